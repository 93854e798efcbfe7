"""What ``make test`` relies on in the test files: its second pass runs the tests whose results
depend on the CPU's kernels again under other dispatch levels (the Makefile's
``OTHER_DISPATCH``: MKL's SSE4.2 BLAS, torch's scalar ATen kernels), and it finds them by the
``kernels`` mark, set once per file (``pytestmark``). A new test file that computes with the
numerical library and lacks the mark would silently drop out of that pass, and a result that
holds for one kind of CPU only would pass CI; here the omission fails, and every exception is
written down with its reason.

The files are read as source (their ``import`` statements and module-level ``pytestmark``),
not collected: the check costs no import of torch and sees a file that fails to import too."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
MARK = "kernels"

# The library's packages that compute with torch (or build and run torch models): a test
# importing one of them computes a result that may depend on the kernels the CPU dispatches to.
NUMERICAL = ("moe_routing.boundary", "moe_routing.landscape", "moe_routing.construction",
             "moe_routing.model")

# Test files that import a numerical package but whose results cannot depend on the kernels,
# with the reason; they run in the first pass only.
NOT_KERNELS: dict[str, str] = {
    "test_model_config.py": "configuration validation: which field and value are refused, and "
                            "the message; no tensor is computed",
    "test_model_parameters.py": "parameter counts: integers from the configuration against the "
                                "sizes of the stored tensors, not their values",
    "test_refusals_paper_a.py": "argument validation of paper A's library: which inputs are "
                                "refused and how the message names them; the equal results it "
                                "compares (a NumPy scalar against the Python number) take the "
                                "same code path on any CPU",
    "test_refusals_paper_b.py": "argument validation of paper B's library: which inputs are "
                                "refused and how the message names them; the equal results it "
                                "compares (NumPy and torch scalars against the Python number) "
                                "take the same code path on any CPU",
}


def numerical_imports(source: str) -> set[str]:
    """The numerical modules a test source imports, anywhere in the file (a test function's
    local ``from moe_routing.construction.fastpath import …`` counts), in any spelling:
    ``import moe_routing.boundary as b``, ``from moe_routing import landscape``,
    ``from moe_routing.model.losses import …``."""
    def numerical(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in NUMERICAL)

    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if numerical(node.module):
                names.add(node.module)
            else:                      # from moe_routing import boundary: a module by its name
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if numerical(n)}


def module_marks(source: str) -> set[str]:
    """The marks of a module-level ``pytestmark`` (one mark, a list or a tuple of them, with or
    without arguments)."""
    marks: set[str] = set()
    for node in ast.parse(source).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            continue
        for sub in ast.walk(node.value):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                    and sub.value.attr == "mark" and isinstance(sub.value.value, ast.Name)
                    and sub.value.value.id == "pytest"):
                marks.add(sub.attr)
    return marks


def unmarked_numerical_files(files: list[Path], excluded: dict[str, str]) -> dict[str, list[str]]:
    """File name -> the numerical modules it imports, for each file that imports one and has
    neither the mark nor an entry in ``excluded``."""
    found = {}
    for path in files:
        source = path.read_text(encoding="utf-8")
        imported = numerical_imports(source)
        if imported and MARK not in module_marks(source) and path.name not in excluded:
            found[path.name] = sorted(imported)
    return found


def suite_files() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def test_every_numerical_test_file_runs_in_the_second_pass():
    missing = unmarked_numerical_files(suite_files(), NOT_KERNELS)
    assert not missing, (
        f"test files importing the numerical library without the {MARK!r} mark (they would "
        f"not run under the Makefile's OTHER_DISPATCH): {missing}; add "
        f"'pytestmark = pytest.mark.{MARK}' to each (or its mark to an existing pytestmark), "
        f"or, if no result there depends on the CPU's kernels, an entry with the reason to "
        f"NOT_KERNELS in {Path(__file__).name}")


def test_every_exclusion_is_needed_and_says_why():
    names = {p.name: p for p in suite_files()}
    for name, why in NOT_KERNELS.items():
        assert name in names, f"NOT_KERNELS names {name}, which is not a test file under tests/"
        source = names[name].read_text(encoding="utf-8")
        assert numerical_imports(source), f"{name} imports no numerical module: drop its entry"
        assert MARK not in module_marks(source), f"{name} is both marked {MARK!r} and excluded"
        assert len(why.split()) >= 5, f"{name}: say why its results cannot depend on the kernels"


def test_the_mark_is_registered_and_the_second_pass_selects_it():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = config["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.split(":", 1)[0].strip() == MARK for m in markers), markers
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    passes = [line for line in makefile.splitlines()
              if "$(OTHER_DISPATCH)" in line and "pytest" in line]
    assert len(passes) == 1, passes
    selection = re.search(r'-m "([^"]+)"', passes[0])
    assert selection, passes[0]
    terms = selection.group(1).split(" and ")
    assert terms[0] == MARK and {"not book", "not assignments", "not training"} <= set(terms), \
        selection.group(1)


# --- control: the check sees what it must --------------------------------------------------------

@pytest.mark.parametrize("source, flagged", [
    ("import pytest\nfrom moe_routing import landscape\n", True),
    ("import moe_routing.boundary as b\npytestmark = pytest.mark.training\n", True),
    ("def test_x():\n    from moe_routing.construction.fastpath import F\n", True),
    ("from moe_routing.model.losses import f\npytestmark = pytest.mark.kernels\n", False),
    ("from moe_routing.model import f\npytestmark = [pytest.mark.kernels, pytest.mark.cuda]\n",
     False),
    ("from moe_routing.model import f\ndef test_x():\n    pytestmark = pytest.mark.kernels\n", True),
    ("from moe_routing.modelling import f\nfrom moe_routing import ledger\n", False),
])
def test_the_check_sees_an_unmarked_numerical_file(tmp_path, source, flagged):
    path = tmp_path / "test_new.py"
    path.write_text(source, encoding="utf-8")
    assert bool(unmarked_numerical_files([path], {})) is flagged
    assert unmarked_numerical_files([path], {"test_new.py": "a reason"}) == {}
