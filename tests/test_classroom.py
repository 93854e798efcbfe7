"""Solution stripping for the student edition, and the publishing check: no public site holds
an autograder, a hidden test or a solution of an assignment."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from moe_book.classroom import (all_secrets, assignment_secrets, leaks, public_site,
                                solution_texts, strip_solutions)

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


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
SOURCES = ROOT / "assignments"

ASSIGNMENT = """```{code-cell} ipython3
def f(x):
    # BEGIN SOLUTION
    return sorted(x, key=lambda v: -abs(v))[:3]
    # END SOLUTION
```

```{code-cell} ipython3
def test_public_one(f):
    assert f([1]) == [1]
```

```{code-cell} ipython3
\"\"\" # BEGIN TEST CONFIG
hidden: true
\"\"\" # END TEST CONFIG
def test_secret_three(f):
    assert f([3, -4, 1, 0]) == [-4, 3, 1]
```
"""


def test_secrets_of_one_assignment():
    hidden, solution = assignment_secrets(ASSIGNMENT)
    assert hidden == ["test_secret_three"]                    # not the public test
    assert solution == ["return sorted(x, key=lambda v: -abs(v))[:3]"]


def test_secrets_of_the_real_assignments():
    """Every assignment declares hidden tests and solution lines (the check looks for them)."""
    for src in sorted(SOURCES.glob("*.md")):
        hidden, solution = assignment_secrets(src.read_text())
        assert len(hidden) >= 3 and len(solution) >= 5, src.name
    with pytest.raises(ValueError, match="no assignment sources"):
        all_secrets(SOURCES / "nope")


def _site(tmp_path):
    site = tmp_path / "html"
    offered = site / "_static" / "downloads" / "assignments"
    offered.mkdir(parents=True)
    (site / "index.html").write_text("<html><body><p>The book.</p></body></html>")
    # the student notebook: statement and public test, the answer replaced by ...
    nb = {"cells": [{"cell_type": "code", "source": ["def bm_monte_carlo(v):\n", "    ...\n"]}]}
    (offered / "boundary_mass.ipynb").write_text(__import__("json").dumps(nb))
    return site, offered


def test_a_clean_site_passes_and_a_control_with_one_autograder_fails(tmp_path):
    import zipfile

    site, offered = _site(tmp_path)
    assert leaks(site, SOURCES) == []
    hidden, solution = all_secrets(SOURCES)
    with zipfile.ZipFile(offered / "boundary_mass-autograder.zip", "w") as zf:
        zf.writestr("tests/q1.py", f"def {hidden[0]}(f):\n    pass\n")
    assert leaks(site, SOURCES) == ["_static/downloads/assignments/boundary_mass-autograder.zip: "
                                    "an autograder (holds every hidden test and the solution)"]
    # renamed, the zip is still read: its tests give it away
    (offered / "boundary_mass-autograder.zip").rename(offered / "material.zip")
    assert leaks(site, SOURCES) == [f"_static/downloads/assignments/material.zip!tests/q1.py: "
                                    f"hidden test(s) {hidden[0]}"]


def test_secrets_are_found_through_html_markup_and_json_escapes(tmp_path):
    import html
    import json

    site, offered = _site(tmp_path)
    _, solution = all_secrets(SOURCES)
    line = next(s for s in solution if '"' in s or "<" in s or "&" in s)
    # Pygments splits a code line into spans and escapes it; a notebook escapes its quotes
    marked = "".join(f"<span>{html.escape(ch)}</span>" for ch in line)
    (site / "page.html").write_text(f"<html><body><pre>{marked}</pre></body></html>")
    (offered / "leaked.ipynb").write_text(json.dumps({"cells": [{"source": [line]}]}))
    found = leaks(site, SOURCES)
    assert [f.split(":")[0] for f in found] == ["_static/downloads/assignments/leaked.ipynb",
                                                "page.html"], found


def test_the_public_copy_leaves_autograders_out_and_refuses_leaks(tmp_path):
    site, offered = _site(tmp_path)
    (offered / "boundary_mass-autograder.zip").write_bytes(b"not checked: left out")
    dest = tmp_path / "public"
    assert public_site(site, dest, SOURCES) == [
        "_static/downloads/assignments/boundary_mass-autograder.zip"]
    assert (dest / "_static/downloads/assignments/boundary_mass.ipynb").is_file()
    assert not list(dest.rglob("*autograder*"))
    hidden, _ = all_secrets(SOURCES)
    (site / "notes.txt").write_text(f"see {hidden[-1]}")
    with pytest.raises(ValueError, match=rf"notes\.txt: hidden test\(s\) {hidden[-1]}"):
        public_site(site, dest, SOURCES)
    assert not dest.exists()                                   # no half-checked copy is left
    with pytest.raises(ValueError, match="not a built HTML tree"):
        leaks(tmp_path, SOURCES)
    with pytest.raises(ValueError, match="must lie outside"):
        public_site(site, site / "public", SOURCES)


def test_the_library_reference_source_pages_are_the_library_not_a_leak(tmp_path):
    """viewcode renders the library's own source under _modules/ (the wheel ships the same
    lines): a solution line equal to library code is not a leak there, and is one on any
    other page (the control)."""
    site, _ = _site(tmp_path)
    _, solution = all_secrets(SOURCES)
    page = f"<html><body><pre>{solution[0]}</pre></body></html>"
    (site / "_modules" / "moe_routing").mkdir(parents=True)
    (site / "_modules" / "moe_routing" / "two_hop.html").write_text(page)
    assert leaks(site, SOURCES) == []
    (site / "chapter.html").write_text(page)
    assert [f.split(":")[0] for f in leaks(site, SOURCES)] == ["chapter.html"]
