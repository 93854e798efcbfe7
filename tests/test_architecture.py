"""The two products of the repository and the direction of their dependency.

``moe_routing`` (src/) is the science library a researcher imports; ``moe_book`` (tooling/) turns
chapters into the book. The book tooling imports the library; the library never imports the
tooling (checked on the source, and by importing every library module with the tooling hidden).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "src" / "moe_routing"
TOOLING = ROOT / "tooling" / "moe_book"


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def library_modules() -> list[str]:
    mods = []
    for f in sorted(LIBRARY.rglob("*.py")):
        parts = f.relative_to(LIBRARY.parent).with_suffix("").parts
        mods.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return mods


def test_library_source_never_imports_the_tooling():
    offenders = {str(f.relative_to(ROOT)): sorted(m for m in imported_modules(f)
                                                  if m.split(".")[0] == "moe_book")
                 for f in LIBRARY.rglob("*.py")}
    assert {f: m for f, m in offenders.items() if m} == {}


def test_every_library_module_imports_with_the_tooling_hidden():
    code = ("import importlib, sys\n"
            "sys.modules['moe_book'] = None  # any import of it raises ImportError\n"
            f"for m in {library_modules()!r}:\n"
            "    importlib.import_module(m)\n"
            "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT / "tests", env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_the_tooling_lives_outside_the_library():
    assert not (LIBRARY / "pipeline.py").exists() and (TOOLING / "pipeline.py").exists()
    assert not list(LIBRARY.glob("*book*")), "book tooling in the science library"


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (at module level or inside a
    function: a lazy import is still a dependency), from the source."""
    pkg = root.name

    def name(f: Path) -> str:
        parts = [pkg, *f.relative_to(root).with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name(f): f for f in sorted(root.rglob("*.py"))}
    edges: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        base = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                mod = (".".join(base[:len(base) - node.level + 1]
                                + ([node.module] if node.module else []))
                       if node.level else node.module or "")
                # ``from . import sub``: the dependency is the sub-module (its package is the
                # importer's own, imported before it anyway)
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in files]
                targets = subs if len(subs) == len(node.names) else [mod, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[m] |= {t for t in targets if t in files and t != m}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while comp[-1:] != [v]:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_in_the_library_or_the_tooling(tmp_path):
    for root in (LIBRARY, TOOLING):
        assert circles(import_graph(root)) == [], root.name
    # the check sees a circle, a lazy import included (staging used to import pdf for a path)
    pkg = tmp_path / "house"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "project.py").write_text("X = 1\n")
    (pkg / "staging.py").write_text("from .project import X\n\ndef f():\n"
                                    "    from .pdf import P\n    return P\n")
    (pkg / "pdf.py").write_text("from .staging import f\nP = 2\n")
    assert circles(import_graph(pkg)) == [["house.pdf", "house.staging"]]


def _module_name(root: Path, f: Path) -> str:
    parts = [root.name, *f.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _from_target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        return ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
    return node.module or ""


def reexports(root: Path) -> list[str]:
    """Names a module of ``root`` imports from the house only to hand them on: imported at
    module level, never used in the module (or listed in its ``__all__``), and not a module
    (a module imported for what importing it does, say a registry's builders, is used by being
    imported).  A package's ``__init__`` is the one place that hands names on; a lazy
    ``__getattr__`` outside it is a re-export too."""
    files = {_module_name(root, f): f for f in sorted(root.rglob("*.py"))}
    found = []
    for m, f in files.items():
        if f.name == "__init__.py":
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        loaded = {n.id for n in ast.walk(tree)
                  if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}
        exported: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                found.append(f"{m}.__getattr__")
            if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
                exported |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _from_target(m, False, node)
            if target.split(".")[0] != root.name:
                continue
            for a in node.names:
                bound = a.asname or a.name
                if f"{target}.{a.name}" in files:
                    continue                                    # a module
                if bound not in loaded or bound in exported:
                    found.append(f"{m}: {bound} (from {target})")
    return found


def private_crossings(root: Path) -> list[str]:
    """Private names (``_x``, not dunders) a module of ``root`` imports from a module of
    another package: a helper private to a package stays in it (a name shared across packages is
    public, and says so by its name)."""
    files = {_module_name(root, f): f for f in sorted(root.rglob("*.py"))}
    found = []
    for m, f in files.items():
        is_package = f.name == "__init__.py"
        package = m if is_package else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _from_target(m, is_package, node)
            if target.split(".")[0] != root.name:
                continue
            home = target if target in files and files[target].name == "__init__.py" \
                else target.rpartition(".")[0]
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__") and home != package:
                    found.append(f"{m}: {a.name} (from {target})")
    return found


def test_only_a_package_face_hands_names_on(tmp_path):
    for root in (LIBRARY, TOOLING):
        assert reexports(root) == [], root.name
    # the check sees a name handed on, one listed in __all__ and a lazy shim; it leaves alone a
    # name the module uses, a module imported for its registration, and a package's face
    pkg = tmp_path / "house"
    (pkg / "parts").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .core import used\n")
    (pkg / "parts" / "__init__.py").write_text("")
    (pkg / "parts" / "builder.py").write_text("X = 1\n")
    (pkg / "core.py").write_text("def used():\n    return 1\n\n\ndef other():\n    return 2\n")
    (pkg / "user.py").write_text("from .core import used\nfrom .parts import builder\n\n"
                                 "def f():\n    return used()\n")
    assert reexports(pkg) == []
    (pkg / "shim.py").write_text("from .core import other, used  # noqa: F401\n\n"
                                 "__all__ = ['used']\n\n\ndef g():\n    return used()\n\n\n"
                                 "def __getattr__(name):\n    return getattr(g, name)\n")
    assert reexports(pkg) == ["house.shim.__getattr__", "house.shim: other (from house.core)",
                              "house.shim: used (from house.core)"]


def test_no_private_name_crosses_a_package(tmp_path):
    for root in (LIBRARY, TOOLING):
        assert private_crossings(root) == [], root.name
    # the check sees a private helper taken from another package, a lazy import included; a
    # helper shared inside one package is its own business
    pkg = tmp_path / "house"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "helpers.py").write_text("def _helper():\n    return 1\n")
    (pkg / "a" / "user.py").write_text("from .helpers import _helper\n")
    assert private_crossings(pkg) == []
    (pkg / "b" / "user.py").write_text("def f():\n    from ..a.helpers import _helper\n"
                                       "    return _helper()\n")
    assert private_crossings(pkg) == ["house.b.user: _helper (from house.a.helpers)"]
