"""``python -m moe_book.chapter_lint [CHAPTER.md ...]``: ruff over the chapters' code cells.

The chapters are MyST notebooks, so ``ruff check src tooling tests …`` never sees their code,
although it is the code readers copy.  This module gives every chapter the library's rules
(``[tool.ruff]`` of pyproject.toml: pyflakes, pycodestyle, bugbear, unused arguments) on the
concatenation of its ``{code-cell}`` blocks, and reports each finding at the chapter's own line
(``notebooks/training.md:212:5: F841 …``), so that an editor or CI log points at the source.

What differs from the library, and why:

* ``E402`` (import not at the top of the file) and ``B018`` (a bare expression) are off: a
  notebook imports where the narrative needs it, and a cell's last bare expression is how it
  displays a value;
* ``display`` is a builtin (IPython provides it in every kernel);
* IPython magics and shell escapes (lines starting, at column 0, with ``%`` or ``!``) are replaced by ``pass``
  before checking.

Exit status 1 when anything is found (every finding printed), 0 otherwise; ``make test`` runs it
beside the library's ruff.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .myst import directive_blocks

#: rules that do not apply to notebook code (see the module docstring)
NOTEBOOK_IGNORES = ("E402", "B018")
NOTEBOOK_BUILTINS = ("display",)

_MAGIC = re.compile(r"^(%|!(?!=))")       # at column 0; `!=` continuing an expression is no escape


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.code} {self.message}"


def chapter_code(text: str) -> tuple[str, list[int]]:
    """The chapter's code cells as one Python source, and for each of its lines the 1-based
    line of the chapter it comes from (0 for the separators between cells)."""
    lines = text.splitlines()
    out: list[str] = []
    where: list[int] = []
    for block in directive_blocks(text, ("code-cell",)):
        first = block.start + 1 + len(block.options)   # options (``:tags: …``) precede the code
        if first < block.end - 1 and lines[first].strip() == "---":     # a YAML option block
            close = next((i for i in range(first + 1, block.end - 1)
                          if lines[i].strip() == "---"), None)
            first = first if close is None else close + 1
        out.append("")
        where.append(0)
        for i in range(first, block.end - 1):                    # up to the closing fence
            src = lines[i]
            out.append("pass" if _MAGIC.match(src) else src)
            where.append(i + 1)
    return "\n".join(out) + "\n", where


def lint_text(text: str, name: str, root: Path) -> list[Finding]:
    """ruff's findings in the code cells of one chapter ``text`` (shown as ``name``)."""
    source, where = chapter_code(text)
    # The stdin file name places the source inside the repository, so ruff reads the project's
    # configuration (pyproject.toml); ``.py`` makes it parse the text as Python.
    cmd = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "json",
           "--stdin-filename", str(root / "notebooks" / f"{Path(name).stem}_cells.py"),
           "--ignore", ",".join(NOTEBOOK_IGNORES),
           "--config", f"builtins = {json.dumps(list(NOTEBOOK_BUILTINS))}", "-"]
    res = subprocess.run(cmd, input=source, capture_output=True, text=True, cwd=root)
    if res.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed on the code of {name}: {res.stderr.strip()}")
    found = []
    for item in json.loads(res.stdout or "[]"):
        row = item["location"]["row"]
        line = where[row - 1] if 0 < row <= len(where) else 0
        found.append(Finding(name, line, item["location"]["column"], item["code"] or "E999",
                             item["message"]))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*", type=Path,
                    help="MyST chapters (default: every notebooks/*.md but README.md)")
    args = ap.parse_args(argv)
    from .project import find_root

    root = find_root()
    paths = args.chapters or sorted(p for p in (root / "notebooks").glob("*.md")
                                    if p.name != "README.md")
    findings: list[Finding] = []
    for path in paths:
        if not path.is_file():
            ap.error(f"{path}: not a file; accepted: MyST chapters such as notebooks/training.md")
        try:
            shown = str(path.resolve().relative_to(root))
        except ValueError:
            shown = str(path)
        findings += lint_text(path.read_text(encoding="utf-8"), shown, root)
    for f in findings:
        print(f)
    print(f"chapter code: {len(findings)} finding(s) in {len(paths)} chapter(s)"
          if findings else f"chapter code: {len(paths)} chapter(s) clean")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
