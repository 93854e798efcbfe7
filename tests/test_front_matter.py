"""The front matter stays current: the introduction's map of the book and the teaching page's
syllabus list every chapter of the table of contents, and the teaching page says what a
built site holds."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from moe_book import findings

ROOT = Path(__file__).resolve().parents[1]
TOC = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
NUMBERS = findings.chapter_numbers(TOC)          # chapter name -> number, as rendered


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_introductions_table_lists_every_numbered_chapter_in_order():
    intro = (ROOT / "notebooks" / "intro.md").read_text(encoding="utf-8")
    table = _section(intro, "## How the book is organised")
    listed = re.findall(r"^\|[^|]*\| \{doc\}`(\w+)`", table, re.M)
    assert listed == sorted(NUMBERS, key=NUMBERS.get), listed
    assert {"two_hop", "bridge"} <= set(listed)


def test_the_syllabus_lists_every_chapter_with_its_number_needs_and_hours():
    page = (ROOT / "book" / "teaching.md").read_text(encoding="utf-8")
    syllabus = _section(page, "## A syllabus")
    rows = re.findall(r"^\| (?:(\d+)\. )?\{doc\}`(?:[^<`]*<)?chapters/(\w+)>?` \| ([^|]*) \| "
                      r"([\d½]+) \|$", syllabus, re.M)
    names = [name for _, name, _, _ in rows]
    assert names == ["intro"] + sorted(NUMBERS, key=NUMBERS.get), names
    hours = 0.0
    for number, name, needs, h in rows:
        if name != "intro":
            assert int(number) == NUMBERS[name], name
            # a chapter needs only chapters before it
            assert all(int(n) < NUMBERS[name] for n in re.findall(r"\d+", needs)), name
        hours += float(h.replace("½", ".5")) if h != "½" else 0.5
    stated = re.search(r"about (\d+) hours in all", syllabus)
    assert stated and abs(int(stated.group(1)) - hours) <= 1, (stated, hours)
    assert "Prerequisites" in syllabus and "suggested order" in syllabus


def test_the_teaching_page_says_no_built_site_holds_an_autograder():
    page = (ROOT / "book" / "teaching.md").read_text(encoding="utf-8")
    assert "keeps copies of the autograders" not in page
    assert "No built site holds an autograder" in page
    staging = (ROOT / "tooling" / "moe_book" / "staging.py").read_text(encoding="utf-8")
    assert "No autograder zip (hidden tests) is ever staged" in staging
