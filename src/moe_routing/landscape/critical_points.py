"""Numerical search for the critical points of a two-parameter router objective.

Minima are easy to find (gradient descent); saddles are not, because descent flows away from
them. The search therefore works on the gradient itself, from many starting routers:

1. a few steps of gradient descent on ``½|∇L̄|²`` (its gradient is ``H ∇L̄``), which is
   attracted by minima, saddles and maxima alike;
2. Newton refinement ``φ ← φ − H⁺ ∇L̄`` (pseudo-inverse, steps capped) until ``|∇L̄| < tol``.

Both steps are :func:`.charts.descend_grad_norm` and :func:`.charts.newton` on the chart's
second-order oracle (``TWO_REGION.second(fn)``), the same code as the K-region search.

Points that do not converge (``½|∇L̄|²`` also has non-critical stationary points) are dropped;
the rest are deduplicated in the canonical chart (``α ∈ [0, π)``, since ``(α, b) ≡ (α+π, −b)``)
and classified by the eigenvalues of the Hessian.

The derivative oracles ``fn`` are checked on every call (finite values of the stated shapes), so
a NaN from an oracle stops the search with a ValueError instead of flowing into a "critical
point".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._internal import validation as check
from .charts import TwoRegionChart, _oracle_values, dedupe, descend, descend_grad_norm, newton
from .two_region import TeacherStudentConfig, routers, wrap_phi

GradHess = Callable[[np.ndarray], tuple]    # phi (S,2) -> (value (S,), grad (S,2), hess (S,2,2))

#: the chart of the two-region model (descent keeps |b| ≤ TWO_REGION.b_max)
TWO_REGION = TwoRegionChart()


@dataclass
class CriticalPoint:
    phi: np.ndarray            # (2,) canonical chart
    value: float
    grad_norm: float
    hess_eigs: np.ndarray      # (2,) ascending
    teacher: bool              # teacher-equivalent partition?

    @property
    def kind(self) -> str:
        lo, hi = self.hess_eigs
        if self.teacher:
            return "teacher minimum" if lo > 0 else "teacher (non-minimum)"
        if lo < 0:
            return "strict saddle" if hi > 0 else "local maximum"
        return "spurious local minimum" if lo > 0 else "degenerate"


def collect(fn: GradHess, phis: np.ndarray, ok: np.ndarray, cfg: TeacherStudentConfig,
            teacher_radius: float = 0.15, merge: float = 1e-3) -> list[CriticalPoint]:
    """Deduplicate converged points and classify them; sorted by objective value."""
    check.function("fn", fn)
    phis = routers(phis, name="phis")
    ok = np.asarray(ok)
    check.require(ok.dtype == np.bool_ and ok.shape == (len(phis),), "ok", ok,
                  f"a boolean array of shape ({len(phis)},) (one flag per router)")
    check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    teacher_radius = check.positive("teacher_radius", teacher_radius)
    merge = check.positive("merge", merge)
    pts: list[np.ndarray] = []
    for p in phis[ok]:
        p = wrap_phi(p)
        if all(TWO_REGION.distance(p, q) > merge for q in pts):
            pts.append(p)
    if not pts:
        return []
    v, g, H = _oracle_values(fn, np.array(pts), 2)
    teacher = cfg.teacher_equivalents()
    out = []
    for i, p in enumerate(pts):
        is_t = min(TWO_REGION.distance(p, t) for t in teacher) < teacher_radius
        out.append(CriticalPoint(phi=p, value=float(v[i]), grad_norm=float(np.linalg.norm(g[i])),
                                 hess_eigs=np.linalg.eigvalsh(H[i]), teacher=bool(is_t)))
    return sorted(out, key=lambda c: c.value)


def start_grid(n_alpha: int, n_b: int, b_range: float = 1.5) -> np.ndarray:
    """A grid of starting routers over ``α ∈ [0, π)``, ``b ∈ [−b_range, b_range]``: (n_α·n_b, 2)."""
    n_alpha = check.integer("n_alpha", n_alpha, low=1)
    n_b = check.integer("n_b", n_b, low=1)
    b_range = check.number("b_range", b_range, low=0)
    A = np.linspace(0, np.pi, n_alpha + 1)[:-1]
    B = np.linspace(-b_range, b_range, n_b)
    return np.array([[a, b] for a in A for b in B])


@dataclass
class SoftCriticalPoint:
    """A critical point of ``L_τ`` (profiled), with its refitted experts and joint spectrum."""

    tau: float
    point: CriticalPoint
    theta: np.ndarray          # (2, 3) refitted experts θ_τ(φ)
    joint_eigs: np.ndarray     # (8,) eigenvalues of the joint Hessian of L_τ(θ, φ), ascending
    partition_error: float
    expert_error: float

    @property
    def kind(self) -> str:
        """The point's kind (:attr:`CriticalPoint.kind`)."""
        return self.point.kind


def hard_critical_points(cfg: TeacherStudentConfig, starts: np.ndarray) -> list[CriticalPoint]:
    """Critical points of the hard profiled objective ``L̄_0`` (exact shape-derivative gradient,
    finite-difference Hessian), excluding the teacher partition where ``L̄_0`` has a kink."""
    from .hessian import profiled_hard_grad_hess

    check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    starts = routers(starts, name="starts")

    def fn(p):
        return profiled_hard_grad_hess(cfg, p)

    second = TWO_REGION.second(fn)
    cand = descend_grad_norm(second, starts, TWO_REGION, steps=5)
    phis, ok = newton(second, cand, TWO_REGION)[:2]
    return [c for c in collect(fn, phis, ok, cfg) if not c.teacher]


def soft_critical_points(cfg: TeacherStudentConfig, taus, starts: np.ndarray,
                         seeds: list | None = None, descent_steps: int = 80,
                         progress=None) -> list[SoftCriticalPoint]:
    """Critical points of ``L_τ`` for each τ (in the given order, usually decreasing).

    Candidates at each τ: the end points of normalised descent from every start (this is where
    the global minimiser is found), the ``seeds`` (e.g. the hard critical points) and the points
    found at the previous τ (continuation in τ, which is how saddles are followed). Each
    candidate is refined by Newton's method and kept when ``|∇L̄_τ| < 1e-7``.  ``progress``:
    called as ``progress(i, n, note)`` after each of the n temperatures.
    """
    from .hessian import joint_hessian, profiled_soft_grad, profiled_soft_grad_hess, soft_refit_np
    from .hard_quadrature import expert_error, partition_error

    check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    taus = check.temperatures("taus", taus)
    starts = routers(starts, name="starts")
    seeds = list(routers(seeds, name="seeds")) if seeds is not None and len(seeds) else []
    descent_steps = check.integer("descent_steps", descent_steps, low=1)
    progress = None if progress is None else check.function("progress", progress)
    prev: list[np.ndarray] = []
    out: list[SoftCriticalPoint] = []
    for i, tau in enumerate(taus):
        def fg(p, tau=tau):
            return profiled_soft_grad(cfg, p, tau)

        def fn(p, tau=tau):
            return profiled_soft_grad_hess(cfg, p, tau)

        ends, _ = descend(TWO_REGION.local(fg), starts, TWO_REGION, steps=descent_steps,
                          lr_start=0.2, lr_end=1e-3)
        cand = dedupe(np.concatenate([ends] + [np.array(seeds + prev)] if (seeds or prev) else [ends]),
                      TWO_REGION, radius=2e-3)
        phis, ok = newton(TWO_REGION.second(fn), cand, TWO_REGION, steps=20,
                          step_cap=min(0.2, max(0.01, 3 * tau)))[:2]
        found = collect(fn, phis, ok, cfg)
        prev = [c.phi for c in found]
        for c in found:
            th = soft_refit_np(cfg, c.phi, tau)
            out.append(SoftCriticalPoint(
                tau=float(tau), point=c, theta=th,
                joint_eigs=np.linalg.eigvalsh(joint_hessian(cfg, th, c.phi, tau)),
                partition_error=partition_error(cfg, c.phi), expert_error=expert_error(cfg, th)))
        if progress is not None:
            progress(i + 1, len(taus),
                     f"τ = {float(tau):g}: {len(found)} critical points")
    return out
