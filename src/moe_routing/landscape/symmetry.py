"""Symmetry breaking in the two-expert Gaussian model (paper B, Proposition 6.3).

Model (paper B, Proposition 6.3; notation of the book's derivation): ``X ~ N(0, I_d)``; the teacher is
``Y = β_1·X`` on ``{u·X > 0}`` and ``β_2·X`` on ``{u·X < 0}`` (``|u| = 1``: the teacher separator).
Two linear experts ``f_k = θ_k·X`` and a binary softmax router with temperature τ,
``π_1 = σ(w·X / τ)``; the soft prediction is the mixture ``m_τ = π_1 f_1 + (1 − π_1) f_2``.
With ``θ̄ = (θ_1 + θ_2)/2`` and ``δ = θ_1 − θ_2``,

    m_τ = θ̄·X + (π_1 − ½) δ·X,

so at exact symmetry (``δ = 0``) the output does not depend on the router at all.

Linearising the population gradient flow ``ż = −∇L_τ(z)`` of ``L_τ = E[(Y − m_τ)²]`` (no factor
½: this fixes the time unit) at ``w = 0, δ = 0, θ̄ = (β_1 + β_2)/2`` gives (our derivation)

    ẇ = M δ / (2τ),   δ̇ = M w / τ,   M = E[(Y − θ̄·X) X Xᵀ],

whose eigenvalues are ``± λ_i(M) / (√2 τ)`` with eigenvectors ``(v_i, ±√2 v_i)``: every non-zero
eigenvalue of ``M`` is an unstable mode and its rate scales as ``1/τ``. With
``γ = (β_1 − β_2)/2``, ``γ_u = γ·u``, ``γ_⊥ = γ − γ_u u`` and ``c = √(2/π)`` (our derivation)

    M = c [ γ_u (I + u uᵀ) + u γ_⊥ᵀ + γ_⊥ uᵀ ].

The paper states the instability, the alignment with the separator and the ``1/τ`` amplification
(Proposition 6.3); the explicit ``M``, the ``√2`` and the time convention are the book's own.

Shapes: ``n`` samples, ``d`` input dimension, ``B`` trajectories simulated together.  Public
functions check their arguments with :mod:`moe_routing._internal.validation` before any work starts; the
RK4 loop then runs on the checked tensors without re-checking them at every stage.  The flow
and its fits are :mod:`.symmetry_flow`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .._internal import validation as check

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SAMPLING_METHODS = ("iid", "sobol")


def _unit(u, name: str = "u") -> np.ndarray:
    u = check.finite_array(name, u, ndim=1)
    nrm = float(np.linalg.norm(u))
    check.require(nrm >= 1e-12, name, u, "a non-zero vector (the teacher separator)")
    return u / nrm


def _square(M) -> np.ndarray:
    """M as a finite square (d, d) array."""
    M = check.finite_array("M", M, ndim=2)
    check.require(M.shape[0] == M.shape[1], "M.shape", M.shape, "a square matrix (d, d)")
    return M


def _symmetric(M) -> np.ndarray:
    """M as a finite symmetric (d, d) array (its eigenvectors are then orthonormal)."""
    M = _square(M)
    check.require(bool(np.allclose(M, M.T)), "M", M, "a symmetric matrix (the operator E[r X Xᵀ])")
    return M


@dataclass(frozen=True)
class TwoExpertGaussian:
    """The teacher of Proposition 6.3: separator ``u`` (normalised here) and experts β_1, β_2.

    A teacher with ``β_1 = β_2`` is one linear map: there is no separator to discover and the
    model is rejected (ValueError) rather than silently giving ``M = 0``.
    """

    u: tuple
    beta1: tuple
    beta2: tuple
    noise_std: float = 0.0
    d: int = field(init=False)

    def __post_init__(self):
        u = _unit(self.u)
        b1 = check.finite_array("beta1", self.beta1, shape=u.shape)
        b2 = check.finite_array("beta2", self.beta2, shape=u.shape)
        check.require(not np.allclose(b1, b2, rtol=0.0, atol=1e-12), "beta2", self.beta2,
                      "an expert different from beta1 (degenerate teacher: beta1 == beta2 is a single "
                      "linear map with no separator; M = 0 and nothing can break symmetry)")
        object.__setattr__(self, "noise_std", check.number("noise_std", self.noise_std, low=0))
        object.__setattr__(self, "u", tuple(u.tolist()))
        object.__setattr__(self, "beta1", tuple(b1.tolist()))
        object.__setattr__(self, "beta2", tuple(b2.tolist()))
        object.__setattr__(self, "d", int(u.size))

    @classmethod
    def abs_teacher(cls, d: int, u=None) -> "TwoExpertGaussian":
        """The teacher ``Y = |u·X|`` (β_1 = u, β_2 = −u), for which ``M = √(2/π)(I + u uᵀ)``."""
        d = check.integer("d", d, low=1)
        u = np.eye(d)[0] if u is None else _unit(u)
        check.require(u.shape == (d,), "u.shape", u.shape, f"({d},) to match d = {d}")
        return cls(u=tuple(u), beta1=tuple(u), beta2=tuple(-u))

    def arrays(self):
        return np.array(self.u), np.array(self.beta1), np.array(self.beta2)

    def sample(self, n: int, seed: int, dtype=torch.float64, method: str = "iid"):
        """``n`` draws ``(X, Y)`` (torch), from a seeded generator (common random numbers).

        ``method="iid"``: independent normals (the reference; what :func:`m_operator_mc`'s
        standard errors assume).  ``method="sobol"``: a scrambled Sobol' sequence mapped to
        N(0, I) by the inverse normal CDF — an *empirical population* whose averages of the
        (piecewise smooth) integrands of the flow converge at ≈ n^(−3/4 … −1) instead of
        n^(−1/2): 2^16 such points reproduce the operator M closer than 10^6 independent draws
        (``benchmarks/bench_paper_profile.py`` measures both), at 1/15 of the cost of every
        gradient.  Use a power of two for ``n`` (the sequence's balance properties hold for
        those; other sizes are refused).  Noise, if any, stays i.i.d.
        """
        n = check.integer("n", n, low=2)
        seed = check.integer("seed", seed, low=0)
        check.require(dtype in (torch.float32, torch.float64), "dtype", dtype,
                      "torch.float32 or torch.float64")
        check.choice("method", method, SAMPLING_METHODS)
        g = torch.Generator().manual_seed(seed)
        u, b1, b2 = (torch.tensor(a, dtype=dtype) for a in self.arrays())
        if method == "iid":
            X = torch.randn(int(n), self.d, generator=g, dtype=dtype)   # (n, d)
        else:
            check.require(n & (n - 1) == 0, "n", n,
                          "a power of two for method='sobol' (e.g. 2**16 = 65536)")
            from scipy.special import ndtri
            from scipy.stats import qmc

            pts = qmc.Sobol(self.d, scramble=True, seed=seed).random(int(n))  # (n, d) in (0,1)
            X = torch.as_tensor(ndtri(pts), dtype=dtype)               # (n, d)
        Y = torch.where(X @ u > 0, X @ b1, X @ b2)                       # (n,)
        if self.noise_std > 0:
            Y = Y + self.noise_std * torch.randn(int(n), generator=g, dtype=dtype)
        return X, Y


def m_operator_closed_form(model: TwoExpertGaussian) -> np.ndarray:
    """``M = E[(Y − θ̄·X) X Xᵀ]`` at ``θ̄ = (β_1+β_2)/2`` in closed form (our derivation). (d, d)"""
    check.instance("model", model, TwoExpertGaussian, "a TwoExpertGaussian")
    u, b1, b2 = model.arrays()
    gamma = 0.5 * (b1 - b2)
    gu = float(gamma @ u)
    gperp = gamma - gu * u
    eye = np.eye(model.d)
    return SQRT_2_OVER_PI * (gu * (eye + np.outer(u, u)) + np.outer(u, gperp) + np.outer(gperp, u))


def m_operator_mc(X: torch.Tensor, Y: torch.Tensor, theta_bar=None, *, reference: bool = False):
    """Monte Carlo ``M_n = (1/n) Σ (Y_i − θ̄·X_i) X_i X_iᵀ`` and the standard error of each entry.

    ``θ̄`` defaults to the sample least-squares fit, which is the stationary expert mean of the
    *sample* gradient flow (so ``M_n`` is exactly the operator that flow linearises around).
    Returns ``(M_n, se, theta_bar)`` as numpy arrays of shapes (d, d), (d, d), (d,).  Needs
    n ≥ 2 samples (a standard error from one is undefined).  The moments come from two
    (d, n) @ (n, d) products; ``reference=True`` forms the (n, d, d) tensor of terms instead
    (the readable path the tests compare against; 9× the memory at d = 3).
    """
    Xa = check.finite_array("X", X, ndim=2)
    n, d = Xa.shape
    check.require(n >= 2, "X.shape", Xa.shape, "(n, d) with n ≥ 2 samples")
    check.finite_array("Y", Y, shape=(n,))
    X = torch.as_tensor(X, dtype=torch.float64)
    Y = torch.as_tensor(Y, dtype=torch.float64)
    if theta_bar is None:
        theta_bar = torch.linalg.lstsq(X, Y[:, None]).solution[:, 0]
    else:
        check.finite_array("theta_bar", theta_bar, shape=(d,))
    theta_bar = torch.as_tensor(theta_bar, dtype=torch.float64)
    reference = check.flag("reference", reference)
    r = Y - X @ theta_bar                                               # (n,)
    if reference:
        terms = r[:, None, None] * X[:, :, None] * X[:, None, :]        # (n, d, d)
        M = terms.mean(0)
        se = terms.std(0) / math.sqrt(n)
        return M.numpy(), se.numpy(), theta_bar.numpy()
    # the same two moments by two (d, n) @ (n, d) products, without the (n, d, d) tensor
    rX = r[:, None] * X                                                 # (n, d)
    M = (rX.T @ X) / n                                                  # (d, d)
    X2 = X * X
    m2 = ((rX * rX).T @ X2) / n                                         # E[r² X_i² X_j²]
    var = (m2 - M * M).clamp_min(0.0) * (n / (n - 1))
    return M.numpy(), (var.sqrt() / math.sqrt(n)).numpy(), theta_bar.numpy()


def linear_growth_rates(M: np.ndarray, tau) -> np.ndarray:
    """Eigenvalues ``± λ_i(M)/(√2 τ)`` of the linearised router/contrast system, sorted descending.

    Shape ``(len(tau), 2d)``. Computed from the block matrix ``(1/τ)[[0, M/2], [M, 0]]`` itself,
    not from the formula, so a test can check the formula against it.
    """
    taus = check.temperatures("tau", tau)
    M = _square(M)
    d = M.shape[0]
    A = np.block([[np.zeros((d, d)), 0.5 * M], [M, np.zeros((d, d))]])
    ev = np.sort(np.linalg.eigvals(A).real)[::-1]
    return np.stack([ev / t for t in taus])


def top_direction(M: np.ndarray) -> np.ndarray:
    """Unit eigenvector of the eigenvalue of largest *modulus* of the symmetric M.

    Both signs of ``λ_i(M)`` give an unstable mode of the linearised system (rates
    ``|λ_i|/(√2τ)``, eigenvectors ``(v_i, ±√2 v_i)``), so the fastest router direction belongs to
    the largest ``|λ_i|``, which need not be the largest ``λ_i``.
    """
    vals, vecs = np.linalg.eigh(_symmetric(M))
    return vecs[:, int(np.argmax(np.abs(vals)))]


def fastest_rate_times_tau(M: np.ndarray) -> float:
    """``max_i |λ_i(M)| / √2``: the fastest linear growth rate multiplied by τ."""
    return float(np.abs(np.linalg.eigvalsh(_symmetric(M))).max() / math.sqrt(2))
