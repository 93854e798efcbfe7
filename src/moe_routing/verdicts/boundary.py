"""Rules for paper B's boundary-mass, soft-to-hard and Γ-convergence claims.

Each rule is a pure function of measured numbers (plain floats, tuples and sequences) and of
thresholds given as keyword arguments; it returns ``(verdict, reason)`` and the :func:`rule`
decorator makes that a :class:`~moe_routing.verdicts.Verdict`.  The reason names the deciding
threshold and the numbers.  The chapters ``boundary_mass``, ``soft_to_hard`` and
``gamma_convergence`` call them; ``tests/test_verdicts_boundary.py`` drives every rule on both
sides of each threshold.

Intervals passed to the rules are *simultaneous* ones (Bonferroni over the rows of a table)
where the rule needs every row to pass, so that one chance miss in a table of eight does not
decide a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import rule


def _inside(x: float, ci: Sequence[float], pad: float = 0.0) -> bool:
    return bool(ci[0] - pad <= x <= ci[1] + pad)


def _worst(values) -> int:
    return int(np.argmax(np.asarray(values, float)))


@rule
def bm_binary(slope_cis: Sequence[Sequence[float]], prefactors: Sequence[float],
              prefactor_cis: Sequence[Sequence[float]], predicted: Sequence[float], *,
              rel_tol: float = 0.05):
    """B-bm-binary: BM(w) linear in w with the surface-integral constant 2S.

    ``slope_cis``: interval of the free log–log slope per router; ``prefactors`` /
    ``prefactor_cis``: prefactor fitted with slope 1 and its interval; ``predicted``: 2S from
    the closed form or the surface quadrature (no Monte Carlo in it).

    * reproduced — every slope interval contains 1 and every 2S lies in its prefactor interval;
    * partly — the slopes pass, but a constant misses its interval while staying within
      ``rel_tol`` of it: 5 % is far outside the Monte Carlo error at the book's sample sizes
      (≈ 1 %) yet small beside a factor-2 convention error (one- vs two-sided slab), so a miss
      of that size points to a second-order effect, not a wrong constant;
    * not reproduced — otherwise (a slope interval without 1, or a constant off by > rel_tol).
    """
    m = len(predicted)
    slopes_ok = [_inside(1.0, ci) for ci in slope_cis]
    covered = [_inside(p, ci) for p, ci in zip(predicted, prefactor_cis)]
    rel = [abs(f / p - 1) for f, p in zip(prefactors, predicted)]
    i = _worst(rel)
    tail = f"largest |prefactor/2S − 1| = {rel[i]:.3f} (case {i + 1})"
    if all(slopes_ok) and all(covered):
        return "reproduced", (f"all {m} slope intervals contain 1 and all {m} values of 2S lie "
                              f"in their prefactor intervals; {tail}")
    if all(slopes_ok) and max(rel) <= rel_tol:
        return "partly", (f"slopes contain 1, but {m - sum(covered)} of {m} constants 2S miss "
                          f"their interval; {tail} ≤ {rel_tol}")
    if not all(slopes_ok):
        return "not reproduced", (f"{m - sum(slopes_ok)} of {m} slope intervals exclude 1")
    return "not reproduced", f"{tail} > {rel_tol}"


@rule
def bm_exponents(slope_cis: Sequence[Sequence[float]], alphas: Sequence[float], *,
                 abs_tol: float = 0.05):
    """X-bm-exponents (the book's own): margin exponents α ≠ 1 without transversality.

    * our extension — every predicted α lies in its (simultaneous) slope interval;
    * partly — some α misses its interval by at most ``abs_tol`` (0.05: a tenth of the
      smallest gap between the exponents tested, 1/3 and 1/2, so a different law would miss by
      far more);
    * not reproduced — some α is further than ``abs_tol`` from its interval.
    """
    miss = [max(ci[0] - a, a - ci[1], 0.0) for ci, a in zip(slope_cis, alphas)]
    i = _worst(miss)
    if max(miss) == 0.0:
        return "our extension", f"all {len(alphas)} predicted exponents lie in their intervals"
    if max(miss) <= abs_tol:
        return "partly", (f"α = {alphas[i]:.3g} misses its interval by {miss[i]:.3f} "
                          f"≤ {abs_tol}")
    return "not reproduced", f"α = {alphas[i]:.3g} misses its interval by {miss[i]:.3f} > {abs_tol}"


@rule
def bm_multi(constants: Sequence[float], constant_cis: Sequence[Sequence[float]],
             sharp: Sequence[float], sharp_se: Sequence[float], slopes: Sequence[float],
             slope_cis: Sequence[Sequence[float]], *, z: float = 2.0, rel_tol: float = 0.05,
             slope_tol: float = 0.05):
    """B-bm-multi: for K > 2, BM(w) is linear in w; its constant is the sharp one.

    The pairwise union bound holds by construction (a union of events), so it cannot test
    anything: the test is the *sharp* junction-free constant Σ ∫_{Γ_jk} p/|∇g_jk|, which the
    union bound exceeds.  ``constants`` / ``constant_cis``: Monte Carlo lim BM(w)/(2w) with its
    interval; ``sharp`` / ``sharp_se``: the sharp constant and its standard error (0 when exact);
    ``slopes`` / ``slope_cis``: free log–log slopes and their intervals.

    * reproduced — every slope agrees with 1 (1 inside its interval, or within ``slope_tol``)
      and every sharp constant (± z se) lies inside its Monte Carlo interval.  slope_tol =
      0.05: over the fitted widths the junction term bends the log–log slope by ≲ 0.02, while
      a failure of linearity (a degenerate interface) gives α = 1/2;
    * partly — slopes pass but a constant misses its interval while within ``rel_tol`` (5 %);
    * not reproduced — otherwise.
    """
    m = len(sharp)
    slope_ok = [abs(s - 1) <= slope_tol or _inside(1.0, ci) for s, ci in zip(slopes, slope_cis)]
    covered = [_inside(s, ci, z * se) for s, ci, se in zip(sharp, constant_cis, sharp_se)]
    rel = [abs(c / s - 1) for c, s in zip(constants, sharp)]
    i = _worst(rel)
    tail = f"largest |MC/sharp − 1| = {rel[i]:.3f} (case {i + 1})"
    if not all(slope_ok):
        j = slope_ok.index(False)
        return "not reproduced", (f"slope {slopes[j]:.3f} excludes 1 from its interval and "
                                  f"differs from 1 by more than {slope_tol}")
    if all(covered):
        return "reproduced", (f"all {m} slopes agree with 1 (interval or ±{slope_tol}), all "
                              f"{m} sharp constants (± {z:g} se) inside the Monte Carlo "
                              f"intervals; {tail}")
    if max(rel) <= rel_tol:
        return "partly", (f"{m - sum(covered)} of {m} sharp constants outside the Monte Carlo "
                          f"interval; {tail} ≤ {rel_tol}")
    return "not reproduced", f"{tail} > {rel_tol}"


@rule
def risk_rate(slopes: Sequence[float], slope_cis: Sequence[Sequence[float]],
              alphas: Sequence[float], gap_over_bound: Sequence[float], *,
              slope_tol: float = 0.01):
    """B-risk-linear (α = 1) and B-risk-alpha (α ≠ 1): |L_τ − L_0| ∝ τ^α, below the bound.

    ``slopes`` / ``slope_cis``: fitted log–log slope of |L_τ − L_0| against τ and its interval;
    ``alphas``: the margin exponent of each case; ``gap_over_bound``: max over τ of
    (|gap| + 2 se) / bound.

    * reproduced — every bound holds (ratio ≤ 1) and every slope agrees with α: α inside its
      interval, or within ``slope_tol``.  The tolerance is needed because exact quadrature gives
      intervals that measure only the departure from a pure power law; 0.01 over three decades
      of τ is a 7 % change of the gap, the size of the O(τ²) correction at the largest τ, while
      the exponents compared differ by ≥ 0.5;
    * partly — every bound holds, but some gap falls *faster* than τ^α (slope > α + slope_tol):
      the O(τ^α) bound is not contradicted, but our examples are built to attain it;
    * not reproduced — some measured gap exceeds its bound, or falls *slower* than τ^α
      (slope < α − slope_tol), which no bound C·τ^α can hold for as τ → 0.
    """
    over = max(gap_over_bound)
    i = _worst(gap_over_bound)
    if over > 1:
        return "not reproduced", f"case {i + 1}: |gap| + 2 se = {over:.3f} × the bound > 1"
    off = [0.0 if _inside(a, ci) else s - a for s, ci, a in zip(slopes, slope_cis, alphas)]
    j = int(np.argmin(off))
    k = int(np.argmax(off))
    if off[j] < -slope_tol:
        return "not reproduced", (f"case {j + 1}: slope {slopes[j]:.4f} < α − {slope_tol} = "
                                  f"{alphas[j] - slope_tol:g}: the gap falls slower than τ^α")
    if off[k] > slope_tol:
        return "partly", (f"bound holds (max ratio {over:.3f}) but case {k + 1} falls faster: "
                          f"slope {slopes[k]:.4f} > α + {slope_tol} = {alphas[k] + slope_tol:g}")
    return "reproduced", (f"all {len(alphas)} slopes agree with α (in their interval or "
                          f"within {slope_tol}); max |gap|/bound = {over:.3f} ≤ 1")


@rule
def layer_not_dimension(mass_share: float, dimension_share: float, gap_over_bound: float, *,
                        mass_min: float = 0.8, dimension_max: float = 0.1):
    """B-layer-not-dimension: the gap tracks the boundary mass across dimensions.

    The measurement is a table of (L_τ − L_0)/τ over dimensions d (rows) and interface masses
    (columns); ``mass_share`` and ``dimension_share`` are the shares of its variation explained
    by the interface mass and by the dimension
    (:func:`~moe_routing.boundary.fits.variance_shares`); ``gap_over_bound`` is the largest
    |gap|/τ divided by the dimension-free bound.

    * reproduced — the interface mass explains ≥ ``mass_min`` (80 %) of the variation, the
      dimension ≤ ``dimension_max`` (10 %), and the dimension-free bound holds.  A gap driven
      by the dimension (growing like √d, say, over d = 1…256) would put most of the variation
      in the rows; 10 % leaves room for our random experts, whose values on the interface
      change with d;
    * partly — the bound holds and the dimension share is small, but the interface mass
      explains less than ``mass_min`` (the gap follows neither factor);
    * not reproduced — the dimension explains more than ``dimension_max``, or the bound fails.
    """
    shares = f"interface mass {mass_share:.3f}, dimension {dimension_share:.3f}"
    if gap_over_bound > 1:
        return "not reproduced", f"gap exceeds the dimension-free bound ({gap_over_bound:.3f} × it)"
    if dimension_share > dimension_max:
        return "not reproduced", (f"variation explained by {shares}: dimension share "
                                  f"> {dimension_max}")
    if mass_share >= mass_min:
        return "reproduced", (f"variation explained by {shares} (≥ {mass_min}, ≤ "
                              f"{dimension_max}); max gap/bound {gap_over_bound:.3f} ≤ 1")
    return "partly", (f"variation explained by {shares}: mass share < {mass_min}, though the "
                      f"dimension share ≤ {dimension_max}")


@rule
def gamma_convergence(distances: Sequence[float], minimum_gaps: Sequence[float],
                      sup_over_bound: Sequence[float], counter_minima: Sequence[float],
                      counter_hard_minimum: float, counter_scale_ratios: Sequence[float], *,
                      flat_tol: float = 1e-6, gap_min: float = 0.01, ratio_tol: float = 0.01):
    """B-gamma (Theorem 4.7) on our compact family, and its counter-example.

    With uniform margin control, over temperatures in decreasing order: ``distances`` =
    |b_τ − b_0| + |c_τ − c_0| of the minimisers, ``minimum_gaps`` = |min L_τ − min L_0|,
    ``sup_over_bound`` = sup |L_τ − L_0| / bound.  Without it (s ∈ [0, 1]): ``counter_minima``
    = min L_τ, ``counter_hard_minimum`` = min L_0, ``counter_scale_ratios`` = s_τ/τ.

    * reproduced for our construction — the minimisers and minima converge (both sequences
      strictly decrease as τ decreases), the uniform bound holds at every τ, and the
      counter-example fails as predicted: min L_τ constant (range ≤ ``flat_tol``, 10⁻⁶, far
      above the quadrature error ≈ 10⁻¹², far below the risks ≈ 10⁻¹), at least ``gap_min``
      (0.01) below min L_0, and s_τ/τ constant to ``ratio_tol`` (1 %) so that s_τ → 0.
      "For our construction": the family is ours and the proof sketch adds the hypothesis
      that L_0 is continuous;
    * partly — the minimisers converge, but the bound or the counter-example fails;
    * not reproduced — the minimisers or the minima do not converge.
    """
    d = np.asarray(distances, float)
    g = np.abs(np.asarray(minimum_gaps, float))
    if not (np.all(np.diff(d) < 0) and np.all(np.diff(g) < 0)):
        return "not reproduced", (f"minimisers or minima do not converge: distances "
                                  f"{d[0]:.3g} → {d[-1]:.3g}, |min gaps| {g[0]:.3g} → {g[-1]:.3g}")
    conv = f"distance {d[0]:.3g} → {d[-1]:.3g}, |min L_τ − min L_0| {g[0]:.3g} → {g[-1]:.3g}"
    over = max(sup_over_bound)
    cm = np.asarray(counter_minima, float)
    ratios = np.asarray(counter_scale_ratios, float)
    flat = float(np.ptp(cm))
    below = float(counter_hard_minimum - cm.max())
    spread = float(np.ptp(ratios) / ratios.mean())
    if over > 1:
        return "partly", f"{conv}, but sup |L_τ − L_0| = {over:.3f} × the bound at some τ"
    if flat > flat_tol or below < gap_min or spread > ratio_tol:
        return "partly", (f"{conv}; counter-example not as predicted: min L_τ range {flat:.1e} "
                          f"(≤ {flat_tol:g}?), {below:.4f} below min L_0 (≥ {gap_min}?), s_τ/τ "
                          f"spread {spread:.1e} (≤ {ratio_tol}?)")
    return "reproduced for our construction", (
        f"{conv}; sup gap ≤ bound (max ratio {over:.3f}); without uniform control min L_τ "
        f"flat to {flat:.1e} ≤ {flat_tol:g}, {below:.4f} ≥ {gap_min} below min L_0")


__all__ = ["bm_binary", "bm_exponents", "bm_multi", "gamma_convergence", "layer_not_dimension",
           "risk_rate"]
