"""The Mixtral-style runs' cache key follows every module that trains or measures them.

``moe_routing.experiments.hf_routing.runs`` keys each cached run by the bytes of
:data:`~moe_routing.experiments.hf_routing.runs.HF_ROUTING_CODE`; a module of the ``hf`` package or
of the experiment split off later and not covered there would let an edit of it reuse stale
runs.  Checked on a copy of the library's files, edited one at a time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from moe_routing.experiments.hf_routing.runs import HF_ROUTING_CODE
from moe_routing._internal.fingerprint import PACKAGE_ROOT, source_fingerprint


def append(path: Path, text: str = "\n_EDITED = 1\n") -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_hf_routing_cache_follows_every_hf_module(tmp_path):
    lib = tmp_path / "moe_routing"
    shutil.copytree(PACKAGE_ROOT, lib, ignore=shutil.ignore_patterns("__pycache__"))
    found = sorted([*(lib / "hf").rglob("*.py"), *(lib / "experiments" / "hf_routing").glob("*.py")])
    assert len(found) > 6
    fp = lambda: source_fingerprint(HF_ROUTING_CODE, root=lib)  # noqa: E731
    for module in found:
        mid = fp()
        append(module)
        assert fp() != mid, module.relative_to(lib)
    # the rule that reads the runs' summary changes no run
    mid = fp()
    append(lib / "_internal" / "verdicts" / "hf_routing.py")
    assert fp() == mid
