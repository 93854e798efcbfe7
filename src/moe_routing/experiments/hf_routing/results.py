"""What the Mixtral-style routing contrast measures and reports (part of
:mod:`.runs`): one run's per-layer :class:`LayerRoutingSummary` and :class:`RoutingRun`,
and over seeds the :class:`Interval`, :class:`ObjectiveLayer` and :class:`RoutingComparison`
the training chapter reads.

Separate because these are plain records, shared by the measurement (:mod:`.measure`)
and the runs and their cache (:mod:`.runs`); a cached run is the ``asdict`` of its
:class:`LayerRoutingSummary`, so this module is part of the runs' cache key
(:data:`.runs.HF_ROUTING_CODE`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._internal.validation import choice, integer


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Interval:
    """A quantity over seeds: ``mean`` of the seeds' values, ``low`` / ``high`` the lowest
    lower and highest upper end of the seeds' own intervals, ``n_seeds``."""

    mean: float
    low: float
    high: float
    n_seeds: int

    def apart_above(self, other: "Interval") -> bool:
        """This interval lies entirely above ``other``."""
        return self.low > other.high

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.mean, self.low, self.high)


@dataclass(frozen=True)
class LayerRoutingSummary:
    """One run, one layer, at the task-determined test positions (n of them).

    nmi, nmi_low, nmi_high — NMI(task; top-1 expert) with its bootstrap interval over test
    sentences (95 %); purity, load_entropy (normalised), max_utilisation — of the top-1
    choice; nmi_topk — NMI of all top-k assignments; counts (K, E) — task × top-1 expert;
    margin_median — median top-two logit margin; bm, bm_low, bm_high — BM(w*) and its Wilson
    interval."""

    layer: int
    n_positions: int
    nmi: float
    nmi_low: float
    nmi_high: float
    purity: float
    load_entropy: float
    max_utilisation: float
    nmi_topk: float
    counts: tuple[tuple[int, ...], ...]
    margin_median: float
    bm: float
    bm_low: float
    bm_high: float


@dataclass(frozen=True)
class RoutingRun:
    """One trained model's measurements: ``exact_match`` (test) and ``train_exact_match`` at
    the object, one :class:`LayerRoutingSummary` per layer, ``train_s`` the wall time of
    training and measuring and ``cpu_s`` its process CPU time (the time it needs on one
    core whatever else runs; 0 for a model measured as given), ``cached`` read from disk."""

    objective: str
    seed: int
    exact_match: float
    train_exact_match: float
    layers: tuple[LayerRoutingSummary, ...]
    train_s: float
    cpu_s: float
    cached: bool


@dataclass(frozen=True)
class ObjectiveLayer:
    """One objective, one layer, over seeds: intervals of the NMI, purity, load entropy,
    max utilisation, BM(w*) and median margin, and the task × expert counts summed over seeds
    (K, E)."""

    objective: str
    layer: int
    nmi: Interval
    purity: Interval
    load_entropy: Interval
    max_utilisation: Interval
    bm: Interval
    margin_median: Interval
    counts: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class RoutingComparison:
    """One model family's runs and their summary per objective and layer.

    ``model``: a label ("Mixtral-style", "library"); ``objectives``, ``seeds``, ``n_layers``,
    ``w_star`` as measured; ``runs`` every :class:`RoutingRun` (objective-major, then seed);
    ``cells`` one :class:`ObjectiveLayer` per objective and layer; ``exact_match`` one
    :class:`Interval` per objective (the binomial interval of each run's test set, joined over
    seeds)."""

    model: str
    objectives: tuple[str, ...]
    seeds: tuple[int, ...]
    n_layers: int
    w_star: float
    runs: tuple[RoutingRun, ...]
    cells: tuple[ObjectiveLayer, ...]
    exact_match: tuple[Interval, ...]

    def cell(self, objective: str, layer: int) -> ObjectiveLayer:
        """The summary of ``objective`` at ``layer`` (1-based)."""
        choice("objective", objective, self.objectives)
        integer("layer", layer, low=1, high=self.n_layers)
        return next(c for c in self.cells if c.objective == objective and c.layer == layer)

    def accuracy(self, objective: str) -> Interval:
        return self.exact_match[list(self.objectives).index(
            choice("objective", objective, self.objectives))]

    def nmi_by_layer(self) -> dict[str, list[tuple[float, float, float]]]:
        """``{objective: [(mean, low, high) of layer 1, …]}``: the input of
        :func:`moe_routing._internal.verdicts.hf_routing.hf_same_contrast`."""
        return {o: [self.cell(o, l).nmi.as_tuple() for l in range(1, self.n_layers + 1)]
                for o in self.objectives}
