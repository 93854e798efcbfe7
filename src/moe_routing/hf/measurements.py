"""Paper A's and paper B's routing measurements of a model's router logits, layer by layer
(part of :mod:`moe_routing.hf`): :func:`routing_measurements` and its :class:`LayerRouting` --
the top-k choice as the model routes (its :class:`~.routing_rule.RoutingRule`), the routing
summary against per-token task ids, the margins Δ_k at the k-th/(k+1)-th boundary and BM(w) on
a fixed grid (:data:`DEFAULT_WIDTHS`) with its power-law fit.

Separate because it needs no transformers: it reads (n, E) logits, from
:func:`~moe_routing.hf.collect_router_logits` or anywhere else, with the library's own
:mod:`~moe_routing.routing_metrics` and :mod:`~moe_routing.boundary`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import routing_metrics as rm
from ..boundary.fits import LogLogFit, bootstrap_bm_fit
from ..boundary.mass import BoundaryMass, boundary_mass_from_margins
from .._internal.validation import fail, flag, integer, number, require, widths as check_widths
from .routing_rule import RoutingRule

#: the default width grid of BM(w), in logit units: 10⁻³ … 10, four widths per decade; fixed
#: (not fitted to the data) so that layers, models and runs are read on the same grid
DEFAULT_WIDTHS = np.geomspace(1e-3, 1e1, 17)
#: how far from 1 the sum of a row of probabilities may be (a softmax rounded to bfloat16 sums
#: to 1 within about 2⁻⁸); a row of logits that is ≥ 0 and sums this close to 1 is a
#: coincidence the caller must vouch for (``allow_probability_rows``)
PROBABILITY_ROW_TOLERANCE = 1e-2


# -------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class LayerRouting:
    """The routing of one layer at the measured tokens (n tokens, E experts, k = the rule's
    top-k).

    experts (n, k) int64 — the experts the router sends each token to, most preferred first;
        weights (n, k) — their gate weights, as the model weighs their outputs (``rule``:
        renormalised or not, a correction bias steering the choice only, PhiMoE's sparsemixer);
    summary — :func:`moe_routing.routing_metrics.routing_summary` of the first expert against
        the task of each token, with the router distribution softmax(a) where the router has
        one (not for a sigmoid router: no entropies then) — the library's convention for its
        own model: counts, P(E|T), purity, NMI, diagonal accuracy, utilisation, entropies;
    assignments — the count matrix and utilisation over all n·k routing assignments (each
        token counted once per chosen expert: the ``f`` of the load-balancing losses);
    margins (n,) — Δ_k = s_(k) − s_(k+1), the gap at the boundary where the router's set of k
        experts changes (k = 1: paper B's top-two margin a_(1) − a_(2)), on the logits or, for a
        router with a correction bias, on its selection scores (``rule.margin_scores``;
        :mod:`.routing_rule` says why); boundary_mass — BM(w) at the widths with Wilson
        intervals; bm_fit — BM(w) ≈ C·w^α fitted by the library's bootstrap over the widths
        where 1 ≤ #{Δ ≤ w} and BM(w) ≤ ``bm_fit_max`` (None when fewer than 3);
    rule — the :class:`~moe_routing.hf.RoutingRule` the layer was read with.
    """

    experts: np.ndarray
    weights: np.ndarray
    summary: dict
    assignments: dict
    margins: np.ndarray
    boundary_mass: BoundaryMass
    bm_fit: LogLogFit | None
    rule: RoutingRule

    def as_dict(self) -> dict:
        """JSON-ready scalars and small arrays (not the per-token arrays)."""
        bm = self.boundary_mass
        fit = None if self.bm_fit is None else dict(
            slope=self.bm_fit.slope, slope_ci=list(self.bm_fit.slope_ci),
            prefactor=self.bm_fit.prefactor, prefactor_ci=list(self.bm_fit.prefactor_ci))
        return dict(summary=self.summary, assignments=self.assignments,
                    top_k=self.rule.top_k, margin_scores=self.rule.margin_scores,
                    margin_median=float(np.median(self.margins)),
                    boundary_mass=dict(widths=bm.widths.tolist(), estimate=bm.estimate.tolist(),
                                       lower=bm.lower.tolist(), upper=bm.upper.tolist(), n=bm.n),
                    bm_fit=fit)


def _positions(positions, n: int) -> np.ndarray:
    """Token indices from None (all), an index array or a boolean mask of length n.

    An index listed twice is refused: the token would be counted twice in every count, NMI and
    boundary mass, as if the model had seen it twice."""
    if positions is None:
        return np.arange(n)
    p = np.asarray(positions.detach().cpu() if hasattr(positions, "detach") else positions)
    if p.dtype == np.bool_:
        require(p.shape == (n,), "positions.shape", p.shape, f"({n},): a mask over the tokens")
        p = np.flatnonzero(p)
    else:
        require(p.ndim == 1 and np.issubdtype(p.dtype, np.integer), "positions",
                f"an array of dtype {p.dtype} and shape {p.shape}",
                "None, a 1-D integer array of token indices or a boolean mask over the tokens")
        if p.size:
            require(int(p.min()) >= 0 and int(p.max()) < n, "positions range",
                    f"{int(p.min())}..{int(p.max())}", f"token indices 0..{n - 1}")
            values, counts = np.unique(p, return_counts=True)
            if counts.max() > 1:
                t = int(values[counts.argmax()])
                fail("positions", p.tolist(), f"distinct token indices (token {t} is listed "
                     f"{int(counts.max())} times: each token is measured once)")
    require(p.size > 0, "positions", "no token", "at least one measured token")
    return p.astype(np.int64)


def _layer_logits(l: int, raw, n_tokens: int, allow_probability_rows: bool) -> np.ndarray:
    """Layer ``l``'s (n, E) logits as float64, refusing rows of probabilities (module
    docstring of :mod:`.routers`: transformers 5.2 records softmax(a) as ``router_logits``)."""
    name = f"router_logits_per_layer[{l}]"
    a = np.asarray(raw.detach().cpu().double() if hasattr(raw, "detach") else raw,
                   dtype=np.float64)
    require(a.ndim == 2 and a.shape[0] == n_tokens and a.shape[1] >= 2, f"{name}.shape", a.shape,
            f"({n_tokens}, E ≥ 2): one row per token of task_ids_per_token")
    require(bool(np.isfinite(a).all()), name, "non-finite entries", "finite logits")
    if not allow_probability_rows:
        simplex = (a.min(1) >= 0) & (np.abs(a.sum(1) - 1) <= PROBABILITY_ROW_TOLERANCE)
        if simplex.any():
            i = int(np.flatnonzero(simplex)[0])
            fail(f"{name}[{i}]", f"a row of probabilities ({int(simplex.sum())} of {a.shape[0]} "
                 f"rows are ≥ 0 and sum to 1 within {PROBABILITY_ROW_TOLERANCE:g})",
                 "pre-softmax router logits, as collect_router_logits returns them (the choice, "
                 "margins and BM(w) need logits: a margin of probabilities is in other units and "
                 "below 1; transformers 5.2 records softmax(a) as router_logits); "
                 "allow_probability_rows=True if these rows are logits all the same")
    return a


def _layer_rules(routing, logits: list[np.ndarray]) -> list[RoutingRule]:
    """One :class:`RoutingRule` per layer: Mixtral's softmax top-k for an int k, else the
    rules given (one per layer, each with the layer's number of experts)."""
    if isinstance(routing, RoutingRule):
        fail("routing", routing, "a top-k or a list of RoutingRule, one per layer (a list "
             "even of one)")
    if isinstance(routing, (list, tuple)):
        require(len(routing) == len(logits), "routing", f"{len(routing)} rules",
                f"{len(logits)} RoutingRule, one per layer of router_logits_per_layer "
                "(routing_rules(model))")
        for l, (r, a) in enumerate(zip(routing, logits)):
            require(isinstance(r, RoutingRule), f"routing[{l}]", type(r).__name__,
                    "a RoutingRule (routing_rules(model))")
            require(r.n_experts == a.shape[1], f"routing[{l}].n_experts", r.n_experts,
                    f"{a.shape[1]}, the experts of router_logits_per_layer[{l}]")
        return list(routing)
    k = integer("routing", routing, low=1)
    rules = []
    for l, a in enumerate(logits):
        require(k < a.shape[1], "routing", routing,
                f"a top-k with 1 ≤ k < E = {a.shape[1]} (the experts of router_logits_per_layer"
                f"[{l}]; with k = E every expert is chosen: no routing boundary, no margin), or "
                "a list of RoutingRule, one per layer")
        rules.append(RoutingRule.softmax_top_k(a.shape[1], k, source=f"layer {l}"))
    return rules


def routing_measurements(router_logits_per_layer, task_ids_per_token, routing,
                         positions=None, *, n_tasks: int | None = None, widths=None,
                         bm_fit_max: float = 0.1, seed: int = 0,
                         allow_probability_rows: bool = False) -> list[LayerRouting]:
    """Paper A's and paper B's routing measurements of each layer (see :class:`LayerRouting`).

    router_logits_per_layer: one (n, E) array or tensor of router logits per layer
    (:func:`collect_router_logits`); pre-softmax logits, never probabilities: a layer with a row
    that is ≥ 0 and sums to 1 (within :data:`PROBABILITY_ROW_TOLERANCE`) is refused, unless
    ``allow_probability_rows=True`` vouches that such rows are logits all the same;
    task_ids_per_token (n,) integer task of each token;
    routing: how the router routes — an int k, Mixtral's rule (the k largest softmax(a), gate
    weights renormalised; 1 ≤ k < E), or one :class:`RoutingRule` per layer, what each router
    of a transformers model really does (:func:`routing_rules`: a correction bias,
    weights not renormalised, PhiMoE's sparsemixer — pass them for any model but Mixtral-style
    ones);
    positions: which tokens to measure (None: all; distinct token indices or a boolean mask of
    length n); n_tasks: K (default: largest id + 1); widths: the BM grid (default
    :data:`DEFAULT_WIDTHS`); bm_fit_max: the largest BM(w) a fit point may have (the small-w
    regime of paper B); seed: of the fit's bootstrap.
    """
    if isinstance(router_logits_per_layer, (torch.Tensor, np.ndarray)):
        fail("router_logits_per_layer", type(router_logits_per_layer).__name__,
             "a list of (n, E) logits, one per layer (a list even of one)")
    layers = list(router_logits_per_layer) if isinstance(router_logits_per_layer,
                                                         (list, tuple)) else None
    require(bool(layers), "router_logits_per_layer", router_logits_per_layer,
            "a non-empty list of (n, E) logits, one per layer")
    tasks = rm._ids("task_ids_per_token", task_ids_per_token)
    require(int(tasks.min()) >= 0, "task_ids_per_token.min()", int(tasks.min()), "task ids ≥ 0")
    n_tasks = int(tasks.max()) + 1 if n_tasks is None else integer("n_tasks", n_tasks, low=1)
    w = DEFAULT_WIDTHS if widths is None else check_widths("widths", widths)
    bm_fit_max = number("bm_fit_max", bm_fit_max, low=0, low_open=True, high=1)
    allow = flag("allow_probability_rows", allow_probability_rows)
    logits = [_layer_logits(l, raw, tasks.size, allow) for l, raw in enumerate(layers)]
    rules = _layer_rules(routing, logits)
    for rule in rules:
        require(rule.top_k < rule.n_experts, f"{rule.source}: top_k", rule.top_k,
                f"< n_experts = {rule.n_experts} (every expert is chosen: no routing boundary, "
                "no margin)")
    sel = _positions(positions, tasks.size)
    t = tasks[sel]
    out = []
    for a, rule in zip(logits, rules):
        a = a[sel]                                                             # (n, E)
        n_exp, k = rule.n_experts, rule.top_k
        experts, weights = rule.route(a)                                       # (n, k) each
        summary = rm.routing_summary(t, experts[:, 0], n_tasks, n_exp, rule.probabilities(a))
        assign = rm.task_expert_counts(np.repeat(t, k), experts.reshape(-1), n_tasks, n_exp)
        assignments = dict(counts=assign.tolist(),
                           utilisation=rm.expert_utilisation(experts.reshape(-1), n_exp).tolist(),
                           load_entropy_normalised=rm.load_entropy(assign.sum(0)),
                           nmi=rm.normalized_mutual_info(assign))
        margins = rule.margins(a)                                              # (n,)
        bm = boundary_mass_from_margins(margins, w)
        fit_at = (bm.counts >= 1) & (bm.estimate <= bm_fit_max) & (bm.widths > 0)
        fit = None
        if np.unique(bm.widths[fit_at]).size >= 3:
            fit = bootstrap_bm_fit(bm.widths[fit_at], bm.counts[fit_at], bm.n, rng=seed)
        out.append(LayerRouting(experts, weights, summary, assignments, margins, bm, fit, rule))
    return out
