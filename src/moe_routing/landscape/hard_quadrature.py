"""The hard objective of the two-region model by semi-analytic quadrature (numpy).

``L_0(θ, φ)``, the closed-form expert refits ``θ(φ)``, the profiled ``L̄_0(φ)`` and the errors
of a student against the teacher (partition and experts), all from the cell moments
:func:`cell_moments`.  Rotating to ``s = n(α)·x, t = n(α)^⊥·x`` (independent N(0, 1)), the
integral over ``s`` of a quadratic against the Gaussian on an interval is exact (truncated
normal moments), and the integral over ``t`` is Gauss–Legendre (:func:`t_pieces`, which the
shape derivative and the first-order constants integrate over too).  The model and its chart:
:mod:`.two_region`; the setting: :mod:`.teacher_student`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import ndtr

from .._internal import validation as check
from .two_region import TeacherStudentConfig, _config, _phi_point, normal, normal_perp

_T_MAX = 9.0           # |t| beyond this carries Gaussian mass < 2e-19
_S_BIG = 40.0          # stands in for ±∞ in the truncated moments


def _trunc_moments(lo, hi):
    """``∫_lo^hi s^j φ(s) ds`` for j = 0, 1, 2 (arrays; empty intervals give 0)."""
    hi = np.maximum(hi, lo)
    plo = np.exp(-0.5 * lo ** 2) / math.sqrt(2 * math.pi)
    phi_ = np.exp(-0.5 * hi ** 2) / math.sqrt(2 * math.pi)
    m0 = ndtr(hi) - ndtr(lo)
    m1 = plo - phi_
    m2 = m0 + lo * plo - hi * phi_
    return m0, m1, m2


@lru_cache(maxsize=8)
def _leggauss(nodes: int):
    return np.polynomial.legendre.leggauss(nodes)


def _gl(nodes: int, a: float, b: float):
    x, w = _leggauss(int(nodes))
    return 0.5 * (b - a) * x + 0.5 * (a + b), 0.5 * (b - a) * w


def t_pieces(cfg: TeacherStudentConfig, phi, nodes: int):
    """Quadrature along the student line Σ = {n(α)·x = b}, in its coordinate t = n(α)^⊥·x.

    Gauss–Legendre with ``nodes`` points per piece on [−T, T] (T = 9: the Gaussian mass beyond
    is < 2e−19), split where the teacher line crosses Σ (the only kink of the integrands) and
    where the teacher line sweeps through the Gaussian bulk (a steep but smooth transition).
    Returns ``(t, w, n, n⊥, u·n, u·n⊥)``: nodes (T,), weights (T,) that already carry the
    Gaussian density φ(t), the unit normal and tangent of Σ (2,), and the teacher normal u's
    components along them.  Both the cell moments of the hard objective and the boundary
    integral of its shape derivative are integrals over t.
    """
    cfg = _config(cfg)
    phi = _phi_point(phi)
    nodes = check.integer("nodes", nodes, low=1)
    a, b = float(phi[0]), float(phi[1])
    n, nperp = normal(a), normal_perp(a)
    u = normal(cfg.teacher_angle)
    un, up = float(u @ n), float(u @ nperp)
    cuts = [-_T_MAX, _T_MAX]
    if abs(up) > 1e-14:
        # tc: where the teacher line crosses Σ (a kink in t). The teacher line meets the s-axis
        # at s_T(t) = b − (t − tc)·up/un, which sweeps the bulk |s| ≤ 9 of the Gaussian while t
        # moves by 9|un/up| around tc: when the two lines are nearly perpendicular in (s, t)
        # that is a steep (but smooth) transition, so it gets its own pieces.
        tc = (cfg.teacher_offset - b * un) / up
        extra = [tc]
        if abs(un) > 1e-14:
            extra += [tc + (b - 9.0) * un / up, tc + (b + 9.0) * un / up]
        cuts = sorted({-_T_MAX, _T_MAX, *[x for x in extra if -_T_MAX < x < _T_MAX]})
    ts, ws = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        t, w = _gl(nodes, lo, hi)
        ts.append(t)
        ws.append(w)
    t, w = np.concatenate(ts), np.concatenate(ws)
    return t, w * np.exp(-0.5 * t ** 2) / math.sqrt(2 * math.pi), n, nperp, un, up


def cell_moments(cfg: TeacherStudentConfig, phi, nodes: int = 96) -> np.ndarray:
    """``Q[k, j] = E[x̃ x̃ᵀ 1{X ∈ C_k(φ)} 1{X in teacher region j}]``, shape (2, 2, 3, 3).

    Everything about the hard objective for affine experts is a quadratic form in these.
    """
    t, wt, n, nperp, un, up = t_pieces(cfg, phi, nodes)
    b, c = float(phi[1]), cfg.teacher_offset
    big = np.full_like(t, _S_BIG)
    # student cells in s: C_1 = (b, ∞), C_2 = (−∞, b)
    student = [(np.full_like(t, b), big), (-big, np.full_like(t, b))]
    # teacher region 1: s·un + t·up > c
    if abs(un) > 1e-14:
        sT = (c - t * up) / un
        r1 = (sT, big) if un > 0 else (-big, sT)
        r2 = (-big, sT) if un > 0 else (sT, big)
        teacher = [r1, r2]
        masks = [np.ones_like(t), np.ones_like(t)]
    else:
        on1 = (t * up > c).astype(float)
        teacher = [(-big, big), (-big, big)]
        masks = [on1, 1.0 - on1]
    # x̃ = A(t) + s·Bv with A = (t n⊥, 1), Bv = (n, 0)
    A = np.stack([t * nperp[0], t * nperp[1], np.ones_like(t)], axis=1)   # (T, 3)
    Bv = np.array([n[0], n[1], 0.0])
    Q = np.zeros((2, 2, 3, 3))
    for k in range(2):
        for j in range(2):
            lo = np.maximum(student[k][0], teacher[j][0])
            hi = np.minimum(student[k][1], teacher[j][1])
            m0, m1, m2 = _trunc_moments(lo, hi)
            wk = wt * masks[j]
            AA = (A * (wk * m0)[:, None]).T @ A
            AB = (wk * m1) @ A
            Q[k, j] = AA + np.outer(AB, Bv) + np.outer(Bv, AB) + np.outer(Bv, Bv) * float((wk * m2).sum())
    return Q


def hard_refit(cfg: TeacherStudentConfig, phi, nodes: int = 96, Q=None) -> np.ndarray:
    """``θ_k(φ) = (E[x̃x̃ᵀ 1_{C_k}])^{-1} E[x̃ Y 1_{C_k}]`` (closed-form expert refits), (2, 3).

    A router that leaves a cell (nearly) empty has no refit (singular moments): refused.
    """
    _phi_point(phi)
    check.integer("nodes", nodes, low=1)
    Q = cell_moments(cfg, phi, nodes) if Q is None else _moments(cfg, Q)
    beta = cfg.beta
    theta = np.zeros((2, 3))
    for k in range(2):
        G = Q[k].sum(0)
        check.require(np.linalg.cond(G) <= 1e12, "phi", phi,
                      f"a router whose cell {k + 1} is not (nearly) empty: |b| ≤ 3")
        theta[k] = np.linalg.solve(G, Q[k, 0] @ beta[0] + Q[k, 1] @ beta[1])
    return theta


def hard_risk(cfg: TeacherStudentConfig, theta, phi, nodes: int = 96, Q=None) -> float:
    """``L_0(θ, φ) = Σ_{k,j} (β_j − θ_k)ᵀ Q_kj (β_j − θ_k) + σ²`` (population, exact up to quadrature)."""
    theta = check.finite_array("theta", theta, shape=(2, 3))
    _phi_point(phi)
    check.integer("nodes", nodes, low=1)
    Q = cell_moments(cfg, phi, nodes) if Q is None else _moments(cfg, Q)
    beta = cfg.beta
    tot = sum(float((beta[j] - theta[k]) @ Q[k, j] @ (beta[j] - theta[k]))
              for k in range(2) for j in range(2))
    return tot + cfg.noise_std ** 2


def _moments(cfg, Q) -> np.ndarray:
    """Precomputed :func:`cell_moments` (2, 2, 3, 3), finite."""
    _config(cfg)
    return check.finite_array("Q", Q, shape=(2, 2, 3, 3))


def profiled_hard(cfg: TeacherStudentConfig, phi, nodes: int = 96) -> float:
    """``L̄_0(φ) = L_0(θ(φ), φ)``."""
    Q = cell_moments(cfg, phi, nodes)
    return hard_risk(cfg, hard_refit(cfg, phi, Q=Q), phi, Q=Q)


def partition_error(cfg: TeacherStudentConfig, phi, nodes: int = 96) -> float:
    """Mass of the symmetric difference between student and teacher partitions, minimised over
    the relabelling of cells: ``min(P(C_1 Δ T_1), P(C_1 Δ T_2))``."""
    Q = cell_moments(cfg, phi, nodes)
    mass = Q[..., 2, 2]                                                 # (2, 2): P(C_k ∩ T_j)
    return float(min(mass[0, 1] + mass[1, 0], mass[0, 0] + mass[1, 1]))


def expert_error(cfg: TeacherStudentConfig, theta) -> float:
    """``min over relabellings of max_k |θ_k − β_π(k)|``."""
    theta, beta = check.finite_array("theta", theta, shape=(2, 3)), _config(cfg).beta
    e_id = max(np.linalg.norm(theta[0] - beta[0]), np.linalg.norm(theta[1] - beta[1]))
    e_sw = max(np.linalg.norm(theta[0] - beta[1]), np.linalg.norm(theta[1] - beta[0]))
    return float(min(e_id, e_sw))
