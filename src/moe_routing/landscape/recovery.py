"""How well the global minimiser of the soft objective recovers the teacher (paper B,
Theorem 5.17, first conclusion), as τ falls.

The critical-point searches (:mod:`.critical_points` for two regions, :mod:`.multi_critical`
for K regions) return every critical point they found at every temperature; the lowest one at
each τ stands for the global minimiser (the searches sample critical points, they do not
enumerate them). A :class:`RecoveryCurve` holds, per τ, whether it is teacher-equivalent, its
expert error ``min_π max_k |θ_k − β_π(k)|``, its partition error (mass routed differently from
the teacher, after the best relabelling) and the extreme eigenvalues of its profiled Hessian,
with least-squares power laws in τ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check
from .critical_points import SoftCriticalPoint
from .multi_critical import MultiCriticalPoint


def fit_exponent(taus, values, floor: float = 0.0) -> float | None:
    """Least-squares slope of ``log value`` against ``log τ`` over the values above ``floor``
    (values at or below it are not resolved: a partition error below the evaluation sample's
    resolution is 0 or noise). ``None`` when fewer than two such values at distinct τ remain —
    there is then no exponent, and no number is made up."""
    taus = check.temperatures("taus", taus)
    values = check.finite_array("values", values, shape=(taus.size,))
    floor = check.number("floor", floor, low=0)
    ok = values > floor
    if ok.sum() < 2 or np.ptp(taus[ok]) == 0:
        return None
    return float(np.polyfit(np.log(taus[ok]), np.log(values[ok]), 1)[0])


@dataclass(frozen=True)
class RecoveryCurve:
    """The global minimiser found at each temperature (a result record). ``taus`` are the
    temperatures at which the search found a critical point, decreasing; ``floor``: partition
    errors at or below it are not resolved."""

    name: str
    taus: tuple
    teacher: tuple             # global minimiser teacher-equivalent, per τ
    expert_error: tuple
    partition_error: tuple
    lam_min: tuple             # smallest and largest eigenvalue of the profiled Hessian
    lam_max: tuple
    floor: float = 0.0

    @property
    def expert_exponent(self) -> float | None:
        return fit_exponent(self.taus, self.expert_error) if len(self.taus) > 1 else None

    @property
    def partition_exponent(self) -> float | None:
        if len(self.taus) < 2:
            return None
        return fit_exponent(self.taus, self.partition_error, self.floor)


def _point_list(name: str, points, kind: type) -> list:
    ok = isinstance(points, (list, tuple)) and all(isinstance(c, kind) for c in points)
    check.require(ok, name, points, f"a list of {kind.__name__} (from the critical-point search)")
    return list(points)


def two_region_recovery(points, taus, name: str = "K = 2, d = 2") -> RecoveryCurve:
    """:class:`RecoveryCurve` of the two-region model from the points of
    :func:`.critical_points.soft_critical_points` (population by quadrature: no floor)."""
    pts = _point_list("points", points, SoftCriticalPoint)
    taus = sorted(check.temperatures("taus", taus).tolist(), reverse=True)
    check.instance("name", name, str, "a teacher's name, a string")
    glob = []
    for t in taus:
        at = [r for r in pts if r.tau == t]
        if at:
            glob.append(min(at, key=lambda r: r.point.value))
    return RecoveryCurve(
        name=name, taus=tuple(r.tau for r in glob), teacher=tuple(r.point.teacher for r in glob),
        expert_error=tuple(r.expert_error for r in glob),
        partition_error=tuple(r.partition_error for r in glob),
        lam_min=tuple(float(r.point.hess_eigs[0]) for r in glob),
        lam_max=tuple(float(r.point.hess_eigs[-1]) for r in glob))


def multi_region_recovery(points, taus, name: str, floor: float = 0.0) -> RecoveryCurve:
    """:class:`RecoveryCurve` of a K-region teacher from the points of
    :func:`.multi_critical.critical_points`; ``floor``: the evaluation sample's resolution
    (1/n_eval) below which a partition error is not resolved."""
    pts = _point_list("points", points, MultiCriticalPoint)
    taus = sorted(check.temperatures("taus", taus).tolist(), reverse=True)
    check.instance("name", name, str, "a teacher's name, a string")
    floor = check.number("floor", floor, low=0)
    glob = []
    for t in taus:
        at = [c for c in pts if c.tau == t]
        if at:
            glob.append(min(at, key=lambda c: c.value))
    return RecoveryCurve(
        name=name, taus=tuple(c.tau for c in glob), teacher=tuple(c.teacher for c in glob),
        expert_error=tuple(c.expert_error for c in glob),
        partition_error=tuple(c.partition_error for c in glob),
        lam_min=tuple(c.lam_min for c in glob),
        lam_max=tuple(float(c.hess_eigs[-1]) for c in glob), floor=floor)


@dataclass(frozen=True)
class FirstOrderCheck:
    """A K-region teacher's global minimisers against the first-order laws of
    :mod:`.first_order` (a result record): the recovery curve, the boundary mass of the
    teacher's interfaces and the expert-error law at each of its temperatures, and at the
    smallest one the measured / law ratios and how many objective points lie in the layer."""

    curve: RecoveryCurve
    constants: object          # first_order.InterfaceConstants
    boundary_mass: tuple       # BM_T(τ) per τ of the curve
    law: tuple                 # first-order expert error per τ of the curve
    expert_ratio: float        # measured / law at the smallest τ
    curvature_ratio: float     # measured / law of the extreme Hessian eigenvalue further from 1
    layer_points: float        # objective sample points inside the boundary layer there


def first_order_check(search, taus, floor: float, width: float = 0.02) -> FirstOrderCheck:
    """Compare the global minimisers of one teacher's search (a
    :class:`.multi_critical.TeacherSearch`) with the first-order laws: interface constants by
    the coarea layer estimator of half-width ``width`` on the search's evaluation sample;
    ``floor``: the evaluation sample's resolution (1/eval_n).  Refuses a search that found no
    critical point (there is no minimiser to compare)."""
    from .first_order import (expert_error_first_order, hessian_first_order,
                              multi_region_constants, teacher_boundary_mass)
    from .multi_critical import TeacherSearch

    check.instance("search", search, TeacherSearch, "a TeacherSearch (multi_critical.search_teacher)")
    width = check.positive("width", width)
    curve = multi_region_recovery(list(search.points), taus, search.name, floor=floor)
    check.require(len(curve.taus) > 0, "search", search.name,
                  "a search that found a critical point at some τ (raise n_starts)")
    consts = multi_region_constants(search.teacher, search.X_eval, width=width)
    bm = teacher_boundary_mass(search.teacher, list(curve.taus), search.X_eval)
    law = expert_error_first_order(consts, list(curve.taus))
    t_min = curve.taus[-1]
    law_eig = np.linalg.eigvalsh(hessian_first_order(consts, t_min))[[0, -1]]
    cr = np.array([curve.lam_min[-1], curve.lam_max[-1]]) / law_eig
    X = search.obj.X
    return FirstOrderCheck(
        curve=curve, constants=consts, boundary_mass=tuple(map(float, bm)),
        law=tuple(map(float, law)), expert_ratio=float(curve.expert_error[-1] / law[-1]),
        curvature_ratio=float(cr[np.argmax(np.abs(cr - 1))]),
        layer_points=float(teacher_boundary_mass(search.teacher, [t_min], X)[0] * X.shape[0]))
