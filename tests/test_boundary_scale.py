"""The closed forms and interface constants of paper B obey their scaling laws at any float64 scale.

For a linear router a(x) = Wx + b and X ~ N(μ, Σ) the score of a pair is g_jk(X) ~ N(m, s²)
with m and s both proportional to the weights and to the scale of the input:

* weights:  g(λW, λb) = λ·g(W, b), so BM(w; λW, λb) = BM(w/λ; W, b) and every coarea constant
  S = f_{g(X)}(0) obeys S(λW, λb) = S(W, b)/λ (the top-two event does not change);
* inputs:   X ↦ σX with b ↦ σb gives the same scores times σ, so S(W, σb; N(σμ, σ²Σ)) =
  S(W, b; N(μ, Σ))/σ and BM(σw) is unchanged.

Each law is checked against the unscaled value at 1e±20 (where an absolute threshold on
the weights used to drop an expert's constraint) and at 1e±160 (where vᵀΣv under- or
overflows and the closed forms used to return 0 with a RuntimeWarning).  A constant that does
not fit in float64 is refused by name, never returned as 0 or ∞.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from moe_routing.boundary import (GaussianLaw, LinearRouter, boundary_mass_linear_gaussian,
                                  coarea_constant, junction_free_constants, pairwise_union_bound,
                                  sample_margins)

pytestmark = pytest.mark.kernels

W3 = np.array([[1.0, 0.2], [-0.5, 0.9], [0.1, -1.1]])
B3 = np.array([0.1, -0.2, 0.05])
V2, C2 = np.array([1.0, 0.5]), 0.3
MEAN = np.array([0.2, -0.1])
COV = np.array([[1.0, 0.3], [0.3, 0.5]])
WIDTHS = np.array([1e-3, 0.05, 0.4])
SCALES = [1e-20, 1e20, 1e-160, 1e160, 1e-300]


@pytest.fixture(autouse=True)
def warnings_are_errors():
    """An overflow that NumPy only warns about is a failure here."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def law(sigma: float = 1.0) -> GaussianLaw:
    return GaussianLaw(sigma * MEAN, (sigma * sigma) * COV)


@pytest.mark.parametrize("lam", SCALES)
def test_junction_constants_scale_as_one_over_the_weights(lam):
    ref = junction_free_constants(LinearRouter(W3, B3), law())
    got = junction_free_constants(LinearRouter(lam * W3, lam * B3), law())
    assert ref.sharp_total > 0 and ref.union_total > ref.sharp_total
    np.testing.assert_allclose(got.full * lam, ref.full, rtol=1e-12)
    np.testing.assert_allclose(got.sharp * lam, ref.sharp, rtol=1e-12)


@pytest.mark.parametrize("sigma", [1e-20, 1e20, 1e-150, 1e150])
def test_junction_constants_scale_as_one_over_the_input_scale(sigma):
    ref = junction_free_constants(LinearRouter(W3, B3), law())
    got = junction_free_constants(LinearRouter(W3, sigma * B3), law(sigma))
    np.testing.assert_allclose(got.full * sigma, ref.full, rtol=1e-12)
    np.testing.assert_allclose(got.sharp * sigma, ref.sharp, rtol=1e-12)


@pytest.mark.parametrize("lam", [1e-20, 1e20, 1e160, 1e-160])
def test_conditional_monte_carlo_constants_in_d3_are_scale_covariant(lam):
    W = np.array([[1.0, 0.2, -0.3], [-0.5, 0.9, 0.4], [0.1, -1.1, 0.2], [0.3, 0.3, -0.8]])
    b = np.array([0.1, -0.2, 0.05, 0.0])
    g3 = GaussianLaw.standard(3)
    ref = junction_free_constants(LinearRouter(W, b), g3, n_cond=4000, rng=1)
    got = junction_free_constants(LinearRouter(lam * W, lam * b), g3, n_cond=4000, rng=1)
    np.testing.assert_allclose(got.sharp * lam, ref.sharp, rtol=1e-10)
    np.testing.assert_allclose(got.sharp_se * lam, ref.sharp_se, rtol=1e-10)


@pytest.mark.parametrize("lam", SCALES)
def test_closed_forms_scale_with_the_weights(lam):
    S = coarea_constant(LinearRouter.binary(V2, C2), law()).value
    bm = boundary_mass_linear_gaussian(LinearRouter.binary(V2, C2), law(), WIDTHS).estimate
    union = pairwise_union_bound(LinearRouter(W3, B3), law(), WIDTHS)
    assert S > 0 and np.all(bm > 0) and np.all(union > bm)
    scaled2, scaled3 = LinearRouter.binary(lam * V2, lam * C2), LinearRouter(lam * W3, lam * B3)
    assert coarea_constant(scaled2, law()).value * lam == pytest.approx(S, rel=1e-12)
    np.testing.assert_allclose(boundary_mass_linear_gaussian(scaled2, law(), lam * WIDTHS).estimate,
                               bm, rtol=1e-12)
    np.testing.assert_allclose(pairwise_union_bound(scaled3, law(), lam * WIDTHS), union, rtol=1e-12)


@pytest.mark.parametrize("lam, sigma", [(1e80, 1e80), (1e-80, 1e-80), (1e160, 1.0),
                                        (1e-160, 1.0), (1e150, 1e10), (1e-150, 1e-10)])
def test_closed_forms_where_v_sigma_v_over_or_underflows(lam, sigma):
    """|v|·σ = 1e±160: vᵀΣv = 1e±320 is not a float64, the closed forms still are."""
    S = coarea_constant(LinearRouter.binary(V2, C2), law()).value
    bm = boundary_mass_linear_gaussian(LinearRouter.binary(V2, C2), law(), WIDTHS).estimate
    r = LinearRouter.binary(lam * V2, lam * sigma * C2)
    assert coarea_constant(r, law(sigma)).value * lam * sigma == pytest.approx(S, rel=1e-12)
    np.testing.assert_allclose(
        boundary_mass_linear_gaussian(r, law(sigma), lam * sigma * WIDTHS).estimate, bm, rtol=1e-12)


@pytest.mark.parametrize("lam", [1e160, 1e-160])
def test_logit_space_sampling_is_scale_covariant(lam):
    """K < d: the margins come from N(Wμ + b, WΣWᵀ), whose covariance overflows at 1e160."""
    W = np.array([[1.0, 0.2, -0.3], [-0.5, 0.9, 0.4]])
    g3 = GaussianLaw.standard(3)
    ref = sample_margins(LinearRouter(W), g3, 500, rng=3)
    got = sample_margins(LinearRouter(lam * W), g3, 500, rng=3)
    np.testing.assert_allclose(got / lam, ref, rtol=1e-10)


@pytest.mark.parametrize("lam, sigma", [(1e-300, 1e-20), (1e200, 1e120)])
def test_constants_outside_float64_are_refused_by_name(lam, sigma):
    """S ≈ 1/(|W|·σ) = 1e±320: refused naming the router, not returned as ∞ or 0."""
    for call in (lambda: coarea_constant(LinearRouter.binary(lam * V2), law(sigma)),
                 lambda: junction_free_constants(LinearRouter(lam * W3), law(sigma))):
        with pytest.raises(ValueError, match=r"(?s)^router = .*float64's normal range"):
            call()
    with pytest.raises(ValueError, match=r"(?s)^v = .*vᵀΣv"):
        law(sigma).linear_moments(lam * V2, 0.0)


def test_a_far_interface_has_a_true_zero_constant():
    """φ(z) = 0 for an interface 1e3 standard deviations away: that 0 is right, not refused."""
    far = LinearRouter.binary(V2, 1e3)
    assert coarea_constant(far, law()).value == 0.0
    assert boundary_mass_linear_gaussian(far, law(), WIDTHS).estimate.max() == 0.0
