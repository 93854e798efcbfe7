"""Refusals of the construction: a dataset is refused only with a proof.

The construction works under hypotheses on the dataset ((H-obj), (H-code), (H-route),
(H-gate); see :mod:`.build`).  When one fails, the build raises :class:`HypothesisFails`, which
names the hypothesis, the task(s) concerned and witness prefixes, and carries what proves the
failure: the offending nodes themselves for the combinatorial (H-obj), an LP certificate
(:class:`.separability.Certificate`) for the three linear-separability hypotheses.  When an
iterative fit and the LP behind it both stop without deciding, nothing is proved and the build
raises :class:`HypothesisUndecided` with the numbers instead -- never a refusal.
"""

from __future__ import annotations

HYPOTHESES = {
    "H-obj": "every object slot (a template prefix followed by ⋆2) belongs to one task only",
    "H-code": "among the prefixes of the same length ending in the same token type, each "
              "head-1 code is a vertex of the convex hull of the group's codes",
    "H-route": "the routing labels (task, or junction for shared prefixes) are linearly "
               "separable in the structural block [TOK | POS | H1]",
    "H-gate": "each task's object slots are linearly separable from the nodes its gate must "
              "stay off at (the task's other nodes for the MoE, every other node for the dense "
              "layer) in the structural block",
}


def _listing(witnesses, limit: int = 6) -> str:
    shown = [f"'{w}'" for w in witnesses[:limit]]
    more = f" and {len(witnesses) - limit} more" if len(witnesses) > limit else ""
    return ", ".join(shown) + more


class HypothesisFails(ValueError):
    """The dataset violates hypothesis ``hypothesis`` of the construction; ``certificate`` is
    the proof (an LP certificate, or the list of offending nodes for (H-obj)).

    ``tasks``: names of the tasks concerned; ``witnesses``: prefix texts, the witness first
    (for an LP certificate, the prefixes in its support, heaviest first).  An LP certificate's
    ``rows`` are indices of structural nodes (:func:`.structure.structural_nodes`), so it can be
    checked against their structural codes."""

    def __init__(self, hypothesis: str, tasks, witnesses, certificate, detail: str = ""):
        self.hypothesis = hypothesis
        self.tasks = tuple(tasks)
        self.witnesses = tuple(witnesses)
        self.certificate = certificate
        super().__init__(
            f"hypothesis ({hypothesis}) fails for task(s) {list(self.tasks)}: "
            f"{HYPOTHESES[hypothesis]}; witness prefix(es) {_listing(self.witnesses)}"
            + (f"\n{detail}" if detail else ""))


class HypothesisUndecided(RuntimeError):
    """An iterative fit checking ``hypothesis`` stopped short and the LP did not decide
    either: the hypothesis may well hold.  ``fit`` and ``lp`` hold the numbers."""

    def __init__(self, hypothesis: str, tasks, witnesses, cause):
        self.hypothesis = hypothesis
        self.tasks = tuple(tasks)
        self.witnesses = tuple(witnesses)
        self.fit = getattr(cause, "fit", None)
        self.lp = getattr(cause, "lp", None)
        super().__init__(
            f"could not decide hypothesis ({hypothesis}) for task(s) {list(self.tasks)} -- not "
            f"a refusal: {cause}; prefixes with the worst margins: {_listing(self.witnesses)}")
