"""The exercise index: parsing sphinx-exercise blocks from MyST, and the classroom rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_book.exercises import (KINDS, Exercise, exercise_index, exercises_page,
                                        find_exercises, problems)

ROOT = Path(__file__).resolve().parents[1]

SOURCE = '''# A chapter

```{exercise}
:label: ex-a

Prove that $|x| \\ge 0$. Then say why.
```

```{solution} ex-a
:class: dropdown

Because. A fenced block *inside* a directive uses a longer outer fence elsewhere.
```

````{exercise} A titled one
:label: ex-b

Estimate the slope with `fit_loglog`.
````

````{solution} ex-b
:class: dropdown

```python
print(fit_loglog([1, 2], [1, 2]))
```
````

:::{exercise}
:label: ex-c

Derive the gradient; compare with {prf:ref}`thm-x` (no code asked).
:::

```{solution-start} ex-c
:class: dropdown
```

The gradient is $2x$.

    x = 1  # an indented code block makes it a code exercise

```{solution-end}
```

```{exercise}
:label: ex-d

Unanswered.
```
'''


def test_finds_every_form_with_its_solution():
    rows = find_exercises("ch", SOURCE)
    assert [r.label for r in rows] == ["ex-a", "ex-b", "ex-c", "ex-d"]
    assert rows[1].title == "A titled one"
    assert "print(fit_loglog" in rows[1].solution
    assert "The gradient is $2x$." in rows[2].solution and "x = 1" in rows[2].solution
    assert rows[3].solution == ""
    assert "Because." in rows[0].solution and "Prove that" in rows[0].statement


def test_kinds():
    kinds = {r.label: r.kind for r in find_exercises("ch", SOURCE)}
    # ex-a: no code anywhere; ex-b: inline code in the statement and a fenced solution;
    # ex-c: a role is not inline code, but its gated solution holds an indented code block
    assert kinds == {"ex-a": "pen-and-paper", "ex-b": "code", "ex-c": "code",
                     "ex-d": "pen-and-paper"}
    assert set(kinds.values()) <= set(KINDS)


def test_summary_keeps_math_whole_and_stops_at_a_sentence():
    e = Exercise("ch", "ex", "", "Let $a. b$ hold for every $x$ in the set. " * 3, "")
    s = e.summary
    assert s.count("$") % 2 == 0 and s.endswith(".")
    assert 80 <= len(s) < len(" ".join(e.statement.split()))
    long = Exercise("ch", "ex", "", "word " * 100, "")
    assert long.summary.endswith(" …") and len(long.summary) < 240


def test_bad_sources_are_rejected():
    with pytest.raises(ValueError, match="without :label:"):
        find_exercises("ch", "```{exercise}\nNo label.\n```\n")
    with pytest.raises(ValueError, match="unterminated"):
        find_exercises("ch", "```{exercise}\n:label: ex\nnever closed\n")


def test_problems_name_the_chapter_and_the_exercise():
    rows = find_exercises("ch", SOURCE) + find_exercises("thin", SOURCE.split("````{exercise}")[0])
    got = problems(rows, ["ch", "thin"])
    assert got == ["ch: exercise ex-d has no solution",
                   "thin: 1 exercise(s), at least 2 needed"]


def test_page_lists_every_exercise_under_its_chapter():
    rows = find_exercises("ch", SOURCE)
    page = exercises_page(rows, {"ch": "A | chapter", "empty": "Empty"})
    assert page.startswith("# Exercises by chapter")
    assert "## [A \\| chapter](../chapters/ch.ipynb)" in page
    for r in rows:   # a numbered cross-reference: "Exercise 4.1", linked to the exercise
        assert f"| {{numref}}`{r.label}` |" in page
    assert "| {numref}`ex-c` | code |" in page
    assert page.split("## [Empty](../chapters/empty.ipynb)")[1].strip().startswith("No exercises yet.")
    # chapters in the order given (the book's), not alphabetical
    page2 = exercises_page(rows, {"empty": "Z first", "ch": "A second"})
    assert page2.index("Z first") < page2.index("A second")


def test_every_chapter_meets_the_classroom_rule():
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md") if p.stem != "README")
    rows = exercise_index(ROOT / "notebooks", names)
    assert problems(rows, names) == []
