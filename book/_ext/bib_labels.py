"""The bibliography's labels in the text's style: author and year.

The chapters cite author–year (``bibtex_reference_style: author_year``: "[Rastegar, 2026]"),
while sphinxcontrib-bibtex's default bibliography style, ``alpha``, labels each entry with
letters ("[Ras26]"): a reader who meets "[Rastegar, 2026]" in a chapter looked in vain for
that label on the Bibliography page. This registers a pybtex label style ``authoryear`` (the
surnames as the citations show them: one, two joined by "and", or the first and "et al.";
a comma; the year; "a", "b" … after the year where two entries would get the same label) and a
formatting style ``authoryear`` (``alpha``'s entries and order, these labels), which the
book's configuration makes the default (``bibtex_default_style``).
"""

from __future__ import annotations

import re
from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.labels import BaseLabelStyle


def _surname(person) -> str:
    return re.sub(r"[{}]", "", " ".join(person.prelast_names + person.last_names)).strip()


def author_year(entry) -> str:
    """"Rastegar, 2026", "Evans and Gariepy, 2015", "Nandakumar et al., 2026"."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in persons]
    who = (names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2
           else f"{names[0]} et al." if names else entry.fields.get("title", "Anonymous"))
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        labels = [author_year(e) for e in sorted_entries]
        count, seen = Counter(labels), Counter()
        for label in labels:
            if count[label] == 1:
                yield label
            else:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]


class AuthorYearStyle(AlphaStyle):
    default_label_style = "authoryear"


def setup(app):
    register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabelStyle)
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
