"""The two products of the repository and the direction of their dependency.

``moe_routing`` (src/) is the science library a researcher imports; ``moe_book`` (tooling/) turns
chapters into the book. The book tooling imports the library; the library never imports the
tooling (checked on the source, and by importing every library module with the tooling hidden).
"""

from __future__ import annotations

import ast
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
                         cwd=ROOT / "tests")
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
                targets = [mod, *(f"{mod}.{a.name}" for a in node.names)]
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


#: the most lines a library module may have: a module over it holds more than one idea (split it
#: by concept, re-exporting the moved names from where they were)
MAX_MODULE_LINES = 450


def module_lengths(root: Path = LIBRARY) -> dict[str, int]:
    return {str(f.relative_to(root)): len(f.read_text(encoding="utf-8").splitlines())
            for f in sorted(root.rglob("*.py"))}


def test_no_library_module_is_over_the_limit(tmp_path):
    lengths = module_lengths()
    assert {f: n for f, n in lengths.items() if n > MAX_MODULE_LINES} == {}
    # the check sees a module that grows past the limit
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    assert module_lengths(tmp_path) == {"big.py": MAX_MODULE_LINES + 1}
