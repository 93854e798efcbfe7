"""Power-law fits on log–log axes, with confidence intervals.

Two situations occur in the book:

* deterministic values (quadrature) or independent estimates with standard errors: ordinary /
  weighted least squares of log y on log x with a Student-t interval (:func:`fit_loglog`);
* Monte Carlo boundary masses at several widths computed from *one* sample (common random
  numbers), whose errors are correlated across widths: a bootstrap of the bin counts
  (:func:`bootstrap_bm_fit`).  Resampling the n margins with replacement changes only how many
  fall between consecutive widths, so a multinomial draw of the bin counts *is* the
  non-parametric bootstrap, at a cost independent of n.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from . import _checks


@dataclass(frozen=True)
class LogLogFit:
    """y ≈ prefactor · x^slope, fitted on log–log axes."""

    slope: float
    slope_ci: tuple[float, float]
    prefactor: float
    prefactor_ci: tuple[float, float]
    confidence: float

    def __str__(self) -> str:
        return (f"slope {self.slope:.4f} [{self.slope_ci[0]:.4f}, {self.slope_ci[1]:.4f}], "
                f"prefactor {self.prefactor:.4g} [{self.prefactor_ci[0]:.4g}, {self.prefactor_ci[1]:.4g}]")


def fit_loglog(x, y, y_se=None, confidence: float = 0.95) -> LogLogFit:
    """Least squares of log|y| on log x (weighted by (y/se)² when ``y_se`` is given).

    The interval is the usual t interval of the regression; with ``y_se`` the residual scale is
    not trusted below 1 (so an exact power law with tiny errors still gets an honest width).
    """
    confidence = _checks.confidence(confidence)
    x = np.asarray(x, float)
    y = np.abs(np.asarray(y, float))
    if x.shape != y.shape or x.ndim != 1 or x.size < 3:
        raise ValueError(f"need 1-D x and y of equal length ≥ 3; got {x.shape} and {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("log–log fit needs x > 0 and y ≠ 0")
    lx, ly = np.log(x), np.log(y)
    w = np.ones_like(lx) if y_se is None else (y / np.asarray(y_se, float)) ** 2
    X = np.stack([np.ones_like(lx), lx], 1)  # (m, 2)
    WX = X * w[:, None]
    cov_un = np.linalg.inv(X.T @ WX)
    beta = cov_un @ (WX.T @ ly)
    resid = ly - X @ beta
    dof = x.size - 2
    s2 = float((w * resid ** 2).sum() / dof)
    if y_se is not None:
        s2 = max(s2, 1.0)
    cov = cov_un * s2
    q = stats.t.ppf(0.5 + confidence / 2, dof)
    se_a, se_b = np.sqrt(np.diag(cov))
    a, b = beta
    return LogLogFit(float(b), (float(b - q * se_b), float(b + q * se_b)), float(np.exp(a)),
                     (float(np.exp(a - q * se_a)), float(np.exp(a + q * se_a))), confidence)


def bootstrap_bm_fit(widths, counts, n: int, n_boot: int = 400, rng=None,
                     confidence: float = 0.95, fixed_slope: float | None = None) -> LogLogFit:
    """Fit BM(w) ≈ C w^α from cumulative counts #{Δ_i ≤ w} of one sample of size n.

    Returns the least-squares fit of the observed counts with percentile bootstrap intervals.
    ``fixed_slope`` fixes α (e.g. 1) and fits only the prefactor (then ``slope_ci`` is a point).
    """
    w = _checks.widths(widths)
    n = _checks.count(n)
    n_boot = _checks.count(n_boot, "n_boot")
    confidence = _checks.confidence(confidence)
    counts = np.asarray(counts, dtype=np.int64)
    order = np.argsort(w)
    w, counts = w[order], counts[order]
    if np.any(np.diff(counts) < 0) or counts[-1] > n or counts[0] < 1:
        raise ValueError("counts must be cumulative, ≥ 1 at the smallest width and ≤ n")
    bins = np.diff(np.concatenate([[0], counts, [n]]))  # (m + 1,)
    draws = _checks.rng(rng).multinomial(n, bins / n, size=n_boot)  # (B, m + 1)
    cum = np.cumsum(draws[:, :-1], axis=1)  # (B, m)
    lx = np.log(w)

    def fit(c):
        c = np.maximum(c, 0.5)  # a zero count in a resample: keep the log finite
        ly = np.log(c / n)
        if fixed_slope is not None:
            a = (ly - fixed_slope * lx).mean(-1)
            return np.full_like(a, fixed_slope), a
        xm = lx.mean()
        b = ((lx - xm) * (ly - ly.mean(-1, keepdims=True))).sum(-1) / ((lx - xm) ** 2).sum()
        return b, ly.mean(-1) - b * xm

    b0, a0 = fit(counts[None, :].astype(float))
    bb, ab = fit(cum.astype(float))
    lo, hi = 50 * (1 - confidence), 50 * (1 + confidence)
    return LogLogFit(float(b0[0]), (float(np.percentile(bb, lo)), float(np.percentile(bb, hi))),
                     float(np.exp(a0[0])),
                     (float(np.exp(np.percentile(ab, lo))), float(np.exp(np.percentile(ab, hi)))),
                     confidence)
