"""Teacher–student landscape (paper B, Theorem 5.17): quadratures, shape derivative, Hessians."""

import math

import numpy as np
import pytest
import torch

from moe_routing.landscape.common import sobol_normal
from moe_routing.landscape.charts import newton
from moe_routing.landscape.critical_points import TWO_REGION
from moe_routing.landscape.hessian import (joint_gradient, joint_hessian, profiled_hard_grad_hess,
                                           profiled_soft_grad_hess, soft_refit_np)
from moe_routing.landscape.shape_derivative import (boundary_integral_gradient,
                                                    finite_difference_gradient)
from moe_routing.landscape.two_region import TeacherStudentConfig, wrap_phi
from moe_routing.landscape.hard_quadrature import (cell_moments, hard_refit, hard_risk,
                                                   partition_error, profiled_hard)
from moe_routing.landscape.soft_quadrature import soft_refit_quad, soft_risk_quad
from moe_routing.landscape.teacher_student import soft_risk

pytestmark = pytest.mark.kernels

CFG = TeacherStudentConfig()
PHIS = [(0.4, 0.1), (1.3, -0.5), (math.pi / 2 + 1e-3, 0.2), (2.5, 1.0), (0.05, 0.31)]




def test_hard_quadrature_converged_and_matches_monte_carlo():
    for phi in PHIS:
        Q, Q2 = cell_moments(CFG, phi, 96), cell_moments(CFG, phi, 192)
        assert np.abs(Q - Q2).max() < 1e-10
        assert Q[..., 2, 2].sum() == pytest.approx(1.0, abs=1e-12)     # masses sum to one
    X = sobol_normal(2 ** 18, 2, seed=0)
    fs = CFG.fstar(X)
    phi = np.array([0.4, 0.1])
    th = hard_refit(CFG, phi)
    g = X[:, 0] * math.cos(phi[0]) + X[:, 1] * math.sin(phi[0]) - phi[1]
    Xt = torch.cat([X, torch.ones_like(X[:, :1])], 1)
    T = torch.tensor(th)
    r2 = (fs - torch.where(g > 0, Xt @ T[0], Xt @ T[1])) ** 2
    se = float(r2.std() / math.sqrt(len(r2)))                           # iid bound; Sobol is tighter
    assert hard_risk(CFG, th, phi) == pytest.approx(float(r2.mean()) + CFG.noise_std ** 2, abs=5 * se)


def test_teacher_partition_recovers_teacher_experts_exactly():
    for phi in CFG.teacher_equivalents():
        th = hard_refit(CFG, phi)
        if np.allclose(wrap_phi(phi), wrap_phi(CFG.teacher_phi)) and phi[0] < math.pi:
            assert th == pytest.approx(CFG.beta, abs=1e-10)
        else:
            assert th[::-1] == pytest.approx(CFG.beta, abs=1e-10)
        assert profiled_hard(CFG, phi) == pytest.approx(CFG.noise_std ** 2, abs=1e-12)
        assert partition_error(CFG, phi) < 1e-12


@pytest.mark.parametrize("phi", PHIS)
def test_shape_derivative_matches_finite_differences(phi):
    rng = np.random.default_rng(0)
    for theta in (hard_refit(CFG, phi), hard_refit(CFG, phi) + 0.2 * rng.standard_normal((2, 3))):
        bi = boundary_integral_gradient(CFG, theta, phi)
        fd = finite_difference_gradient(CFG, theta, phi, h=1e-5)
        assert bi == pytest.approx(fd, abs=2e-7)
        assert np.linalg.norm(bi) > 1e-3                                 # not trivially zero


def test_soft_quadrature_converged_and_matches_monte_carlo():
    phi = torch.tensor(PHIS, dtype=torch.float64)
    theta = torch.randn(len(PHIS), 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    X = sobol_normal(2 ** 17, 2, seed=2)
    fs = CFG.fstar(X)
    for tau in (0.3, 0.01):
        a = soft_risk_quad(CFG, theta, phi, tau)
        assert torch.allclose(a, soft_risk_quad(CFG, theta, phi, tau, nodes=96), atol=1e-8)
        # Monte Carlo with an iid standard-error bound (scrambled Sobol is more accurate)
        proj = X[:, :1] * torch.cos(phi[:, 0]) + X[:, 1:] * torch.sin(phi[:, 0])
        P = torch.sigmoid((proj - phi[:, 1]) / tau)
        Xt = torch.cat([X, torch.ones_like(X[:, :1])], 1)
        F = torch.einsum("nc,skc->nsk", Xt, theta)
        r2 = (fs[:, None] - P * F[..., 0] - (1 - P) * F[..., 1]) ** 2
        se = r2.std(0) / math.sqrt(X.shape[0])
        mc = soft_risk(theta, phi, tau, X, fs, CFG.noise_std ** 2)
        assert torch.all((a - mc).abs() <= 5 * se)


def test_soft_risk_tends_to_hard_risk_linearly_in_tau():
    phi = np.array([1.3, -0.5])
    th = hard_refit(CFG, phi)
    L0 = hard_risk(CFG, th, phi)
    gaps = []
    for tau in (0.04, 0.02, 0.01):
        Lt = float(soft_risk_quad(CFG, torch.tensor(th)[None], torch.tensor(phi)[None], tau)[0])
        gaps.append(abs(Lt - L0))
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[0] / gaps[1] == pytest.approx(2.0, rel=0.1)              # O(τ): the soft-to-hard bound
    _, L_refit = soft_refit_quad(CFG, torch.tensor(phi)[None], 1e-3)
    assert float(L_refit[0]) == pytest.approx(profiled_hard(CFG, phi), abs=5e-3)


def _risk_gap(theta, phi, tau):
    """L_τ(θ, φ) − L_0(θ, φ) by quadrature."""
    theta_t = torch.tensor(theta, dtype=torch.float64)[None]
    phi_t = torch.tensor(phi, dtype=torch.float64)[None]
    soft = float(soft_risk_quad(CFG, theta_t, phi_t, tau)[0])
    return soft - hard_risk(CFG, theta, phi)


@pytest.mark.parametrize("tau", [0.1, 0.01])
def test_profiled_gap_is_bounded_by_the_gap_at_the_two_refits(tau):
    """Remark (a) of the landscape chapter: |L̄_τ − L̄_0| ≤ max of |L_τ − L_0| at the hard
    and the soft refit, so a bound uniform over a ball holding both refits transfers to the
    profiled objectives."""
    for phi in PHIS:
        th0 = hard_refit(CFG, phi)
        th_tau, lbar_tau = soft_refit_quad(CFG, torch.tensor(phi, dtype=torch.float64)[None],
                                           tau)
        th_tau, lbar_tau = th_tau[0].numpy(), float(lbar_tau[0])
        lbar_0 = profiled_hard(CFG, phi)
        tol = 1e-9 * max(1.0, abs(lbar_0))
        assert lbar_0 - lbar_tau <= -_risk_gap(th_tau, phi, tau) + tol
        assert lbar_tau - lbar_0 <= _risk_gap(th0, phi, tau) + tol


def test_soft_hard_gap_is_unbounded_in_the_experts():
    """Without a ball there is no uniform gap: along θ = s·θ⁽⁰⁾, L_τ − L_0 is a quadratic in
    s with a nonzero leading coefficient (constant experts ±s at the teacher's router)."""
    th = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    gaps = {s: _risk_gap(s * th, CFG.teacher_phi, 0.01) for s in (10.0, 100.0, 1000.0)}
    assert abs(gaps[1000.0]) > 1e3 * abs(gaps[10.0]) / 2
    assert gaps[1000.0] / gaps[100.0] == pytest.approx(100.0, rel=0.05)   # ∝ s²


def test_joint_hessian_matches_finite_differences_of_gradient():
    phi, tau = np.array([2.0, -0.5]), 0.1
    th = soft_refit_np(CFG, phi, tau) + 0.05
    H = joint_hessian(CFG, th, phi, tau)
    p0 = np.concatenate([th.ravel(), phi])
    Hfd = np.zeros((8, 8))
    for i in range(8):
        e = np.zeros(8)
        e[i] = 1e-5
        gp = joint_gradient(CFG, (p0 + e)[:6].reshape(2, 3), (p0 + e)[6:], tau)
        gm = joint_gradient(CFG, (p0 - e)[:6].reshape(2, 3), (p0 - e)[6:], tau)
        Hfd[:, i] = (gp - gm) / 2e-5
    assert H == pytest.approx(0.5 * (Hfd + Hfd.T), abs=1e-6)


@pytest.mark.parametrize("tau", [1e-3, 1e-2])
def test_soft_derivatives_are_continuous_at_routers_parallel_to_the_teacher(tau):
    # at α = α* exactly the teacher's t-range jumps across s = b*: autograd must still see how
    # it moves with α (a constant stand-in for u·n⊥ = 0 once cut that, and the Hessian at the
    # teacher came out 30 times too large)
    for base in (CFG.teacher_phi, CFG.teacher_equivalents()[1]):
        _, g0, H0 = profiled_soft_grad_hess(CFG, base[None], tau)
        step = np.array([1e-8, 0.0])
        _, g1, H1 = profiled_soft_grad_hess(CFG, (base + step)[None], tau)
        assert g0[0] == pytest.approx(g1[0] - H1[0] @ step, abs=2e-6)  # Taylor, |H| up to 3/τ
        assert np.linalg.eigvalsh(H0[0]) == pytest.approx(np.linalg.eigvalsh(H1[0]), rel=1e-2)


def test_teacher_minimum_and_strict_saddle_of_soft_objective():
    tau = 0.03
    fn = lambda p: profiled_soft_grad_hess(CFG, p, tau)                  # noqa: E731
    # the saddle of the hard objective (found with the exact shape gradient) seeds the soft one
    fh = lambda p: profiled_hard_grad_hess(CFG, p)                       # noqa: E731
    hard, ok_h = newton(TWO_REGION.second(fh), np.array([[2.0, -0.5]]), TWO_REGION)[:2]
    assert ok_h.all()
    phis, ok = newton(TWO_REGION.second(fn), np.array([hard[0], [0.02, 0.31]]), TWO_REGION,
                      step_cap=0.05)[:2]
    assert ok.all()
    saddle, teach = phis
    assert TWO_REGION.distance(teach, CFG.teacher_phi) < 0.02
    ev_t = np.linalg.eigvalsh(fn(teach[None])[2][0])
    ev_s = np.linalg.eigvalsh(fn(saddle[None])[2][0])
    assert ev_t.min() > 1.0                                              # sharp minimum (∝ 1/τ)
    assert ev_s.min() < -1.0 and ev_s.max() > 0                          # strict saddle
    J = np.linalg.eigvalsh(joint_hessian(CFG, soft_refit_np(CFG, saddle, tau), saddle, tau))
    assert J.min() < -0.5                                                # also in the joint Hessian
    assert TWO_REGION.distance(saddle, hard[0]) < 0.05                        # near the hard saddle


def test_bad_input_raises():
    with pytest.raises(ValueError, match="tau = 0.0"):
        soft_risk_quad(CFG, torch.zeros(1, 2, 3), torch.zeros(1, 2), 0.0)
    with pytest.raises(ValueError, match="tau = -1.0"):
        profiled_soft_grad_hess(CFG, [[0.1, 0.2]], -1.0)
    with pytest.raises(ValueError, match="degenerate teacher"):
        TeacherStudentConfig(beta1=(1.0, 0.0, 0.0), beta2=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match=r"beta1.shape = \(2,\)"):
        TeacherStudentConfig(beta1=(1.0, 0.0), beta2=(0.0, 1.0))
    with pytest.raises(ValueError, match="teacher_offset = 5.0"):
        TeacherStudentConfig(teacher_offset=5.0)
    with pytest.raises(ValueError, match=r"theta.shape = \(3, 3\)"):
        hard_risk(CFG, np.zeros((3, 3)), [0.1, 0.2])
    with pytest.raises(ValueError, match="h = 0.5 is not allowed"):
        finite_difference_gradient(CFG, np.zeros((2, 3)), [0.1, 0.2], h=0.5)
    with pytest.raises(ValueError, match="n = 4 is not allowed"):
        sobol_normal(4, 2, seed=0)
