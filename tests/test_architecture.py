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
