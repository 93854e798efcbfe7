"""The student edition: the book with every exercise solution removed at build time.

Hiding solutions with CSS (or sphinx-exercise's ``hide_solutions``, which also crashes on gated
``solution-start``/``solution-end`` solutions) leaves them in the HTML, in the page sources and
in the search index. Here they are cut from the *sources* before Sphinx sees them, so no
solution text can reach any file of the student build.

Recognised forms (MyST):

* backtick fences  ```` ```{solution} label ```` … ```` ``` ```` (any fence length ≥ 3; the
  closing fence must be at least as long, as in CommonMark);
* colon fences ``:::{solution} label`` … ``:::``;
* gated solutions ``{solution-start} label`` … ``{solution-end}`` (either fence style).
"""

from __future__ import annotations

import re

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>solution(?:-start)?)\}")
_GATE_END = re.compile(r"^[ \t]*(`{3,}|:{3,})\{solution-end\}")


def strip_solutions(text: str) -> str:
    """Remove every solution block from MyST markdown ``text``; everything else is kept."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence = m.group("fence")
        if m.group("name") == "solution-start":
            # Skip to the matching {solution-end} directive (and its own closing fence).
            j = i + 1
            while j < len(lines) and not _GATE_END.match(lines[j]):
                j += 1
            if j == len(lines):
                raise ValueError(f"unterminated {{solution-start}} at line {i + 1}")
            end_fence = _GATE_END.match(lines[j]).group(1)
            k = j + 1
            while k < len(lines) and not _closes(lines[k], end_fence):
                k += 1
            i = k + 1
        else:
            j = i + 1
            # CommonMark: the block ends at the first bare fence of the same character at least
            # as long as the opening one (nested directives use shorter fences).
            while j < len(lines) and not _closes(lines[j], fence):
                j += 1
            if j == len(lines):
                raise ValueError(f"unterminated {{solution}} block at line {i + 1}")
            i = j + 1
        # Drop one blank line after the removed block so paragraphs do not pile up.
        if i < len(lines) and not lines[i].strip() and out and not out[-1].strip():
            i += 1
    return "".join(out)


def _closes(line: str, fence: str) -> bool:
    s = line.strip()
    return bool(s) and set(s) == {fence[0]} and len(s) >= len(fence)


def strip_notebook(nb) -> int:
    """Strip solutions from every markdown cell of an nbformat notebook, in place.

    Returns the number of cells changed (so callers can report what was removed).
    """
    changed = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            new = strip_solutions(cell.source)
            if new != cell.source:
                cell.source = new
                changed += 1
    return changed


def solution_texts(text: str) -> list[str]:
    """The bodies of the solution blocks of ``text`` (what must never appear in a student
    build); used by the tests."""
    bodies = []
    lines = text.splitlines(keepends=True)
    stripped = strip_solutions(text).splitlines(keepends=True)
    # Lines present in the original but not in the stripped text are solution lines.
    from difflib import SequenceMatcher

    sm = SequenceMatcher(a=lines, b=stripped, autojunk=False)
    for tag, a0, a1, _, _ in sm.get_opcodes():
        if tag in ("delete", "replace"):
            bodies.append("".join(lines[a0:a1]))
    return bodies
