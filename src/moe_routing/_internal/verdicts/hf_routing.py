"""Rule of the Mixtral-style comparison (ours): does a model people train show the same
routing contrast between objectives as the library's model?

The training chapter's contrast (paper A, Figure 2) is an *ordering* of objectives by how well
the router's top-1 choice follows the task at the task-determined positions (NMI): the
task-router objective against cross-entropy alone, and against cross-entropy with load
balancing (:data:`moe_routing.experiments.hf_routing.runs.CONTRAST_PAIRS`).  Each NMI enters as an
interval ``(mean, low, high)`` over seeds
(:class:`moe_routing.experiments.hf_routing.results.Interval`); a contrast is *shown* by a model (at one
layer) when the two intervals are apart, in the direction of the reference model's means.

Routing is read only on models that learned the facts: the task-router loss optimises the
router's agreement with the task directly, so its NMI is high on any model, one that learned
nothing included.  Below an accuracy floor (:data:`ACCURACY_FLOOR`, test exact match at the
object) the comparison is *inconclusive*, whatever the NMIs say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..validation import fail, number, require
from . import rule

OURS = "our extension"
NOT = "not supported"       # a claim of the book that the evidence does not support
#: the contrasts judged: (objective expected higher, objective expected lower)
PAIRS = (("ce+router", "ce"), ("ce+router", "ce+lb"))
#: the test exact match every compared model must reach for its routing to be read
ACCURACY_FLOOR = 0.5


def _triple(name: str, value) -> tuple[float, float, float]:
    if all(hasattr(value, a) for a in ("mean", "low", "high")):
        value = (value.mean, value.low, value.high)
    try:
        m, lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        fail(name, value, "an interval (mean, low, high) or an Interval")
    for part, v in (("mean", m), ("low", lo), ("high", hi)):
        number(f"{name}.{part}", v, low=0.0, high=1.0)
    require(lo <= m <= hi, name, (m, lo, hi), "(mean, low, high) with low ≤ mean ≤ high")
    return m, lo, hi


def _layers(name: str, value) -> dict[str, list[tuple[float, float, float]]]:
    require(isinstance(value, Mapping), name, type(value).__name__,
            "a mapping {objective: [(mean, low, high) per layer]}")
    missing = sorted({o for p in PAIRS for o in p} - set(value))
    require(not missing, f"{name} objectives", sorted(value), f"all of {sorted({*PAIRS[0], *PAIRS[1]})}")
    out = {}
    for o, per in value.items():
        require(isinstance(per, Sequence) and len(per) > 0 and not isinstance(per, str),
                f"{name}[{o!r}]", per, "a non-empty list of intervals, one per layer")
        out[o] = [_triple(f"{name}[{o!r}][{l}]", v) for l, v in enumerate(per)]
    n = {len(v) for v in out.values()}
    require(len(n) == 1, f"{name} layers", sorted(n), "the same number of layers per objective")
    return out


def _apart(hi_side, lo_side) -> bool:
    return hi_side[1] > lo_side[2]


def _accuracies(name: str, value) -> dict[str, float]:
    require(isinstance(value, Mapping), name, type(value).__name__,
            "a mapping {objective: test exact match in [0, 1] (or an Interval)}")
    objectives = sorted({o for p in PAIRS for o in p})
    missing = sorted(set(objectives) - set(value))
    require(not missing, f"{name} objectives", sorted(value), f"all of {objectives}")
    return {o: number(f"{name}[{o!r}]", getattr(v, "mean", v), low=0.0, high=1.0)
            for o, v in value.items()}


@rule
def hf_same_contrast(library: Mapping, mixtral: Mapping, library_accuracy: Mapping,
                     mixtral_accuracy: Mapping, metric: str = "NMI", *,
                     floor: float = ACCURACY_FLOOR):
    """X-hf-routing: the Mixtral-style model shows the same routing contrast between
    objectives as the library's model.

    ``library`` / ``mixtral``: ``{objective: [(mean, low, high) of layer 1, layer 2, …]}`` —
    the routing ``metric`` at the task-determined positions with intervals over seeds
    (``RoutingComparison.nmi_by_layer()``).  The reference is the library's model (one layer
    or several: each contrast's direction is that of the library's means at its *first*
    layer, the one paper A's model has), and a contrast counts as the library's only when its
    intervals are apart there.  For each such contrast and each Mixtral layer the contrast is
    *shown* when Mixtral's intervals are apart in the same direction.  ``library_accuracy`` /
    ``mixtral_accuracy``: ``{objective: test exact match}`` (a number in [0, 1] or an
    Interval, its mean read); ``floor`` = 0.5 (:data:`ACCURACY_FLOOR`):

    * inconclusive — a model of either family is below the floor: a model that did not learn
      the facts says nothing about how training routes them (the task-router loss optimises
      the NMI directly, on any model), so its NMIs are not read;
    * our extension — every library contrast shown at every Mixtral layer;
    * partly — shown at some layer(s) or for some contrast(s) only;
    * not supported — shown nowhere, or the library's model itself separates no contrast
      (nothing to compare: the reason says so).
    """
    lib, mix = _layers("library", library), _layers("mixtral", mixtral)
    acc = {"library": _accuracies("library_accuracy", library_accuracy),
           "Mixtral": _accuracies("mixtral_accuracy", mixtral_accuracy)}
    floor = number("floor", floor, low=0.0, high=1.0)
    low = [f"{fam} {o} {100 * a:.1f} %" for fam, per in acc.items() for o, a in per.items()
           if a < floor]
    if low:
        return "inconclusive", (f"test exact match below the {100 * floor:.0f} % floor: "
                                + ", ".join(low) + f" (models that did not learn the facts; "
                                f"{metric} not read)")
    ref = []
    for hi_o, lo_o in PAIRS:
        a, b = lib[hi_o][0], lib[lo_o][0]
        if _apart(a, b):
            ref.append((hi_o, lo_o))
        elif _apart(b, a):
            ref.append((lo_o, hi_o))
    if not ref:
        return NOT, (f"the library's model separates no contrast of {metric} "
                                  "(intervals overlap): there is no contrast to reproduce")
    n_layers = len(next(iter(mix.values())))
    shown, notes = 0, []
    for up, down in ref:
        at = [l + 1 for l in range(n_layers) if _apart(mix[up][l], mix[down][l])]
        shown += len(at)
        notes.append(f"{up} > {down}: library {lib[up][0][0]:.2f} vs {lib[down][0][0]:.2f}, "
                     "Mixtral " + ", ".join(f"L{l + 1} {mix[up][l][0]:.2f} vs {mix[down][l][0]:.2f}"
                                            for l in range(n_layers))
                     + f" (apart at {'layers ' + ', '.join(map(str, at)) if at else 'no layer'})")
    total = len(ref) * n_layers
    txt = f"{metric} at task-determined positions; " + "; ".join(notes)
    if shown == total:
        return OURS, txt + f": all {total} shown"
    if shown > 0:
        return "partly", txt + f": {shown} of {total} shown"
    return NOT, txt + ": none shown"
