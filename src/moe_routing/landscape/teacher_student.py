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
its arguments with :mod:`moe_routing._internal.validation` (finite tensors of the stated shapes, τ > 0).

Where the code is: the teacher and the router chart are in :mod:`.two_region`, the hard
objective by quadrature in :mod:`.hard_quadrature`, the soft objective by quadrature (the
deterministic, differentiable counterpart of the sample) in :mod:`.soft_quadrature`; this
module holds the soft objective on a fixed sample.
"""

from __future__ import annotations

import torch

from .._internal import validation as check
from .common import features


def _sample(X: torch.Tensor, fstar: torch.Tensor) -> None:
    """The fixed sample: inputs X (n, 2) and teacher values f*(X) (n,), finite."""
    check.finite_tensor("X", X, shape=(None, 2))
    check.finite_tensor("fstar", fstar, shape=(X.shape[0],))


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
