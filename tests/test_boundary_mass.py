"""Boundary mass, margins, coarea constants (paper B; checks of our derivations)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from moe_routing.boundary import (GaussianLaw, LinearRouter, PowerRouter, SphereRouter, UniformBox,
                                  VanishingDensityLaw, boundary_mass_linear_gaussian,
                                  boundary_mass_mc, bootstrap_bm_fit, coarea_constant, fit_loglog,
                                  gate_gap_bound, hard_gates, junction_free_constants,
                                  pairwise_union_bound, sample_margins, soft_gates, sphere_constant,
                                  tail_constant, top_two_margin, wilson_interval)
from moe_routing.boundary.coarea import linear_gaussian_constant

pytestmark = pytest.mark.kernels


# ---------------------------------------------------------------- margins and gates

def test_margin_matches_full_sort():
    a = np.random.default_rng(0).standard_normal((500, 5))
    s = np.sort(a, axis=1)
    np.testing.assert_allclose(top_two_margin(a), s[:, -1] - s[:, -2])
    np.testing.assert_allclose(top_two_margin(a[:, :2]), np.abs(a[:, 0] - a[:, 1]))


@settings(max_examples=60, deadline=None)
@given(K=st.integers(2, 7), tau=st.floats(1e-3, 10.0), seed=st.integers(0, 10_000))
def test_gate_gap_bounds(K, tau, seed):
    a = 3 * np.random.default_rng(seed).standard_normal((64, K))
    p, h = soft_gates(a, tau), hard_gates(a)
    np.testing.assert_allclose(p.sum(1), 1.0)
    delta = top_two_margin(a)
    bound = gate_gap_bound(delta, tau, K)
    gap_top = 1 - (p * h).sum(1)
    assert np.all(gap_top <= bound * (1 + 1e-12) + 1e-15)
    assert np.all(np.abs(p - h).sum(1) <= 2 * np.minimum(1, bound) * (1 + 1e-12) + 1e-15)
    if K == 2:  # equality for two experts: 1 − π_k* = σ(−Δ/τ)
        loser = (p * (1 - h)).sum(1)  # = 1 − π_k*, computed without cancellation
        np.testing.assert_allclose(loser, special.expit(-delta / tau), rtol=1e-9, atol=1e-300)


def test_soft_gates_are_stable_for_tiny_tau():
    a = np.array([[1000.0, 999.0, -5.0]])
    p = soft_gates(a, 1e-4)
    assert np.all(np.isfinite(p)) and p[0, 0] == 1.0


# ---------------------------------------------------------------- Monte Carlo vs closed forms

def test_wilson_interval_covers_and_handles_zero():
    lo, hi = wilson_interval(np.array([0, 50, 100]), 100)
    assert lo[0] == 0 and hi[0] > 0.0 and lo[2] < 1 and hi[2] == 1
    assert lo[1] < 0.5 < hi[1]


def test_closed_form_matches_monte_carlo_linear_gaussian():
    law = GaussianLaw([0.2, -0.1, 0.4], np.diag([1.0, 2.0, 0.5]))
    router = LinearRouter.binary([1.0, -0.5, 2.0], b=0.3)
    w = np.array([0.01, 0.05, 0.2, 1.0])
    exact = boundary_mass_linear_gaussian(router, law, w).estimate
    mc = boundary_mass_mc(router, law, w, 400_000, rng=1)
    se = np.sqrt(exact * (1 - exact) / mc.n)
    assert np.all(np.abs(mc.estimate - exact) <= 4.5 * se)


def test_closed_form_slope_is_twice_surface_integral():
    law = GaussianLaw.standard(4, mean=[0.5, 0, 0, 0])
    router = LinearRouter.binary([1.0, 2.0, 0.0, -1.0], b=-0.2)
    S = coarea_constant(router, law).value
    v, c = router.pair(0, 1)
    m, s = v @ law.mean + c, np.linalg.norm(v)
    assert S == pytest.approx(np.exp(-0.5 * (m / s) ** 2) / (s * np.sqrt(2 * np.pi)))
    w = np.array([1e-5, 1e-4])
    bm = boundary_mass_linear_gaussian(router, law, w).estimate
    np.testing.assert_allclose(bm / (2 * w), S, rtol=1e-6)


@pytest.mark.parametrize("d", [2, 3])
def test_sphere_constant_closed_form_centred(d):
    sig, r, scale = 1.3, 0.8, 2.0
    law = GaussianLaw.standard(d, scale=sig)
    router = SphereRouter(np.zeros(d), r, scale)
    area = 2 * np.pi ** (d / 2) / special.gamma(d / 2) * r ** (d - 1)
    p_r = np.exp(-r ** 2 / (2 * sig ** 2)) / (2 * np.pi * sig ** 2) ** (d / 2)
    exact = area * p_r / (2 * scale * r)
    assert sphere_constant(router, law, 64).value == pytest.approx(exact, rel=1e-12)


def test_sphere_constant_monte_carlo_in_d4():
    law = GaussianLaw.standard(4)
    router = SphereRouter(np.zeros(4), 1.5)
    est = sphere_constant(router, law, 20_000, rng=0)
    p_r = np.exp(-1.5 ** 2 / 2) / (2 * np.pi) ** 2
    exact = 2 * np.pi ** 2 * 1.5 ** 3 * p_r / (2 * 1.5)
    assert est.se > 0 and abs(est.value - exact) <= 5 * est.se + 1e-9


def test_coarea_matches_monte_carlo_on_off_centre_circle():
    law = GaussianLaw([0.4, -0.3], [[1.0, 0.3], [0.3, 0.8]])
    router = SphereRouter([0.1, 0.2], 1.1)
    S = sphere_constant(router, law).value
    w = 0.02  # BM(w) = 2wS + O(w³): the slab is symmetric, the O(w²) term cancels
    bm = boundary_mass_mc(router, law, [w], 600_000, rng=3)
    se = np.sqrt(bm.estimate[0] * (1 - bm.estimate[0]) / bm.n) / (2 * w)
    assert abs(bm.estimate[0] / (2 * w) - S) <= 4 * se + 2e-3 * S


def test_bootstrap_fit_recovers_slope_and_intercept():
    law = GaussianLaw.standard(3)
    router = LinearRouter.binary([1.0, 1.0, 0.5])
    S = coarea_constant(router, law).value
    w = np.geomspace(2e-3, 5e-2, 8)
    bm = boundary_mass_mc(router, law, w, 1_000_000, rng=5)
    fit = bootstrap_bm_fit(w, bm.counts, bm.n, n_boot=300, rng=0)
    assert fit.slope_ci[0] < 1 < fit.slope_ci[1]
    assert fit.slope_ci[1] - fit.slope_ci[0] < 0.1
    fixed = bootstrap_bm_fit(w, bm.counts, bm.n, n_boot=300, rng=0, fixed_slope=1.0)
    assert fixed.prefactor_ci[0] < 2 * S < fixed.prefactor_ci[1]


def test_fit_loglog_exact_power_law():
    x = np.geomspace(1e-3, 1, 9)
    fit = fit_loglog(x, 3.0 * x ** 1.5)
    assert fit.slope == pytest.approx(1.5) and fit.prefactor == pytest.approx(3.0)
    noisy = fit_loglog(x, 3.0 * x ** 1.5 * np.exp(0.05 * np.random.default_rng(0).standard_normal(9)))
    assert noisy.slope_ci[0] < 1.5 < noisy.slope_ci[1]


# ---------------------------------------------------------------- non-transversal / vanishing density

def test_power_router_boundary_mass_is_square_root():
    law = UniformBox.cube(2)
    router = PowerRouter(2, power=2.0)  # g = x1², paper B's α = 1/2
    w = np.geomspace(1e-4, 1e-1, 7)
    bm = boundary_mass_mc(router, law, w, 400_000, rng=2)
    exact = np.sqrt(w)  # P(x1² ≤ w) for x1 ~ U[−1, 1]
    assert np.all((bm.lower <= exact * 1.0001) & (exact <= bm.upper * 1.0001 + 1e-12) |
                  (np.abs(bm.estimate - exact) <= 4 * np.sqrt(exact / bm.n)))
    fit = bootstrap_bm_fit(w, bm.counts, bm.n, n_boot=200, rng=0)
    assert fit.slope_ci[0] < 0.5 < fit.slope_ci[1]
    assert router.alpha == 0.5


@pytest.mark.parametrize("alpha", [0.5, 2.0, 3.0])
def test_vanishing_density_law(alpha):
    law = VanishingDensityLaw(2, alpha)
    from scipy import integrate
    marg = lambda t: 2 * law.pdf(np.array([[t, 0.0]]))[0]  # x2 integrated out (density 1/2)
    total = integrate.quad(marg, -1, 0)[0] + integrate.quad(marg, 0, 1)[0]
    assert total == pytest.approx(1.0, abs=1e-8)
    router = LinearRouter.binary([1.0, 0.0])
    w = np.array([0.01, 0.1, 0.5])
    bm = boundary_mass_mc(router, law, w, 300_000, rng=4)
    exact = law.mass_within(w)
    assert np.all(np.abs(bm.estimate - exact) <= 4.5 * np.sqrt(exact * (1 - exact) / bm.n) + 1e-12)


def test_tail_constant():
    assert tail_constant(lambda w: np.minimum(w, 1.0), 1.0) == pytest.approx(1.0)
    law = GaussianLaw.standard(2)
    router = LinearRouter.binary([2.0, 0.0])
    S = coarea_constant(router, law).value
    cm = tail_constant(lambda w: boundary_mass_linear_gaussian(router, law, w).estimate, 1.0)
    assert cm == pytest.approx(2 * S, rel=1e-6)  # Φ concave on w > 0: sup at w → 0


# ---------------------------------------------------------------- K > 2

@pytest.mark.parametrize("K", [3, 4, 6])
def test_union_bound_dominates_monte_carlo_and_sharp_constant(K):
    law = GaussianLaw.standard(2, mean=[0.2, 0.1])
    router = LinearRouter.random(K, 2, rng=K)
    w = np.geomspace(1e-3, 0.3, 6)
    bm = boundary_mass_mc(router, law, w, 100_000, rng=K)
    ub = pairwise_union_bound(router, law, w)
    assert np.all(bm.lower <= ub)
    J = junction_free_constants(router, law)
    assert J.sharp_total <= J.union_total + 1e-15
    # small-w limit: BM(w)/(2w) → sharp constant (junctions are O(w²))
    small = boundary_mass_mc(router, law, [4e-3], 500_000, rng=10 + K)
    ratio = small.estimate[0] / (2 * 4e-3)
    se = np.sqrt(small.estimate[0] / small.n) / (2 * 4e-3)
    assert abs(ratio - J.sharp_total) <= 4.5 * se + 0.02 * J.sharp_total


def test_junction_constants_d3_match_monte_carlo_and_k2_is_full():
    law = GaussianLaw.standard(3)
    router = LinearRouter.random(4, 3, rng=3)
    J = junction_free_constants(router, law, n_cond=100_000, rng=0)
    small = boundary_mass_mc(router, law, [4e-3], 500_000, rng=1)
    ratio = small.estimate[0] / 8e-3
    se = np.sqrt(small.estimate[0] / small.n) / 8e-3
    assert abs(ratio - J.sharp_total) <= 4.5 * np.hypot(se, J.sharp_total_se) + 0.02 * J.sharp_total
    two = LinearRouter.binary([1.0, 0.5, 0.0])
    J2 = junction_free_constants(two, law)
    assert J2.sharp_total == pytest.approx(J2.union_total)
    assert J2.union_total == pytest.approx(linear_gaussian_constant(*two.pair(0, 1), law))


# The pairwise union bound feeds C_m of the risk bound (soft_to_hard, K = 3): its *value* is
# checked here against computations that share no code with the library -- a planar quadrature
# of the Gaussian density over each slab, a line integral along each tie line, scipy.stats for
# the moments -- from above and below, so that a wrong constant (a missing pair, a one-sided
# slab, a factor) fails, not only a bound that falls below a Monte Carlo estimate.

def slab_mass_by_planar_quadrature(v, c, law, w):
    """P(|v·X + c| ≤ w) for X ~ law in d = 2: ∫ over x_a of ∫ over the strip in x_b of p."""
    from scipy import integrate

    a = int(np.argmin(np.abs(v)))                 # integrate the other coordinate in the strip
    b = 1 - a
    sd = np.sqrt(np.diag(law.cov))
    lo, hi = law.mean[a] - 12 * sd[a], law.mean[a] + 12 * sd[a]

    def density(xb, xa):
        x = np.empty((1, 2))
        x[0, a], x[0, b] = xa, xb
        return law.pdf(x)[0]

    ends = sorted([lambda xa, s=s: (s * w - c - v[a] * xa) / v[b] for s in (-1, 1)],
                  key=lambda f: f(0.0))
    if v[b] < 0:
        ends = ends[::-1]
    val, err = integrate.dblquad(density, lo, hi, lambda xa: min(f(xa) for f in ends),
                                 lambda xa: max(f(xa) for f in ends), epsabs=1e-13, epsrel=1e-11)
    return val


def union_law_and_router(K):
    law = GaussianLaw([0.4, -0.3], [[1.2, 0.35], [0.35, 0.7]])
    router = LinearRouter(np.random.default_rng(K).standard_normal((K, 2)),
                          np.random.default_rng(100 + K).normal(0, 1.5, K))   # tie lines off the mean
    return law, router


@pytest.mark.parametrize("K", [3, 4])
def test_union_bound_value_matches_planar_quadrature(K):
    law, router = union_law_and_router(K)
    w = np.array([1e-3, 0.05, 0.4, 2.0])
    ub = pairwise_union_bound(router, law, w)
    ref = np.array([sum(slab_mass_by_planar_quadrature(*router.pair(j, k), law, wi)
                        for j, k in router.pairs()) for wi in w])
    np.testing.assert_allclose(ub, ref, rtol=1e-7, atol=1e-12)   # from above and from below


@pytest.mark.parametrize("K", [3, 4])
def test_union_constant_is_the_tie_lines_integral(K):
    """J.union_total = Σ_{j<k} ∫_{g_jk = 0} p/|∇g_jk|: a line integral along each tie line."""
    from scipy import integrate

    law, router = union_law_and_router(K)
    total = 0.0
    for j, k in router.pairs():
        v, c = router.pair(j, k)
        x0 = -c * v / (v @ v)                         # a point of the line v·x + c = 0
        e = np.array([-v[1], v[0]]) / np.linalg.norm(v)
        line = integrate.quad(lambda t, x0=x0, e=e: law.pdf((x0 + t * e)[None])[0], -np.inf, np.inf,
                              epsabs=1e-14, epsrel=1e-12)[0]
        total += line / np.linalg.norm(v)
    J = junction_free_constants(router, law)
    assert J.union_total == pytest.approx(total, rel=1e-9)
    w = np.array([1e-6])
    assert pairwise_union_bound(router, law, w)[0] / (2 * w[0]) == pytest.approx(total, rel=1e-5)


def test_tail_constant_of_the_union_bound_is_its_supremum():
    """C_m = sup_w UB(w)/w for the risk bound's K = 3 case, against scipy.stats + a bounded
    optimiser; an off-centre law makes the sup interior (not the w → 0 limit)."""
    from scipy import optimize, stats

    law, router = union_law_and_router(3)
    pairs = []
    for j, k in router.pairs():
        v, c = router.pair(j, k)
        pairs.append((v @ law.mean + c, np.sqrt(v @ law.cov @ v)))

    def ub(w):
        return sum(stats.norm.cdf(w, m, s) - stats.norm.cdf(-w, m, s) for m, s in pairs)

    grid = np.geomspace(1e-6, 1e3, 20001)
    i = int(np.argmax(ub(grid) / grid))
    res = optimize.minimize_scalar(lambda lw: -ub(np.exp(lw)) / np.exp(lw),
                                   bounds=(np.log(grid[max(i - 1, 0)]), np.log(grid[i + 1])),
                                   method="bounded", options={"xatol": 1e-12})
    sup = -res.fun
    C_m = tail_constant(lambda w: pairwise_union_bound(router, law, w), 1.0)
    assert C_m == pytest.approx(sup, rel=1e-7)                    # neither below nor above
    assert sup > 1.5 * 2 * junction_free_constants(router, law).union_total   # interior sup


def test_union_bound_monte_carlo_path_matches_exact_strip_areas():
    """Uniform law on the square: the strip's area by 1-D quadrature of a piecewise-linear
    length; the Monte Carlo bound must agree within 4.5 standard errors on both sides."""
    from scipy import integrate

    law = UniformBox.cube(2)
    router = LinearRouter.random(3, 2, rng=1)
    w = np.array([0.01, 0.1, 0.6])
    n = 400_000
    ub = pairwise_union_bound(router, law, w, n=n, rng=0)
    exact, se = np.zeros_like(w), np.zeros_like(w)
    for j, k in router.pairs():
        v, c = router.pair(j, k)
        for i, wi in enumerate(w):
            def length(x1, v=v, c=c, wi=wi):
                ends = sorted(((-wi - c - v[0] * x1) / v[1], (wi - c - v[0] * x1) / v[1]))
                return max(0.0, min(1.0, ends[1]) - max(-1.0, ends[0]))
            p = integrate.quad(length, -1, 1, limit=200)[0] / 4        # density 1/4
            exact[i] += p
            se[i] += np.sqrt(p * (1 - p) / n)     # pairs share one sample: se's add at most
    assert np.all(np.abs(ub - exact) <= 4.5 * se)


def test_union_bound_monte_carlo_for_non_gaussian_law():
    law = UniformBox.cube(2)
    router = LinearRouter.random(3, 2, rng=1)
    w = np.array([0.01, 0.1])
    bm = boundary_mass_mc(router, law, w, 200_000, rng=0)
    ub = pairwise_union_bound(router, law, w, n=200_000, rng=0)  # same sample: bound holds exactly
    assert np.all(bm.estimate <= ub + 1e-12)


# ---------------------------------------------------------------- bad input

def test_bad_inputs_name_the_value():
    law, router = GaussianLaw.standard(2), LinearRouter.binary([1.0, 0.0])
    with pytest.raises(ValueError, match=r"widths\[1\] = -0.5"):
        boundary_mass_mc(router, law, [0.1, -0.5], 10 ** 12)  # raised before sampling 10^12 points
    with pytest.raises(ValueError, match="n = 0 is not allowed"):
        boundary_mass_mc(router, law, [0.1], 0)
    with pytest.raises(ValueError, match=r"weight.shape = \(1, 2\)"):
        LinearRouter(np.ones((1, 2)))
    with pytest.raises(ValueError, match="n_experts = 1"):
        gate_gap_bound([0.1], 0.1, 1)
    with pytest.raises(ValueError, match="tau = 0.0"):
        soft_gates(np.zeros((3, 2)), 0.0)
    with pytest.raises(ValueError, match="tau = -1"):
        soft_gates(np.zeros((3, 2)), -1)
    with pytest.raises(ValueError, match="law.dim = 2 .* d = 3"):
        sample_margins(LinearRouter.binary([1.0, 0.0, 0.0]), law, 10)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        router.logits(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="positive definite"):
        GaussianLaw([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="radius"):
        SphereRouter([0.0, 0.0], -1.0)
    with pytest.raises(ValueError, match="router.n_experts = 3"):
        coarea_constant(LinearRouter.random(3, 2, rng=0), law)


def test_logit_space_sampling_has_the_law_of_input_space_sampling():
    """The K < d shortcut (sampling a ~ N(Wμ + b, WΣWᵀ)) must give the margins' exact law."""
    from scipy import stats
    from moe_routing.boundary import logit_sampler

    law = GaussianLaw([0.3, -0.2, 0.1, 0.0, 0.5], np.diag([1.0, 0.5, 2.0, 1.0, 0.3]))
    router = LinearRouter.random(3, 5, rng=0, scale=1.0)
    assert logit_sampler(router, law) is not None
    fast = sample_margins(router, law, 50_000, rng=1)
    slow = top_two_margin(router.logits(law.sample(50_000, np.random.default_rng(2))))
    assert stats.ks_2samp(fast, slow).pvalue > 1e-3
    assert logit_sampler(LinearRouter.random(6, 5, rng=0), law) is None  # K ≥ d: no shortcut
