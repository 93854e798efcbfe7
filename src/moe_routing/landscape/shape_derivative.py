"""The shape derivative of the hard risk (the book's derivation, for paper B's Theorem 5.17).

For a binary hard router with interface ``Σ = {g = 0}`` and cells ``C_1 = {g > 0}``,
``C_2 = {g < 0}``, moving the interface trades the per-point losses
``ℓ_k(x) = E[(Y − f_k(x))² | X = x]``, so (transversal ``g``, experts fixed)

    ∂_φ L_0 = ∫_Σ (ℓ_1 − ℓ_2)(x) · ∂_φ g(x) · p(x) / |∇g(x)|  dH¹(x).

``ℓ_1 − ℓ_2`` on Σ is the specialisation gap: where it vanishes the interface feels no force.
With the experts refitted (``θ = θ(φ)``), the same formula gives ``∇L̄_0`` (envelope theorem:
``∂_θ L_0 = 0`` at the refit). In the chart ``g = n(α)·x − b``: ``|∇g| = 1``,
``∂_α g = n(α)^⊥·x`` (the coordinate t along Σ) and ``∂_b g = −1``.
"""

from __future__ import annotations

import math

import numpy as np

from .._internal import validation as check
from .two_region import TeacherStudentConfig
from .hard_quadrature import hard_risk, t_pieces


def boundary_integral_gradient(cfg: TeacherStudentConfig, theta, phi, nodes: int = 96) -> np.ndarray:
    """``(∂_α L_0, ∂_b L_0)`` by the boundary integral over Σ = {s = b}, parametrised by t."""
    theta = check.finite_array("theta", theta, shape=(2, 3))
    t, wt, n, nperp, _, _ = t_pieces(cfg, phi, nodes)
    b = float(phi[1])
    x = b * n[None, :] + t[:, None] * nperp[None, :]                    # (T, 2) points on Σ
    xt = np.concatenate([x, np.ones((t.size, 1))], axis=1)              # (T, 3)
    u = np.array([math.cos(cfg.teacher_angle), math.sin(cfg.teacher_angle)])
    beta = cfg.beta
    fstar = np.where(x @ u > cfg.teacher_offset, xt @ beta[0], xt @ beta[1])
    gap = (fstar - xt @ theta[0]) ** 2 - (fstar - xt @ theta[1]) ** 2   # ℓ_1 − ℓ_2 (noise cancels)
    dens_s = math.exp(-0.5 * b * b) / math.sqrt(2 * math.pi)            # p = φ(s)φ(t); wt carries φ(t)
    d_alpha = float((wt * gap * t).sum()) * dens_s                      # ∂_α g = t
    d_b = float((wt * gap * (-1.0)).sum()) * dens_s                     # ∂_b g = −1
    return np.array([d_alpha, d_b])


def finite_difference_gradient(cfg: TeacherStudentConfig, theta, phi, h: float = 1e-5,
                               nodes: int = 96) -> np.ndarray:
    """Central differences of the quadrature hard risk ``L_0(θ, φ)`` in (α, b), experts fixed
    (step 0 < h < 0.1: larger steps leave the region where the difference quotient is a
    derivative)."""
    h = check.number("h", h, low=0, high=0.1, low_open=True, high_open=True)
    phi = check.finite_array("phi", phi, shape=(2,))
    out = np.zeros(2)
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        out[i] = (hard_risk(cfg, theta, phi + e, nodes) - hard_risk(cfg, theta, phi - e, nodes)) / (2 * h)
    return out
