"""The soft minimiser near the teacher, to first order in τ: what boundary mass and the
specialisation gap control (our derivation; paper B's summary says that in Theorem 5.17 the
recovery errors are controlled by the boundary mass and the specialisation gap).

Put the student router at the teacher's partition (the teacher's scores in the chart, φ*) and
the experts at the teacher's, ``θ = β``. Across a teacher interface ``Σ_kj`` (jump
``D = (β_k − β_j)·x̃``, logit difference ``g = a_k − a_j``) the soft gate mixes the two experts
in a layer of width O(τ) in g. Integrating across the layer (coarea formula, with
``∫_0^∞ σ(−s) ds = ln 2``, ``∫_0^∞ σ(−s)² ds = ln 2 − ½``):

* **experts** — the soft refit moves expert k by

      θ_k − β_k = (1 − ln 2) τ G_k⁻¹ Σ_j ∫_{Σ_kj} D x̃ p/|∇_x g| dH + O(τ²),

  ``G_k = E[x̃ x̃ᵀ 1{X ∈ T_k}]``. The layer integral is the boundary mass of the teacher's
  interface, ``BM_T(w) = P(Δ*(X) ≤ w) = 2w S + O(w²)`` with ``S = Σ ∫ p/|∇_x g| dH``, times an
  interface average of the jump: the expert error is a boundary-mass quantity, linear in τ;
* **curvature** — the soft objective along a router displacement that moves the interface by
  ε (in g units) is ``τ ∫ D² h(ε/τ) p/|∇_x g| dH`` with ``h'' (0) = ½`` (the exercise on the
  kink), so the profiled Hessian at φ* is

      ∇²L̄_τ(φ*) = (1/(2τ)) Σ ∫_{Σ_kj} D² ∇_φ g ∇_φ gᵀ p/|∇_x g| dH + O(1).

  ``D² = ℓ_wrong − ℓ_right`` is the specialisation gap at the interface (the excess loss of the
  wrong expert there): the gap, integrated against the interface density, is the stiffness
  (∝ 1/τ) that holds the soft minimiser at the teacher's partition.

Two ways to evaluate the interface integrals: exactly by Gauss–Legendre quadrature along the
teacher's line for the two-region model of :mod:`.teacher_student` (chart ``(α, b)``), and by the
coarea layer estimator ``∫_Σ f p/|∇_x g| dH ≈ E[f 1{Δ* ≤ w}]/(2w)`` on a sample for the
K-region model of :mod:`.multi_region` (local chart coordinates at φ*).

Shapes: ``K`` experts, ``p = d + 1`` features, ``D`` router coordinates, ``n`` sample points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import ndtr

from .._internal import validation as check
from .common import features
from .multi_region import (MultiRegionTeacher, chart_dim, logits_from_phi, retract,
                           tangent_basis)
from .two_region import TeacherStudentConfig
from .hard_quadrature import cell_moments, t_pieces

# ∫_0^∞ σ(−s)(1 − σ(−s)) ds − ∫_0^∞ σ(−s)² ds = ½ − (ln 2 − ½): the net pull of the layer
EXPERT_CONSTANT = 1.0 - math.log(2.0)
# h''(0) for h(z) = ∫_0^∞ σ(z − v)² dv + ∫_{−∞}^0 σ(v − z)² dv, the layer cost of a shift z
CURVATURE_CONSTANT = 0.5


@dataclass(frozen=True)
class InterfaceConstants:
    """The teacher's interface constants that the first-order laws need (a result record).

    ``S``: ``Σ ∫_Σ p/|∇_x g| dH`` (so ``BM_T(w) ≈ 2wS``); ``gap``: the mean specialisation gap
    ``∫ D² p/|∇_x g| dH / S`` (mean squared jump on the interface); ``expert_coef`` (K, p):
    ``G_k⁻¹ Σ_j ∫_{Σ_kj} D x̃ p/|∇_x g| dH``; ``hessian_coef`` (D, D):
    ``½ Σ ∫ D² ∇_φ g ∇_φ gᵀ p/|∇_x g| dH``; ``chart``: the router coordinates of
    ``hessian_coef``.
    """

    S: float
    gap: float
    expert_coef: np.ndarray
    hessian_coef: np.ndarray
    chart: str


def _constants(c) -> InterfaceConstants:
    return check.instance("constants", c, InterfaceConstants, "an InterfaceConstants (from "
                          "two_region_constants or multi_region_constants)")


def expert_error_first_order(constants: InterfaceConstants, taus) -> np.ndarray:
    """``max_k |θ_k − β_k| ≈ (1 − ln 2) τ max_k |expert_coef_k|`` at each τ: (T,)."""
    c = _constants(constants)
    taus = check.temperatures("taus", taus)
    return EXPERT_CONSTANT * taus * float(np.linalg.norm(c.expert_coef, axis=1).max())


def hessian_first_order(constants: InterfaceConstants, tau) -> np.ndarray:
    """``∇²L̄_τ(φ*) ≈ hessian_coef / τ`` in the constants' chart: (D, D)."""
    c = _constants(constants)
    tau = check.temperature("tau", tau)
    return c.hessian_coef / tau


# --------------------------------------------------------------------------------------------
# Two regions, exact quadrature along the teacher's line
# --------------------------------------------------------------------------------------------

def _two_region_line(cfg: TeacherStudentConfig, nodes: int):
    """Nodes on Σ* = {n(α*)·x = b*}: coordinate t (T,), weights with the density p (T,),
    features x̃ (T, 3) and the jump D = (β_1 − β_2)·x̃ (T,)."""
    t, wt, n, nperp, _, _ = t_pieces(cfg, cfg.teacher_phi, nodes)   # wt carries φ(t)
    b = cfg.teacher_offset
    w = wt * math.exp(-0.5 * b * b) / math.sqrt(2 * math.pi)        # p = φ(s = b*) φ(t), |∇g| = 1
    xt = features(torch.as_tensor(b * n[None, :] + t[:, None] * nperp[None, :])).numpy()
    D = xt @ (cfg.beta[0] - cfg.beta[1])
    return t, w, xt, D


def two_region_constants(cfg: TeacherStudentConfig, nodes: int = 200) -> InterfaceConstants:
    """:class:`InterfaceConstants` of the two-region teacher by quadrature (chart ``(α, b)``,
    ``∇_φ g = (t, −1)`` on Σ*). ``nodes``: Gauss–Legendre nodes on ``|t| ≤ 9`` (≥ 8)."""
    cfg = check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    nodes = check.integer("nodes", nodes, low=8)
    t, w, xt, D = _two_region_line(cfg, nodes)
    S = float(w.sum())
    Q = cell_moments(cfg, cfg.teacher_phi, 96)                       # cell k ∩ region k: G_k
    I = (w * D) @ xt                                                 # ∫ D x̃ p dH (3,)
    coef = np.stack([np.linalg.solve(Q[0, 0], I), np.linalg.solve(Q[1, 1], -I)])
    dg = np.stack([t, -np.ones_like(t)], 1)                          # ∇_(α,b) g on Σ*
    H = CURVATURE_CONSTANT * np.einsum("t,ti,tj->ij", w * D ** 2, dg, dg)
    return InterfaceConstants(S=S, gap=float((w * D ** 2).sum()) / S, expert_coef=coef,
                              hessian_coef=H, chart="(α, b)")


def two_region_boundary_mass(cfg: TeacherStudentConfig, widths) -> np.ndarray:
    """``BM_T(w) = P(|n(α*)·X − b*| ≤ w) = Φ(b* + w) − Φ(b* − w)``, exactly: (W,)."""
    cfg = check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    w = check.widths("widths", widths)
    b = cfg.teacher_offset
    return ndtr(b + w) - ndtr(b - w)


def two_region_growth(cfg: TeacherStudentConfig, directions: int = 720,
                      nodes: int = 200) -> tuple[float, np.ndarray]:
    """The growth of the hard profiled objective at the teacher's kink.

    Moving the router from φ* by ``εv`` misroutes, at each point of Σ*, a slab of width
    ``ε|v·∇_φ g|`` whose loss rises by the gap ``D²`` (the refit lowers this only at order ε²),
    so ``L̄_0(φ* + εv) − L̄_0(φ*) = ε κ(v) + O(ε²)`` with ``κ(v) = ∫ D² |v·∇_φ g| p dH``.
    Returns ``(κ = min over unit v, κ(v) on a grid of directions (directions,))``: κ is the
    constant of the sharp (q = 1) growth condition of the chapter's theorem.
    """
    cfg = check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    directions = check.integer("directions", directions, low=8)
    nodes = check.integer("nodes", nodes, low=8)
    t, w, _, D = _two_region_line(cfg, nodes)
    ang = np.linspace(0.0, math.pi, directions, endpoint=False)       # κ(−v) = κ(v)
    V = np.stack([np.cos(ang), np.sin(ang)], 1)                      # (A, 2)
    proj = np.abs(V[:, :1] * t[None] - V[:, 1:])                     # |v·(t, −1)| (A, T)
    kappa = proj @ (w * D ** 2)
    return float(kappa.min()), kappa


# --------------------------------------------------------------------------------------------
# K regions, coarea layer estimator on a sample
# --------------------------------------------------------------------------------------------

def _teacher_logits(teacher: MultiRegionTeacher, X: torch.Tensor):
    """The teacher's scores in the student's chart (φ*), at X: logits (n, K), φ* (M,)."""
    phi = teacher.phi()
    W, b = logits_from_phi(torch.as_tensor(phi)[None], teacher.K, teacher.d)
    return (X @ W[0].T + b[0]), phi


def teacher_boundary_mass(teacher: MultiRegionTeacher, widths, X: torch.Tensor) -> np.ndarray:
    """``BM_T(w) = P(Δ*(X) ≤ w)`` of the teacher's interfaces on the sample X, Δ* the top-two
    margin of the teacher's scores normalised as a router of the chart (the temperature acts on
    those): (W,)."""
    check.instance("teacher", teacher, MultiRegionTeacher, "a MultiRegionTeacher")
    w = check.widths("widths", widths)
    check.finite_tensor("X", X, shape=(None, teacher.d))
    A, _ = _teacher_logits(teacher, X)
    top2 = torch.topk(A, 2, dim=1).values
    margin = (top2[:, 0] - top2[:, 1]).numpy()
    return (margin[None, :] <= w[:, None]).mean(1)


def multi_region_constants(teacher: MultiRegionTeacher, X: torch.Tensor,
                           width: float = 0.02) -> InterfaceConstants:
    """:class:`InterfaceConstants` of a K-region teacher by the coarea layer estimator on X
    (local chart coordinates at φ*, those of :class:`.multi_region.ProfiledObjective`).

    ``width``: the layer half-width w in logit units (0 < w ≤ 0.5); the estimator's bias is
    O(w²) plus the triple junctions' O(w) share, its noise ∝ 1/√(n·BM_T(w)).
    """
    check.instance("teacher", teacher, MultiRegionTeacher, "a MultiRegionTeacher")
    check.finite_tensor("X", X, shape=(None, teacher.d))
    width = check.number("width", width, low=0, high=0.5, low_open=True)
    K, d = teacher.K, teacher.d
    X = X.to(torch.float64)
    A, phi = _teacher_logits(teacher, X)
    top = torch.topk(A, 2, dim=1)
    k1, k2 = top.indices[:, 0], top.indices[:, 1]
    lay = ((top.values[:, 0] - top.values[:, 1]) <= width).numpy()
    n = X.shape[0]
    check.require(int(lay.sum()) >= 10, "width", width, f"a layer holding ≥ 10 of the n = {n} "
                  "points (widen it or give a larger sample)")
    Xt = features(X).numpy()                                         # (n, p)
    B = teacher.beta                                                 # (K, p)
    region = teacher.region(X).numpy()
    xl, a1, a2 = Xt[lay], k1.numpy()[lay], k2.numpy()[lay]
    D = np.einsum("np,np->n", xl, B[a1] - B[a2])                     # jump, top minus second
    scale = 1.0 / (2 * width * n)                                    # E[· 1{layer}]/(2w)
    S = float(lay.sum()) * scale
    F = np.zeros((K, d + 1))
    np.add.at(F, a1, D[:, None] * xl)
    np.add.at(F, a2, -D[:, None] * xl)
    coef = np.stack([np.linalg.solve(Xt[region == k].T @ Xt[region == k] / n, F[k] * scale)
                     for k in range(K)])
    # ∇_z a_k(x) = Jw_k x + Jb_k at z = 0 in the local coordinates of the chart
    p0 = torch.as_tensor(phi)[None]
    T = torch.as_tensor(tangent_basis(phi[None], K, d))
    Dz = chart_dim(K, d)

    def logits(z):
        W, b = logits_from_phi(retract(p0, T, z[None], K, d), K, d)
        return torch.cat([W[0], b[0][:, None]], 1)                   # (K, p)

    J = torch.autograd.functional.jacobian(logits, torch.zeros(Dz, dtype=torch.float64)).numpy()
    dg = np.einsum("np,npz->nz", xl, J[a1] - J[a2])                  # ∇_z g (n_layer, D)
    H = CURVATURE_CONSTANT * scale * np.einsum("n,ni,nj->ij", D ** 2, dg, dg)
    return InterfaceConstants(S=S, gap=float((D ** 2).sum()) * scale / S, expert_coef=coef,
                              hessian_coef=H, chart="local")
