"""Solution stripping for the student edition."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from moe_book.classroom import solution_texts, strip_solutions

DOC = """# Chapter

```{exercise}
:label: ex-a

Prove it.
```

```{solution} ex-a
:class: dropdown

SECRET-ONE: the proof.
```

Text between.

````{solution} ex-b
:class: dropdown

SECRET-TWO with code:

```python
print("SECRET-THREE")
```
````

:::{solution} ex-c
SECRET-FOUR
:::

```{solution-start} ex-d
```
SECRET-FIVE
```{code-cell} ipython3
x = "SECRET-SIX"
```
```{solution-end}
```

After.
"""


def test_all_solution_forms_are_removed_and_the_rest_kept():
    out = strip_solutions(DOC)
    assert "SECRET" not in out
    assert "{solution" not in out
    for kept in ("# Chapter", "{exercise}", "Prove it.", "Text between.", "After."):
        assert kept in out


def test_solution_texts_are_exactly_the_removed_lines():
    bodies = "".join(solution_texts(DOC))
    for n in ("ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX"):
        assert f"SECRET-{n}" in bodies
    assert "Prove it." not in bodies


@pytest.mark.parametrize("bad", ["```{solution} x\nopen forever\n",
                                 "```{solution-start} x\n```\nno end\n"])
def test_unterminated_blocks_are_errors(bad):
    with pytest.raises(ValueError, match="unterminated"):
        strip_solutions(bad)


@given(st.lists(st.text(alphabet="abc xyz\n", max_size=30), max_size=5))
def test_text_without_solutions_is_unchanged(chunks):
    text = "\n".join(chunks)
    assert strip_solutions(text) == text
