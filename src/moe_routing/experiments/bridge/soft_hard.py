"""Paper B's soft-to-hard gap on paper A's trained routers (ours): the soft mixture at
temperature τ against hard routing (:func:`soft_vs_hard`, :func:`mixture_logits`) and the
check of the gap against paper B's bound (:func:`bound_check`).

The margins and the boundary mass that the bound's constants come from are :mod:`.margins`'s;
this module is the part that re-runs the layer as a mixture, in float64 (the conventions --
logits, hard and soft, the mixture of losses -- are :mod:`.margins`'s docstring).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._internal import validation as check
from ...boundary.fits import fit_loglog
from ...boundary.risk import risk_bound
from .layers import (_dataset, _expert_outputs, _float64, _head, _layer_parts, _model,
                     _position_masks, _split)


# ----------------------------------------------------------------------------- soft vs hard
def mixture_logits(model, inputs, select, taus):
    """Vocabulary logits at the ``select``-ed positions of ``inputs`` (M, t) for the hard
    router, each soft mixture at ``taus`` and the trained (Switch) model, in float64.

    Returns a dict of tensors: ``hard`` (n, V); ``soft`` (T, n, V); ``switch`` (n, V);
    ``router_logits`` (n, K); ``expert_logits`` (n, K, V) -- the logits with expert k alone
    (unit gate), for the mixture of losses.  The model is copied, never changed.
    """
    import torch

    _model(model, top_1=True)
    t = check.temperatures("taus", taus)
    m = _float64(model)
    check.instance("select", select, torch.Tensor, "a bool tensor (M, t)")
    check.require(select.dtype == torch.bool and tuple(select.shape) == tuple(inputs.shape),
                  "select", tuple(select.shape), f"a bool tensor of shape {tuple(inputs.shape)}")
    with torch.no_grad():
        a1_all, logits_all = _layer_parts(m, inputs)
        switch = m(inputs).logits[select]                                     # (n, V)
        a1, a = a1_all[select], logits_all[select]                           # (n, d), (n, K)
        ff = _expert_outputs(m, m.ln_moe(a1))                                # (n, K, d)
        k_star = a.argmax(-1)
        hard = _head(m, a1, ff[torch.arange(a.shape[0]), k_star])
        soft = torch.stack([
            _head(m, a1, (torch.softmax(a / float(tau), -1)[..., None] * ff).sum(1))
            for tau in t])
        experts = _head(m, a1[:, None, :], ff)                                # (n, K, V)
    return dict(hard=hard, soft=soft, switch=switch, router_logits=a, expert_logits=experts)


@dataclass(frozen=True)
class SoftHard:
    """Soft mixture against hard routing at the object position of every ``split`` sentence.

    Per τ (arrays (T,)): ``ce_soft`` L_τ, ``em_soft`` exact match, ``gap`` |L_τ − L_0|;
    ``ce_losses`` the mixture of losses E[Σ_k π_{k,τ} ℓ_k] and ``gap_losses`` its |· − L_0|;
    ``abs_gap`` = E|ℓ_τ − ℓ_0| and ``abs_gap_losses`` the same for the mixture of losses (the
    mean of the pointwise absolute gaps: the signed ones cancel between positions, so the
    difference of means is not monotone in τ and fits no rate; the bound bounds these).
    ``ce_hard`` L_0 and ``em_hard`` (unit-gate top-1), ``ce_switch``, ``em_switch`` (the
    trained model as it is).  ``slope``, ``slope_ci``: log–log fit of ``abs_gap_losses``
    against τ over the τ where it is positive (NaN when fewer than 3).  ``margins``: Δ at the same positions
    (their boundary mass is the one the bound of these gaps needs).  Constants for
    :func:`bound_check`: ``loss_range`` = max over positions of max_k ℓ_k − min_k ℓ_k (the
    mixture of losses' pointwise gap is ≤ (1 − π_{k*,τ})·loss_range); ``envelope`` = max over
    positions and τ (with 1 − π_{k*,τ} > 1e-9, above rounding) of |ℓ_τ − ℓ_0| / (1 − π_{k*,τ}),
    the same constant *measured* for the mixture of predictions (not known a priori: a bound
    with it tests only the margin-tail step of the proof).
    """

    taus: np.ndarray
    ce_soft: np.ndarray
    em_soft: np.ndarray
    gap: np.ndarray
    ce_losses: np.ndarray
    gap_losses: np.ndarray
    abs_gap: np.ndarray
    abs_gap_losses: np.ndarray
    ce_hard: float
    em_hard: float
    ce_switch: float
    em_switch: float
    slope: float
    slope_ci: tuple[float, float]
    margins: np.ndarray
    n_experts: int
    loss_range: float
    envelope: float
    n: int


def _loglog_slope(taus, gap):
    ok = gap > 0
    if int(np.unique(taus[ok]).size) < 3:
        return float("nan"), (float("nan"), float("nan"))
    fit = fit_loglog(taus[ok], gap[ok])
    return fit.slope, fit.slope_ci


def soft_vs_hard(model, dataset, taus, split: str = "test") -> SoftHard:
    """L_τ (soft mixture at each τ of ``taus``) against L_0 (hard top-1) at the object position
    of every ``split`` sentence of ``dataset``: cross-entropy, exact match, the gaps and their
    log–log slope (see the module docstring for what soft and hard are)."""
    import torch
    import torch.nn.functional as F

    _model(model, top_1=True)
    _dataset(dataset, model)
    t = check.temperatures("taus", taus)
    enc = _split(dataset, split, model)
    _, _, obj = _position_masks(dataset, enc)
    rows, cols = obj.nonzero(as_tuple=True)
    target = enc.tokens[rows, cols + 1]                                       # the objects
    out = mixture_logits(model, enc.inputs, obj, t)
    a = out["router_logits"]

    def ce(z):                          # z (..., n, V) -> per-position cross-entropy (..., n)
        reps = z.numel() // (z.shape[-1] * target.numel())      # leading dims, row-major
        return F.cross_entropy(z.reshape(-1, z.shape[-1]), target.repeat(reps),
                               reduction="none").reshape(z.shape[:-1])

    l0 = ce(out["hard"])                                                      # (n,)
    lt = ce(out["soft"])                                                      # (T, n)
    lk = ce(out["expert_logits"].transpose(0, 1)).transpose(0, 1)            # (n, K)
    pi = torch.stack([torch.softmax(a / float(tau), -1) for tau in t])      # (T, n, K)
    l_loss = (pi * lk).sum(-1)                                                # (T, n)
    gap = (lt - l0).mean(1).abs().numpy()        # pointwise differences, then the mean
    gap_l = (l_loss - l0).mean(1).abs().numpy()
    # ℓ_τ − ℓ_0 of the mixture of losses as Σ_{k≠k*} π_k (ℓ_k − ℓ_k*): no cancellation of
    # (1 − ε)·ℓ_k* against ℓ_0, so a gap of 1e-200 is that gap, not rounding
    diff = lk - lk.gather(-1, a.argmax(-1, keepdim=True))                     # (n, K)
    abs_gap_l = (pi * diff).sum(-1).abs().mean(1).numpy()
    abs_gap = (lt - l0).abs().mean(1).numpy()
    off = 1 - pi.max(-1).values                                               # 1 − π_{k*,τ}
    # where 1 − π_{k*,τ} is below 1e-9 the two losses agree to rounding, and their difference
    # over it would measure the rounding, not the loss: those (position, τ) are left out
    ratio = torch.where(off > 1e-9, (lt - l0).abs() / off.clamp_min(1e-9),
                        torch.zeros_like(off))
    em = lambda z: (z.argmax(-1) == target).double().mean(-1)               # noqa: E731
    slope, slope_ci = _loglog_slope(t, abs_gap_l)
    srt = a.sort(-1).values
    return SoftHard(
        taus=t, ce_soft=lt.mean(1).numpy(), em_soft=em(out["soft"]).numpy(), gap=gap,
        ce_losses=l_loss.mean(1).numpy(), gap_losses=gap_l, abs_gap=abs_gap,
        abs_gap_losses=abs_gap_l, ce_hard=float(l0.mean()),
        em_hard=float(em(out["hard"])), ce_switch=float(ce(out["switch"]).mean()),
        em_switch=float(em(out["switch"])), slope=slope, slope_ci=slope_ci,
        margins=(srt[:, -1] - srt[:, -2]).numpy(), n_experts=int(a.shape[1]),
        loss_range=float((lk.max(-1).values - lk.min(-1).values).max()),
        envelope=float(ratio.max()), n=int(target.numel()))


# ----------------------------------------------------------------------------- bound
@dataclass(frozen=True)
class BoundCheck:
    """Measured gaps against paper B's bound (K − 1)·M·C_m·Γ(1 + α)·τ^α (all arrays (T,)).

    ``bound`` per τ, ``ratio`` = gap / bound; ``below``: every gap ≤ its bound.  ``slope``
    (``slope_ci``): the log–log slope of the gaps (over the τ with a positive gap); ``alpha``
    the measured boundary-mass exponent; ``rate_matches``: α lies in the slope's interval.
    ``M`` the pointwise constant used and ``form`` where it came from.
    """

    taus: np.ndarray
    gap: np.ndarray
    bound: np.ndarray
    ratio: np.ndarray
    below: bool
    slope: float
    slope_ci: tuple[float, float]
    alpha: float
    rate_matches: bool
    C_m: float
    M: float
    form: str


def bound_check(gap, alpha: float, C_m: float, constants: dict, taus=None) -> BoundCheck:
    """Is the measured gap below paper B's bound, and does it fall at the rate τ^α?

    The bound (the soft-to-hard risk bound of the ``soft_to_hard`` chapter, constants ours):
    if the pointwise gap of the loss obeys |ℓ_τ(x) − ℓ_0(x)| ≤ M·(1 − π_{k*,τ}(x)) and
    BM(w) ≤ C_m w^α at every w, then, since 1 − π_{k*,τ} ≤ (K − 1) e^{−Δ/τ} and
    E[e^{−Δ/τ}] ≤ C_m Γ(1+α) τ^α (layer cake),

        |L_τ − L_0| ≤ (K − 1) · M · C_m · Γ(1 + α) · τ^α.

    ``constants`` holds ``n_experts`` K and one of: ``B``, ``B_star`` -- squared loss, mixture
    of predictions, |f_k| ≤ B, |f*| ≤ B*: M = 4B(B + B*) (the book's
    :func:`~moe_routing.boundary.risk.risk_bound`); ``loss_range`` R -- a mixture of losses
    with every ℓ_k(x) in an interval of length R: M = R (for cross-entropy,
    :attr:`SoftHard.loss_range` of the positions measured); ``M`` -- any other pointwise
    constant (e.g. :attr:`SoftHard.envelope`, measured).  ``gap`` is a :class:`SoftHard`
    (its ``gap`` and ``taus``; pass ``constants`` with ``loss_range`` to check its
    ``gap_losses`` instead, which that constant bounds) or an array with ``taus``.
    The bound holds for the law of the positions measured only if C_m is the supremum over
    every w of *their* empirical BM
    (:func:`~moe_routing.experiments.bridge.margins.boundary_mass_of_router` of the same positions).

    Degenerate constants, and what they give (the products take 0·∞ = 0):

    * ``C_m = inf`` (accepted:
      :func:`~moe_routing.experiments.bridge.margins.margin_tail_constant`'s value when a margin is
      0, where no BM(w) ≤ C_m w^α holds with a finite C_m) -- the bound is +inf at every τ (vacuous),
      ``ratio`` 0, ``below`` True; unless M = 0 (next item).
    * ``M = 0`` (``loss_range`` 0 or ``M`` 0: every expert's loss is the same at every
      position, so |ℓ_τ − ℓ_0| = 0 pointwise) -- the bound is 0 at every τ, whatever C_m.
    * ``ratio`` = gap / bound with gap/0 = +inf for a positive gap (the bound is violated) and
      0/0 = 0 (a zero gap is within any bound, a zero one included); gap/inf = 0.
    """
    if not isinstance(constants, dict):
        check.fail("constants", type(constants).__name__,
                   "a dict with n_experts and one of: B and B_star, loss_range, M")
    K = check.integer("constants['n_experts']", constants.get("n_experts"), low=2)
    forms = [f for f in (("B", "B_star"), ("loss_range",), ("M",))
             if all(k in constants for k in f)]
    unknown = set(constants) - {"n_experts", "B", "B_star", "loss_range", "M"}
    check.require(len(forms) == 1 and not unknown, "constants", constants,
                  "n_experts and exactly one of: B and B_star (squared loss), loss_range "
                  "(mixture of losses), M (a pointwise constant)")
    (form,) = forms
    if isinstance(gap, SoftHard):
        check.require(taus is None, "taus", taus, "None when gap is a SoftHard (its taus)")
        t = gap.taus
        g = gap.abs_gap_losses if form == ("loss_range",) else gap.abs_gap
    else:
        t = check.temperatures("taus", taus)
        g = np.abs(check.finite_array("gap", gap, shape=t.shape))
    alpha = check.positive("alpha", alpha)
    # inf: margin_tail_constant's value when a margin is 0 (the bound is then vacuous)
    C_m = check.number("C_m", C_m, low=0, low_open=True, allow_inf=True)
    from scipy import special

    if form == ("B", "B_star"):
        B = check.positive("constants['B']", constants["B"])
        Bs = check.positive("constants['B_star']", constants["B_star"])
        M = 4 * B * (B + Bs)
        log_M = math.log(4.0) + math.log(B) + float(np.logaddexp(math.log(B), math.log(Bs)))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            bound = (risk_bound(t, K, B, Bs, C_m, alpha) if np.isfinite(C_m)
                     else np.full(t.shape, np.inf))                  # M > 0: vacuous
        name = f"squared loss, mixture of predictions: M = 4B(B+B*) with B = {B:g}, B* = {Bs:g}"
    else:
        key = form[0]
        M = check.number(f"constants[{key!r}]", constants[key], low=0)
        log_M = math.log(M) if M > 0 else -math.inf
        if M == 0:                    # no pointwise gap: 0 whatever C_m (0·∞ = 0)
            bound = np.zeros(t.shape)
        elif not np.isfinite(C_m):
            bound = np.full(t.shape, np.inf)
        else:
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                bound = (K - 1) * M * C_m * special.gamma(1 + alpha) * t ** alpha
        name = ("mixture of losses: M = loss range" if key == "loss_range"
                else "pointwise constant M given")
    if M > 0 and np.isfinite(C_m):
        # a factor past float64's range (M·C_m = inf while τ^α is small, Γ(1 + α) = inf for
        # α > 170, τ^α = 0, …) makes the product inf, 0 or NaN where the bound is a float:
        # there it is exp of the sum of the logs (inf or 0 only where the bound itself is)
        off = ~(np.isfinite(bound) & (bound >= np.finfo(float).tiny))
        if off.any():
            log_b = (math.log(K - 1) + log_M + math.log(C_m) + float(special.gammaln(1 + alpha))
                     + alpha * np.log(t))
            with np.errstate(over="ignore", under="ignore"):
                bound = np.where(off, np.exp(log_b), bound)
    slope, slope_ci = _loglog_slope(t, g)
    # gap / bound, with gap/0 = inf for a positive gap and 0/0 = 0 (docstring)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, g / np.where(bound > 0, bound, 1.0),
                         np.where(g > 0, np.inf, 0.0))
    return BoundCheck(taus=t, gap=g, bound=bound, ratio=ratio, below=bool(np.all(g <= bound)),
                      slope=slope, slope_ci=slope_ci, alpha=alpha,
                      rate_matches=bool(slope_ci[0] <= alpha <= slope_ci[1]), C_m=C_m,
                      M=float(M), form=name)


__all__ = ["BoundCheck", "SoftHard", "bound_check", "mixture_logits", "soft_vs_hard"]
