"""Paper A's and paper B's routing measurements of a model's router logits, layer by layer
(part of :mod:`moe_routing.hf`): :func:`routing_measurements` and its :class:`LayerRouting` --
the top-k choice as Mixtral routes, the routing summary against per-token task ids, the top-two
margins and BM(w) on a fixed grid (:data:`DEFAULT_WIDTHS`) with its power-law fit.

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
from ..boundary.margin import top_two_margin
from ..boundary.mass import BoundaryMass, boundary_mass_from_margins
from ..validation import fail, integer, number, require, widths as check_widths

#: the default width grid of BM(w), in logit units: 10⁻³ … 10, four widths per decade; fixed
#: (not fitted to the data) so that layers, models and runs are read on the same grid
DEFAULT_WIDTHS = np.geomspace(1e-3, 1e1, 17)


# -------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class LayerRouting:
    """The routing of one layer at the measured tokens (n tokens, E experts, k = top_k).

    experts (n, k) int64 — the top-k experts of softmax(logits), most probable first (the
        order and the set Mixtral routes to); weights (n, k) — their gate weights, the top-k
        probabilities renormalised to sum to 1 (Mixtral's; = softmax over the k chosen logits);
    summary — :func:`moe_routing.routing_metrics.routing_summary` of the top-1 expert against
        the task of each token, with the router distribution (the library's convention for its
        own model: counts, P(E|T), purity, NMI, diagonal accuracy, utilisation, entropies);
    assignments — the count matrix and utilisation over all n·k routing assignments (each
        token counted once per chosen expert: the ``f`` of the load-balancing losses);
    margins (n,) — top-two margins Δ of the logits (paper B); boundary_mass — BM(w) at the
        widths with Wilson intervals; bm_fit — BM(w) ≈ C·w^α fitted by the library's bootstrap
        over the widths where 1 ≤ #{Δ ≤ w} and BM(w) ≤ ``bm_fit_max`` (None when fewer than 3).
    """

    experts: np.ndarray
    weights: np.ndarray
    summary: dict
    assignments: dict
    margins: np.ndarray
    boundary_mass: BoundaryMass
    bm_fit: LogLogFit | None

    def as_dict(self) -> dict:
        """JSON-ready scalars and small arrays (not the per-token arrays)."""
        bm = self.boundary_mass
        fit = None if self.bm_fit is None else dict(
            slope=self.bm_fit.slope, slope_ci=list(self.bm_fit.slope_ci),
            prefactor=self.bm_fit.prefactor, prefactor_ci=list(self.bm_fit.prefactor_ci))
        return dict(summary=self.summary, assignments=self.assignments,
                    margin_median=float(np.median(self.margins)),
                    boundary_mass=dict(widths=bm.widths.tolist(), estimate=bm.estimate.tolist(),
                                       lower=bm.lower.tolist(), upper=bm.upper.tolist(), n=bm.n),
                    bm_fit=fit)


def _positions(positions, n: int) -> np.ndarray:
    """Token indices from None (all), an index array or a boolean mask of length n."""
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
    require(p.size > 0, "positions", "no token", "at least one measured token")
    return p.astype(np.int64)


def routing_measurements(router_logits_per_layer, task_ids_per_token, top_k: int,
                         positions=None, *, n_tasks: int | None = None, widths=None,
                         bm_fit_max: float = 0.1, seed: int = 0) -> list[LayerRouting]:
    """Paper A's and paper B's routing measurements of each layer (see :class:`LayerRouting`).

    router_logits_per_layer: one (n, E) array or tensor of router logits per layer (e.g.
    :func:`collect_router_logits`; pre-softmax logits, not probabilities: the margins are
    read in logit units); task_ids_per_token (n,) integer task of each token; top_k: experts
    per token (the model's ``num_experts_per_tok``); positions: which tokens to measure (None:
    all; an index array or a boolean mask of length n); n_tasks: K (default: largest id + 1);
    widths: the BM grid (default :data:`DEFAULT_WIDTHS`); bm_fit_max: the largest BM(w) a fit
    point may have (the small-w regime of paper B); seed: of the fit's bootstrap.
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
    out = []
    for l, raw in enumerate(layers):
        a = np.asarray(raw.detach().cpu().double() if hasattr(raw, "detach") else raw,
                       dtype=np.float64)
        require(a.ndim == 2 and a.shape[0] == tasks.size and a.shape[1] >= 2,
                f"router_logits_per_layer[{l}].shape", a.shape,
                f"({tasks.size}, E ≥ 2): one row per token of task_ids_per_token")
        require(bool(np.isfinite(a).all()), f"router_logits_per_layer[{l}]", "non-finite entries",
                "finite logits")
        n_exp = a.shape[1]
        k = integer("top_k", top_k, low=1, high=n_exp)
        sel = _positions(positions, tasks.size)
        a, t = a[sel], tasks[sel]
        z = a - a.max(1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(1, keepdims=True)                   # (n, E) float64
        # top-k of the softmax, most probable first, ties to the lower index (stable sort)
        experts = np.argsort(-probs, axis=1, kind="stable")[:, :k]            # (n, k)
        top = np.take_along_axis(probs, experts, 1)
        weights = top / top.sum(1, keepdims=True)
        summary = rm.routing_summary(t, experts[:, 0], n_tasks, n_exp, probs)
        assign = rm.task_expert_counts(np.repeat(t, k), experts.reshape(-1), n_tasks, n_exp)
        assignments = dict(counts=assign.tolist(),
                           utilisation=rm.expert_utilisation(experts.reshape(-1), n_exp).tolist(),
                           load_entropy_normalised=rm.load_entropy(assign.sum(0)),
                           nmi=rm.normalized_mutual_info(assign))
        margins = top_two_margin(a)
        bm = boundary_mass_from_margins(margins, w)
        fit_at = (bm.counts >= 1) & (bm.estimate <= bm_fit_max) & (bm.widths > 0)
        fit = None
        if np.unique(bm.widths[fit_at]).size >= 3:
            fit = bootstrap_bm_fit(bm.widths[fit_at], bm.counts[fit_at], bm.n, rng=seed)
        out.append(LayerRouting(experts, weights, summary, assignments, margins, bm, fit))
    return out
