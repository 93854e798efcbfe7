"""Soft/hard risks and the soft-to-hard gap (paper B; checks of our derivations)."""

import numpy as np
import pytest
from scipy import integrate, special

from moe_routing.boundary import (ConstantExperts, GaussianLaw, LinearRouter, MoERegression,
                                  PowerRouter, SphereRouter, TanhExperts, Teacher, UniformBox,
                                  VanishingDensityLaw, first_order_constant, fit_loglog, risk_bound,
                                  risk_layer_quadrature, risk_mc, risk_polar_2d, risk_quad_1d,
                                  top_two_margin)
from moe_routing.boundary.risk import JUMP_SQ, SOFTPLUS, SOFTPLUS_SQ

pytestmark = pytest.mark.kernels

U1 = UniformBox.cube(1)
SIGN = Teacher(lambda x: np.sign(x[:, 0]), 1.0)
PM1 = ConstantExperts([1.0, -1.0])
ROUTER_1D = LinearRouter.binary([1.0])


def test_sigmoid_integrals():
    sq = integrate.quad(lambda s: special.expit(-s) ** 2, 0, np.inf)[0]
    lin = integrate.quad(lambda s: special.expit(-s), 0, np.inf)[0]
    assert sq == pytest.approx(0.1931472, abs=5e-8) and sq == pytest.approx(SOFTPLUS_SQ, rel=1e-10)
    assert lin == pytest.approx(0.6931472, abs=5e-8) and lin == pytest.approx(SOFTPLUS, rel=1e-10)
    jump = integrate.quad(lambda s: special.expit(-s) ** 2, 0, np.inf)[0] * 2
    assert jump == pytest.approx(JUMP_SQ, rel=1e-10)


def test_section9_teacher_is_hard_student():
    taus = np.array([0.1, 0.03, 0.01, 0.003])
    model = MoERegression(ROUTER_1D, PM1, SIGN)
    g = risk_quad_1d(model, U1, taus)
    np.testing.assert_allclose(g.gap / taus, 0.772589, atol=5e-7)
    assert first_order_constant(model, U1)[0] == pytest.approx(2 * (2 * np.log(2) - 1), rel=1e-12)
    assert g.hard == pytest.approx(0.0, abs=1e-14)


def test_section9_continuous_teacher_soft_is_better():
    taus = np.array([0.03, 0.01, 0.003])
    model = MoERegression(ROUTER_1D, PM1, Teacher(lambda x: 0.3 + 0.5 * x[:, 0], 1.0))
    g = risk_quad_1d(model, U1, taus)
    np.testing.assert_allclose(g.gap / taus, [-1.9507, -1.9836, -1.9951], atol=1e-4)
    assert first_order_constant(model, U1)[0] == pytest.approx(-2.0, abs=1e-6)
    assert np.all(np.diff(np.abs(g.gap / taus + 2)) < 0)  # → −2 as τ → 0


def test_mixture_of_losses_first_order():
    model = MoERegression(ROUTER_1D, PM1, SIGN, mixture="losses")
    taus = np.array([0.01, 0.003])
    g = risk_quad_1d(model, U1, taus)
    np.testing.assert_allclose(g.gap / taus, 4 * np.log(2), rtol=1e-6)
    assert first_order_constant(model, U1)[0] == pytest.approx(4 * np.log(2))


def test_quadrature_matches_monte_carlo_with_common_random_numbers():
    model = MoERegression(ROUTER_1D, PM1, Teacher(lambda x: 0.3 + 0.5 * x[:, 0], 1.0))
    taus = np.array([0.1, 0.03])
    q = risk_quad_1d(model, U1, taus)
    mc = risk_mc(model, U1, taus, 300_000, rng=0)
    assert np.all(np.abs(mc.gap - q.gap) <= 4.5 * mc.se)
    assert abs(mc.hard - q.hard) < 0.01


@pytest.mark.parametrize("alpha", [1.5, 2.0, 3.0])
def test_vanishing_density_gap_slope_and_constant(alpha):
    law = VanishingDensityLaw(1, alpha)
    model = MoERegression(ROUTER_1D, PM1, SIGN)
    taus = np.geomspace(1e-4, 1e-2, 5)
    g = risk_quad_1d(model, law, taus)
    fit = fit_loglog(taus, g.gap)
    assert fit.slope == pytest.approx(alpha, abs=1e-4)
    # our derivation: gap/τ^α → 4α ∫_0^∞ s^(α−1) σ(−s)² ds
    const = 4 * alpha * integrate.quad(lambda s: s ** (alpha - 1) * special.expit(-s) ** 2, 0, np.inf)[0]
    np.testing.assert_allclose(g.gap / taus ** alpha, const, rtol=1e-5)
    assert np.all(g.gap <= risk_bound(taus, 2, 1.0, 1.0, 1.0, alpha))


def test_non_transversal_router_gap_is_square_root():
    model = MoERegression(PowerRouter(1, 2.0), PM1, Teacher(lambda x: np.ones(len(x)), 1.0))
    taus = np.geomspace(1e-4, 1e-2, 5)
    g = risk_quad_1d(model, U1, taus)
    fit = fit_loglog(taus, g.gap)
    assert fit.slope == pytest.approx(0.5, abs=1e-4)
    const = 4 * integrate.quad(lambda u: special.expit(-u * u) ** 2, 0, np.inf)[0]
    np.testing.assert_allclose(g.gap / np.sqrt(taus), const, rtol=1e-6)
    assert np.all(g.gap <= risk_bound(taus, 2, 1.0, 1.0, 1.0, 0.5))


def test_pointwise_bound_for_many_experts():
    rng = np.random.default_rng(0)
    for K in (2, 3, 5):
        router = LinearRouter.random(K, 3, rng=rng)
        experts = TanhExperts(rng.uniform(-0.5, 0.5, K), rng.uniform(-0.5, 0.5, K),
                              rng.standard_normal((K, 3)))
        B = experts.bound
        teacher = Teacher(lambda x: 0.8 * np.cos(x.sum(1)), 0.8)
        x = rng.standard_normal((5000, 3))
        delta = top_two_margin(router.logits(x))
        for mixture, pre in (("predictions", 4 * (K - 1) * B * (B + 0.8)),
                             ("losses", (K - 1) * (B + 0.8) ** 2)):
            model = MoERegression(router, experts, teacher, mixture=mixture)
            for tau in (1.0, 0.1, 0.01):
                d = model.gap(x, [tau])[0]
                assert np.all(np.abs(d) <= pre * np.exp(-delta / tau) + 1e-12)


def test_bound_never_exceeded_k3_monte_carlo():
    law = GaussianLaw.standard(2)
    router = LinearRouter.random(3, 2, rng=2)
    rng = np.random.default_rng(1)
    experts = ConstantExperts([1.0, -1.0, 0.5])
    teacher = Teacher(lambda x: np.tanh(3 * x[:, 0] - x[:, 1]), 1.0)
    model = MoERegression(router, experts, teacher)
    taus = np.array([0.3, 0.1, 0.03])
    g = risk_mc(model, law, taus, 200_000, rng=rng)
    from moe_routing.boundary import pairwise_union_bound, tail_constant
    C_m = tail_constant(lambda w: pairwise_union_bound(router, law, w), 1.0)
    assert np.all(np.abs(g.gap) + 4 * g.se <= risk_bound(taus, 3, 1.0, 1.0, C_m, 1.0))


def test_layer_quadrature_matches_monte_carlo_and_first_order():
    d = 4
    rng = np.random.default_rng(0)
    v = rng.standard_normal(d)
    law = GaussianLaw.standard(d)
    experts = TanhExperts([1.0, -1.0], [0.5, 0.5], rng.standard_normal((2, d)) / 2)
    ts = rng.standard_normal(d) / 2
    teacher = Teacher(lambda x: np.sign(x @ v) + 0.5 * np.tanh(x @ ts), 1.5)
    model = MoERegression(LinearRouter.binary(v), experts, teacher)
    taus = np.array([0.05, 0.01])
    lq = risk_layer_quadrature(model, law, taus, n_perp=1500, rng=1)
    mc = risk_mc(model, law, taus, 200_000, rng=2)
    assert np.all(np.abs(lq.gap - mc.gap) <= 4.5 * np.hypot(lq.se, mc.se))
    fo, fo_se = first_order_constant(model, law, n_cond=50_000, rng=3)
    assert abs(lq.gap[1] / taus[1] - fo) <= 4.5 * np.hypot(lq.se[1] / taus[1], fo_se) + 0.03 * abs(fo)


def test_polar_quadrature_curved_interface_first_order():
    router = SphereRouter([0.0, 0.0], 1.0)
    law = GaussianLaw.standard(2, mean=[0.3, 0.0])
    model = MoERegression(router, PM1, Teacher(lambda x: np.where(router.g(x) > 0, 1.0, -1.0), 1.0))
    taus = np.array([0.01, 0.001])
    g = risk_polar_2d(model, law, taus, rho_max=16.0)
    fo = first_order_constant(model, law)[0]
    from moe_routing.boundary import sphere_constant
    assert fo == pytest.approx(4 * JUMP_SQ * sphere_constant(router, law).value, rel=1e-10)
    assert g.gap[0] / taus[0] == pytest.approx(fo, rel=5e-3)
    assert g.gap[1] / taus[1] == pytest.approx(fo, rel=5e-4)


def test_margin_tail_constant_must_hold_at_every_width():
    """Off-centre interface (g = x − 2, X ~ N(0, 1)): BM(w)/w grows from 2S = 2φ(2) to a
    supremum near w = 3, and the layer cake E e^{−Δ/τ} = ∫ τ⁻¹ e^{−w/τ} BM(w) dw, which the risk
    bound needs, exceeds 2S·τ at large τ: a "bound" with C_m = 2S is not a bound, one with
    C_m = sup_w BM(w)/w (``tail_constant``) is."""
    from moe_routing.boundary import boundary_mass_linear_gaussian, coarea_constant, tail_constant

    router, law = LinearRouter.binary([1.0], b=-2.0), GaussianLaw.standard(1)

    def bm(w):
        return boundary_mass_linear_gaussian(router, law, w).estimate

    two_s = 2 * coarea_constant(router, law).value
    C_m = tail_constant(bm, 1.0)
    assert two_s == pytest.approx(2 * np.exp(-2) / np.sqrt(2 * np.pi), rel=1e-12)
    w = np.linspace(2.5, 3.5, 200001)               # the sup, by a fine independent grid
    sup = float(np.max((special.ndtr(2 + w) - special.ndtr(2 - w)) / w))
    assert C_m == pytest.approx(sup, rel=1e-8) and C_m > 2.5 * two_s
    for tau in (0.1, 1.0, 3.0):
        layer_cake = integrate.quad(lambda v, tau=tau: np.exp(-v / tau) / tau * bm(np.array([v]))[0],
                                    0, np.inf, limit=200)[0]
        assert layer_cake <= C_m * tau * (1 + 1e-9)
    big = integrate.quad(lambda v: np.exp(-v) * bm(np.array([v]))[0], 0, np.inf, limit=200)[0]
    assert big > 1.5 * two_s * 1.0                  # τ = 1: the 2S envelope is violated


def test_risk_bad_inputs():
    model = MoERegression(ROUTER_1D, PM1, SIGN)
    with pytest.raises(ValueError, match=r"taus\[1\] = 0.0"):
        risk_quad_1d(model, U1, [0.1, 0.0])
    with pytest.raises(ValueError, match=r"taus\[0\] = -0.1"):
        risk_bound([-0.1], 2, 1, 1, 1)
    with pytest.raises(ValueError, match="n = 0"):
        risk_mc(model, U1, [0.1], 0)
    with pytest.raises(ValueError, match="law.dim = 2"):
        risk_mc(model, UniformBox.cube(2), [0.1], 10)
    with pytest.raises(ValueError, match="values.size = 1"):
        ConstantExperts([1.0])
    with pytest.raises(ValueError, match="experts.n_experts = 3"):
        MoERegression(ROUTER_1D, ConstantExperts([1.0, 0.0, -1.0]), SIGN)
    with pytest.raises(ValueError, match="mixture"):
        MoERegression(ROUTER_1D, PM1, SIGN, mixture="tokens")


# ------------------------------------------------- the faster estimators against the references

def _layer_model(d=6, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    experts = TanhExperts([1.0, -1.0], [0.5, 0.5], rng.standard_normal((2, d)) / 2)
    ts = rng.standard_normal(d) / 2
    teacher = Teacher(lambda x: np.sign(x @ v - 0.3) + 0.5 * np.tanh(x @ ts), 1.5)
    return MoERegression(LinearRouter.binary(v, b=-0.3), experts, teacher)


def test_control_variate_layer_estimator_agrees_with_the_reference_within_its_error():
    """The control-variate estimator (first-order term on many directions, lines on a tenth
    of them) meets the plain layer estimator within the errors both state, its control's mean
    meets first_order_constant, and at small τ its error is several times smaller than the
    reference's on as many lines (the O(τ) part of the variance is gone)."""
    model, law = _layer_model(), GaussianLaw.standard(6)
    taus = np.array([0.1, 0.01, 0.001])
    ref = risk_layer_quadrature(model, law, taus, n_perp=1000, rng=1)
    cv = risk_layer_quadrature(model, law, taus, n_perp=10_000, n_lines=1000, rng=2)
    assert np.all(np.abs(cv.gap - ref.gap) <= 4 * np.hypot(cv.se, ref.se))
    assert np.isnan(ref.first_order) and cv.method.endswith("control variate")
    fo, fo_se = first_order_constant(model, law, n_cond=20_000, rng=3)
    assert abs(cv.first_order - fo) <= 4 * np.hypot(cv.first_order_se, fo_se)
    assert np.all(cv.se[1:] < ref.se[1:] / 2.5)
    # the control is the τ → 0 limit: a bias in the remainder would show at τ = 0.001
    assert cv.gap[-1] / taus[-1] == pytest.approx(cv.first_order, abs=4 * cv.se[-1] / taus[-1])


def test_control_variate_stays_unbiased_when_its_control_is_wrong():
    """A teacher that is discontinuous *off* the interface breaks the first-order term's
    premise; the estimator must still meet the reference (only its variance may grow)."""
    rng = np.random.default_rng(4)
    v, w = rng.standard_normal(3), rng.standard_normal(3)
    model = MoERegression(LinearRouter.binary(v), PM1,
                          Teacher(lambda x: np.sign(x @ v) * (x @ w > 0.2), 1.0))
    law = GaussianLaw.standard(3)
    taus = np.array([0.05, 0.01])
    ref = risk_layer_quadrature(model, law, taus, n_perp=1500, rng=1)
    cv = risk_layer_quadrature(model, law, taus, n_perp=6000, n_lines=600, rng=2)
    assert np.all(np.abs(cv.gap - ref.gap) <= 4 * np.hypot(cv.se, ref.se))


def test_rqmc_agrees_with_monte_carlo_and_beats_it_at_equal_size():
    law2 = GaussianLaw.standard(2)
    r3 = LinearRouter.random(3, 2, rng=np.random.default_rng([0, 3]))
    e3 = ConstantExperts([1.0, -1.0, 0.3])
    from moe_routing.boundary import hard_gates
    model = MoERegression(r3, e3, Teacher(lambda x: (e3(x) * hard_gates(r3.logits(x))).sum(1), 1.0))
    taus = np.array([0.1, 0.01])
    mc = risk_mc(model, law2, taus, 1 << 18, rng=1)
    rq = risk_mc(model, law2, taus, 1 << 18, rng=2, method="rqmc")
    assert rq.method.startswith("randomised quasi-Monte Carlo (16 × 2^14")
    assert np.all(np.abs(rq.gap - mc.gap) <= 4 * np.hypot(rq.se, mc.se))
    assert np.all(rq.se < mc.se / 2)          # ≈ 3× (τ = 0.01) to 11× (τ = 0.1) here
    box = risk_mc(MoERegression(ROUTER_1D, PM1, SIGN), U1, [0.05], 1 << 14, rng=0, method="rqmc")
    assert box.gap[0] == pytest.approx(
        risk_quad_1d(MoERegression(ROUTER_1D, PM1, SIGN), U1, [0.05]).gap[0], abs=4 * box.se[0])
    with pytest.raises(ValueError, match="^law = "):
        risk_mc(MoERegression(ROUTER_1D, PM1, SIGN), VanishingDensityLaw(1, 2.0), [0.1], 64,
                method="rqmc")
    with pytest.raises(ValueError, match="^method = "):
        risk_mc(model, law2, taus, 64, method="sobol")
    with pytest.raises(ValueError, match="^n_lines = "):
        risk_layer_quadrature(_layer_model(), GaussianLaw.standard(6), [0.1], n_perp=10,
                              n_lines=11)


def test_coarser_layer_rule_matches_the_default_rule():
    """k_fine = 0 with 8 nodes per panel (the chapter's rule) against the default rule, on the
    same directions: the difference is quadrature error only, far below any standard error."""
    model, law = _layer_model(), GaussianLaw.standard(6)
    taus = [0.05, 0.002]
    a = risk_layer_quadrature(model, law, taus, n_perp=200, rng=5)
    b = risk_layer_quadrature(model, law, taus, n_perp=200, rng=5, n_gl=8, k_fine=0)
    assert b.gap == pytest.approx(a.gap, rel=1e-9)


def test_rate_fit_reads_the_slope_and_the_ratio_to_the_bound():
    """An exact power law 0.3 τ^1.5 fits slope 1.5; its ratio to the bound is the largest
    (|gap| + 2 se) / bound over τ, so a gap above its bound reports a ratio above 1."""
    from moe_routing.boundary import RateCase, RiskGap, fit_rate, risk_bound

    taus = np.geomspace(1e-3, 1e-1, 6)
    gap = RiskGap(taus=taus, gap=0.3 * taus ** 1.5, se=np.zeros(6), hard=0.0, method="exact")
    r = fit_rate(RateCase("power law", gap, alpha=1.5, K=2, B=1.0, B_star=1.0, C_m=0.1))
    assert abs(r.fit.slope - 1.5) < 1e-10
    bound = risk_bound(taus, 2, 1.0, 1.0, 0.1, 1.5)
    assert np.allclose(r.bound, bound) and r.ratio == pytest.approx(float(np.max(gap.gap / bound)))
    assert r.row()["case"] == "power law" and r.row()["α"] == 1.5
    tight = fit_rate(RateCase("tight", gap, alpha=1.5, K=2, B=1.0, B_star=1.0, C_m=1e-3))
    assert tight.ratio > 1 > r.ratio
    with pytest.raises(ValueError, match="^K = 1 is not allowed"):
        RateCase("c", gap, alpha=1.5, K=1, B=1.0, B_star=1.0, C_m=0.1)
