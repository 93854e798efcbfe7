"""Rules of the bridge chapter (ours): paper B's quantities on paper A's trained routers.

Every claim here is the book's own ("our extension" when it holds).  Boundary masses are
compared through their Wilson intervals; the soft-to-hard rate through the fitted slope's
confidence interval and the bound's constants measured on the same positions.
"""

from __future__ import annotations

from ..validation import integer, number, require
from . import rule

OURS = "our extension"
NOT = "not supported"       # a claim of the book that the evidence does not support


@rule
def router_buys_margin(w: float, bm_router: float, hi_router: float, bm_ce: float,
                       lo_ce: float):
    """X-bridge-margins: the task-router loss buys large margins -- at the template-determined
    positions its router has a smaller boundary mass BM(w) than the CE-trained router's.

    ``bm_*`` the empirical BM(w) at the width ``w``; ``hi_router`` the upper end of the
    task-router model's Wilson interval, ``lo_ce`` the lower end of the CE model's:

    * our extension — the intervals are separated (hi_router < lo_ce);
    * partly — the task-router BM is smaller but the intervals overlap;
    * not reproduced — it is not smaller.
    """
    w = number("w", w, low=0, low_open=True)
    for name, v in (("bm_router", bm_router), ("hi_router", hi_router), ("bm_ce", bm_ce),
                    ("lo_ce", lo_ce)):
        require(0.0 <= float(v) <= 1.0, name, v, "a probability in [0, 1]")
    require(hi_router >= bm_router and lo_ce <= bm_ce, "interval", (hi_router, lo_ce),
            "upper end ≥ the estimate, lower end ≤ the estimate")
    txt = (f"BM({w:g}) at determined positions: CE + task router {bm_router:.3f} "
           f"(≤ {hi_router:.3f}) vs CE {bm_ce:.3f} (≥ {lo_ce:.3f})")
    if hi_router < lo_ce:
        return OURS, txt + ": separated"
    if bm_router < bm_ce:
        return "partly", txt + ": smaller, the intervals overlap"
    return NOT, txt + ": not smaller"


@rule
def soft_hard_rate(below: bool, rate_matches: bool, worst_ratio: float, slope: float,
                   slope_lo: float, slope_hi: float, alpha: float, n_resolved: int):
    """X-bridge-soft-hard: on a trained router, the gap |L_τ − L_0| between the soft mixture at
    temperature τ and hard routing sits below paper B's bound with the measured α and C_m and
    falls at the rate τ^α.

    ``below``: the gap is below the bound at every τ (``worst_ratio`` its largest gap/bound);
    ``rate_matches``: α lies in the confidence interval [slope_lo, slope_hi] of the fitted
    log-log slope of the gap; ``n_resolved``: the temperatures at which the gap is positive in
    float64 (with margins of tens of τ it underflows to 0; a slope with a confidence interval
    needs three temperatures, so with fewer pass any finite slope, it is not read):

    * partly — fewer than three resolved temperatures (below the bound, rate untested);
    * our extension — below the bound and the rate matches;
    * partly — below the bound, but the rate does not match (the bound is loose there);
    * not reproduced — above the bound at some τ.
    """
    worst_ratio = number("worst_ratio", worst_ratio, low=0)
    n_resolved = integer("n_resolved", n_resolved, low=0)
    if n_resolved < 3:
        return (("partly", f"the gap is positive at {n_resolved} temperature(s) only (below "
                 "float64 resolution elsewhere): below the bound, rate untested") if below else
                (NOT, f"above the bound (gap/bound ≤ {worst_ratio:.3g})"))
    txt = (f"gap/bound ≤ {worst_ratio:.3g}; gap slope {slope:.2f} "
           f"[{slope_lo:.2f}, {slope_hi:.2f}] vs α = {alpha:.2f}")
    if not below:
        return NOT, txt + ": above the bound"
    if rate_matches:
        return OURS, txt + ": below the bound, the rate matches"
    return "partly", txt + ": below the bound, the rate does not match"


@rule
def temperature_amplifies(slope: float, slope_lo: float, slope_hi: float, n_fitted: int,
                          n_runs: int, *, tol: float = 0.25):
    """X-bridge-temperature: in a trained transformer, the router's task-aligned component
    leaves the symmetric state at a rate ∝ 1/τ (paper B, Proposition 6.3, carried from its
    Gaussian model to paper A's model under plain SGD).

    ``slope`` is the fitted slope of log(rate) against log(1/τ) over the runs whose growth
    could be fitted (``n_fitted`` of ``n_runs``), ``[slope_lo, slope_hi]`` its confidence
    interval; the prediction is 1.  ``tol`` = 0.25: a rate ∝ τ^(−1/2) or τ^(−2) misses by at
    least 0.5, and an interval wider than 2·tol cannot tell them from 1/τ.

    * not reproduced — fewer than two runs fitted (no exponential growth to compare), or
      slope_lo ≤ 0 (no amplification resolved: the rate does not grow with 1/τ);
    * our extension — 1 ∈ [slope_lo, slope_hi], |slope − 1| ≤ tol, the interval no wider than
      2·tol, and every run fitted;
    * partly — otherwise: the rate grows with 1/τ but not in proportion, or not all runs
      could be fitted, or the interval is too wide to tell.
    """
    n_runs = integer("n_runs", n_runs, low=1)
    n_fitted = integer("n_fitted", n_fitted, low=0, high=n_runs)
    tol = number("tol", tol, low=0, low_open=True)
    if n_fitted < 2:
        return NOT, (f"{n_fitted} of {n_runs} runs grew log-linearly: no rate "
                                  "to compare across temperatures")
    slope = number("slope", slope)
    slope_lo = number("slope_lo", slope_lo, high=slope)
    slope_hi = number("slope_hi", slope_hi, low=slope)
    txt = (f"log-rate vs log(1/τ) slope {slope:.2f} [{slope_lo:.2f}, {slope_hi:.2f}] "
           f"(prediction 1), {n_fitted}/{n_runs} runs fitted")
    if slope_lo <= 0:
        return NOT, txt + ": no amplification resolved"
    if (slope_lo <= 1.0 <= slope_hi and abs(slope - 1.0) <= tol
            and slope_hi - slope_lo <= 2 * tol and n_fitted == n_runs):
        return OURS, txt + f": 1 inside the interval, |slope − 1| ≤ {tol}"
    return "partly", txt + ": the rate grows with 1/τ, not shown to be in proportion"
