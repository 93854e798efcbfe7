"""Verdicts that cannot lie: every verdict of the reproduction ledger is decided by a named rule.

A *rule* is a small pure function of the measured quantities (and of the thresholds it states)
that returns a :class:`Verdict`: the verdict word, a one-line reason naming the threshold that
decided it, and the rule's own name. Chapters call rules; no verdict is a literal in a cell
(:meth:`moe_routing.ledger.Ledger.record` accepts only a :class:`Verdict`). Each rule is unit
tested on both sides of each of its thresholds, the outcome "not reproduced" included
(``tests/test_verdicts_<family>.py``).

The vocabulary separates *what* was reproduced:

* ``reproduced`` -- the paper's result came out again in our measurement;
* ``reproduced for our construction`` -- the theorem's conclusion holds for *our* construction
  (which adds parts and hypotheses of its own), so it shows the statement is achievable, not that
  the paper's own construction behaves so;
* ``partly`` -- part of the claim holds, or only under conditions the reason states;
* ``not reproduced`` -- our measurement disagrees with the claim;
* ``our extension`` -- a claim of the book itself, not of the papers.

Rules live in one module per chapter family: :mod:`.knowledge`, :mod:`.construction`,
:mod:`.training`, :mod:`.boundary`, :mod:`.landscape`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

VERDICTS = ("reproduced", "reproduced for our construction", "partly", "not reproduced",
            "our extension")


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


def rule(func: Callable[..., tuple[str, str]]) -> Callable[..., Verdict]:
    """Make ``func`` (returning ``(verdict, reason)``) a rule returning a :class:`Verdict`
    stamped with the rule's qualified name."""
    name = f"{func.__module__}.{func.__qualname__}"

    @functools.wraps(func)
    def wrapper(*args, **kwargs) -> Verdict:
        verdict, reason = func(*args, **kwargs)
        return Verdict(verdict, reason, name)

    wrapper.is_rule = True
    return wrapper


__all__ = ["VERDICTS", "Verdict", "rule"]
