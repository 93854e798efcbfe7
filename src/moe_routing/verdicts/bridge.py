"""Rules of the bridge chapter (ours): paper B's quantities on paper A's trained routers.

Every claim here is the book's own ("our extension" when it holds).  Boundary masses are
compared through their Wilson intervals; the soft-to-hard rate through the fitted slope's
confidence interval and the bound's constants measured on the same positions.
"""

from __future__ import annotations

from ..validation import integer, number, require
from . import rule

OURS = "our extension"


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
    return "not reproduced", txt + ": not smaller"


@rule
def soft_hard_rate(below: bool, rate_matches: bool, worst_ratio: float, slope: float,
                   slope_lo: float, slope_hi: float, alpha: float, n_resolved: int):
    """X-bridge-soft-hard: on a trained router, the gap |L_τ − L_0| between the soft mixture at
    temperature τ and hard routing sits below paper B's bound with the measured α and C_m and
    falls at the rate τ^α.

    ``below``: the gap is below the bound at every τ (``worst_ratio`` its largest gap/bound);
    ``rate_matches``: α lies in the confidence interval [slope_lo, slope_hi] of the fitted
    log-log slope of the gap; ``n_resolved``: the temperatures at which the gap is positive in
    float64 (with margins of tens of τ it underflows to 0, and no slope can be fitted: pass
    any finite slope then, it is not read):

    * partly — fewer than two resolved temperatures (below the bound, rate untested);
    * our extension — below the bound and the rate matches;
    * partly — below the bound, but the rate does not match (the bound is loose there);
    * not reproduced — above the bound at some τ.
    """
    worst_ratio = number("worst_ratio", worst_ratio, low=0)
    n_resolved = integer("n_resolved", n_resolved, low=0)
    if n_resolved < 2:
        return (("partly", f"the gap is positive at {n_resolved} temperature(s) only (below "
                 "float64 resolution elsewhere): below the bound, rate untested") if below else
                ("not reproduced", f"above the bound (gap/bound ≤ {worst_ratio:.3g})"))
    txt = (f"gap/bound ≤ {worst_ratio:.3g}; gap slope {slope:.2f} "
           f"[{slope_lo:.2f}, {slope_hi:.2f}] vs α = {alpha:.2f}")
    if not below:
        return "not reproduced", txt + ": above the bound"
    if rate_matches:
        return OURS, txt + ": below the bound, the rate matches"
    return "partly", txt + ": below the bound, the rate does not match"
