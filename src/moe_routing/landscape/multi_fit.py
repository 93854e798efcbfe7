"""The K-region model's fits on the fixed sample and their errors against the teacher.

The objectives of :mod:`.multi_region`'s model (same notation and shapes): the gates of a
router, the soft risk ``L_τ(θ, φ)``, the closed-form refits ``θ_τ(φ)`` (soft) and ``θ_0(φ)``
(hard, per cell), the errors of a student against the teacher (cells against regions,
experts against experts), and the K = 2 specialisation checked against the two-region code.
Every public function checks its arguments with :mod:`moe_routing._internal.validation` before any work.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from .._internal import validation as check
from .common import features, sobol_normal
from .multi_region import (MultiRegionTeacher, _chart_tensor, _dims, chart_points,
                           from_two_region, logits_from_phi)

RIDGE = 1e-10          # ours: added to the refit's Gram matrix so that a (nearly) empty cell
                       # gives a finite expert instead of a singular solve; shifts L̄ by < 1e-9


def _sample(X, fstar) -> None:
    """The fixed sample: inputs X (n, d) and teacher values f*(X) (n,), finite tensors."""
    check.finite_tensor("X", X, ndim=2)
    check.finite_tensor("fstar", fstar, shape=(X.shape[0],))


def two_region_agreement(taus, seed: int, n: int = 2 ** 14) -> float:
    """``max |L_τ(this module) − L_τ(teacher_student)|`` for the K = 2 teacher of
    :class:`.two_region.TeacherStudentConfig`, on one sample, over four fixed routers
    (both charts: angle and offset (α, b) there, ``V = n(α)/√2, e = −b/√2`` here), seeded
    random experts and every τ in ``taus``: the K-region code specialised to two regions is the
    two-region code (a value at rounding level says so; anything larger is a bug)."""
    from .two_region import TeacherStudentConfig
    from .teacher_student import soft_risk as soft_risk_k2

    taus = check.temperatures("taus", taus)
    seed = check.integer("seed", seed, low=0)
    cfg = TeacherStudentConfig()
    t2 = from_two_region(cfg)
    X = sobol_normal(n, 2, seed)
    theta = torch.randn(4, 2, 3, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(seed))
    ab = torch.tensor([[0.4, 0.1], [1.3, -0.5], [2.5, 1.0], [0.05, 0.31]], dtype=torch.float64)
    nv = torch.stack([ab[:, 0].cos(), ab[:, 0].sin()], 1)
    phi = torch.cat([nv / math.sqrt(2), -ab[:, 1:] / math.sqrt(2)], 1)
    return max(float((soft_risk(theta, phi, float(t), X, t2.fstar(X))
                      - soft_risk_k2(theta, ab, float(t), X, cfg.fstar(X))).abs().max())
               for t in taus)


# --------------------------------------------------------------------------------------------
# Objectives on the fixed sample
# --------------------------------------------------------------------------------------------

def gates(X: torch.Tensor, phi: torch.Tensor, tau: float, K: int) -> torch.Tensor:
    """``π_τ = softmax(a/τ)`` for S routers: X (n,d), phi (S,M) → (S, n, K)."""
    tau = check.temperature("tau", tau)
    check.finite_tensor("X", X, ndim=2)
    W, b = logits_from_phi(phi, K, X.shape[1])
    A = torch.einsum("nd,skd->snk", X, W) + b[:, None, :]
    return torch.softmax(A / tau, dim=-1)


def soft_risk(theta: torch.Tensor, phi: torch.Tensor, tau: float, X: torch.Tensor, fstar: torch.Tensor,
              noise_var: float = 0.0) -> torch.Tensor:
    """``L_τ(θ, φ)`` on the sample: theta (S,K,p), phi (S,M) → (S,). ``noise_var`` adds σ²."""
    _sample(X, fstar)
    p = X.shape[1] + 1
    check.finite_tensor("theta", theta, ndim=3)
    K = theta.shape[1]
    check.require(K >= 2 and theta.shape[2] == p, "theta.shape", tuple(theta.shape),
                  f"(S, K, {p}) with K ≥ 2 affine experts")
    S = _chart_tensor("phi", phi, K, X.shape[1]).shape[0]
    check.require(theta.shape[0] == S, "theta.shape", tuple(theta.shape),
                  f"({S}, {K}, {p}): one set of experts per router in phi")
    noise_var = check.number("noise_var", noise_var, low=0)
    P = gates(X, phi, tau, K)                                           # (S, n, K)
    F = torch.einsum("np,skp->snk", features(X), theta)                 # (S, n, K)
    m = (P * F).sum(-1)
    return ((fstar[None] - m) ** 2).mean(1) + noise_var


def _sample_moments(X: torch.Tensor, fstar: torch.Tensor):
    """Per-point products that the refit needs, computed once per sample: the distinct entries
    of ``x̃x̃ᵀ`` (n, p(p+1)/2) with their (row, col) indices, and ``x̃ f*`` (n, p)."""
    Xt = features(X)
    p = Xt.shape[1]
    iu = torch.triu_indices(p, p)
    return Xt[:, iu[0]] * Xt[:, iu[1]], iu, Xt * fstar[:, None]


def soft_refit(phi: torch.Tensor, tau: float, X: torch.Tensor, fstar: torch.Tensor, K: int,
               ridge: float = RIDGE, moments=None, return_gram: bool = False):
    """``θ_τ(φ) = argmin_θ L_τ(θ, φ)`` on the sample (least squares on ``z = (π_k x̃)_k``).

    Returns ``(theta (S,K,p), profiled risk without noise (S,))``; differentiable in φ.

    The Gram matrix ``E[z zᵀ]`` has blocks ``E[π_k π_l x̃x̃ᵀ]``: it is assembled from the
    K(K+1)/2 gate products against the p(p+1)/2 distinct feature products (one small matmul),
    never from the (S, n, K·p) design matrix of :func:`soft_refit_reference` (less memory
    traffic in the double backward passes that the Hessians need; the speed-up is measured by
    ``benchmarks/bench_landscape_multi.py``).  ``moments``: the per-sample products of
    :class:`.profiled.ProfiledObjective` (``obj.moments``), computed once per sample.
    ``return_gram``: also return the gates ``P`` (S, n, K) and the ridged Gram matrix ``G``
    (S, K·p, K·p), which the closed-form Hessian of :mod:`.profiled` reuses.
    """
    _sample(X, fstar)
    ridge = check.number("ridge", ridge, low=0)
    return_gram = check.flag("return_gram", return_gram)
    P = gates(X, phi, tau, K)                                           # (S, n, K)
    n = P.shape[1]
    if moments is not None:
        p_ = X.shape[1] + 1
        check.require(isinstance(moments, tuple) and len(moments) == 3, "moments", moments,
                      "the (Q, iu, XF) products of ProfiledObjective.moments")
        check.finite_tensor("moments[0]", moments[0], shape=(n, p_ * (p_ + 1) // 2))
        check.finite_tensor("moments[2]", moments[2], shape=(n, p_))
    Q, iu, XF = moments if moments is not None else _sample_moments(X, fstar)
    ku = torch.triu_indices(K, K)
    PP = P[..., ku[0]] * P[..., ku[1]]                                  # (S, n, K(K+1)/2)
    Gu = PP.transpose(1, 2) @ Q                                         # (S, K(K+1)/2, p(p+1)/2)
    c = P.transpose(1, 2) @ XF                                          # (S, K, p)
    G, theta, risk = _normal_solve(Gu, c, n, ridge, (fstar ** 2).mean())
    if return_gram:
        return theta, risk, P, G
    return theta, risk


def _normal_solve(Gu: torch.Tensor, c: torch.Tensor, n: int, ridge: float, f2):
    """The last step of every soft refit: from the sums over the ``n`` sample points of the
    gate-pair × feature-pair products ``Gu`` (S, K(K+1)/2, p(p+1)/2) and of the gated targets
    ``c`` (S, K, p), the ridged Gram matrix ``G`` (S, K·p, K·p), the least-squares ``theta``
    (S, K, p) and the profiled risk ``f2 − cᵀθ`` (S,) (``f2 = E[f*²]``).  One function for
    :func:`soft_refit` (differentiable) and the blocked, no-autograd refit of
    :class:`.profiled.ProfiledObjective`, so that both solve the same normal equations."""
    S, K, p = c.shape
    G = (Gu / n).reshape(S, -1)[:, _gram_index(K, p)].reshape(S, K * p, K * p)
    G = G + ridge * torch.eye(K * p, dtype=G.dtype)
    cf = (c / n).reshape(S, K * p)                                      # (S, K·p)
    theta = torch.linalg.solve(G, cf[..., None])[..., 0]                # (S, K·p)
    return G, theta.reshape(S, K, p), f2 - (cf * theta).sum(-1)


def soft_refit_reference(phi: torch.Tensor, tau: float, X: torch.Tensor, fstar: torch.Tensor, K: int,
                         ridge: float = RIDGE):
    """The readable reference of :func:`soft_refit`: build the design matrix
    ``Z = (π_1 x̃, …, π_K x̃)`` (S, n, K·p) and solve the normal equations. Same outputs; kept
    for tests and for ``benchmarks/bench_landscape_multi.py``."""
    _sample(X, fstar)
    ridge = check.number("ridge", ridge, low=0)
    P = gates(X, phi, tau, K)                                           # (S, n, K)
    Xt = features(X)
    n, p = Xt.shape
    Z = (P[..., None] * Xt[None, :, None, :]).reshape(P.shape[0], n, K * p)   # (S, n, K·p)
    G = Z.transpose(1, 2) @ Z / n + ridge * torch.eye(K * p, dtype=P.dtype)
    c = torch.einsum("snq,n->sq", Z, fstar) / n
    theta = torch.linalg.solve(G, c[..., None])[..., 0]
    return theta.reshape(-1, K, p), (fstar ** 2).mean() - (c * theta).sum(-1)


@lru_cache(maxsize=32)
def _gram_index(K: int, p: int) -> torch.Tensor:
    """Flat index into (K(K+1)/2 gate pairs) × (p(p+1)/2 feature pairs) of every entry
    ``((k, i), (l, j))`` of the symmetric (K·p)² Gram matrix: (K²p²,) long."""
    def tri(K_):
        t = torch.zeros(K_, K_, dtype=torch.long)
        iu = torch.triu_indices(K_, K_)
        t[iu[0], iu[1]] = torch.arange(iu.shape[1])
        t[iu[1], iu[0]] = torch.arange(iu.shape[1])
        return t
    tk, tp = tri(K), tri(p)
    npp = p * (p + 1) // 2
    idx = tk[:, None, :, None] * npp + tp[None, :, None, :]             # (K, p, K, p)
    return idx.reshape(-1)


def hard_refit(phi: np.ndarray, X: torch.Tensor, fstar: torch.Tensor, K: int, ridge: float = RIDGE):
    """Hard cells ``C_k = {k = argmax a}``, per-cell least squares; returns ``(theta (K,p),
    L̄_0 without noise)``. On a fixed sample this is piecewise *constant* in φ (it changes only
    when a sample point changes cell), so only its values are meaningful, not its derivatives."""
    _sample(X, fstar)
    K, d = _dims(K, X.shape[1])
    ridge = check.number("ridge", ridge, low=0)
    ph = torch.as_tensor(chart_points(phi, K, d, name="phi", single=True), dtype=X.dtype).reshape(1, -1)
    W, b = logits_from_phi(ph, K, X.shape[1])
    cell = (X @ W[0].T + b[0]).argmax(1)
    Xt = features(X)
    n, p = Xt.shape
    theta = torch.zeros(K, p, dtype=X.dtype)
    sse = torch.zeros((), dtype=X.dtype)
    for k in range(K):
        idx = cell == k
        A, y = Xt[idx], fstar[idx]
        G = A.T @ A / n + ridge * torch.eye(p, dtype=X.dtype)
        theta[k] = torch.linalg.solve(G, A.T @ y / n)
        sse = sse + ((y - A @ theta[k]) ** 2).sum() / n
    return theta.numpy(), float(sse)


# --------------------------------------------------------------------------------------------
# Recovery errors
# --------------------------------------------------------------------------------------------

def confusion(phi, teacher: MultiRegionTeacher, X: torch.Tensor) -> np.ndarray:
    """``M[k, j] = P(C_k(φ) ∩ T_j)`` on the sample X (hard student cells vs teacher regions)."""
    check.instance("teacher", teacher, MultiRegionTeacher, "a MultiRegionTeacher")
    K = teacher.K
    check.finite_tensor("X", X, shape=(None, teacher.d))
    ph = torch.as_tensor(chart_points(phi, K, teacher.d, name="phi", single=True),
                         dtype=X.dtype).reshape(1, -1)
    W, b = logits_from_phi(ph, K, X.shape[1])
    cell = (X @ W[0].T + b[0]).argmax(1).numpy()
    reg = teacher.region(X).numpy()
    return np.bincount(cell * K + reg, minlength=K * K).reshape(K, K) / X.shape[0]


def best_permutation(M: np.ndarray) -> np.ndarray:
    """``π`` with student cell k ↔ teacher region π[k], maximising the agreeing mass."""
    M = check.finite_array("M", M, ndim=2)
    check.require(M.shape[0] == M.shape[1], "M.shape", M.shape, "a square (K, K) confusion matrix")
    rows, cols = linear_sum_assignment(-M)
    perm = np.empty(M.shape[0], dtype=int)
    perm[rows] = cols
    return perm


def partition_error(phi, teacher: MultiRegionTeacher, X: torch.Tensor) -> float:
    """``min_π P(cell ≠ π⁻¹(region))``: mass of disagreement after the best relabelling."""
    M = confusion(phi, teacher, X)
    perm = best_permutation(M)
    return float(1.0 - M[np.arange(len(perm)), perm].sum())


def expert_error(theta, phi, teacher: MultiRegionTeacher, X: torch.Tensor) -> float:
    """``max_k |θ_k − β_π(k)|`` for the relabelling π that best matches the partitions."""
    perm = best_permutation(confusion(phi, teacher, X))
    theta = check.finite_array("theta", theta, shape=teacher.beta.shape)
    return float(np.linalg.norm(theta - teacher.beta[perm], axis=1).max())


def describe_partition(phi, teacher: MultiRegionTeacher, X: torch.Tensor, share: float = 0.15) -> str:
    """Which teacher regions each student cell covers (those holding ≥ ``share`` of the cell's
    mass), e.g. ``"{1}{2}{3}"`` for the teacher, ``"{1,2}{3}{3}"`` for a merge and a split;
    cells sorted; an empty cell is ``{}``."""
    share = check.number("share", share, low=0, high=1, low_open=True)
    M = confusion(phi, teacher, X)
    parts = []
    for k in range(teacher.K):
        tot = M[k].sum()
        cov = [j + 1 for j in range(teacher.K) if tot > 0 and M[k, j] >= share * tot]
        parts.append("{" + ",".join(map(str, cov)) + "}")
    return "".join(sorted(parts))
