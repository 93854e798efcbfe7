"""The chapter linter: ruff's findings at the chapter's own lines, the notebook exemptions, and
every chapter clean."""

from __future__ import annotations

from pathlib import Path

from moe_book.chapter_lint import chapter_code, lint_text, main

ROOT = Path(__file__).resolve().parents[1]

CHAPTER = """\
# A chapter

```{code-cell} ipython3
:tags: [parameters]

seed = 0
```

Some prose with `import os` that is not code.

```{code-cell} ipython3
---
tags: [hide-input]
---
import os
%matplotlib inline
x = [1, 2]
y = (x[0]
     != x[1])
for i in x:
    print(seed)
display(y)
y
```
"""


def test_code_lines_map_back_to_the_chapter():
    source, where = chapter_code(CHAPTER)
    lines = CHAPTER.splitlines()
    for src, line in zip(source.splitlines(), where):
        if line:
            assert src == lines[line - 1] or (src == "pass" and lines[line - 1].startswith("%"))
    assert "import os" in source and "Some prose" not in source and "tags:" not in source


def test_findings_name_the_chapter_line_and_exemptions_hold():
    found = lint_text(CHAPTER, "notebooks/x.md", ROOT)
    got = {(f.line, f.code) for f in found}
    lines = CHAPTER.splitlines()
    assert (lines.index("import os") + 1, "F401") in got              # unused import
    assert (lines.index("for i in x:") + 1, "B007") in got            # unused loop variable
    # display() is a builtin, a bare last expression and a late import are fine, a magic is
    # skipped and a line starting with != is code, not a shell escape
    assert {code for _, code in got} == {"F401", "B007"}, found


def test_every_chapter_is_clean(capsys):
    assert main([]) == 0, capsys.readouterr().out
