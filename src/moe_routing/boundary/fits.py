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

from .._internal import validation as check


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
    Needs ≥ 3 points (two parameters and one degree of freedom for the interval) at ≥ 2
    distinct x, all x > 0, y ≠ 0 and standard errors > 0.
    """
    confidence = check.probability("confidence", confidence)
    x = check.finite_array("x", x, ndim=1, low=0, low_open=True)
    y = np.abs(check.finite_array("y", y, shape=(x.size,)))
    check.require(x.size >= 3, "x.size", x.size, "≥ 3 points (a slope, a prefactor and a residual)")
    check.require(bool(np.ptp(x) > 0), "x", x, "at least 2 distinct values (a slope needs a spread in x)")
    zero = np.flatnonzero(y == 0)
    if zero.size:
        check.fail(f"y[{int(zero[0])}]", 0.0, "y ≠ 0 (its logarithm is taken)")
    lx, ly = np.log(x), np.log(y)
    if y_se is None:
        w = np.ones_like(lx)
    else:
        w = (y / check.finite_array("y_se", y_se, shape=(x.size,), low=0, low_open=True)) ** 2
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
    Widths must be > 0 (logarithms are taken) and, to fit a slope, take ≥ 2 distinct values.
    """
    w = check.widths("widths", widths, positive=True)
    n = check.integer("n", n, low=1)
    n_boot = check.integer("n_boot", n_boot, low=1)
    confidence = check.probability("confidence", confidence)
    if fixed_slope is not None:
        fixed_slope = check.number("fixed_slope", fixed_slope)
    else:
        check.require(bool(np.ptp(w) > 0), "widths", w, "at least 2 distinct widths (a slope needs a spread)")
    c = check.finite_array("counts", counts, shape=(w.size,), low=0)
    check.require(bool(np.all(c == np.round(c))), "counts", counts, "integer counts #{Δ_i ≤ w}")
    counts = c.astype(np.int64)
    order = np.argsort(w)
    w, counts = w[order], counts[order]
    check.require(not (np.any(np.diff(counts) < 0) or counts[-1] > n or counts[0] < 1), "counts", counts,
                  f"cumulative counts, ≥ 1 at the smallest width and ≤ n = {n}")
    bins = np.diff(np.concatenate([[0], counts, [n]]))  # (m + 1,)
    draws = check.generator("rng", rng).multinomial(n, bins / n, size=n_boot)  # (B, m + 1)
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


def simultaneous_confidence(m: int, family: float = 0.95) -> float:
    """Per-interval confidence giving ``family`` simultaneous coverage over m intervals
    (Bonferroni: 1 − (1 − family)/m).

    A table that checks m predictions at once with plain 95 % intervals expects one miss in
    twenty by chance alone; a verdict that needs *every* row to pass must use intervals whose
    joint coverage is 95 %.  Bonferroni is conservative but needs no independence between rows.
    """
    m = check.integer("m", m, low=1)
    family = check.probability("family", family)
    return 1 - (1 - family) / m


@dataclass(frozen=True)
class InterfaceConstantFit:
    """lim_{w→0} BM(w)/(2w) estimated from a Monte Carlo curve, with a bootstrap interval.

    ``constant`` is the intercept of BM(w)/(2w) ≈ constant + drift·w; ``drift`` absorbs the
    O(w²) term of BM (slabs overlapping near triple junctions for K > 2).
    """

    constant: float
    constant_ci: tuple[float, float]
    drift: float
    confidence: float


def fit_interface_constant(widths, counts, n: int, n_boot: int = 400, rng=None,
                           confidence: float = 0.95) -> InterfaceConstantFit:
    """Intercept of BM(w)/(2w) = c₀ + c₁·w from cumulative counts #{Δ_i ≤ w} of one sample.

    Why an intercept and not a fit with slope 1: for K > 2 the slabs of two interfaces overlap
    near a triple junction in a set of mass O(w²), so BM(w)/(2w) drifts linearly in w.  A
    fixed-slope fit would return an average over the widths, biased by that drift by a few per
    cent — as much as the Monte Carlo interval at 10⁶ samples — while the intercept is the
    coarea constant itself.  Weighted least squares with weights w_i (the variance of
    BM(w)/(2w) is ≈ c₀/(2nw)); the interval is a percentile bootstrap of the bin counts (a
    multinomial draw, as in :func:`bootstrap_bm_fit`).  Needs ≥ 3 distinct widths > 0.
    """
    w = check.widths("widths", widths, positive=True)
    n = check.integer("n", n, low=1)
    n_boot = check.integer("n_boot", n_boot, low=1)
    confidence = check.probability("confidence", confidence)
    check.require(np.unique(w).size >= 3, "widths", w,
                  "≥ 3 distinct widths (an intercept, a drift and a residual)")
    c = check.finite_array("counts", counts, shape=(w.size,), low=0)
    check.require(bool(np.all(c == np.round(c))), "counts", counts, "integer counts #{Δ_i ≤ w}")
    order = np.argsort(w)
    w, counts = w[order], c.astype(np.int64)[order]
    check.require(not (np.any(np.diff(counts) < 0) or counts[-1] > n), "counts", counts,
                  f"cumulative counts ≤ n = {n}")
    X = np.stack([np.ones_like(w), w], 1)                      # (m, 2)
    solve = np.linalg.pinv(X.T @ (X * w[:, None])) @ (X * w[:, None]).T   # (2, m)

    def fit(cum):                                              # (B, m) -> (B, 2)
        return (cum / n / (2 * w)) @ solve.T

    bins = np.diff(np.concatenate([[0], counts, [n]]))         # (m + 1,)
    draws = check.generator("rng", rng).multinomial(n, bins / n, size=n_boot)
    boot = fit(np.cumsum(draws[:, :-1], axis=1).astype(float))  # (B, 2)
    c0, c1 = fit(counts[None, :].astype(float))[0]
    lo, hi = np.percentile(boot[:, 0], [50 * (1 - confidence), 50 * (1 + confidence)])
    return InterfaceConstantFit(float(c0), (float(lo), float(hi)), float(c1), confidence)


def variance_shares(values) -> tuple[float, float, float]:
    """Shares of the variation of a (rows × columns) table explained by each factor.

    For a complete two-way table y[i, j] (here: dimension i, interface mass j), the total sum
    of squares about the grand mean splits exactly into a row part, a column part and an
    interaction/residual part (balanced design); the function returns the three shares
    (η²_rows, η²_columns, residual), which sum to 1.  "The gap tracks the boundary mass, not
    the dimension" is the statement that the column share is large and the row share small.
    Needs ≥ 2 rows, ≥ 2 columns and a table that is not constant.
    """
    y = check.finite_array("values", values, ndim=2)
    check.require(min(y.shape) >= 2, "values.shape", y.shape, "≥ 2 rows and ≥ 2 columns")
    m = y.mean()
    total = float(((y - m) ** 2).sum())
    check.require(total > 0, "values", y, "a table that is not constant (no variation to share)")
    rows = float(y.shape[1] * ((y.mean(1) - m) ** 2).sum()) / total
    cols = float(y.shape[0] * ((y.mean(0) - m) ** 2).sum()) / total
    return rows, cols, max(0.0, 1.0 - rows - cols)
