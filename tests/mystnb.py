"""Throw-away MyST chapters for the pipeline tests."""

from __future__ import annotations

import textwrap

# The jupytext header every chapter of the book starts with.
HEADER = textwrap.dedent("""\
    ---
    jupytext:
      text_representation:
        extension: .md
        format_name: myst
    kernelspec:
      display_name: Python 3
      language: python
      name: python3
    ---

    """)


def chapter(body: str) -> str:
    """A MyST chapter: the jupytext header, then ``body`` (dedented)."""
    return HEADER + textwrap.dedent(body)
