"""What re-executes what: the chapter keys and the training-run cache hash exactly what their
results depend on (the science library), not the book tooling, page templates or claims' wording.

Checked on a copy of this repository's own files, edited one at a time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from moe_book import project as pl
from moe_routing.experiments.task_routing.config import TRAINING_CODE
from moe_routing._internal.fingerprint import source_fingerprint

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def copy(tmp_path: Path) -> pl.Project:
    dst = tmp_path / "repo"
    for part in ("notebooks", "book", "src", "tooling", "assignments"):
        shutil.copytree(ROOT / part, dst / part,
                        ignore=shutil.ignore_patterns("_build", "__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "requirements", dst / "requirements")
    return pl.Project(dst, library=dst / "src" / "moe_routing")


def keys(project: pl.Project) -> dict[str, str]:
    params, _ = pl.validate(project, "default", "cpu")
    return {n: pl.notebook_key(project, n, params[n], "default", "cpu")
            for n in project.notebook_names()}


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@pytest.mark.parametrize("edit", [
    "tooling/moe_book/pages.py",          # a page template
    "tooling/moe_book/pipeline.py",       # the pipeline's command line
    "tooling/moe_book/project.py",        # the layout, parameters and records it shares
    "tooling/moe_book/staging.py",        # how the book's source is staged
    "tooling/moe_book/execution.py",      # how one chapter is executed
    "tooling/moe_book/exercises.py",      # the exercise-index heuristic
    "src/moe_routing/claims.yaml",        # the wording of a claim
    "book/_config.yml",                   # the book's configuration
    "book/teaching.md",                   # a hand-written page
])
def test_tooling_and_wording_edits_reexecute_nothing(copy, edit):
    before = keys(copy)
    append(copy.root / edit, "\n# edited\n")
    assert keys(copy) == before


def edit_code(path: Path) -> None:
    """A change of what the module computes (a comment would not count: module docstring of
    moe_routing._internal.fingerprint)."""
    append(path, "\n_EDITED = 1\n" if path.suffix == ".py" else "\n# edited\n")


def test_science_edits_reexecute_the_chapters(copy):
    before = keys(copy)
    edit_code(copy.library / "boundary" / "mass.py")
    after = keys(copy)
    assert all(after[n] != before[n] for n in before)


def test_training_cache_follows_the_training_code_only(copy):
    fp = lambda: source_fingerprint(TRAINING_CODE, root=copy.library)  # noqa: E731
    before = fp()
    for unrelated in ("boundary/mass.py", "landscape/symmetry.py", "claims.yaml",
                      "_internal/plots.py"):
        edit_code(copy.library / unrelated)
    assert fp() == before
    # modules that read trained runs or train other experiments
    for reader in ("experiments/bridge/margins.py", "experiments/two_hop/runs.py",
                   "knowledge/two_hop.py", "experiments/two_hop/config.py",
                   "experiments/two_hop/measure.py", "knowledge/two_hop_dataset.py",
                   "experiments/bridge/layers.py", "experiments/bridge/soft_hard.py",
                   "experiments/grid/runner.py", "experiments/task_routing/plan.py",
                   "experiments/task_routing/claims.py", "experiments/task_routing/power.py"):
        edit_code(copy.library / reader)
    assert fp() == before
    for related in ("model/train.py", "knowledge/dataset.py", "routing_metrics.py",
                    "experiments/task_routing/runs.py", "experiments/task_routing/config.py",
                    "experiments/task_routing/data.py", "experiments/task_routing/store.py",
                    "knowledge/sources/embedded.py",
                    "knowledge/trie/__init__.py"):
        mid = fp()
        edit_code(copy.library / related)
        assert fp() != mid, related


def test_docstrings_comments_and_layout_retrain_nothing(copy):
    """Documentation work (an API page's docstring fixes, a comment, a reflowed call) changes
    no result: the keys stay; a changed constant does not (the control)."""
    fp = lambda: source_fingerprint(TRAINING_CODE, root=copy.library)  # noqa: E731
    before, chapters = fp(), keys(copy)
    path = copy.library / "model" / "train.py"
    text = path.read_text(encoding="utf-8")
    doc_start = text.index('"""') + 3
    path.write_text(text[:doc_start] + "A reworded first line.\n" + text[doc_start:]
                    + "\n# a comment\n", encoding="utf-8")
    (copy.library / "model" / "losses.py").write_text(
        (copy.library / "model" / "losses.py").read_text(encoding="utf-8")
        .replace("def objective_loss(", "def objective_loss(  # reflowed\n    ", 1),
        encoding="utf-8")
    assert fp() == before and keys(copy) == chapters
    edit_code(path)
    assert fp() != before


def test_the_two_hop_cache_follows_every_two_hop_module(copy):
    """Every module of the two-hop experiment is in its key's code (a module split off later and
    not listed would let an edit reuse stale runs); the grid runner, which never changes a
    result, is not."""
    from moe_routing.experiments.two_hop.config import TWO_HOP_CODE

    listed = set(TWO_HOP_CODE)
    found = {str(f.relative_to(copy.library)) for f in (copy.library / "knowledge").rglob("two_hop*.py")}
    package = copy.library / "experiments" / "two_hop"
    modules = sorted(str(f.relative_to(copy.library)) for f in package.glob("*.py"))
    assert found and found <= listed and "experiments/two_hop" in listed, sorted(found - listed)
    assert len(modules) >= 4                     # the package, its config, measure and runs
    fp = lambda: source_fingerprint(TWO_HOP_CODE, root=copy.library)  # noqa: E731
    for module in sorted(found) + modules:
        mid = fp()
        edit_code(copy.library / module)
        assert fp() != mid, module
    mid = fp()
    edit_code(copy.library / "experiments" / "grid" / "runner.py")
    assert fp() == mid
