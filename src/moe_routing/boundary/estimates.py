"""Coarea estimates of boundary mass confronted with Monte Carlo (paper B's coarea estimates).

The boundary-mass chapter checks one kind of statement many times: "BM(w) ≈ C·w^α for small
w", with C and α predicted (a surface integral S and α = 1 for a transversal binary router,
other exponents when transversality fails, the sharp junction-free constant for K > 2).  Each
check is the same measurement, so it lives here, once, tested:

* :func:`widths_for` — widths at which the *predicted* mass C·w^α runs over a fixed range
  [bm_lo, bm_hi], so that every curve is measured with the same relative Monte Carlo error
  (too small a mass is noise, too large leaves the small-w regime);
* :func:`check_power_law` — one sample of margins, BM at those widths, a free log–log fit
  (slope) and a fit with the slope fixed to α (prefactor), both with bootstrap intervals;
* :func:`check_junction_constant` — for K > 2: the intercept lim BM(w)/(2w) of the same kind
  of curve, compared with the sharp constant (the pairwise union bound beside it as context).

The verdicts built on these numbers are decided in :mod:`moe_routing._internal.verdicts.boundary`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check
from .coarea import JunctionConstants, junction_free_constants
from .fits import InterfaceConstantFit, LogLogFit, bootstrap_bm_fit, fit_interface_constant
from .laws import GaussianLaw, InputLaw
from .mass import BoundaryMass, boundary_mass_from_margins, pairwise_union_bound, sample_margins
from .routers import LinearRouter, Router


def _bm_range(bm_range) -> tuple[float, float]:
    """``(bm_lo, bm_hi)`` with 0 < bm_lo < bm_hi < 1: a range of boundary masses."""
    r = check.finite_array("bm_range", bm_range, shape=(2,))
    check.require(bool(0 < r[0] < r[1] < 1), "bm_range", tuple(r),
                  "(bm_lo, bm_hi) with 0 < bm_lo < bm_hi < 1 (a range of probabilities)")
    return float(r[0]), float(r[1])


def widths_for(alpha: float, prefactor: float, bm_range=(2e-3, 4e-2),
               n_widths: int = 8) -> np.ndarray:
    """``n_widths`` widths, geometrically spaced, where prefactor·w^α runs over ``bm_range``.

    Solving C·w^α = m gives w = (m/C)^(1/α); shape (n_widths,), increasing.
    """
    alpha = check.positive("alpha", alpha)
    prefactor = check.positive("prefactor", prefactor)
    lo, hi = _bm_range(bm_range)
    n_widths = check.integer("n_widths", n_widths, low=2)
    return np.geomspace((lo / prefactor) ** (1 / alpha), (hi / prefactor) ** (1 / alpha),
                        n_widths)


@dataclass(frozen=True)
class PowerLawCheck:
    """A Monte Carlo boundary-mass curve beside its predicted law ``prefactor``·w^``alpha``.

    ``free``: log–log fit of slope and prefactor; ``fixed``: prefactor with the slope fixed to
    ``alpha``.  Both intervals are at ``free.confidence``.
    """

    bm: BoundaryMass
    alpha: float
    prefactor: float
    free: LogLogFit
    fixed: LogLogFit

    @property
    def widths(self) -> np.ndarray:
        return self.bm.widths

    @property
    def slope_covers(self) -> bool:
        """Does the slope interval contain the predicted exponent α?"""
        return bool(self.free.slope_ci[0] <= self.alpha <= self.free.slope_ci[1])

    @property
    def prefactor_covers(self) -> bool:
        """Does the prefactor interval (slope fixed to α) contain the predicted constant?"""
        return bool(self.fixed.prefactor_ci[0] <= self.prefactor <= self.fixed.prefactor_ci[1])

    @property
    def relative_error(self) -> float:
        """Fitted prefactor (slope α) / predicted prefactor − 1."""
        return self.fixed.prefactor / self.prefactor - 1


def check_power_law(router: Router, law: InputLaw, alpha: float, prefactor: float, n: int,
                    bm_range=(2e-3, 4e-2), n_widths: int = 8, n_boot: int = 400,
                    confidence: float = 0.95, rng=None) -> PowerLawCheck:
    """Measure BM(w) from n margins at :func:`widths_for` widths and fit it (see the module).

    One sample serves every width (common random numbers), so the intervals come from a
    bootstrap of the bin counts (:func:`~moe_routing.boundary.fits.bootstrap_bm_fit`).
    """
    w = widths_for(alpha, prefactor, bm_range, n_widths)
    n = check.sample_size("n", n, row_bytes=16)
    n_boot = check.integer("n_boot", n_boot, low=1)
    confidence = check.probability("confidence", confidence)
    g = check.generator("rng", rng)
    bm = boundary_mass_from_margins(sample_margins(router, law, n, g), w, confidence)
    check.require(bool(bm.counts[0] >= 1), "n", n,
                  f"a sample large enough that some margin falls below w = {w[0]:.3g} "
                  f"(the predicted mass there is {_bm_range(bm_range)[0]:g})")
    free = bootstrap_bm_fit(w, bm.counts, n, n_boot=n_boot, rng=g, confidence=confidence)
    fixed = bootstrap_bm_fit(w, bm.counts, n, n_boot=n_boot, rng=g, confidence=confidence,
                             fixed_slope=float(alpha))
    return PowerLawCheck(bm, float(alpha), float(prefactor), free, fixed)


@dataclass(frozen=True)
class JunctionCheck:
    """A K > 2 router: Monte Carlo BM against the sharp (junction-free) constant.

    ``bm``: BM at the fit widths; ``union``: the pairwise union bound at the same widths
    (context only: it holds by construction); ``slope``: free log–log fit;
    ``constant``: intercept lim BM(w)/(2w) with its interval; ``constants``: the per-pair
    coarea constants (``sharp_total``, ``union_total``).
    """

    bm: BoundaryMass
    union: np.ndarray
    slope: LogLogFit
    constant: InterfaceConstantFit
    constants: JunctionConstants

    @property
    def sharp_covered(self) -> bool:
        """Is the sharp constant (± 2 of its standard errors) inside the Monte Carlo interval?"""
        s, se = self.constants.sharp_total, self.constants.sharp_total_se
        lo, hi = self.constant.constant_ci
        return bool(lo <= s + 2 * se and s - 2 * se <= hi)


def check_junction_constant(router: LinearRouter, law: GaussianLaw, n: int,
                            bm_range=(2e-3, 4e-2), n_widths: int = 8, n_boot: int = 400,
                            confidence: float = 0.95, n_cond: int = 200_000,
                            rng=None) -> JunctionCheck:
    """Sharp constant of a K-expert linear router vs one Monte Carlo sample of n margins.

    The fit widths are those where 2·(sharp constant)·w runs over ``bm_range``; the intercept
    of BM(w)/(2w) (:func:`~moe_routing.boundary.fits.fit_interface_constant`) is the measured
    constant.
    """
    check.instance("router", router, LinearRouter, "a LinearRouter")
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    n = check.sample_size("n", n, row_bytes=16)
    n_widths = check.integer("n_widths", n_widths, low=3)
    n_boot = check.integer("n_boot", n_boot, low=1)
    confidence = check.probability("confidence", confidence)
    n_cond = check.sample_size("n_cond", n_cond, row_bytes=8 * (3 * law.dim + 2 * router.n_experts))
    _bm_range(bm_range)
    g = check.generator("rng", rng)
    J = junction_free_constants(router, law, n_cond=n_cond, rng=g)
    check.require(J.sharp_total > 0, "router", router,
                  "a router with at least one routing interface of positive mass")
    w = widths_for(1.0, 2 * J.sharp_total, bm_range, n_widths)
    margins = sample_margins(router, law, n, g)
    bm = boundary_mass_from_margins(margins, w, confidence)
    check.require(bool(bm.counts[0] >= 1), "n", n,
                  f"a sample large enough that some margin falls below w = {w[0]:.3g}")
    slope = bootstrap_bm_fit(w, bm.counts, n, n_boot=n_boot, rng=g, confidence=confidence)
    constant = fit_interface_constant(w, bm.counts, n, n_boot=n_boot, rng=g,
                                      confidence=confidence)
    return JunctionCheck(bm, pairwise_union_bound(router, law, w), slope, constant, J)
