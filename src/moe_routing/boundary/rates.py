"""The soft → hard rate of one margin law: its measured gap, fitted slope and bound.

The soft → hard chapter measures ``|L_τ − L_0|`` for several margin laws (exponents α) and
asks two things of each: does the gap fall like ``τ^α`` (the slope on log–log axes), and does
it stay below the risk bound ``risk_bound`` built from the law's margin-tail constant ``C_m``?
A :class:`RateCase` holds what one law contributes (the measured gap and the bound's
constants); :func:`fit_rate` answers both questions in a :class:`RateFit`.  The chapter builds
its cases (they are its examples); the fit, the bound and the ratio are computed here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check
from .fits import LogLogFit, fit_loglog
from .risk import RiskGap, risk_bound


@dataclass(frozen=True)
class RateCase:
    """One margin law: ``gap`` (a :class:`RiskGap` on a τ grid), the margin exponent ``alpha``,
    the bound's constants — ``K`` experts, ``|f_k| ≤ B``, ``|f*| ≤ B_star``, the margin-tail
    constant ``C_m`` — and, where the estimator or a formula gives one, the first-order
    constant ``first`` of lim (L_τ − L_0)/τ (None: none)."""

    name: str
    gap: RiskGap
    alpha: float
    K: int
    B: float
    B_star: float
    C_m: float
    first: float | None = None

    def __post_init__(self):
        check.require(isinstance(self.name, str) and self.name != "", "name", self.name,
                      "a non-empty case name")
        check.instance("gap", self.gap, RiskGap, "a RiskGap (risk_mc, risk_quad_1d, …)")
        for field_name in ("alpha", "B", "B_star", "C_m"):
            object.__setattr__(self, field_name,
                               check.positive(field_name, getattr(self, field_name)))
        object.__setattr__(self, "K", check.integer("K", self.K, low=2))
        if self.first is not None:
            object.__setattr__(self, "first", check.number("first", self.first))


@dataclass(frozen=True)
class RateFit:
    """A case's log–log fit of ``|gap|`` against τ (weighted by the standard errors when it
    has any), its bound at every τ, and ``ratio`` = max over τ of ``(|gap| + 2 se) / bound``
    (below 1: the measurement is under the bound with two standard errors to spare)."""

    case: RateCase
    fit: LogLogFit
    bound: np.ndarray          # (n_τ,)
    ratio: float

    def row(self) -> dict:
        """The case's row of the chapter's slope table."""
        g = self.case.gap
        return {"case": self.case.name, "method": g.method, "α": self.case.alpha,
                "fitted slope": self.fit.slope,
                "slope CI": "[{:.4f}, {:.4f}]".format(*self.fit.slope_ci),
                "C_m": self.case.C_m, "max (|gap| + 2 se) / bound": self.ratio}


def fit_rate(case: RateCase) -> RateFit:
    """Fit the slope of one case's gap and compare it with its bound."""
    check.instance("case", case, RateCase, "a RateCase")
    g = case.gap
    fit = fit_loglog(g.taus, g.gap, y_se=g.se if np.any(g.se > 0) else None)
    bound = risk_bound(g.taus, case.K, case.B, case.B_star, case.C_m, case.alpha)
    ratio = float(np.max((np.abs(g.gap) + 2 * g.se) / bound))
    return RateFit(case=case, fit=fit, bound=bound, ratio=ratio)
