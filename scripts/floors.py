"""The version floors of the library's runtime dependencies, and the tests that check them
(``make floors``).

    python scripts/floors.py pins [--no-torch]   the floors as exact pins, one a line
                                                 (``numpy==1.26.4``): the lowest releases the
                                                 wheel accepts (pyproject.toml's ``>=``)
    python scripts/floors.py torch               the torch pin alone
    python scripts/floors.py tests               the test files that need only the runtime
                                                 dependencies, one a line, then --deselect=
                                                 for each test that needs the checkout

One source: the floors are the ``>=`` of pyproject.toml's ``[project] dependencies`` (and of
the ``notebooks`` extra's pandas and matplotlib, which library modules import to return tables
and draw figures); ``make floors`` installs the wheel with exactly these releases in a fresh
virtual environment and runs these tests against it. A test file qualifies when it imports the
library and, besides it, only the standard library, those dependencies, pytest, hypothesis and
the suite's own helper modules (tests/numerics.py): the book tooling, transformers, Ray and the
like are not in a floor environment. Standard library only (runs with any Python >= 3.11).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: import names of distributions whose import name differs
IMPORT_NAMES = {"pyyaml": "yaml"}
#: the packages of the ``notebooks`` extra that the library's own modules import (lazily:
#: results as pandas DataFrames, figures with matplotlib); their floors are pinned too
LIBRARY_EXTRAS = ("notebooks", ("pandas", "matplotlib"))
#: what a qualifying test may import besides the library, the runtime dependencies and the
#: standard library
TEST_TOOLS = {"pytest", "hypothesis", "conftest", "numerics"}


def requirements(root: Path = ROOT) -> list[str]:
    """The runtime dependencies, then the :data:`LIBRARY_EXTRAS` requirements."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra, names = LIBRARY_EXTRAS
    return [*project["dependencies"],
            *(r for r in project["optional-dependencies"][extra]
              if re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() in names)]


def floor_pins(root: Path = ROOT) -> dict[str, str]:
    """Distribution name -> its floor as an exact pin (``name==X.Y[.Z]``), for every
    requirement of :func:`requirements`; one without a ``>=`` floor is an error."""
    pins = {}
    for req in requirements(root):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", req)
        name, spec = m.group(1).lower(), m.group(2)
        floor = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", spec)
        if floor is None:
            raise SystemExit(f"error: pyproject.toml: {req!r} states no floor (>=)")
        pins[name] = f"{name}=={floor.group(1)}"
    return pins


#: tests of the selected files that hold only in the checkout's environment, not in a floor
#: environment, with the reason (deselected by ``make floors``)
CHECKOUT_ONLY = {
    "tests/test_knowledge_embedded.py::test_the_shipped_folder_is_what_the_package_reads":
        "compares the package's data folder with the checkout's src/ (the wheel's is elsewhere)",
    "tests/test_knowledge_embedded.py::test_a_hidden_data_package_really_is_unimportable":
        "hides one package of the `data` extra, which the checkout's environment has and a "
        "floor environment does not",
}


def _imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def floor_tests(root: Path = ROOT) -> list[Path]:
    """The test files that import the library and nothing beyond the runtime dependencies
    (see the module docstring), in name order."""
    allowed = ({IMPORT_NAMES.get(n, n) for n in floor_pins(root)} | TEST_TOOLS
               | set(sys.stdlib_module_names) | {"moe_routing"})
    out = []
    for path in sorted((root / "tests").glob("test_*.py")):
        imported = _imports(path.read_text(encoding="utf-8"))
        if "moe_routing" in imported and imported <= allowed:
            out.append(path)
    return out


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "pins":
        pins = floor_pins()
        if "--no-torch" in argv:
            pins.pop("torch", None)
        print("\n".join(pins.values()))
    elif what == "torch":
        print(floor_pins()["torch"])
    elif what == "tests":
        print("\n".join([str(p.relative_to(ROOT)) for p in floor_tests()]
                        + [f"--deselect={node}" for node in CHECKOUT_ONLY]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
