"""What a cached result depends on: a hash of the library's source.

Two caches use it: the book's chapter executions (keyed by the whole science library) and the
training-run cache of :mod:`moe_routing.experiments.task_routing` (keyed by the code that trains
and measures).  Both hash *only* what their results depend on, so that editing the wording of a
claim (``claims.yaml``, read when the ledger page is generated) or anything of the book tooling
(which lives outside this package) re-executes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".yaml", ".tsv", ".json", ".csv", ".txt")
# Files of the package that no computed result depends on.
NOT_RESULTS = frozenset({"claims.yaml"})


def source_files(parts: Iterable[str] | None = None, root: Path = PACKAGE_ROOT) -> list[Path]:
    """The package's source and data files, sorted; ``parts`` restricts them to sub-packages or
    modules given relative to the package (``"model"``, ``"routing_metrics.py"``); ``root`` is
    the package folder (another copy of it in tests)."""
    root = Path(root)
    roots = [root / p for p in parts] if parts is not None else [root]
    for r in roots:
        if not r.exists():
            raise ValueError(f"no {r.relative_to(root)} in {root}")
    files = set()
    for r in roots:
        for f in ([r] if r.is_file() else r.rglob("*")):
            if (f.is_file() and f.suffix in SOURCE_SUFFIXES and f.name not in NOT_RESULTS
                    and "__pycache__" not in f.parts):
                files.add(f)
    return sorted(files)


def source_fingerprint(parts: Iterable[str] | None = None, root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 (hex) of the relative paths and bytes of :func:`source_files`."""
    h = hashlib.sha256()
    for f in source_files(parts, root):
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()
