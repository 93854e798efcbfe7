"""Conventions of the chapters' MyST sources that a reader would see broken in the book."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("*.md") if p.name != "README.md")
PRF = re.compile(r"^(`{3,}|:{3,})\{prf:(\w+)\}(?P<title>.*)$", re.M)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_prf_titles_do_not_nest_parentheses(path):
    """sphinx-proof prints a title in parentheses ("Theorem 5.1 (title)"): a title that holds
    parentheses itself renders nested ones."""
    bad = [m.group("title").strip() for m in PRF.finditer(path.read_text(encoding="utf-8"))
           if "(" in m.group("title")]
    assert bad == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_paper_results_carry_their_paper(path):
    """Paper results are written A-Thm 4.2, B-Thm 5.17, B-Prop 6.3 (the book numbers its own
    results, so a bare "Theorem 4.2" could be either)."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"```\{code-cell\}.*?\n```", "", text, flags=re.S)
    bare = re.findall(r"(?<![\w-])(?:Theorem|Proposition) (?:4\.1|4\.2|4\.7|5\.17|6\.3)\b", prose)
    assert bare == []


CODE_WIDTH = 90        # the column shows about 90 characters of code without a scroll bar


def code_lines(text: str):
    """(line number, line) of every code line of the chapter's code cells, the cell's
    ``---`` metadata block (figure captions, tags) excluded: it is not shown as code."""
    cell = meta = False
    for n, line in enumerate(text.splitlines(), 1):
        if not cell:
            cell = line.startswith("```{code-cell}")
            meta = False
            continue
        if line.startswith("```"):
            cell = False
        elif line == "---":
            meta = not meta
        elif not meta:
            yield n, line


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_code_fits_the_column(path):
    wide = [f"{n}: {len(line)}" for n, line in code_lines(path.read_text(encoding="utf-8"))
            if len(line) > CODE_WIDTH]
    assert wide == []


def test_code_lines_skip_metadata_and_prose():
    text = ("prose " * 30 + "\n```{code-cell} ipython3\n---\nmystnb:\n  figure:\n    caption: "
            + "c" * 120 + "\n---\nx = 1\n```\n" + "y" * 120 + "\n")
    assert list(code_lines(text)) == [(8, "x = 1")]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_ledger_states_the_profile_its_numbers_come_from(path):
    """A verdict box must say which scale measured it (smoke, default or paper)."""
    calls = re.findall(r"Ledger\(([^)]*)\)", path.read_text(encoding="utf-8"))
    assert all("profile=profile" in c for c in calls), calls


def test_the_training_chapter_states_the_sizes_of_its_default_profile():
    """"So we chose d_model 16, two heads, experts of 32 neurons, 1,500 steps": the prose must
    be the default profile's values, and the calibration it cites must have run at that budget."""
    import json

    import yaml

    text = " ".join((ROOT / "notebooks" / "training.md").read_text(encoding="utf-8").split())
    p = yaml.safe_load((ROOT / "notebooks" / "params" / "default.yaml").read_text())["training"]
    words = {1: "one", 2: "two", 4: "four"}
    assert (f"**`d_model` {p['d_model']}, {words[p['n_heads']]} heads, experts of "
            f"{p['d_expert']} neurons**, {p['steps']:,} steps") in text
    cal = json.loads((ROOT / "benchmarks" / "results" / "training_calibration.json").read_text())
    assert cal["common"]["steps"] == p["steps"] and cal["common"]["n_heads"] == p["n_heads"]
    assert {(r["d_model"], r["n_experts"], r["d_expert"]) for r in cal["rows"]} >= {
        (p["d_model"], 1, p["d_expert"]), (p["d_model"], p["fig2_experts"], p["d_expert"])}
