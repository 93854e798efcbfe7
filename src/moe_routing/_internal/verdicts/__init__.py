"""Verdicts that cannot lie: every verdict of the reproduction ledger is decided by a named rule.

A *rule* is a small pure function of the measured quantities (and of the thresholds it states)
that returns a :class:`Verdict`: the verdict word, a one-line reason naming the threshold that
decided it, and the rule's own name. Chapters call rules; no verdict is a literal in a cell
(:meth:`moe_routing._internal.ledger.Ledger.record` accepts only a :class:`Verdict`). Each rule is unit
tested on both sides of each of its thresholds, the outcome "not reproduced" included
(``tests/test_verdicts_<family>.py``).

The vocabulary separates *what* was reproduced:

* ``reproduced`` -- the paper's result came out again in our measurement;
* ``reproduced for our construction`` -- the theorem's conclusion holds for *our* construction
  (which adds parts and hypotheses of its own), so it shows the statement is achievable, not that
  the paper's own construction behaves so;
* ``holds by definition`` -- the statement follows from the definitions in a line, so no
  measurement could contradict it; what was checked is that our implementation of the
  definitions satisfies it (a failure is a bug in the implementation, read "not reproduced").
  It is kept apart from ``reproduced`` so that the ledger does not count a definition as a
  result that came out again;
* ``partly`` -- part of the claim holds, or only under conditions the reason states;
* ``not reproduced`` -- adequate evidence disagrees with a claim *of a paper*: converged runs,
  intervals narrow enough to resolve the difference, a quantity the model can test at its size;
* ``inconclusive`` -- the evidence cannot decide, in either direction: runs that had not
  converged, intervals too wide to tell a difference from none, a quantity the model cannot test
  at this size, a model that learned too little for its measurements to mean anything.  A rule
  applies it to support and to refutation alike: evidence too weak to confirm a claim is also
  too weak to refute it;
* ``our extension`` -- a claim of the book itself, not of the papers, that held;
* ``not supported`` -- a claim of the book itself that adequate evidence does not support (the
  book's hypotheses are nobody's results to reproduce: "not reproduced" is kept for the papers').

Which words a claim can receive follows from whose claim it is (:data:`PAPER_VERDICTS`,
:data:`OUR_VERDICTS`; the ledger refuses any other pairing).

Rules live in one module per chapter family: :mod:`.knowledge`, :mod:`.construction`,
:mod:`.training`, :mod:`.boundary`, :mod:`.landscape`, :mod:`.two_hop`, :mod:`.bridge` and
:mod:`.codes_variant` (ours).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

VERDICTS = ("reproduced", "reproduced for our construction", "holds by definition", "partly",
            "not reproduced", "inconclusive", "our extension", "not supported")
#: the words a claim of a paper (an ``A-`` or ``B-`` id) can receive
PAPER_VERDICTS = ("reproduced", "reproduced for our construction", "holds by definition",
                  "partly", "not reproduced", "inconclusive")
#: the words a claim of the book itself (an ``X-`` id) can receive
OUR_VERDICTS = ("our extension", "holds by definition", "partly", "not supported",
                "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """The decision of one rule: ``verdict`` (one of :data:`VERDICTS`), ``reason`` (one line:
    which threshold held or failed, with the numbers), ``rule`` (the deciding function)."""

    verdict: str
    reason: str
    rule: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict = {self.verdict!r} is not allowed; accepted: "
                             + ", ".join(map(repr, VERDICTS)))
        if not self.reason or "\n" in self.reason:
            raise ValueError(f"reason = {self.reason!r} is not allowed; accepted: one "
                             "non-empty line")


def _nan_at(value, depth: int = 0) -> str | None:
    """Where ``value`` (a number, or sequences / mappings / arrays of them) holds a NaN:
    ``""`` for the value itself, ``"[2]"`` / ``"['ce'][0]"`` for an item, None when it holds
    none.  Strings and other objects hold no NaN."""
    if isinstance(value, (str, bytes)) or depth > 8:
        return None
    if isinstance(value, numbers.Number):
        try:
            return "" if math.isnan(complex(value).real) or math.isnan(complex(value).imag) \
                else None
        except (TypeError, ValueError):
            return None
    if hasattr(value, "__array__") and not isinstance(value, Mapping):
        arr = np.asarray(value)
        if arr.dtype.kind in "fc" and np.isnan(arr).any():
            idx = tuple(int(i) for i in np.argwhere(np.isnan(arr))[0])
            return "".join(f"[{i}]" for i in idx)
        if arr.dtype.kind != "O":
            return None
        value = arr.tolist()
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        where = _nan_at(item, depth + 1)
        if where is not None:
            return f"[{key!r}]{where}"
    return None


def rule(func: Callable[..., tuple[str, str]]) -> Callable[..., Verdict]:
    """Make ``func`` (returning ``(verdict, reason)``) a rule returning a :class:`Verdict`
    stamped with the rule's qualified name.

    Every rule refuses a NaN anywhere in its arguments (ValueError naming the argument and
    the item): a NaN fails every comparison silently, so ``x <= tol`` and ``x > tol`` are both
    False and a rule would fall through to whichever verdict its last line returns.  A
    measurement that could not be made must be dealt with before a verdict is asked for.
    """
    name = f"{func.__module__}.{func.__qualname__}"
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs) -> Verdict:
        for arg, value in signature.bind(*args, **kwargs).arguments.items():
            where = _nan_at(value)
            if where is not None:
                raise ValueError(f"{func.__qualname__}: {arg}{where} = nan is not allowed; "
                                 "accepted: measured numbers (a NaN means a measurement "
                                 "failed: deal with it before asking for a verdict)")
        verdict, reason = func(*args, **kwargs)
        return Verdict(verdict, reason, name)

    wrapper.is_rule = True
    return wrapper


__all__ = ["OUR_VERDICTS", "PAPER_VERDICTS", "VERDICTS", "Verdict", "rule"]
