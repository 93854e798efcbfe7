"""Rules of the book's capacity-bound variant of paper A's model (ours): entities embedded by
fixed random codes, so that the experts -- not the embedding table -- must hold the facts.

Its claims are the book's own (``X-`` ids: *our extension* when they hold, *not supported*
when the evidence does not bear them out), decided on paired differences over seeds
(:func:`moe_routing.experiments.accuracy.paired_difference`) and, like every accuracy rule,
*inconclusive* when the runs had not converged or an interval straddles the threshold.
"""

from __future__ import annotations

from ..validation import flag, number
from . import rule
from .training import _difference, _dv


@rule
def router_cost(router_vs_ce, router_vs_lb, *, margin: float = 0.03,
                converged: bool = True) -> tuple[str, str]:
    """X-codes-router-cost: in the capacity-bound variant, the task-router loss costs accuracy
    against both standard objectives -- by more than ``margin`` = 3 pp, resolved.

    ``router_vs_ce``, ``router_vs_lb``: the paired differences (router − CE, router − CE + LB)
    of test exact match at one configuration.  *our extension* when both intervals lie entirely
    below −3 pp; *not supported* when both lie above −3 pp (no cost beyond the margin);
    *partly* when one does each; *inconclusive* when an interval straddles −3 pp or the runs
    had not converged (a gap between runs still learning is also a difference of speed).
    """
    converged = flag("converged", converged)
    margin = number("margin", margin, low=0, high=1)
    d = [_difference(n, v) for n, v in (("router_vs_ce", router_vs_ce),
                                        ("router_vs_lb", router_vs_lb))]
    txt = f"router − CE {_dv(d[0])}, router − CE+LB {_dv(d[1])}"
    if not converged:
        return "inconclusive", f"{txt}: the runs had not converged"
    costs = [x[2] < -margin for x in d]
    free = [x[1] >= -margin for x in d]
    if all(costs):
        return "our extension", f"{txt}: both below −{100 * margin:g} pp"
    if all(free):
        return "not supported", f"{txt}: both above −{100 * margin:g} pp (no cost beyond it)"
    if any(costs) and any(free):
        return "partly", f"{txt}: a cost against one objective only"
    return "inconclusive", f"{txt}: an interval straddles −{100 * margin:g} pp"


__all__ = ["router_cost"]
