"""Checks of collection arguments, on top of :mod:`moe_routing.validation`'s scalar checks.

Why: a bare string, a number (NaN included) or a 0-d array passed where a sequence is expected
would otherwise be iterated character by character or fail with a ``TypeError`` deep inside;
here it is a ``ValueError`` naming the argument, like every other refusal of the library.
"""

from __future__ import annotations

from typing import Any

from ..validation import fail, require


def sequence(name: str, value: Any, accepted: str, *, nonempty: bool = True) -> list:
    """The items of ``value`` as a list: any iterable except a string or bytes (a 0-d array or
    a number is refused), non-empty unless allowed."""
    if isinstance(value, (str, bytes)):
        fail(name, value, accepted)
    try:
        items = list(value)
    except TypeError:
        fail(name, value, accepted)
    if nonempty:
        require(len(items) > 0, name, items, f"{accepted}, at least one")
    return items


def sequence_of(name: str, value: Any, cls: type, *, nonempty: bool = True) -> list:
    """The items of ``value`` as a list, each an instance of ``cls``; a single instance (a
    common slip for a list of one) is refused with that hint, and a bad item is named by its
    index."""
    what = f"a sequence of {cls.__name__}"
    if isinstance(value, cls):
        fail(name, value, f"{what} (a list, even of one)")
    items = sequence(name, value, what, nonempty=nonempty)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            fail(f"{name}[{i}]", type(item).__name__, f"a {cls.__name__}")
    return items
