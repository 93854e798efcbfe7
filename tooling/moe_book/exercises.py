"""The chapters' exercises, found in the MyST sources: an index page for teachers and a check.

Every chapter ends with sphinx-exercise exercises (``{exercise}`` with ``:label:``, answered by a
``{solution}`` that names the label). This module reads them from ``notebooks/<name>.md`` —
without executing anything — so that the teacher's guide can list them and a test can hold every
chapter to the classroom rule: at least two exercises, each with a solution.

Recognised forms: backtick or colon fences, ``{exercise}``/``{exercise-start}`` and
``{solution}``/``{solution-start}`` (gated). The *kind* of an exercise is a heuristic (ours):
``code`` when its solution contains a code block (fenced or indented) or its statement refers
to code (inline code, a cell, "run"), ``pen-and-paper`` otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .myst import directive_blocks, table_cell

# inline code (not a role such as {prf:ref}`x`) or words that ask to run something
_CODE_WORDS = re.compile(r"(?<![}`])`[^`$]+`|\b(cell|code|run|rerun|implement|simulate)\b",
                         re.IGNORECASE)
KINDS = ("pen-and-paper", "code")


@dataclass(frozen=True)
class Exercise:
    """One exercise of one chapter (``solution`` is its solution's text, '' if it has none)."""

    chapter: str
    label: str
    title: str
    statement: str
    solution: str

    @property
    def kind(self) -> str:
        if _has_code_block(self.solution) or _CODE_WORDS.search(_strip_math(self.statement)):
            return "code"
        return "pen-and-paper"

    @property
    def summary(self) -> str:
        """The statement's opening: whole sentences up to at least 80 characters (a bare
        "Let X be …" says little), cut at ~220 characters, never inside ``$…$`` math."""
        text = " ".join(self.statement.split())
        in_math, last_space = False, None
        for i, ch in enumerate(text):
            if ch == "$":
                in_math = not in_math
            elif not in_math:
                if (ch in ".?!" and (i + 1 == len(text) or text[i + 1] == " ") and i >= 80
                        and not re.search(r"\b(e\.g|i\.e|cf|resp|eq|Fig|Thm)$", text[:i])):
                    return text[: i + 1]
                if ch == " ":
                    last_space = i
                    if i > 220:
                        return text[:last_space] + " …"
        return text


def _strip_math(text: str) -> str:
    return re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.S)


def _has_code_block(text: str) -> bool:
    if re.search(r"^[ \t]*(`{3,}|~{3,})", text, flags=re.M):
        return True
    prev_blank = True
    for line in _strip_math(text).splitlines():
        if prev_blank and line.startswith("    ") and line.strip():
            return True
        prev_blank = not line.strip()
    return False


def find_exercises(chapter: str, text: str) -> list[Exercise]:
    """The exercises of one chapter's MyST source, each joined with its solution."""
    blocks = directive_blocks(text, ("exercise", "solution"))
    solutions = {b.arg.split()[0]: b.body for b in blocks if b.name == "solution" and b.arg}
    found = []
    for b in blocks:
        if b.name != "exercise":
            continue
        label = b.options.get("label", "")
        if not label:
            raise ValueError(f"{chapter}: an exercise without :label: (its solution cannot refer "
                             f"to it): {b.body[:60]!r}")
        found.append(Exercise(chapter, label, b.arg, b.body, solutions.get(label, "")))
    return found


def exercise_index(notebooks_dir: Path, names: list[str]) -> list[Exercise]:
    """Exercises of the chapters ``names`` (``notebooks_dir/<name>.md``), chapter by chapter."""
    rows: list[Exercise] = []
    for name in names:
        rows += find_exercises(name, (Path(notebooks_dir) / f"{name}.md").read_text("utf-8"))
    return rows


def problems(rows: list[Exercise], names: list[str], minimum: int = 2) -> list[str]:
    """What breaks the classroom rule: fewer than ``minimum`` exercises, or one unanswered."""
    out = []
    for name in names:
        mine = [r for r in rows if r.chapter == name]
        if len(mine) < minimum:
            out.append(f"{name}: {len(mine)} exercise(s), at least {minimum} needed")
        out += [f"{name}: exercise {r.label} has no solution" for r in mine if not r.solution]
    return out


def exercises_page(rows: list[Exercise], titles: dict[str, str]) -> str:
    """A MyST page listing every chapter's exercises in book order (``titles``: chapter name →
    title, in the order of the table of contents). Each exercise is a ``{numref}`` to its label,
    so it shows the book's own number ("Exercise 4.1") and links to the exercise."""
    lines = ["# Exercises by chapter", "",
             "Every chapter ends with exercises, listed here in the order of the book; in the "
             "public book each solution is a dropdown under its exercise, and the student "
             "edition has none. *Kind* is a heuristic: **code** when the solution contains code "
             "or the statement asks to run something, **pen-and-paper** otherwise.", ""]
    for name, title in titles.items():
        mine = [r for r in rows if r.chapter == name]
        lines += [f"## [{table_cell(title)}](../chapters/{name}.ipynb)", ""]
        if not mine:
            lines += ["No exercises yet.", ""]
            continue
        lines += ["| Exercise | Kind | Statement (opening) |", "|---|---|---|"]
        for r in mine:
            lines.append(f"| {{numref}}`{r.label}` | {r.kind} | {table_cell(r.summary)} |")
        lines.append("")
    return "\n".join(lines)
