"""The one reader of MyST directive fences in the tooling.

Both the student edition (:mod:`moe_book.classroom`, which cuts solutions) and the exercise index
(:mod:`moe_book.exercises`, which lists exercises with their solutions) need the same thing: the
extent of every ``{exercise}``/``{solution}`` block of a chapter's source, in both fence styles
and in sphinx-exercise's gated form. This module finds them, once.

Recognised forms:

* backtick fences ```` ```{name} arg ```` … ```` ``` ```` (any fence length ≥ 3; the closing
  fence must be at least as long, as in CommonMark, so nested directives with shorter fences
  stay inside);
* colon fences ``:::{name} arg`` … ``:::``;
* gated blocks ``{name-start} arg`` … ``{name-end}`` (either fence style), whose content lies
  between the two directives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_OPTION = re.compile(r"^[ \t]*:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")


@dataclass(frozen=True)
class Block:
    """One directive block of a MyST text; ``start``/``end`` are line indices (``end`` one past
    the block's last line, its closing fence)."""

    name: str
    gated: bool
    arg: str
    options: dict[str, str] = field(hash=False)
    body: str
    start: int
    end: int


def table_cell(text: object) -> str:
    """Make text safe inside one cell of a Markdown table (no pipe, no line break)."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def fence_closes(line: str, fence: str) -> bool:
    """Whether ``line`` is a bare fence closing a block opened with ``fence``."""
    s = line.strip()
    return bool(s) and set(s) == {fence[0]} and len(s) >= len(fence)


def directive_blocks(text: str, names: tuple[str, ...]) -> list[Block]:
    """Every top-level block of the directives ``names`` in ``text``, in order.

    Raises ``ValueError`` naming the line of an unterminated block (a student build that kept
    half a solution would be worse than no build).
    """
    alternatives = "|".join(map(re.escape, names))
    opener = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>" + alternatives
                        + r")(?P<gated>-start)?\}[ \t]*(?P<arg>.*)$")
    gate_end = re.compile(r"^[ \t]*(`{3,}|:{3,})\{(" + alternatives + r")-end\}")
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = opener.match(lines[i])
        if not m:
            i += 1
            continue
        fence, name = m.group("fence"), m.group("name")
        j = i + 1
        opts: dict[str, str] = {}
        while j < len(lines) and (om := _OPTION.match(lines[j])):
            opts[om.group("key")] = om.group("value").strip()
            j += 1
        k = j
        while k < len(lines) and not fence_closes(lines[k], fence):
            k += 1
        if m.group("gated"):
            # the opening directive closes at its own fence; the content runs to {name-end}
            end = k + 1
            while end < len(lines) and not gate_end.match(lines[end]):
                end += 1
            if end >= len(lines):
                raise ValueError(f"unterminated {{{name}-start}} at line {i + 1}")
            body = "\n".join(lines[k + 1:end])
            end_fence = gate_end.match(lines[end]).group(1)
            k = end + 1
            while k < len(lines) and not fence_closes(lines[k], end_fence):
                k += 1
        else:
            if k == len(lines):
                raise ValueError(f"unterminated {{{name}}} block at line {i + 1}")
            body = "\n".join(lines[j:k])
        out.append(Block(name, bool(m.group("gated")), m.group("arg").strip(), opts,
                         body.strip(), i, min(k + 1, len(lines))))
        i = k + 1
    return out
