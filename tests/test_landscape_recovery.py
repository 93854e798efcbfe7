"""Recovery curves and saddle tallies (moe_routing.landscape.recovery, .saddles) on critical
points built by hand, so that each outcome is known, and on a real two-region search."""

import numpy as np
import pytest

from moe_routing.landscape.critical_points import (CriticalPoint, SoftCriticalPoint,
                                                   hard_critical_points, soft_critical_points,
                                                   start_grid)
from moe_routing.landscape.multi_critical import MultiCriticalPoint
from moe_routing.landscape.recovery import (fit_exponent, multi_region_recovery,
                                            two_region_recovery)
from moe_routing.landscape.saddles import (multi_region_tally, track_hard_points,
                                           two_region_tally)
from moe_routing.landscape.two_region import TeacherStudentConfig

pytestmark = pytest.mark.kernels

CFG = TeacherStudentConfig()


def soft(tau, phi, value, eigs, teacher=False, pe=0.0, ee=0.0):
    cp = CriticalPoint(phi=np.array(phi, float), value=value, grad_norm=0.0,
                       hess_eigs=np.array(eigs, float), teacher=teacher)
    return SoftCriticalPoint(tau=tau, point=cp, theta=np.zeros((2, 3)), joint_eigs=np.zeros(8),
                             partition_error=pe, expert_error=ee)


def hard(phi, eigs):
    return CriticalPoint(phi=np.array(phi, float), value=1.0, grad_norm=0.0,
                         hess_eigs=np.array(eigs, float), teacher=False)


def multi(tau, value, eigs, teacher=False, pe=0.0, ee=0.0, kind_eigs=None):
    return MultiCriticalPoint(tau=tau, phi=np.ones(5), value=value, grad_norm=0.0,
                              hess_eigs=np.array(eigs, float), teacher=teacher, partition_error=pe,
                              expert_error=ee, theta=np.zeros((3, 3)), partition="{1}{2}{3}",
                              hard_value=0.0)


def test_fit_exponent_power_law_floor_and_too_few_points():
    t = np.array([0.1, 0.01, 0.001])
    assert fit_exponent(t, 3 * t ** 1.5) == pytest.approx(1.5)
    assert fit_exponent(t, [1e-2, 1e-4, 0.0]) == pytest.approx(2.0)    # the zero is not resolved
    assert fit_exponent(t, [1e-2, 1e-7, 1e-9], floor=1e-6) is None      # one value above the floor
    assert fit_exponent([0.1], [1.0]) is None


def test_two_region_recovery_takes_the_lowest_point_per_tau():
    pts = [soft(0.1, [0, 0.3], 0.5, [1, 2], teacher=True, pe=1e-2, ee=0.1),
           soft(0.1, [2, -0.5], 0.2, [-1, 1], pe=0.3, ee=2.0),             # lower, not the teacher
           soft(0.01, [0, 0.3], 0.1, [10, 20], teacher=True, pe=1e-4, ee=0.01),
           soft(0.01, [2, -0.5], 1.2, [-1, 1], pe=0.3, ee=2.0)]
    r = two_region_recovery(pts, [0.01, 0.1])
    assert r.taus == (0.1, 0.01) and r.teacher == (False, True)
    assert r.expert_error == (2.0, 0.01) and r.lam_max == (1.0, 20.0)
    assert r.expert_exponent == pytest.approx(np.log(2.0 / 0.01) / np.log(10))


def test_multi_region_recovery_skips_temperatures_without_points():
    pts = [multi(0.3, 1.0, [1, 2], True, 0.02, 0.5), multi(0.03, 0.1, [3, 9], True, 1e-6, 0.05)]
    r = multi_region_recovery(pts, [0.3, 0.1, 0.03], "K3", floor=1e-5)
    assert r.taus == (0.3, 0.03)
    assert r.partition_exponent is None                                 # 1e-6 is below the floor
    assert r.expert_exponent == pytest.approx(1.0)


def test_two_region_tally_separates_inherited_from_unexplained():
    spurious = hard([0.36, 0.01], [0.07, 0.3])
    ridge = hard([2.06, -0.52], [-1.4, 0.02])
    pts = [soft(0.1, [2.05, -0.53], 1.0, [-1.8, 0.01]),
           soft(0.1, [1.0, 1.0], 1.0, [0.5, 1.0]),                        # not strict, at large τ
           soft(0.001, [2.06, -0.52], 1.0, [-1.44, 0.02]),
           soft(0.001, [0.363, 0.009], 0.4, [0.07, 0.3]),                 # continues the spurious min
           soft(0.001, [0.353, 0.016], 0.4, [-0.07, 0.3]),
           soft(0.001, [0.0, 0.3], 0.01, [300, 2000], teacher=True)]
    t = two_region_tally(pts, [spurious, ridge], [0.1, 0.001])
    assert (t.tau, t.n_points, t.n_strict, t.n_inherited, t.n_unexplained) == (0.001, 3, 2, 1, 0)
    assert t.nonstrict_taus == (0.1, 0.001) and t.strict_below is None
    # the same minimum far from any spurious hard minimum is unexplained
    t2 = two_region_tally(pts, [ridge], [0.1, 0.001])
    assert (t2.n_inherited, t2.n_unexplained) == (0, 1)
    tracks = track_hard_points(pts, [spurious, ridge], [0.1, 0.001])
    assert tracks[0][0] is None and tracks[0][1] is pts[3]
    assert tracks[1][0] is pts[0] and tracks[1][1] is pts[2]


def test_multi_region_tally_and_strict_below():
    pts = [multi(0.3, 1.0, [0.2, 3.0]), multi(0.1, 1.0, [-0.3, 3.0]), multi(0.01, 1.0, [-1.0, 3.0]),
           multi(0.01, 0.1, [1.0, 9.0], teacher=True)]
    t = multi_region_tally(pts, [0.3, 0.1, 0.01], "K3")
    assert (t.n_points, t.n_strict, t.n_unexplained) == (1, 1, 0)
    assert t.nonstrict_taus == (0.3,) and t.strict_below == 0.1


def test_real_search_finds_the_ridge_saddle_and_the_teacher():
    starts = start_grid(3, 3) + np.array([0.26, 0.0])
    hard_pts = hard_critical_points(CFG, starts)
    soft_pts = soft_critical_points(CFG, [0.1, 0.03], starts, seeds=[c.phi for c in hard_pts],
                                    descent_steps=30)
    r = two_region_recovery(soft_pts, [0.1, 0.03])
    assert all(r.teacher) and r.expert_error[1] < r.expert_error[0]
    t = two_region_tally(soft_pts, hard_pts, [0.1, 0.03])
    assert t.n_points >= 1 and t.n_strict == t.n_points                # the ridge saddle
