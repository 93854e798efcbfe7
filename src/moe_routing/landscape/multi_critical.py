"""Critical points of the profiled soft objective ``L̄_τ`` of the K-region teacher–student model.

The same two-phase idea as :mod:`.critical_points` (K = 2), in the D-dimensional chart of
:mod:`.multi_region`:

1. **normalised descent** on ``L̄_τ`` from many random routers, with geometrically decaying
   steps: it finds the minima. Optionally (``n_slow``) the interior local minima of
   ``|∇L̄_τ|`` along each path, where a path slowed down near a saddle, are kept as candidates;
2. **descent on ½|∇L̄_τ|²** (direction ``H∇L̄_τ``, one closed-form Hessian per step) from
   the same starts: attracted by critical points of every index, it brings starts near saddles
   that descent on ``L̄_τ`` flows away from;
3. **continuation**: the critical points of the previous temperature, as they are and after a
   few steps of (2) at the new temperature (a critical point moves by O(τ) as τ falls, and
   Newton's basin shrinks with τ);
4. **Newton refinement** ``z = −H⁺g`` (pseudo-inverse, capped steps, in local coordinates) of
   every candidate. A point counts as critical when ``|∇L̄_τ| < tol``.

Steps 2 and 4 are :func:`.charts.descend_grad_norm` and :func:`.charts.newton` on the chart's
second-order oracle (``MultiRegionChart(K, d).second(obj, τ, ...)``): the same code as the
K = 2 search.

**Two levels (ours, optional).** With a ``guide`` (the same teacher's objective on a smaller,
nested sample), steps 1–3 and a first Newton all run on the guide, and Newton on the objective
refines only the guide's critical points (and the previous temperature's points whose family
the guide lost): the `paper` profile's 262,144-point objective costs a Hessian per candidate and
step only where a critical point is already close.

Routers that (nearly) switch an expert off (a cell whose mean gate is below ``MIN_CELL_MASS``)
are dropped: a K-expert student with an empty cell is a (K−1)-expert student, outside the
compact router set of the theorem (ours; they count among the candidates that did not converge).
Points are deduplicated
modulo relabelling and classified by the eigenvalues of the D×D Hessian.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .._internal import validation as check
from .charts import MultiRegionChart, dedupe, descend, descend_grad_norm, newton
from .common import sobol_normal
from .multi_fit import describe_partition, expert_error, hard_refit, partition_error
from .multi_region import MultiRegionTeacher, chart_points, random_routers
from .profiled import ProfiledObjective

EIG_TOL = 1e-6         # |λ| below this (relative to max |λ|) counts as zero curvature
MIN_CELL_MASS = 0.01   # Newton drops a router with a cell of mean gate below it (module text)


@dataclass
class MultiCriticalPoint:
    tau: float
    phi: np.ndarray            # (M,) chart point
    value: float               # L̄_τ (noise included)
    grad_norm: float
    hess_eigs: np.ndarray      # (D,) ascending, profiled Hessian in local coordinates
    teacher: bool              # partition error below the teacher radius
    partition_error: float
    expert_error: float
    theta: np.ndarray          # (K, p) refitted experts
    partition: str             # which teacher regions each student cell covers
    hard_value: float          # L̄_0 at the same router (hard refit on the evaluation sample)
    family: int = -1           # continuation family across temperatures
    joint_eigs: np.ndarray | None = field(default=None, repr=False)

    @property
    def lam_min(self) -> float:
        return float(self.hess_eigs[0])

    @property
    def kind(self) -> str:
        scale = max(1.0, float(np.abs(self.hess_eigs).max()))
        lo = self.hess_eigs[0]
        neg = lo < -EIG_TOL * scale
        pos = lo > EIG_TOL * scale
        if self.teacher:
            return "teacher minimum" if pos else "teacher (non-minimum)"
        if neg:
            return "strict saddle" if self.hess_eigs[-1] > 0 else "local maximum"
        return "spurious local minimum" if pos else "degenerate"


def _objective(obj) -> ProfiledObjective:
    return check.instance("obj", obj, ProfiledObjective, "a ProfiledObjective")


def start_routers(obj: ProfiledObjective, S: int, seed: int, tau: float,
                  min_cell_mass: float = 0.05) -> np.ndarray:
    """S random routers (seeded) whose every cell carries mean gate ≥ ``min_cell_mass``."""
    obj = _objective(obj)
    S = check.integer("S", S, low=1)
    tau = check.temperature("tau", tau)
    min_cell_mass = check.number("min_cell_mass", min_cell_mass, low=0, high=1.0 / obj.K)
    rng = check.generator("seed", seed)
    alive = MultiRegionChart(obj.K, obj.d).second(obj, tau, min_cell_mass=min_cell_mass).alive
    out = []
    for _ in range(100):
        cand = random_routers(4 * S, obj.K, obj.d, rng)
        out.extend(cand[alive(cand)])
        if len(out) >= S:
            return np.array(out[:S])
    check.fail("min_cell_mass", min_cell_mass, f"a mass that 100 draws of {4 * S} random routers can "
               f"reach in every cell (fewer than S = {S} did)")


def most_critical(obj: ProfiledObjective, phi: np.ndarray, tau: float, keep: int) -> np.ndarray:
    """The ``keep`` routers with the smallest ``|∇L̄_τ|``: Newton (a Hessian per step, the
    expensive part) is spent only on the candidates closest to being critical.  An empty batch
    gives an empty batch."""
    obj = _objective(obj)
    phi = chart_points(phi, obj.K, obj.d, name="phi", allow_empty=True)
    tau = check.temperature("tau", tau)
    keep = check.integer("keep", keep, low=0)
    if len(phi) <= keep:
        return phi
    _, _, _, g = obj.grad(phi, tau)
    return phi[np.argsort(np.linalg.norm(g, axis=1))[:keep]]


def _assign_families(found, prev, K: int, d: int, start: int, radius: float = 0.3) -> None:
    """Continuation: match each new point to a distinct point of the previous temperature
    (nearest pairs first, within ``radius``); unmatched points start new families."""
    chart = MultiRegionChart(K, d)
    pairs = sorted((chart.distance(c.phi, q.phi), i, j)
                   for i, c in enumerate(found) for j, q in enumerate(prev))
    used_new, used_old = set(), set()
    for dist, i, j in pairs:
        if dist < radius and i not in used_new and j not in used_old:
            found[i].family = prev[j].family
            used_new.add(i)
            used_old.add(j)
    nxt = start
    for i, c in enumerate(found):
        if i not in used_new:
            c.family, nxt = nxt, nxt + 1


def critical_points(obj: ProfiledObjective, taus, starts: np.ndarray, eval_X: torch.Tensor, *,
                    descent_steps: int = 60, grad_norm_steps: int = 15, newton_steps: int = 25,
                    tol: float = 1e-7,
                    teacher_radius: float = 0.1, merge: float = 1e-3, joint: bool = False,
                    candidate_radius: float = 0.03, continuation_steps: int = 25,
                    n_slow: int = 0, saddle_candidates: int = 8,
                    guide=None, progress=None):
    """Critical points of ``L̄_τ`` for each τ (in the given order, usually decreasing).

    Returns ``(points, stats)``; ``stats[τ]`` counts candidates, converged and dropped points.
    ``eval_X``: an independent sample on which partition errors and ``L̄_0`` are measured.
    ``teacher_radius``: a point whose partition error is below it is teacher-equivalent.
    ``guide``: ``None`` (search on ``obj`` itself) or the same teacher's objective on a smaller
    sample (ours: the two-level search).  The descents, the saddle search, continuation and a
    first Newton run on the guide, where each pass over the sample is ``n/n_guide`` times
    cheaper; Newton on ``obj`` then refines the guide's critical points, so every point returned
    is a critical point of ``obj`` to ``tol`` exactly as in the one-level search.  What the two
    levels can change is which points are *found*: a critical point of ``obj`` with no
    counterpart on the guide is missed (the tests hold the teacher minimum of both searches
    equal on one teacher; ``benchmarks/bench_paper_profile.py`` prints which points each finds).
    ``progress``: called as ``progress(i, n, note)`` after each of the n temperatures (e.g. a
    :class:`moe_routing._internal.progress.Progress`).
    """
    obj = _objective(obj)
    if guide is not None:
        check.instance("guide", guide, ProfiledObjective, "None or a ProfiledObjective")
        check.require(guide.teacher is obj.teacher and len(guide.X) <= len(obj.X), "guide", guide,
                      "None or the same teacher's ProfiledObjective on a sample no larger than "
                      f"obj's ({len(obj.X)} points)")
    search = obj if guide is None else guide
    taus = [float(t) for t in check.temperatures("taus", taus)]
    starts = chart_points(starts, obj.K, obj.d, name="starts")
    check.finite_tensor("eval_X", eval_X, shape=(None, obj.d))
    teacher_radius = check.number("teacher_radius", teacher_radius, low=0, high=0.5,
                                  low_open=True, high_open=True)
    descent_steps = check.integer("descent_steps", descent_steps, low=1)
    grad_norm_steps = check.integer("grad_norm_steps", grad_norm_steps, low=0)
    newton_steps = check.integer("newton_steps", newton_steps, low=0)
    continuation_steps = check.integer("continuation_steps", continuation_steps, low=0)
    n_slow = check.integer("n_slow", n_slow, low=0)
    saddle_candidates = check.integer("saddle_candidates", saddle_candidates, low=0)
    tol, merge = check.positive("tol", tol), check.positive("merge", merge)
    candidate_radius = check.positive("candidate_radius", candidate_radius)
    joint = check.flag("joint", joint)
    progress = None if progress is None else check.function("progress", progress)
    K, d, teacher = obj.K, obj.d, obj.teacher
    chart = MultiRegionChart(K, d)
    fstar_eval = teacher.fstar(eval_X)
    prev: list[MultiCriticalPoint] = []
    out: list[MultiCriticalPoint] = []
    stats = {}
    next_family = 0
    for tau in taus:
        ends, slow = descend(chart.local(search, tau), starts, chart, steps=descent_steps,
                             lr_start=0.3, lr_end=1e-3, n_slow=n_slow)
        second = chart.second(search, tau)          # descent on ½|∇L̄_τ|²: every router alive
        gnd = (descend_grad_norm(second, starts, chart, steps=grad_norm_steps)
               if grad_norm_steps else ends[:0])
        gnd = most_critical(search, dedupe(gnd, chart, radius=candidate_radius), tau,
                            saddle_candidates)
        cont = np.stack([c.phi for c in prev]) if prev else ends[:0]
        if prev and continuation_steps:
            # follow the previous critical points: a critical point moves by O(τ) as τ falls and
            # Newton's basin shrinks with τ, so first let descent on ½|∇L̄_τ|² (attracted by the
            # nearby critical point of any index) bring each one into the new basin
            cont = np.concatenate([cont, descend_grad_norm(second, cont, chart,
                                                           steps=continuation_steps,
                                                           step_cap=min(0.2, 3 * tau))])
        cand = np.concatenate([ends, slow, gnd, cont])
        cand = dedupe(cand, chart, radius=candidate_radius)
        n_cand = len(cand)
        cap = min(0.2, max(0.02, 3 * tau))
        if guide is not None:
            # the guide's critical points: the only candidates worth a Hessian of obj
            g_phi, g_ok = newton(chart.second(guide, tau, min_cell_mass=MIN_CELL_MASS), cand,
                                 chart, steps=newton_steps, step_cap=cap, tol=tol)[:2]
            cand = dedupe(g_phi[g_ok], chart, radius=merge)
            # and a previous point whose family the guide lost (the guide's sample resolves a
            # boundary layer of width O(τ) less well as τ falls): Newton on obj from it directly
            lost = [c.phi for c in prev
                    if all(chart.distance(c.phi, q) > candidate_radius for q in cand)]
            cand = np.concatenate([cand, np.array(lost).reshape(-1, cand.shape[1])])
        phi, ok, val, gr, He = newton(chart.second(obj, tau, min_cell_mass=MIN_CELL_MASS), cand,
                                      chart, steps=newton_steps, step_cap=cap, tol=tol)
        found: list[MultiCriticalPoint] = []
        for i in np.flatnonzero(ok):
            if any(chart.distance(phi[i], c.phi) < merge for c in found):
                continue
            th = obj.refit(phi[i], tau)
            pe = partition_error(phi[i], teacher, eval_X)
            cp = MultiCriticalPoint(
                tau=tau, phi=phi[i].copy(), value=float(val[i]), grad_norm=float(np.linalg.norm(gr[i])),
                hess_eigs=np.linalg.eigvalsh(He[i]), teacher=pe < teacher_radius, partition_error=pe,
                expert_error=expert_error(th, phi[i], teacher, eval_X), theta=th,
                partition=describe_partition(phi[i], teacher, eval_X),
                hard_value=hard_refit(phi[i], eval_X, fstar_eval, K)[1] + obj.noise_var)
            if joint:
                cp.joint_eigs = np.linalg.eigvalsh(obj.joint_hessian(th, phi[i], tau))
            found.append(cp)
        _assign_families(found, prev, K, d, start=next_family)
        next_family = max([next_family] + [c.family + 1 for c in found])
        stats[tau] = {"candidates": n_cand, "converged": int(ok.sum()), "distinct": len(found)}
        out.extend(found)
        prev = found
        if progress is not None:
            progress(len(stats), len(taus), f"τ = {tau:g}: {len(found)} critical points")
    return out, stats


@dataclass(frozen=True)
class TeacherSearch:
    """The critical points of one teacher's ``L̄_τ`` at every temperature searched, with the
    objective and the evaluation sample they were measured on."""

    name: str
    teacher: MultiRegionTeacher
    obj: ProfiledObjective
    saddle_search: bool            # False: minima only (descent and Newton, no saddle search)
    guide_n: int | None            # the guide's sample size (two-level search), None: one level
    X_eval: torch.Tensor           # (eval_n, d) independent sample: partition errors, L̄_0
    points: tuple                  # MultiCriticalPoint, in the order found
    stats: dict                    # τ → candidates, converged, distinct
    seconds: float = field(compare=False)   # wall time: a measurement, not a result

    def describe(self) -> str:
        """Two lines: what was found per τ, and how the two kinds of partition error separate."""
        per_tau = ", ".join(f"{t:g}: ({s['candidates']}, {s['converged']}, {s['distinct']})"
                            for t, s in self.stats.items())
        te = [c.partition_error for c in self.points if c.teacher]
        nt = [c.partition_error for c in self.points if not c.teacher]
        level = (f"two-level search, guide of {self.guide_n} points" if self.guide_n
                 else "one-level search")
        return (f"{self.name} ({len(self.obj.X)} points, {level}): {len(self.points)} critical "
                f"points in {self.seconds:.0f} s; per τ "
                f"(candidates, converged, distinct): {per_tau}\n    partition errors: "
                + (f"teacher-equivalent ≤ {max(te):.3g}" if te else "no teacher-equivalent point")
                + ", " + (f"non-teacher ≥ {min(nt):.3g}" if nt else "no non-teacher point found"))


def search_teacher(name: str, teacher: MultiRegionTeacher, n: int, seed: int, taus, *,
                   eval_n: int, n_starts: int, saddles: bool = True, descent_steps: int = 60,
                   grad_norm_steps: int = 15, newton_steps: int = 25,
                   continuation_steps: int = 25, n_guide: int | None = None,
                   progress: bool = True) -> TeacherSearch:
    """The chapter's search for one teacher: the objective on an ``n``-point sample, an
    independent ``eval_n``-point evaluation sample (seed + 1), ``n_starts`` random routers, the
    critical points at every τ (with the saddle search and continuation when ``saddles``, minima
    only otherwise), and the joint (θ, φ) Hessian — the theorem's object — at the smallest τ.
    ``n_guide``: ``None`` or a sample size ≤ ``n`` for the two-level search of
    :func:`critical_points` (the guide's sample is the first ``n_guide`` points of the
    objective's: a scrambled Sobol net is nested); ``n_guide`` = ``n`` is the one-level search.
    ``progress``: report "i of n temperatures, ETA" lines on stderr."""
    from .._internal.progress import Progress

    check.require(isinstance(name, str) and name != "", "name", name, "a non-empty teacher name")
    check.instance("teacher", teacher, MultiRegionTeacher, "a MultiRegionTeacher")
    taus = [float(t) for t in check.temperatures("taus", taus)]
    eval_n = check.integer("eval_n", eval_n, low=16)
    n_starts = check.integer("n_starts", n_starts, low=1)
    saddles, progress = check.flag("saddles", saddles), check.flag("progress", progress)
    for knob, v in (("descent_steps", descent_steps), ("grad_norm_steps", grad_norm_steps),
                    ("newton_steps", newton_steps), ("continuation_steps", continuation_steps)):
        check.integer(knob, v, low=1 if knob == "descent_steps" else 0)
    obj = ProfiledObjective(teacher, n, seed)
    guide = None
    if n_guide is not None:
        guide = ProfiledObjective(teacher, check.integer("n_guide", n_guide, low=16, high=n),
                                  seed)
        guide = guide if len(guide.X) < len(obj.X) else None      # the same sample: one level
    X_eval = sobol_normal(eval_n, teacher.d, seed + 1)
    starts = start_routers(obj, n_starts, seed, taus[0])
    t0 = time.perf_counter()
    pts, stats = critical_points(
        obj, taus, starts, X_eval, descent_steps=descent_steps,
        grad_norm_steps=grad_norm_steps if saddles else 0,
        continuation_steps=continuation_steps if saddles else 0, newton_steps=newton_steps,
        guide=guide, progress=Progress(f"{name}: critical-point search, temperature", len(taus), every=0.0)
        if progress else None)
    for c in pts:
        if c.tau == taus[-1]:
            c.joint_eigs = np.linalg.eigvalsh(obj.joint_hessian(c.theta, c.phi, c.tau))
    return TeacherSearch(name=name, teacher=teacher, obj=obj, saddle_search=saddles,
                         guide_n=None if guide is None else len(guide.X),
                         X_eval=X_eval, points=tuple(pts), stats=stats,
                         seconds=time.perf_counter() - t0)


def _point_list(points) -> list:
    ok = isinstance(points, (list, tuple)) and all(isinstance(c, MultiCriticalPoint) for c in points)
    check.require(ok, "points", points, "a list of MultiCriticalPoint (a TeacherSearch's points)")
    return list(points)


def point_table(points):
    """Every critical point, one row each (by τ decreasing, then value): a pandas DataFrame."""
    import pandas as pd

    pts = _point_list(points)
    return pd.DataFrame([{
        "τ": c.tau, "family": c.family, "kind": c.kind, "cells ⊇ teacher regions": c.partition,
        "L̄_τ": round(c.value, 5), "L̄₀ (same router)": round(c.hard_value, 5),
        "λₘᵢₙ": round(c.lam_min, 4), "λₘₐₓ": round(float(c.hess_eigs[-1]), 2),
        "partition error": float(f"{c.partition_error:.3g}"),
        "expert error": round(c.expert_error, 4),
    } for c in sorted(pts, key=lambda c: (-c.tau, c.value))])
