"""Γ-convergence on a compact family and the counter-example without uniform margin control."""

import numpy as np
import pytest

from moe_routing.boundary import ThresholdFamily, box_qp, risk_bound

pytestmark = pytest.mark.kernels


def teacher(x):
    return np.tanh(4 * (x - 0.3)) + 0.3 * x


def test_box_qp_matches_brute_force():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((20, 2, 2))
    G = A @ A.transpose(0, 2, 1) + 1e-3 * np.eye(2)
    h = 2 * rng.standard_normal((20, 2))
    r, c = box_qp(G, h, 1.0, 1.0)
    grid = np.linspace(-1, 1, 401)
    C = np.stack(np.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)
    brute = 1.0 - 2 * h @ C.T + np.einsum("ci,mij,cj->mc", C, G, C)
    assert np.all(r <= brute.min(1) + 1e-12)
    assert np.all(r >= brute.min(1) - 1e-4)  # grid spacing 0.005
    assert np.all(np.abs(c) <= 1.0 + 1e-12)


def test_minimisers_converge_with_uniform_margin_control():
    fam = ThresholdFamily(teacher, s_range=(0.25, 1.0))
    assert fam.uniform_margin_control and fam.margin_constant() == pytest.approx(4.0)
    hard = fam.minimise(None, n_b=61)
    errs, gaps = [], []
    for tau in (0.01, 0.003, 0.001):
        m = fam.minimise(tau, n_b=61, n_s=9)
        errs.append(abs(m.b - hard.b) + np.abs(m.c - hard.c).sum())
        gaps.append(abs(m.risk - hard.risk))
    assert np.all(np.diff(errs) < 0) and errs[-1] < 0.06
    assert np.all(np.diff(gaps) < 0) and gaps[-1] < 0.01


def test_sup_gap_obeys_uniform_bound():
    fam = ThresholdFamily(teacher, s_range=(0.25, 1.0), c_bound=1.5)
    B_star = 1.3
    for tau in (0.03, 0.003):
        sup = fam.sup_gap(tau, n_b=9, n_s=4, n_c=5)
        assert 0 < sup <= risk_bound(tau, 2, fam.c_bound, B_star, fam.margin_constant(), 1.0)[0]


def test_counter_example_without_uniform_margin_control():
    fam = ThresholdFamily(teacher, s_range=(0.0, 1.0))
    assert not fam.uniform_margin_control and fam.margin_constant() == np.inf
    hard = fam.minimise(None, n_b=61)
    mins = [fam.minimise(tau, n_b=61, n_s=41) for tau in (0.03, 0.01, 0.003)]
    risks = np.array([m.risk for m in mins])
    assert np.ptp(risks) < 1e-7  # min L_τ does not move with τ ...
    assert risks[0] < hard.risk - 0.05  # ... and stays far below min L_0
    ratio = np.array([m.s / t for m, t in zip(mins, (0.03, 0.01, 0.003))])
    assert np.ptp(ratio) < 1e-3 * ratio.mean()  # s_τ = t* τ → 0: a router that is not a minimiser of L_0
    assert fam.hard_profile(0.3, [0.0]).risk[0] > hard.risk + 0.1


def test_family_bad_inputs():
    with pytest.raises(ValueError, match="s_range"):
        ThresholdFamily(teacher, s_range=(-0.1, 1.0))
    with pytest.raises(ValueError, match="tau = 0.0"):
        ThresholdFamily(teacher).minimise(0.0)
    with pytest.raises(ValueError, match="n_b = 0"):
        ThresholdFamily(teacher).minimise(0.1, n_b=0)


def test_sign_teacher_minimisers_converge_yet_gamma_convergence_fails():
    """f* = sign(x − 0.3) with s ∈ [0, 1]: small s is penalised, so the exact minimisers
    converge (s_τ = 1, b_τ → 0.3) — but the liminf inequality fails at θ = (0.3, 0, (1, −1)):
    L_0(θ) = 4 P(X < 0.3) = 2.6 while θ_τ = (0.3, √τ, (1, −1)) → θ has L_τ(θ_τ) =
    2(2 ln 2 − 1)√τ + o(√τ) → 0, and θ_τ is a sequence of near-minimisers."""
    from scipy import integrate

    def f(x):
        return np.sign(x - 0.3)

    def risk(s, tau):  # c = (1, −1) fixed: c_0 σ(z) + c_1 σ(−z) = tanh(z/2); tau = 0: hard
        gate = ((lambda _x: 1.0) if s == 0 else (lambda x: np.sign(x - 0.3))) if tau == 0 \
            else (lambda x: np.tanh(s * (x - 0.3) / (2 * tau)))
        return integrate.quad(lambda x: 0.5 * (f(x) - gate(x)) ** 2, -1, 1, points=[0.3],
                              limit=200, epsabs=1e-13)[0]

    fam = ThresholdFamily(f, s_range=(0.0, 1.0))
    hard = fam.minimise(None, n_b=61)
    assert hard.risk == pytest.approx(0.0, abs=1e-12)
    mins = {tau: fam.minimise(tau, n_b=61, n_s=9) for tau in (0.01, 0.001)}
    assert all(m.s == pytest.approx(1.0) for m in mins.values())     # largest scale, not s → 0
    assert abs(mins[0.001].b - 0.3) < abs(mins[0.01].b - 0.3) < 1e-3
    assert risk(0.0, 0) == pytest.approx(2.6, abs=1e-10)
    for tau in (1e-2, 1e-4, 1e-6):
        l_tau = risk(np.sqrt(tau), tau)
        assert l_tau == pytest.approx(2 * (2 * np.log(2) - 1) * np.sqrt(tau), rel=1e-4)
    assert risk(np.sqrt(1e-6), 1e-6) < 1e-3 < 2.6                 # liminf L_τ(θ_τ) < L_0(θ)
    near = risk(np.sqrt(0.001), 0.001) - mins[0.001].risk           # near-minimisers ...
    assert 0 < near < 0.03                                          # ... with a bad limit
    # the same failure with the experts profiled out: min_c L_0 at s = 0 is Var f* = 0.91
    assert fam.hard_profile(0.3, [0.0]).risk[0] == pytest.approx(0.91, abs=1e-9)
    assert fam.soft_profile(0.3, [np.sqrt(1e-6)], 1e-6).risk[0] < 1e-3
