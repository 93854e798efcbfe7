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

from .myst import directive_blocks


def strip_solutions(text: str) -> str:
    """Remove every solution block from MyST markdown ``text``; everything else is kept."""
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for block in directive_blocks(text, ("solution",)):
        end = block.end
        # Drop one blank line after the removed block so paragraphs do not pile up.
        if (end < len(lines) and not lines[end].strip() and block.start > 0
                and not lines[block.start - 1].strip()):
            end += 1
        drop.update(range(block.start, end))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


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
