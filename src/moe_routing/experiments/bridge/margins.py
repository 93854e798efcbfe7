"""Paper B's quantities measured on paper A's trained routers (ours).

Paper A trains a softmax router and routes each token to its top-1 expert; paper B studies
that very object: the top-two margin Δ(x) of the router logits, the boundary mass
BM(w) = P(Δ ≤ w) with its power law BM(w) ≈ C w^α, and the gap |L_τ − L_0| = O(τ^α) between the
soft mixture at temperature τ and hard routing.  This module measures them on a trained
:class:`~moe_routing.model.MoETransformer` (one layer, as
:mod:`~moe_routing.experiments.task_routing.runs` trains it; a model from
:func:`moe_routing.experiments.task_routing.runs.load_model`), over the sentences of one split of its dataset.

Conventions (what is measured, exactly):

* **Logits.** Δ is taken on the router's logits as the model computes them,
  ``a(x) = W_r LN(A'(x)) / τ_model`` (``MoEConfig.router_temperature``, 1 in every run of
  :mod:`~moe_routing.experiments.task_routing.runs`), *not* on the probabilities softmax(a): paper
  B's margin is a logit margin, the one for which the gate gap ``1 − π_{k*,τ} ≤ (K − 1) e^{−Δ/τ}``
  (:mod:`moe_routing.boundary.margin`) holds and for which ``p_(2)/p_(1) = e^{−Δ}`` exactly.
  The bridge's temperature τ comes *on top of* τ_model: the soft gate is softmax(a/τ).
* **Positions.** Every position of a sentence at which a next token is predicted (BOS, the
  template words, the subject -- the positions of the training loss), each tagged
  ``determined`` when its prefix is continued by sentences of one task only (the positions of
  ``routing_determined`` in :func:`moe_routing.experiments.task_routing.data.evaluate_run`: there a
  router reading the prefix can know the task) or ``shared`` otherwise; ``object`` marks the position that
  predicts the object.
* **Hard and soft.** The trained model's layer is ``A'' = A' + g·FF_{k*}(LN(A'))`` with the
  Switch gate g = p_{k*} (the router probability of the chosen expert).  Paper B's hard router
  is the τ → 0 limit of the soft mixture, ``A'' = A' + FF_{k*}`` (unit gate), and its soft
  router is ``A'' = A' + Σ_k softmax(a/τ)_k FF_k`` (every expert: a mixture of predictions at
  the layer's output, then the shared unembedding).  L_0 and L_τ are their cross-entropies at
  the object position; the trained (Switch) model is reported beside them, as it is neither.
  The mixture is computed from the model's own parts (attention, router, experts, unembedding,
  run one after another), in float64 on a copy of the model, so that exponentially small gaps
  are not float32 rounding.  The *mixture of losses* ``Σ_k π_{k,τ} ℓ_k`` (ℓ_k: the loss with
  expert k alone) is reported too: it is the form whose bound has a constant computable from
  the data (the loss range across experts), see :func:`~moe_routing.experiments.bridge.soft_hard.bound_check`.

The chapter that calls these functions reads its numbers from the returned objects.  The
margins and boundary mass are here; the model's parts are :mod:`.layers`, the soft
mixture and the bound :mod:`.soft_hard`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._internal import validation as check
from ...boundary.fits import bootstrap_bm_fit
from ...boundary.margin import top_two_margin
from ...boundary.mass import boundary_mass_from_margins, tail_constant
from .layers import _dataset, _layer_parts, _model, _position_masks, _split

#: which positions :func:`router_margins` returns
POSITIONS = ("all", "object", "determined", "shared")


# ----------------------------------------------------------------------------- margins
@dataclass(frozen=True)
class RouterMargins:
    """Top-two margins of the router logits at the selected positions (all arrays (n,)).

    ``margins`` Δ = a_(1) − a_(2) on the logits ``logits`` (n, K) as the model computes them
    (already divided by ``router_temperature`` = τ_model; *not* probabilities).
    ``determined``: the prefix is continued by one task only; ``is_object``: the position
    predicts the object; ``sentence`` (row of the split), ``position`` (input position),
    ``task``; ``split``, ``positions`` as requested.
    """

    margins: np.ndarray
    logits: np.ndarray
    determined: np.ndarray
    is_object: np.ndarray
    sentence: np.ndarray
    position: np.ndarray
    task: np.ndarray
    router_temperature: float
    split: str
    positions: str

    @property
    def kind(self) -> np.ndarray:
        """``'determined'`` or ``'shared'`` per position."""
        return np.where(self.determined, "determined", "shared")

    def of_kind(self, kind: str) -> np.ndarray:
        """The margins of the positions of one kind (``'determined'``, ``'shared'``, or
        ``'object'``)."""
        kind = check.choice("kind", kind, ("determined", "shared", "object"))
        sel = {"determined": self.determined, "shared": ~self.determined,
               "object": self.is_object}[kind]
        return self.margins[sel]


def router_margins(model, dataset, positions: str = "all", split: str = "test",
                   batch_size: int = 512) -> RouterMargins:
    """Δ(x) of the model's router at the ``positions`` of the ``split`` sentences of
    ``dataset`` (the model's training dataset): ``'all'`` predicted positions, only the
    ``'object'``-predicting ones, or only those of kind ``'determined'`` / ``'shared'``.
    For a top-k router Δ is a_(k) − a_(k+1), the gap at its decision boundary (top-1: the
    top-two margin of paper B)."""
    _model(model)
    _dataset(dataset, model)
    positions = check.choice("positions", positions, POSITIONS)
    batch_size = check.integer("batch_size", batch_size, low=1)
    enc = _split(dataset, split, model)
    loss_mask, determined, obj = _position_masks(dataset, enc)
    sel = {"all": loss_mask, "object": obj, "determined": determined,
           "shared": loss_mask & ~determined}[positions]
    check.require(bool(sel.any()), "positions", positions,
                  f"a kind of position that occurs in the {split} split")
    model.eval()
    _, logits = _layer_parts(model, enc.inputs, batch_size)
    a = logits[sel].double().cpu().numpy()                                   # (n, K)
    rows, cols = sel.nonzero(as_tuple=True)
    k = int(model.config.top_k)
    check.require(k < a.shape[1], "model.config.top_k", k,
                  f"fewer than the {a.shape[1]} experts (at k = E no choice has a boundary)")
    return RouterMargins(
        # the boundary of a top-k router is between its k-th and (k+1)-th logit
        margins=top_two_margin(a, k=k), logits=a, determined=determined[sel].cpu().numpy(),
        is_object=obj[sel].cpu().numpy(), sentence=rows.cpu().numpy(),
        position=cols.cpu().numpy(), task=enc.task[rows].cpu().numpy(),
        router_temperature=float(model.config.router_temperature), split=split,
        positions=positions)


# ----------------------------------------------------------------------------- boundary mass
@dataclass(frozen=True)
class RouterBoundaryMass:
    """Empirical BM(w) = #{Δ_i ≤ w}/n of a router's margins, with its power-law fit.

    ``widths``, ``estimate``, ``lower``, ``upper`` (Wilson intervals at ``confidence``),
    ``counts`` -- all (m,).  ``alpha`` (``alpha_ci``), ``prefactor`` C (``prefactor_ci``): the
    fit BM(w) ≈ C w^α over the widths ``fitted`` (bootstrap of the bin counts,
    :func:`moe_routing.boundary.fits.bootstrap_bm_fit`).  ``C_m`` = sup_w BM(w)/w^α of the
    empirical law at the fitted α (:func:`moe_routing.boundary.mass.tail_constant`), the
    constant the risk bound needs; ``min_margin`` the smallest margin (C_m is infinite when it
    is 0).
    """

    widths: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    counts: np.ndarray
    n: int
    confidence: float
    fitted: np.ndarray
    alpha: float
    alpha_ci: tuple[float, float]
    prefactor: float
    prefactor_ci: tuple[float, float]
    C_m: float
    min_margin: float


def boundary_mass_of_router(margins, w_grid, confidence: float = 0.95,
                            fit_max_mass: float = 0.5, n_boot: int = 400,
                            rng=0) -> RouterBoundaryMass:
    """BM(w) on ``w_grid`` from ``margins`` (a :class:`RouterMargins` or an array of Δ ≥ 0),
    the fitted α and C_m.

    The power law is a small-w statement (BM bends to 1 once the slab holds most positions), so
    α is fitted on the widths whose count is ≥ 1 and whose BM is ≤ ``fit_max_mass``; at least
    two distinct such widths are needed (a ValueError says so).  C_m is the supremum over
    *every* w of the empirical BM(w)/w^α: a step function right-continuous at the sorted
    margins, so the supremum is attained at a margin, and the margins themselves are the grid
    given to ``tail_constant`` (a log grid would miss the steps and underestimate it).
    """
    d = margins.margins if isinstance(margins, RouterMargins) else margins
    d = check.finite_array("margins", d, ndim=1, low=0)
    w = check.widths("w_grid", w_grid, positive=True)
    check.require(bool(np.all(np.diff(w) > 0)), "w_grid", w_grid, "increasing widths")
    confidence = check.probability("confidence", confidence)
    fit_max_mass = check.number("fit_max_mass", fit_max_mass, low=0, low_open=True, high=1)
    bm = boundary_mass_from_margins(d, w, confidence)
    fitted = (bm.counts >= 1) & (bm.estimate <= fit_max_mass)
    check.require(int(np.unique(w[fitted]).size) >= 2, "w_grid", w_grid,
                  f"≥ 2 widths with at least one margin Δ ≤ w and BM(w) ≤ "
                  f"fit_max_mass={fit_max_mass} (the smallest margin is {d.min():.3g}, the "
                  f"median {np.median(d):.3g})")
    fit = bootstrap_bm_fit(w[fitted], bm.counts[fitted], bm.n, n_boot=n_boot, rng=rng,
                           confidence=confidence)
    alpha = fit.slope
    check.require(alpha > 0, "alpha (fitted)", alpha,
                  "a positive slope (a boundary mass grows with w)")
    return RouterBoundaryMass(w, bm.estimate, bm.lower, bm.upper, bm.counts, bm.n, confidence,
                              fitted, alpha, fit.slope_ci, fit.prefactor, fit.prefactor_ci,
                              margin_tail_constant(d, alpha), float(d.min()))


def margin_tail_constant(margins, alpha: float) -> float:
    """C_m = sup_{w>0} BM(w)/w^α of the empirical law of ``margins`` (inf when a margin is 0).

    The empirical BM is a right-continuous step function and w^α increases, so on each step
    [Δ_(i), Δ_(i+1)) the ratio is largest at its left end: the sorted margins are the exact
    grid for :func:`moe_routing.boundary.mass.tail_constant`.  With this C_m the bound of
    :func:`~moe_routing.experiments.bridge.soft_hard.bound_check` is a theorem for the positions
    measured, at *any* α > 0 (a fitted α or the α = 1 of a transversal router).  A margin of 0 (a
    tie) puts mass at w → 0 that no C_m w^α bounds: C_m = inf, which
    :func:`~moe_routing.experiments.bridge.soft_hard.bound_check` accepts (its bound is then +inf,
    vacuous, unless M = 0).
    """
    d = margins.margins if isinstance(margins, RouterMargins) else margins
    srt = np.sort(check.finite_array("margins", d, ndim=1, low=0))
    alpha = check.positive("alpha", alpha)
    if srt[0] == 0:
        return float("inf")

    def ecdf(x):
        return np.searchsorted(srt, x, side="right") / srt.size

    return float(tail_constant(ecdf, alpha, w_grid=np.unique(srt)))


# ----------------------------------------------------------------------------- τ on the margins
@dataclass(frozen=True)
class TauGrid:
    """Temperatures on the scale of a router's margins (:func:`resolving_taus`).

    ``levels`` the quantile levels, ``widths`` (m,) the margins' quantiles there (the widths
    whose boundary mass is read, BM(widths) ≈ levels), ``bm`` the :class:`RouterBoundaryMass`
    on those widths (its α, ``alpha_ci`` the local exponent there, its C_m the supremum over
    every width), ``taus`` = widths / α (m,)."""

    levels: np.ndarray
    widths: np.ndarray
    bm: RouterBoundaryMass
    taus: np.ndarray


def resolving_taus(margins, levels, n_boot: int = 400, rng=0) -> TauGrid:
    """A τ grid that reads the boundary mass at the ``levels`` quantiles of ``margins``.

    E|ℓ_τ − ℓ_0| ≈ R·E[e^{−Δ/τ}] = R ∫ e^{−w/τ} dBM(w) weighs the widths w by e^{−w/τ}; for
    BM(w) = C w^α the weight w^{α−1} e^{−w/τ} peaks at w ≈ ατ (a Gamma(α, τ) law), so the gap at
    τ reads the boundary mass at widths ≈ ατ.  The widths are the margins' quantiles at
    ``levels`` (distinct, positive), α the exponent of BM fitted there, and τ = w/α: on this
    grid the rate τ^α is tested where it was measured.  A fixed grid (τ ≤ 0.2 against margins
    of ≈ 9) reads e^{−9/0.2} ≈ 1e-20 of the gap: 0 in float64 at most τ, and no rate.
    """
    d = margins.margins if isinstance(margins, RouterMargins) else margins
    d = check.finite_array("margins", d, ndim=1, low=0)
    lv = check.finite_array("levels", levels, ndim=1, low=0, low_open=True)
    check.require(lv.size >= 3 and bool(np.all(np.diff(lv) > 0)) and lv[-1] <= 1, "levels",
                  levels,
                  "≥ 3 increasing quantile levels in (0, 1]")
    w = np.quantile(d, lv)
    check.require(bool(np.all(w > 0)) and bool(np.all(np.diff(w) > 0)), "levels", levels,
                  f"levels whose margin quantiles are distinct and positive (they are "
                  f"{np.round(w, 6).tolist()}: ties or margins of 0 there)")
    bm = boundary_mass_of_router(d, w, fit_max_mass=1.0, n_boot=n_boot, rng=rng)
    return TauGrid(levels=lv, widths=w, bm=bm, taus=w / bm.alpha)


@dataclass(frozen=True)
class PowerLawCheck:
    """Is BM(w) one power law over the fitted widths?  ``alpha_low`` / ``alpha_high`` (with
    ``*_ci``) fitted on the lower and upper halves of them; ``power_law``: the two intervals
    overlap (a plateau followed by a jump -- two populations of margins -- gives two apart)."""

    alpha_low: float
    alpha_low_ci: tuple[float, float]
    alpha_high: float
    alpha_high_ci: tuple[float, float]
    power_law: bool


def power_law_check(bm: RouterBoundaryMass, n_boot: int = 400, rng=0) -> PowerLawCheck:
    """Fit the exponent separately on the lower and upper halves of ``bm``'s fitted widths
    (each half ≥ 2 distinct widths: ≥ 4 fitted widths, ValueError otherwise)."""
    check.instance("bm", bm, RouterBoundaryMass, "a RouterBoundaryMass")
    idx = np.nonzero(bm.fitted)[0]
    check.require(idx.size >= 4, "bm.fitted", int(idx.size), "≥ 4 fitted widths (2 per half)")
    half = idx.size // 2
    fits = [bootstrap_bm_fit(bm.widths[i], bm.counts[i], bm.n, n_boot=n_boot, rng=rng,
                             confidence=bm.confidence) for i in (idx[:half + 1], idx[half:])]
    (lo, hi) = fits
    apart = lo.slope_ci[1] < hi.slope_ci[0] or hi.slope_ci[1] < lo.slope_ci[0]
    return PowerLawCheck(lo.slope, tuple(lo.slope_ci), hi.slope, tuple(hi.slope_ci),
                         not apart)
