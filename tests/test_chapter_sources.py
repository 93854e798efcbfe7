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
