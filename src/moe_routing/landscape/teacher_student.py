"""Teacher–student MoE regression for the landscape-transfer theorem (paper B, Theorem 5.17).

The setting (our concrete instance of the paper's teacher–student model):

* input ``X ~ N(0, I_2)``, features ``x̃ = (x_1, x_2, 1)`` (affine experts);
* teacher: K = 2 regions split by the line ``{n(α*)·x = b*}``, ``n(α) = (cos α, sin α)``, with
  affine experts ``β_1`` on ``{n(α*)·x > b*}`` and ``β_2`` on the other side, plus independent
  noise of variance σ² (it adds σ² to every risk and drops out of every gradient, so it is
  carried analytically instead of being sampled);
* student: two affine experts ``θ_k`` and a *fixed-scale* linear router in the chart
  ``φ = (α, b)``: ``g(x) = n(α)·x − b`` (so ``|∇g| = 1`` and the temperature τ is the width of
  the boundary layer in input units), soft gate ``π_1 = σ(g/τ)``, hard cell ``C_1 = {g > 0}``.

Why this chart: hard routing is invariant to positive rescaling of the logits, and a free scale
would make ``L_τ(θ, s·φ) = L_{τ/s}(θ, φ)`` — τ would then mean nothing. Fixing ``|∇g| = 1`` is the
compact router set the theorem asks for. The chart covers each partition twice:
``(α, b)`` and ``(α + π, −b)`` describe the same line with the cells swapped (the permutation
symmetry of the experts).

Two ways to evaluate population quantities, both used:

* **hard** objective ``L_0`` and profiled ``L̄_0(φ) = min_θ L_0(θ, φ)``: deterministic quadrature.
  Rotating to ``s = n(α)·x, t = n(α)^⊥·x`` (independent N(0,1)), the integral over ``s`` of a
  quadratic against the Gaussian on an interval is exact (truncated normal moments), and the
  integral over ``t`` is Gauss–Legendre on ``[−T, T]`` split at the point where the teacher line
  crosses the student line (the only kink). Error: below 1e-10 at the default 96 nodes per
  piece (checked against 192 nodes in the tests).
* **soft** objective ``L_τ``: a fixed sample of scrambled-Sobol normal inputs (common random
  numbers: every φ, θ, τ sees the same points, so the landscape is a smooth function that
  autograd can differentiate twice). Its error is measured by independent replicate samples.

Shapes: ``n`` samples, ``S`` router parameters evaluated at once.  Every public function checks
its arguments with :mod:`moe_routing.validation` (finite tensors of the stated shapes, τ > 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from scipy.special import ndtr

from .. import validation as check
from .common import features

_T_MAX = 9.0           # |t| beyond this carries Gaussian mass < 2e-19
_S_BIG = 40.0          # stands in for ±∞ in the truncated moments


def normal(alpha) -> np.ndarray:
    """``n(α) = (cos α, sin α)``: the unit normal of the router line at angle α, (2,)."""
    alpha = check.number("alpha", alpha)
    return np.array([math.cos(alpha), math.sin(alpha)])


def normal_perp(alpha) -> np.ndarray:
    """``d n(α)/dα``: the unit vector along the router line, (2,)."""
    alpha = check.number("alpha", alpha)
    return np.array([-math.sin(alpha), math.cos(alpha)])


def routers(phi, *, name: str = "phi", allow_empty: bool = False) -> np.ndarray:
    """Routers ``(α, b)`` of this chart as a finite (S, 2) float array (one router (2,) gives
    S = 1): the argument check of every function that takes a batch of routers."""
    check.instance("name", name, str, "the argument's name, a string")
    a = check.finite_array(name, phi, ndim=(1, 2), nonempty=not check.flag("allow_empty", allow_empty))
    check.require(a.shape[-1] == 2 or a.size == 0, f"{name}.shape", a.shape, "(S, 2) or (2,): routers (α, b)")
    return a.reshape(-1, 2)


def _phi_point(phi) -> np.ndarray:
    """One router ``(α, b)`` as a finite (2,) array."""
    return check.finite_array("phi", phi, shape=(2,))


def _phi_batch(phi: torch.Tensor) -> torch.Tensor:
    """S routers as a finite torch tensor (S, 2) (one router (2,) is reshaped)."""
    check.finite_tensor("phi", phi, ndim=(1, 2))
    check.require(phi.shape[-1] == 2, "phi.shape", tuple(phi.shape), "(S, 2) or (2,): routers (α, b)")
    return phi.reshape(-1, 2)


def _sample(X: torch.Tensor, fstar: torch.Tensor) -> None:
    """The fixed sample: inputs X (n, 2) and teacher values f*(X) (n,), finite."""
    check.finite_tensor("X", X, shape=(None, 2))
    check.finite_tensor("fstar", fstar, shape=(X.shape[0],))


@dataclass(frozen=True)
class TeacherStudentConfig:
    """The teacher: line ``{n(α*)·x = b*}``, experts ``β_1`` (on ``n·x > b*``) and ``β_2``
    (rows ``(w_1, w_2, intercept)``), noise std σ.

    A teacher whose two experts coincide has no partition to recover (ValueError); so has one
    whose line leaves (nearly) all the Gaussian mass on one side, |b*| > 3.
    """

    teacher_angle: float = 0.0
    teacher_offset: float = 0.3
    beta1: tuple = (1.0, 1.0, 0.8)
    beta2: tuple = (-1.0, -0.5, -0.4)
    noise_std: float = 0.1

    def __post_init__(self):
        b1 = check.finite_array("beta1", self.beta1, shape=(3,))
        b2 = check.finite_array("beta2", self.beta2, shape=(3,))
        check.require(not np.allclose(b1, b2, rtol=0, atol=1e-12), "beta2", self.beta2,
                      "an expert different from beta1 (degenerate teacher: beta1 == beta2 leaves no "
                      "partition to recover)")
        object.__setattr__(self, "teacher_angle", check.number("teacher_angle", self.teacher_angle))
        object.__setattr__(self, "teacher_offset", check.number(
            "teacher_offset", self.teacher_offset, low=-3.0, high=3.0))
        object.__setattr__(self, "noise_std", check.number("noise_std", self.noise_std, low=0))
        object.__setattr__(self, "beta1", tuple(b1.tolist()))
        object.__setattr__(self, "beta2", tuple(b2.tolist()))

    @property
    def beta(self) -> np.ndarray:
        return np.array([self.beta1, self.beta2], dtype=float)           # (2, 3)

    @property
    def teacher_phi(self) -> np.ndarray:
        return np.array([self.teacher_angle, self.teacher_offset])

    def teacher_equivalents(self) -> np.ndarray:
        """Both chart coordinates of the teacher partition: (2, 2)."""
        a, b = self.teacher_angle, self.teacher_offset
        return np.array([[a, b], [a + math.pi, -b]])

    def fstar(self, X: torch.Tensor) -> torch.Tensor:
        """Teacher regression function ``f*(x) = E[Y | x]`` at X (n, 2) → (n,)."""
        check.finite_tensor("X", X, shape=(None, 2))
        u = torch.tensor(normal(self.teacher_angle), dtype=X.dtype)
        Xt = features(X)
        b = torch.tensor(self.beta, dtype=X.dtype)
        return torch.where(X @ u > self.teacher_offset, Xt @ b[0], Xt @ b[1])


def wrap_phi(phi) -> np.ndarray:
    """Canonical chart coordinates: α ∈ [0, π), using (α, b) ≡ (α + π, −b)."""
    phi = _phi_point(phi)
    a, b = float(phi[0]), float(phi[1])
    k = math.floor(a / math.pi)
    a -= k * math.pi
    if k % 2:
        b = -b
    return np.array([a, b])


# --------------------------------------------------------------------------------------------
# Soft objective on a fixed sample (torch, differentiable)
# --------------------------------------------------------------------------------------------

def gate(X: torch.Tensor, phi: torch.Tensor, tau: float) -> torch.Tensor:
    """``π_1 = σ(g/τ)`` for S routers at once. X (n,2), phi (S,2) → (n,S)."""
    tau = check.temperature("tau", tau)
    check.finite_tensor("X", X, shape=(None, 2))
    check.finite_tensor("phi", phi, shape=(None, 2))
    a, b = phi[:, 0], phi[:, 1]
    g = X[:, :1] * torch.cos(a) + X[:, 1:] * torch.sin(a) - b           # (n, S)
    return torch.sigmoid(g / tau)


def soft_risk(theta: torch.Tensor, phi: torch.Tensor, tau: float, X: torch.Tensor,
              fstar: torch.Tensor, noise_var: float = 0.0) -> torch.Tensor:
    """``L_τ(θ, φ) = E[(Y − π_1 θ_1·x̃ − π_2 θ_2·x̃)²]`` (mixture of predictions).

    theta (S,2,3), phi (S,2) → (S,). ``noise_var`` adds the analytic σ².
    """
    tau = check.temperature("tau", tau)
    _sample(X, fstar)
    check.finite_tensor("phi", phi, shape=(None, 2))
    check.finite_tensor("theta", theta, shape=(phi.shape[0], 2, 3))
    noise_var = check.number("noise_var", noise_var, low=0)
    P = gate(X, phi, tau)                                               # (n, S)
    F = torch.einsum("nc,skc->nsk", features(X), theta)                 # (n, S, 2)
    m = P * F[..., 0] + (1 - P) * F[..., 1]
    return ((fstar[:, None] - m) ** 2).mean(0) + noise_var


def soft_refit(phi: torch.Tensor, tau: float, X: torch.Tensor, fstar: torch.Tensor):
    """Closed-form ``θ_τ(φ) = argmin_θ L_τ(θ, φ)``: least squares on the features
    ``z = (π_1 x̃, π_2 x̃)``. Returns ``(theta (S,2,3), profiled risk without noise (S,))``;
    differentiable in φ (the profiled soft objective ``L̄_τ``)."""
    tau = check.temperature("tau", tau)
    _sample(X, fstar)
    P = gate(X, phi, tau)                                               # (n, S)
    Xt = features(X)                                                    # (n, 3)
    Z = torch.cat([P[..., None] * Xt[:, None, :], (1 - P)[..., None] * Xt[:, None, :]], dim=2)  # (n,S,6)
    n = X.shape[0]
    G = torch.einsum("nsi,nsj->sij", Z, Z) / n                          # (S, 6, 6)
    c = torch.einsum("nsi,n->si", Z, fstar) / n                         # (S, 6)
    theta = torch.linalg.solve(G, c[..., None])[..., 0]                 # (S, 6)
    risk = (fstar ** 2).mean() - (c * theta).sum(-1)
    return theta.reshape(-1, 2, 3), risk


def profiled_soft(phi: torch.Tensor, tau: float, X: torch.Tensor, fstar: torch.Tensor,
                  noise_var: float = 0.0) -> torch.Tensor:
    """``L̄_τ(φ) = min_θ L_τ(θ, φ)``, (S,2) → (S,)."""
    noise_var = check.number("noise_var", noise_var, low=0)
    return soft_refit(phi, tau, X, fstar)[1] + noise_var


# --------------------------------------------------------------------------------------------
# Hard objective by semi-analytic quadrature (numpy)
# --------------------------------------------------------------------------------------------

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


def _config(cfg) -> TeacherStudentConfig:
    return check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")


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


# --------------------------------------------------------------------------------------------
# Soft objective by quadrature (torch, differentiable, vectorised over S routers)
# --------------------------------------------------------------------------------------------

_LAYER = 12.0          # the dense piece around Σ spans b ± 12τ (gate within e^-12 of 0/1 outside)


def _trunc_moments_t(lo, hi):
    """Torch version of :func:`_trunc_moments` (j = 0, 1, 2), differentiable in lo and hi."""
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
