"""The lock's pins, and the conda environments written from them.

The lock is the folder ``requirements/``: the files ``runtime.txt``, ``book.txt``,
``cluster.txt`` and ``data.txt`` (:data:`LOCKS`), compiled by pip-compile (``make lock``) from the
``.in`` files beside them, hashed, and torch's release, pinned in ``runtime.in`` (``make env``
installs torch alone, from ``TORCH_INDEX``: it is in no lock file).  :func:`lock_pins` reads them
all; :func:`lock_constraints` gives the pins without hashes (the chapters' cache keys, and a
constraints file for pip: a hashed one would switch pip to hash-checking mode).  From them:

* ``environment.yml``: the whole lock (library, book tooling, tests), for conda users;
* ``binder/environment.yml``: what Binder needs to *run the chapters* and nothing more -- the
  library's dependencies, its ``notebooks`` extra and jupytext (JupyterLab opens the MyST
  chapters as notebooks through it), each with every package it pulls in, at the lock's
  versions; not the book tooling (Jupyter Book, otter, papermill, the test tools). torch is left
  out there: ``binder/postBuild`` installs it alone from ``TORCH_INDEX`` (PyTorch's CPU index by
  default), as ``make env`` does, since PyPI's Linux torch brings ~3 GB of CUDA libraries.

Run by `make lock` (``python -m moe_book.environment``); tests/test_environment.py checks that
the files agree with the lock.  The pins are those of the platform ``make lock`` resolved for (the
CI's: Linux x86-64, CPython 3.11): no environment markers.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# PyTorch's CPU wheels (torch==2.13.0+cpu), the default of the Makefile's TORCH_INDEX
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# what Binder runs besides the library's own dependencies and its notebooks extra
BINDER_EXTRA = ("jupytext",)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: the lock files ``requirements/<name>.txt``, in the order ``make lock`` compiles them
LOCKS = ("runtime", "book", "cluster", "data")
LOCK_DIR = ROOT / "requirements"
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def lock_pins(lock: Path = LOCK_DIR) -> dict[str, str]:
    """``{normalised name: 'name==version'}``: the pins of the lock files in the folder ``lock``
    (the ones of :data:`LOCKS` it holds; hashes, options and comments skipped) and torch's, from
    its ``runtime.in``.  A package pinned to two versions is an error naming both."""
    pins: dict[str, str] = {}
    sources = [Path(lock) / f"{name}.txt" for name in LOCKS]
    for path in [p for p in sources if p.is_file()] + [Path(lock) / "runtime.in"]:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            m = _PIN.match(line.strip())
            if not m or (path.suffix == ".in" and _norm(m.group(1)) != "torch"):
                continue
            name, pin = _norm(m.group(1)), f"{m.group(1)}=={m.group(2)}"
            if name in pins and pins[name].split("==")[1] != m.group(2):
                raise ValueError(f"{lock}: {name} is pinned to two versions ({pins[name]}, "
                                 f"{pin}, in {path.name}); accepted: one version in every lock "
                                 "file (make lock compiles each at the versions of the others)")
            pins[name] = pin
    return pins


def lock_constraints(lock: Path = LOCK_DIR) -> str:
    """Every pin of :func:`lock_pins`, one per line, sorted: a pip constraints file without
    hashes, and what the chapters' cache keys read of the lock (versions, not the files' bytes:
    a new hash or comment re-executes nothing)."""
    return "".join(f"{pin}\n" for _, pin in sorted(lock_pins(lock).items()))


def closure(roots: list[str], skip: tuple[str, ...] = ()) -> set[str]:
    """Normalised names of ``roots`` (requirement strings, extras allowed) and of everything
    they require, transitively, as the installed distributions' metadata says (markers evaluated
    for this interpreter; ``skip`` and its own requirements left out)."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in roots]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = _norm(req.name)
        if name in skip:
            continue
        key = name + "".join(f"[{e}]" for e in sorted(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            raise ValueError(f"{req.name} is not installed here; accepted: run this in the "
                             "environment of the lock (make env)") from None
        for r in requires:
            for e in [""] + sorted(req.extras):
                todo.append((Requirement(r), e))
    return {k.split("[")[0] for k in seen}


def binder_pins(lock: Path = LOCK_DIR, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The lock's lines for Binder: the closure of the library's dependencies, its notebooks
    extra and :data:`BINDER_EXTRA`, without torch (but with torch's own dependencies)."""
    project = tomllib.loads(Path(pyproject).read_text(encoding="utf-8"))["project"]
    roots = [*project["dependencies"], *project["optional-dependencies"]["notebooks"],
             *BINDER_EXTRA]
    torch = [r for r in roots if _norm(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) == "torch"]
    names = closure([r for r in roots if r not in torch]) | (closure(["torch"]) - {"torch"})
    pins = lock_pins(lock)
    missing = sorted(n for n in names if n not in pins)
    if missing:
        raise ValueError(f"{missing} are needed by Binder but not in {lock}; accepted: a lock "
                         "made from this environment (make lock)")
    return sorted((pins[n] for n in names), key=str.lower)


def _conda_env(comments: list[str], name: str, pip_lines: list[str]) -> str:
    """A conda environment file: the comment lines, then Python 3.11 and pip with these lines."""
    lines = [*comments, f"name: {name}", "channels:", "  - conda-forge", "dependencies:",
             "  - python=3.11", "  - pip", "  - pip:", *[f"      - {p}" for p in pip_lines]]
    return "\n".join(lines) + "\n"


def main() -> None:
    lock = ROOT / "requirements"
    (ROOT / "environment.yml").write_text(_conda_env([
        "# Conda environment with the same pins as the lock files requirements/*.txt and torch's",
        "# in requirements/runtime.in (generated by python -m moe_book.environment; do not edit",
        "# by hand). Then: pip install --no-deps -e . -e ./tooling",
        "# torch==2.13.0 resolves to the CPU build 2.13.0+cpu of the index below (a local label",
        "# sorts above the bare release); every other pin is exact, the same wheel on either index.",
    ], "moe-routing", [f"--extra-index-url {TORCH_INDEX}",
                       *lock_constraints(lock).splitlines()]))
    (ROOT / "binder").mkdir(exist_ok=True)
    (ROOT / "binder" / "environment.yml").write_text(_conda_env([
        "# Binder's environment: what running the chapters needs, at the lock's versions (generated",
        "# by python -m moe_book.environment; do not edit by hand): the library's dependencies, its",
        "# notebooks extra and jupytext, without the book tooling. torch is installed by postBuild,",
        "# alone, from TORCH_INDEX (PyTorch's CPU index unless set).",
    ], "moe-routing-binder", binder_pins(lock, ROOT / "pyproject.toml")))


if __name__ == "__main__":
    main()
