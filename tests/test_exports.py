"""What each package of the library exports (``__all__``), and the rule that keeps it true.

Two kinds of package:

* packages that **re-export names** (``boundary``, ``construction``, ``knowledge``, ``model``,
  ``knowledge.sources``, ``knowledge.trie``, ``hf`` and each experiment's package): their
  ``__all__`` is the API contract a researcher reads (and ``import *``, Sphinx and static
  checkers use), so it stays a literal list.  The expected list is *derived* here from the
  package's own source -- what it imports from its modules (but under an underscore alias: a
  tool of its own), the public functions and classes it defines, the lazy names it declares in a
  ``*_EXPORTS`` tuple -- so the list can never drift from the imports;
* packages that **list their modules** (``moe_routing``, ``moe_routing.landscape``): their
  ``__all__`` is computed from the modules on disk (every module whose name does not start
  with an underscore), so a new module needs no second edit; checked here against the files.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import moe_routing

LIBRARY = Path(moe_routing.__file__).parent
REEXPORTING = ["moe_routing.boundary", "moe_routing.construction", "moe_routing.knowledge",
               "moe_routing.model", "moe_routing.knowledge.sources", "moe_routing.knowledge.trie",
               "moe_routing.hf", "moe_routing.experiments.task_routing",
               "moe_routing.experiments.two_hop", "moe_routing.experiments.bridge",
               "moe_routing.experiments.hf_routing", "moe_routing.experiments.grid"]
MODULE_LISTS = ["moe_routing", "moe_routing.landscape"]


def derived_exports(source: str) -> set[str]:
    """The public names an ``__init__`` source makes its package's: the names it imports from
    its own modules (``from .x import a``), the public functions and classes it defines, and
    the names of any tuple bound to a ``*_EXPORTS`` name (exported lazily, by ``__getattr__``).
    Names it imports from elsewhere (``from ..validation import ...``) or under an underscore
    alias (``from .x import a as _a``) are its own tools."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_EXPORTS")):
            names |= set(ast.literal_eval(node.value))
    return {n for n in names if not n.startswith("_")}


def init_source(package: str) -> str:
    return (LIBRARY.parent / package.replace(".", "/") / "__init__.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("package", REEXPORTING)
def test_a_packages_all_is_what_it_imports_and_defines(package):
    mod = importlib.import_module(package)
    assert isinstance(mod.__all__, list) and len(mod.__all__) == len(set(mod.__all__))
    assert set(mod.__all__) == derived_exports(init_source(package))
    for name in mod.__all__:                 # every name resolves (lazy ones included)
        assert getattr(mod, name) is not None


def test_the_derivation_sees_a_forgotten_or_foreign_name():
    source = ("from ..validation import fail\n"
              "from .mass import boundary_mass, _private\n"
              "from .mass import sample as _sample\n"
              "from .routers import Router as R\n"
              "LAZY_EXPORTS = ('TwoHop',)\n"
              "SHOWN = 10\n"
              "def build(): ...\n"
              "def __getattr__(name): ...\n"
              "__all__ = ['boundary_mass', 'R', 'TwoHop']\n")
    derived = derived_exports(source)
    assert derived == {"boundary_mass", "R", "TwoHop", "build"}    # fail, _sample, SHOWN: no
    assert derived - {"boundary_mass", "R", "TwoHop"} == {"build"}  # the one __all__ forgot


def modules_on_disk(folder: Path) -> list[str]:
    """The package's modules and sub-packages, from its files."""
    found = {p.stem for p in folder.glob("*.py")} | {p.parent.name for p in folder.glob("*/__init__.py")}
    return sorted(n for n in found if not n.startswith("_"))


@pytest.mark.parametrize("package", MODULE_LISTS)
def test_a_module_list_is_every_public_module(package):
    mod = importlib.import_module(package)
    names = [n for n in mod.__all__ if n != "__version__"]
    assert names == modules_on_disk(Path(mod.__file__).parent)
    assert "__version__" not in mod.__all__ or mod.__version__ == moe_routing.__version__
    for name in names:
        assert importlib.import_module(f"{package}.{name}").__name__ == f"{package}.{name}"


def test_the_module_rule_would_see_a_new_module(tmp_path):
    (tmp_path / "mass.py").write_text("")
    (tmp_path / "_private.py").write_text("")
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()                                     # a folder, not a package
    assert modules_on_disk(tmp_path) == ["mass", "sources"]
