"""The first-order laws near the teacher (moe_routing.landscape.first_order): the expert bias
set by the boundary mass, the curvature set by the specialisation gap, and the kink's growth
constant — each against an independent computation."""

import math

import numpy as np
import pytest
import torch

from moe_routing.landscape import multi_region as mr
from moe_routing.landscape.profiled import ProfiledObjective
from moe_routing.landscape.common import sobol_normal
from moe_routing.landscape.first_order import (EXPERT_CONSTANT, expert_error_first_order,
                                               hessian_first_order, multi_region_constants,
                                               teacher_boundary_mass, two_region_boundary_mass,
                                               two_region_constants, two_region_growth)
from moe_routing.landscape.hessian import profiled_soft_grad_hess
from moe_routing.landscape.two_region import TeacherStudentConfig
from moe_routing.landscape.hard_quadrature import profiled_hard
from moe_routing.landscape.soft_quadrature import soft_refit_quad

pytestmark = pytest.mark.kernels

CFG = TeacherStudentConfig()
C2 = two_region_constants(CFG)


def test_layer_constants_are_the_integrals_of_the_logistic():
    s = np.linspace(0.0, 60.0, 600_001)
    sig = 1 / (1 + np.exp(s))                                            # σ(−s)
    net = np.trapezoid(sig * (1 - sig), s) - np.trapezoid(sig ** 2, s)
    assert EXPERT_CONSTANT == pytest.approx(net, abs=1e-8)


@pytest.mark.parametrize("tau, tol", [(1e-3, 0.01), (1e-2, 0.05)])
def test_two_region_expert_law_matches_the_soft_refit_at_the_teacher(tau, tol):
    # the soft refit at the teacher's router, by the chapter's quadrature (another code path)
    theta = soft_refit_quad(CFG, torch.tensor(CFG.teacher_phi)[None], tau)[0][0].numpy()
    delta = np.linalg.norm(theta - CFG.beta, axis=1)                     # per expert
    law = EXPERT_CONSTANT * tau * np.linalg.norm(C2.expert_coef, axis=1)
    assert delta == pytest.approx(law, rel=tol)
    assert expert_error_first_order(C2, tau)[0] == pytest.approx(delta.max(), rel=tol)


def test_two_region_curvature_law_matches_the_soft_hessian_at_the_teacher():
    tau = 1e-3
    _, _, H = profiled_soft_grad_hess(CFG, CFG.teacher_phi[None], tau)
    law = hessian_first_order(C2, tau)
    assert np.linalg.eigvalsh(H[0]) == pytest.approx(np.linalg.eigvalsh(law), rel=0.01)


def test_two_region_boundary_mass_is_exact_and_linear():
    w = np.array([1e-3, 0.01, 0.1])
    X = sobol_normal(2 ** 18, 2, seed=3)
    s = X[:, 0] * math.cos(CFG.teacher_angle) + X[:, 1] * math.sin(CFG.teacher_angle)
    mc = ((s - CFG.teacher_offset).abs().numpy()[None] <= w[:, None]).mean(1)
    bm = two_region_boundary_mass(CFG, w)
    se = np.sqrt(bm * (1 - bm) / X.shape[0])
    assert np.all(np.abs(mc - bm) <= 5 * se + 1e-12)
    assert bm[0] == pytest.approx(2 * w[0] * C2.S, rel=1e-4)            # BM(w) = 2wS + O(w³)


def test_two_region_growth_is_the_one_sided_derivative_at_the_kink():
    kappa, per_dir = two_region_growth(CFG, directions=8)
    ang = np.linspace(0.0, math.pi, 8, endpoint=False)
    eps = 1e-5
    base = profiled_hard(CFG, CFG.teacher_phi)
    for a, k in zip(ang[[0, 2, 5]], per_dir[[0, 2, 5]]):
        v = np.array([math.cos(a), math.sin(a)])
        assert (profiled_hard(CFG, CFG.teacher_phi + eps * v) - base) / eps == pytest.approx(k, rel=1e-3)
        assert (profiled_hard(CFG, CFG.teacher_phi - eps * v) - base) / eps == pytest.approx(k, rel=1e-3)
    assert kappa == pytest.approx(per_dir.min()) and kappa > 0


def test_sample_estimator_agrees_with_the_quadrature_for_two_regions():
    X = sobol_normal(2 ** 18, 2, seed=1)
    cm = multi_region_constants(mr.from_two_region(CFG), X, width=0.02)
    assert cm.S == pytest.approx(C2.S, rel=0.01)
    assert cm.gap == pytest.approx(C2.gap, rel=0.01)
    assert np.linalg.norm(cm.expert_coef, axis=1) == pytest.approx(
        np.linalg.norm(C2.expert_coef, axis=1), rel=0.01)
    # local chart z = (α/√2, −b/√2) up to signs: the Hessian scales by 2
    assert 0.5 * np.linalg.eigvalsh(cm.hessian_coef) == pytest.approx(np.linalg.eigvalsh(C2.hessian_coef),
                                                                      rel=0.02)
    bm = teacher_boundary_mass(mr.from_two_region(CFG), [0.01, 0.1], X)
    assert bm == pytest.approx(two_region_boundary_mass(CFG, [0.01, 0.1]), rel=0.02)


def test_three_region_laws_match_the_sample_objective_at_the_teacher():
    t = mr.three_region_plane()
    obj = ProfiledObjective(t, 2 ** 16, 0)
    c = multi_region_constants(t, obj.X, width=0.02)
    tau = 0.01
    th = obj.refit(t.phi(), tau)
    assert np.linalg.norm(th - t.beta, axis=1).max() == pytest.approx(
        expert_error_first_order(c, tau)[0], rel=0.15)
    *_, H = obj.grad_hess(t.phi()[None], tau)
    law = np.linalg.eigvalsh(hessian_first_order(c, tau))
    assert np.linalg.eigvalsh(H[0])[[0, -1]] == pytest.approx(law[[0, -1]], rel=0.05)


def test_a_thin_layer_is_refused():
    X = sobol_normal(64, 2, seed=0)
    with pytest.raises(ValueError, match="^width"):
        multi_region_constants(mr.three_region_plane(), X, width=1e-4)
