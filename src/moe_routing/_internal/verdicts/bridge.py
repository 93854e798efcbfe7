"""Rules of the bridge chapter (ours): paper B's quantities on paper A's trained routers.

Every claim here is the book's own: "our extension" when it holds, "not supported" when
adequate evidence contradicts it, "inconclusive" when the evidence cannot decide either way
(intervals that straddle the threshold or are too wide to tell, too few resolved points).
Boundary masses are compared through their Wilson intervals; the soft-to-hard rate through the
fitted slope's confidence interval against the boundary-mass exponent's, on a τ grid that
resolves the gap.  The soft-to-hard *bound* is a theorem for the empirical law of the positions
measured (C_m the exact supremum of their BM): it "holds by definition" and decides nothing.
"""

from __future__ import annotations

from ..validation import flag, integer, number, require
from . import rule

OURS = "our extension"
NOT = "not supported"       # a claim of the book that the evidence does not support
UNSURE = "inconclusive"


def _bm_interval(name: str, est, lo, hi) -> tuple[float, float, float]:
    vals = [number(f"{name}{part}", v, low=0.0, high=1.0)
            for part, v in (("", est), ("_lo", lo), ("_hi", hi))]
    require(vals[1] <= vals[0] <= vals[2], f"{name} interval", tuple(vals),
            "(estimate, lower, upper) with lower ≤ estimate ≤ upper")
    return tuple(vals)


@rule
def router_buys_margin(w: float, bm_router: float, lo_router: float, hi_router: float,
                       bm_ce: float, lo_ce: float, hi_ce: float):
    """X-bridge-margins: the task-router loss buys large margins -- at the template-determined
    positions its router has a smaller boundary mass BM(w) than the CE-trained router's.

    ``bm_*`` the empirical BM(w) at the width ``w`` with the ends of its Wilson interval
    (``lo_*``, ``hi_*``), for the task-router model and the CE model:

    * our extension — the intervals are separated, the task router's below (hi_router < lo_ce);
    * not supported — separated the other way (lo_router > hi_ce): its BM is larger;
    * inconclusive — the intervals overlap (a difference the positions cannot resolve).
    """
    w = number("w", w, low=0, low_open=True)
    r = _bm_interval("bm_router", bm_router, lo_router, hi_router)
    c = _bm_interval("bm_ce", bm_ce, lo_ce, hi_ce)
    txt = (f"BM({w:g}) at determined positions: CE + task router {r[0]:.3f} "
           f"[{r[1]:.3f}, {r[2]:.3f}] vs CE {c[0]:.3f} [{c[1]:.3f}, {c[2]:.3f}]")
    if r[2] < c[1]:
        return OURS, txt + ": separated, the task router's smaller"
    if r[1] > c[2]:
        return NOT, txt + ": separated, the task router's larger"
    return UNSURE, txt + ": the intervals overlap"


@rule
def soft_hard_bound(below: bool, worst_ratio: float, n_finite: int, n_taus: int):
    """X-bridge-soft-hard-bound: on a trained router, E|ℓ_τ − ℓ_0| (soft mixture of losses at
    temperature τ against hard routing) is below paper B's bound (K − 1)·R·C_m·Γ(1 + α)·τ^α.

    With C_m the exact supremum of the empirical BM(w)/w^α of the positions measured and R
    their loss range across experts, the bound is a theorem for that empirical law at any α:
    it *holds by definition*, and a gap above it is a bug in the implementation, not a finding.
    ``below``: every gap ≤ its bound (``worst_ratio`` the largest gap/bound); ``n_finite`` of
    ``n_taus`` temperatures have a finite bound (C_m = inf, a margin of 0, makes it vacuous):

    * holds by definition — below the bound at every τ, with a finite bound at one τ or more;
    * not supported — above the bound at some τ (read: a bug);
    * inconclusive — the bound is infinite at every τ (vacuous: nothing was checked).
    """
    below = flag("below", below)
    worst_ratio = number("worst_ratio", worst_ratio, low=0, allow_inf=True)
    n_taus = integer("n_taus", n_taus, low=1)
    n_finite = integer("n_finite", n_finite, low=0, high=n_taus)
    if not below:
        return NOT, (f"gap/bound reaches {worst_ratio:.3g} > 1: the theorem fails on the "
                     "empirical law, a bug in the measurement")
    if n_finite == 0:
        return UNSURE, (f"the bound is infinite at all {n_taus} τ (a margin of 0 gives "
                        "C_m = inf): vacuous, nothing checked")
    return "holds by definition", (f"gap/bound ≤ {worst_ratio:.3g} at {n_finite} of {n_taus} "
                                   "τ, as the theorem for the empirical law requires")


@rule
def soft_hard_rate(slope: float, slope_lo: float, slope_hi: float, alpha: float,
                   alpha_lo: float, alpha_hi: float, n_resolved: int, *, tau_span: float,
                   max_width: float = 1.0, min_span: float = 3.0):
    """X-bridge-soft-hard: on a trained router, E|ℓ_τ − ℓ_0| -- the soft mixture (of losses)
    at temperature τ against hard routing -- falls at the rate τ^α, α the exponent of the
    boundary mass of the same positions over the widths the τ grid probes.

    ``slope`` [``slope_lo``, ``slope_hi``]: the log–log slope of E|ℓ_τ − ℓ_0| against τ with its
    95 % interval, over the ``n_resolved`` temperatures where the gap is positive in float64;
    ``alpha`` [``alpha_lo``, ``alpha_hi``]: the fitted exponent with its bootstrap interval.
    ``max_width`` = 1: a slope interval wider than that cannot tell τ^α from τ^(α ± 1/2).
    ``tau_span`` = τ_max / τ_min of the grid; ``min_span`` = 3: over a narrower band a power
    law cannot be told from the exp(−Δ/τ) of an empirical law's gap, whatever the intervals.

    * inconclusive — fewer than three resolved temperatures (no slope with an interval; the
      values are not read), a τ grid spanning less than ``min_span``, or a slope interval
      wider than ``max_width`` that meets α's;
    * our extension — the two intervals overlap (the rate is consistent with τ^α);
    * not supported — they are apart: the gap does not fall like τ^α on this grid.
    """
    n_resolved = integer("n_resolved", n_resolved, low=0)
    max_width = number("max_width", max_width, low=0, low_open=True)
    tau_span = number("tau_span", tau_span, low=1)
    min_span = number("min_span", min_span, low=1)
    if n_resolved < 3:
        return UNSURE, (f"the gap is positive at {n_resolved} temperature(s) only (a slope "
                        "with an interval needs 3): the rate is untested")
    slope = number("slope", slope)
    slope_lo = number("slope_lo", slope_lo, high=slope)
    slope_hi = number("slope_hi", slope_hi, low=slope)
    alpha = number("alpha", alpha, low=0, low_open=True)
    alpha_lo = number("alpha_lo", alpha_lo, high=alpha)
    alpha_hi = number("alpha_hi", alpha_hi, low=alpha)
    txt = (f"E|ℓτ − ℓ0| slope {slope:.2f} [{slope_lo:.2f}, {slope_hi:.2f}] vs α = {alpha:.2f} "
           f"[{alpha_lo:.2f}, {alpha_hi:.2f}] over {n_resolved} τ")
    if tau_span < min_span:
        return UNSURE, (txt + f": the τ grid spans a factor of {tau_span:.1f} only (a rate "
                        f"needs ≥ {min_span:g}: over a narrow band a power law and "
                        "exp(−Δ/τ) look alike)")
    overlap = slope_lo <= alpha_hi and alpha_lo <= slope_hi
    if not overlap:
        return NOT, txt + ": the intervals are apart, the rate is not τ^α"
    if slope_hi - slope_lo > max_width:
        return UNSURE, txt + f": the slope interval is wider than {max_width:g}"
    return OURS, txt + ": the intervals overlap, the rate is τ^α"


@rule
def temperature_amplifies(slope: float, slope_lo: float, slope_hi: float, n_fitted: int,
                          n_runs: int, *, tol: float = 0.25):
    """X-bridge-temperature: in a trained transformer, the router contrast |w| (the norm of
    the router weights centred over the experts, B's state variable) leaves the symmetric
    state at a rate ∝ 1/τ (paper B, Proposition 6.3, carried from its Gaussian model to paper
    A's model under plain SGD).

    ``slope`` is the fitted slope of log(rate of |w|) against log(1/τ) over the runs whose
    growth could be fitted (``n_fitted`` of ``n_runs``), ``[slope_lo, slope_hi]`` its
    confidence interval; the prediction is 1.  ``tol`` = 0.25: a rate ∝ τ^(−1/2) or τ^(−2)
    misses by at least 0.5, and an interval wider than 2·tol cannot tell them from 1/τ.
    The verdict follows the interval:

    * inconclusive — fewer than three runs fitted (two give a slope but no interval; the
      values are not read), or 1 inside an interval wider than 2·tol (too wide to tell 1/τ
      from its neighbours);
    * not supported — 1 outside the interval: the 1/τ law is rejected at these τ (the reason
      says whether the rate grows with 1/τ at all);
    * our extension — 1 inside an interval no wider than 2·tol, |slope − 1| ≤ tol, and every
      run fitted;
    * partly — 1 inside a narrow interval, but some runs did not grow log-linearly or the
      slope is further than tol from 1.
    """
    n_runs = integer("n_runs", n_runs, low=1)
    n_fitted = integer("n_fitted", n_fitted, low=0, high=n_runs)
    tol = number("tol", tol, low=0, low_open=True)
    if n_fitted < 3:
        return UNSURE, (f"{n_fitted} of {n_runs} runs grew log-linearly: a slope with an "
                        "interval needs 3 (the values are not read)")
    slope = number("slope", slope)
    slope_lo = number("slope_lo", slope_lo, high=slope)
    slope_hi = number("slope_hi", slope_hi, low=slope)
    txt = (f"log-rate vs log(1/τ) slope {slope:.2f} [{slope_lo:.2f}, {slope_hi:.2f}] "
           f"(prediction 1), {n_fitted}/{n_runs} runs fitted")
    if not slope_lo <= 1.0 <= slope_hi:
        how = ("no amplification resolved" if slope_lo <= 0 < slope_hi or slope_hi <= 0
               else "the rate grows faster than 1/τ" if slope_lo > 1
               else "the rate grows more slowly than 1/τ")
        return NOT, txt + f": 1 outside the interval, {how}"
    if slope_hi - slope_lo > 2 * tol:
        return UNSURE, txt + f": 1 inside an interval wider than 2·{tol}"
    if n_fitted < n_runs or abs(slope - 1.0) > tol:
        return "partly", txt + (": 1 inside the interval, but not every run grew log-linearly"
                                if n_fitted < n_runs else f": 1 inside, but |slope − 1| > {tol}")
    return OURS, txt + f": 1 inside the interval, |slope − 1| ≤ {tol}"


@rule
def separator_aligned(fractions, chances, *, factor: float = 2.0):
    """X-bridge-temperature-separator: the direction in which a trained router leaves the
    symmetric state correlates with the task separator, as B-Prop 6.3's unstable mode
    correlates with the teacher's -- the between-task fraction of the router's centred logits is
    more than ``factor`` times what a router of random weights gives on the same inputs.

    ``fractions``, ``chances``: per run (the same runs, in order), the measured fraction and the
    random router's (:meth:`~moe_routing.experiments.bridge.temperature_fits.GrowthRun.
    separator_alignment`; a run without a fraction is left out by the caller: a NaN is
    refused).  The runs are compared through the
    mean of log(fraction / chance) with its t interval (95 %).  ``factor`` = 2: in B's Gaussian
    model the separator's eigenvalue is twice the others', and a mode that merely drifts
    towards the task direction by chance sits at 1.

    * our extension — the interval lies above log(factor): resolvably more task-aligned than
      ``factor`` × chance;
    * not supported — the interval lies below log(factor): resolvably less (at or below 1, the
      unstable direction ignores the tasks or avoids them);
    * inconclusive — fewer than 3 runs, or an interval containing log(factor).
    """
    import numpy as np
    from scipy import stats

    factor = number("factor", factor, low=1.0)
    f = np.asarray(fractions, dtype=float)
    c = np.asarray(chances, dtype=float)
    require(f.ndim == 1 and f.shape == c.shape, "chances", c.shape,
            f"one value per run, as fractions {f.shape}")
    require(bool(np.all((f >= 0) & (f <= 1) & (c > 0) & (c <= 1))),
            "fractions/chances", (f.tolist(), c.tolist()),
            "fractions in [0, 1] and chances in (0, 1]")
    n = f.size
    if n < 3:
        return UNSURE, f"{n} run(s): an interval needs 3"
    ratio = np.log(np.maximum(f, 1e-12) / c)
    mean = float(ratio.mean())
    half = float(stats.t.ppf(0.975, n - 1) * ratio.std(ddof=1) / np.sqrt(n))
    lo, hi, bar = np.exp(mean - half), np.exp(mean + half), np.log(factor)
    txt = (f"between-task fraction / a random router's: {np.exp(mean):.2g}× "
           f"[{lo:.2g}, {hi:.2g}] over {n} runs (median fraction {np.median(f):.3f}, "
           f"chance {np.median(c):.3f})")
    if mean - half > bar:
        return OURS, txt + f": above {factor:g}× chance, aligned with the task separator"
    if mean + half < bar:
        return NOT, txt + (f": below {factor:g}× chance, "
                           + ("below chance: the mode avoids the task direction" if hi < 1
                              else "no more task-aligned than a direction drawn at random"))
    return UNSURE, txt + f": the interval contains {factor:g}× chance"
