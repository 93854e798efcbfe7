"""What a cached result depends on: a hash of the library's source.

Two caches use it: the book's chapter executions (keyed by the whole science library) and the
training-run cache of :mod:`moe_routing.experiments.task_routing.runs` (keyed by the code that trains
and measures).  Both hash *only* what their results depend on, so that editing the wording of a
claim (``claims.yaml``, read when the ledger page is generated) or anything of the book tooling
(which lives outside this package) re-executes nothing.  A Python module is hashed as its
syntax tree without docstrings (comments and layout are not in the tree): a docstring, a
comment or a reflowed line changes no result, so it retrains and re-executes nothing; a file
that does not parse is hashed as bytes (and fails where it is imported).  No chapter prints a
docstring of the library.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]          # moe_routing/
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


def _code(path: Path) -> bytes:
    """What a file contributes: a Python module's syntax tree without docstrings (the module
    docstring); a data file's bytes."""
    raw = path.read_bytes()
    if path.suffix != ".py":
        return raw
    try:
        tree = ast.parse(raw)
    except (SyntaxError, ValueError):
        return raw
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()


def source_fingerprint(parts: Iterable[str] | None = None, root: Path = PACKAGE_ROOT) -> str:
    """SHA-256 (hex) of the relative paths and the code (:func:`_code`) of
    :func:`source_files`."""
    h = hashlib.sha256()
    for f in source_files(parts, root):
        h.update(str(f.relative_to(root)).encode())
        h.update(b"\0")
        h.update(_code(f))
        h.update(b"\0")
    return h.hexdigest()
