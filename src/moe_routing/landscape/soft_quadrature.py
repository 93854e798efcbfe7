"""The soft objective of the two-region model by quadrature (torch, differentiable).

:func:`soft_moments` integrates the gate's moments against the teacher's regions
deterministically, vectorised over S routers and differentiable in φ (autograd), so that the
population ``L_τ`` (:func:`soft_risk_quad`), its refits and profile (:func:`soft_refit_quad`),
their gradients and Hessians all come from one formula -- the deterministic counterpart of the
fixed-sample objective of :mod:`.teacher_student`.  It reuses the Gauss–Legendre rule and the
range of :mod:`.hard_quadrature`; the model and its chart: :mod:`.two_region`.
"""

from __future__ import annotations

import math

import torch

from .._internal import validation as check
from .hard_quadrature import _T_MAX, _leggauss
from .two_region import TeacherStudentConfig, _config, _phi_batch

_LAYER = 12.0          # the dense piece around Σ spans b ± 12τ (gate within e^-12 of 0/1 outside)


def _trunc_moments_t(lo, hi):
    """Torch version of :func:`.hard_quadrature._trunc_moments` (j = 0, 1, 2), differentiable
    in lo and hi."""
    hi = torch.maximum(hi, lo)
    c = 1.0 / math.sqrt(2 * math.pi)
    plo, phi_ = c * torch.exp(-0.5 * lo ** 2), c * torch.exp(-0.5 * hi ** 2)
    m0 = torch.special.ndtr(hi) - torch.special.ndtr(lo)
    m1 = plo - phi_
    m2 = m0 + lo * plo - hi * phi_
    return m0, m1, m2


def _away_from_zero(v: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``v`` with entries of modulus < eps moved to ±eps-ish by adding ±eps (keeps dv/dφ)."""
    shift = torch.where(v >= 0, torch.full_like(v, eps), torch.full_like(v, -eps))
    return torch.where(v.abs() < eps, v + shift, v)


def soft_moments(cfg: TeacherStudentConfig, phi: torch.Tensor, tau: float, nodes: int = 48) -> torch.Tensor:
    """``R[s, k, j] = E[π_1^k x̃ x̃ᵀ 1{teacher region j}]`` for k = 0, 1, 2: (S, 3, 2, 3, 3).

    In the rotated coordinates ``s = n(α)·x, t = n(α)^⊥·x`` the gate depends on ``s`` only, so
    for each ``s`` the ``t``-integral (a quadratic against the Gaussian over the teacher's
    half-line in ``t``) is exact, and the remaining smooth ``s``-integral is Gauss–Legendre on
    ``[−9, 9]`` split at ``b ± 12τ`` (the boundary layer gets its own nodes) and where the
    teacher line sweeps through the Gaussian bulk. Differentiable in φ (autograd), so the
    landscape, its gradients and Hessians come from one deterministic formula.
    """
    cfg = _config(cfg)
    tau = check.temperature("tau", tau)
    phi = _phi_batch(phi)
    nodes = check.integer("nodes", nodes, low=1)
    dt = phi.dtype
    alpha, b = phi[:, 0], phi[:, 1]                                     # (S,)
    cs, sn = torch.cos(alpha), torch.sin(alpha)
    ua = cfg.teacher_angle
    un = math.cos(ua) * cs + math.sin(ua) * sn                          # u·n   (S,)
    up = -math.cos(ua) * sn + math.sin(ua) * cs                         # u·n⊥  (S,)
    c = cfg.teacher_offset
    # breakpoints in s (clamped to [−9, 9]); the teacher sweep is bounded by |t| ≤ 9
    # |u·n| or |u·n⊥| below 1e-12 is shifted away from 0 by 1e-12 *additively*: a constant in
    # its place would cut the dependence on α, and autograd would miss the (delta-like) change
    # of the teacher's t-range across s = c/un when the router is parallel to the teacher
    # (found at α = α*: gradient and Hessian wrong there, values right)
    safe_un = _away_from_zero(un)
    safe_up = _away_from_zero(up)
    bps = torch.stack([b - _LAYER * tau, b + _LAYER * tau, (c - 9.0 * safe_up) / safe_un,
                       (c + 9.0 * safe_up) / safe_un], dim=1).clamp(-_T_MAX, _T_MAX)
    edges = torch.cat([torch.full_like(b[:, None], -_T_MAX), torch.sort(bps, dim=1).values,
                       torch.full_like(b[:, None], _T_MAX)], dim=1)     # (S, 6)
    x, w = _leggauss(int(nodes))
    x, w = torch.tensor(x, dtype=dt), torch.tensor(w, dtype=dt)
    lo, hi = edges[:, :-1, None], edges[:, 1:, None]                    # (S, 5, 1)
    s = (0.5 * (hi - lo) * x + 0.5 * (hi + lo)).reshape(len(b), -1)     # (S, N)
    ws = (0.5 * (hi - lo) * w).reshape(len(b), -1) * torch.exp(-0.5 * s ** 2) / math.sqrt(2 * math.pi)
    gate1 = torch.sigmoid((s - b[:, None]) / tau)                       # (S, N)
    # t-moments of the teacher regions: region 1 = {t·up > c − s·un}
    tT = ((c - s * un[:, None]) / safe_up[:, None]).clamp(-40.0, 40.0)
    big = torch.full_like(tT, 40.0)
    pos = (safe_up > 0)[:, None]
    r1 = (torch.where(pos, tT, -big), torch.where(pos, big, tT))
    r2 = (torch.where(pos, -big, tT), torch.where(pos, tT, big))
    # x̃ = s·n̂ + t·p̂ + e with n̂ = (n, 0), p̂ = (n⊥, 0), e = (0, 0, 1): every moment is a
    # combination of the scalar sums I[p, q] = Σ_nodes w_k(s) s^p m_q(s) (m_q: t-moments), so no
    # (S, N, 3, 3) tensor is ever built — that keeps the backward passes cheap.
    one = torch.ones_like(s)
    mom = torch.stack([torch.stack(_trunc_moments_t(lo_t, hi_t), dim=-1) for lo_t, hi_t in (r1, r2)],
                      dim=2)                                            # (S, N, 2 regions, 3 q)
    spow = torch.stack([one, s, s * s], dim=-1)                         # (S, N, 3 p)
    wk = torch.stack([one, gate1, gate1 * gate1], dim=-1) * ws[..., None]   # (S, N, 3 k)
    I = torch.einsum("snk,snjq,snp->skjpq", wk, mom, spow)              # (S, 3, 2, 3, 3)
    zeros = torch.zeros_like(cs)
    nh = torch.stack([cs, sn, zeros], -1)                               # (S, 3)
    ph = torch.stack([-sn, cs, zeros], -1)
    e = torch.zeros_like(nh)
    e[:, 2] = 1.0

    def outer(a, b):
        return a[:, :, None] * b[:, None, :]

    def sym(a, b):
        o = outer(a, b)
        return o + o.transpose(1, 2)

    basis = torch.stack([outer(nh, nh), outer(ph, ph), outer(e, e), sym(nh, ph), sym(nh, e), sym(ph, e)],
                        dim=1)                                          # (S, 6, 3, 3)
    coef = torch.stack([I[..., 2, 0], I[..., 0, 2], I[..., 0, 0], I[..., 1, 1], I[..., 1, 0], I[..., 0, 1]],
                       dim=-1)                                          # (S, 3, 2, 6)
    return torch.einsum("skjm,smab->skjab", coef, basis)


def _risk_from_moments(cfg: TeacherStudentConfig, R: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``L_τ`` (without noise) from :func:`soft_moments`; theta (S, 2, 3) → (S,)."""
    beta = torch.tensor(cfg.beta, dtype=R.dtype)
    E0, E1, E2 = R[:, 0], R[:, 1], R[:, 2]                              # (S, 2, 3, 3)
    fy2 = torch.einsum("ja,sjab,jb->s", beta, E0, beta)
    cx1 = torch.einsum("sjab,jb->sa", E1, beta)                         # E[π x̃ f*]
    cx0 = torch.einsum("sjab,jb->sa", E0, beta)
    G11 = E2.sum(1)                                                     # E[π² x̃x̃ᵀ]
    G12 = (E1 - E2).sum(1)                                              # E[π(1−π) x̃x̃ᵀ]
    G22 = (E0 - 2 * E1 + E2).sum(1)                                     # E[(1−π)² x̃x̃ᵀ]
    t1, t2 = theta[:, 0], theta[:, 1]
    quad = (torch.einsum("sa,sab,sb->s", t1, G11, t1) + 2 * torch.einsum("sa,sab,sb->s", t1, G12, t2)
            + torch.einsum("sa,sab,sb->s", t2, G22, t2))
    lin = (t1 * cx1).sum(-1) + (t2 * (cx0 - cx1)).sum(-1)
    return fy2 - 2 * lin + quad


def soft_risk_quad(cfg: TeacherStudentConfig, theta: torch.Tensor, phi: torch.Tensor, tau: float,
                   nodes: int = 48) -> torch.Tensor:
    """Population ``L_τ(θ, φ)`` by quadrature: theta (S,2,3), phi (S,2) → (S,) (noise included)."""
    R = soft_moments(cfg, phi, tau, nodes)
    check.finite_tensor("theta", theta, ndim=(2, 3))
    check.require(tuple(theta.shape[-2:]) == (2, 3) and theta.numel() == 6 * R.shape[0], "theta.shape",
                  tuple(theta.shape), f"({R.shape[0]}, 2, 3): two affine experts per router")
    return _risk_from_moments(cfg, R, theta.reshape(-1, 2, 3)) + cfg.noise_std ** 2


def soft_refit_quad(cfg: TeacherStudentConfig, phi: torch.Tensor, tau: float, nodes: int = 48):
    """``θ_τ(φ)`` and ``L̄_τ(φ)`` (noise included) by quadrature: (S,2,3), (S,)."""
    R = soft_moments(cfg, phi, tau, nodes)
    beta = torch.tensor(cfg.beta, dtype=R.dtype)
    E0, E1, E2 = R[:, 0], R[:, 1], R[:, 2]
    G11, G12, G22 = E2.sum(1), (E1 - E2).sum(1), (E0 - 2 * E1 + E2).sum(1)
    G = torch.cat([torch.cat([G11, G12], 2), torch.cat([G12.transpose(1, 2), G22], 2)], 1)  # (S,6,6)
    cx1 = torch.einsum("sjab,jb->sa", E1, beta)
    cx0 = torch.einsum("sjab,jb->sa", E0, beta)
    cvec = torch.cat([cx1, cx0 - cx1], 1)                               # (S, 6)
    theta = torch.linalg.solve(G, cvec[..., None])[..., 0]
    fy2 = torch.einsum("ja,sjab,jb->s", beta, E0, beta)
    return theta.reshape(-1, 2, 3), fy2 - (cvec * theta).sum(-1) + cfg.noise_std ** 2
