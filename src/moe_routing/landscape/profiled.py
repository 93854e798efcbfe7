"""The profiled soft objective ``L̄_τ(φ) = min_θ L_τ(θ, φ)`` of the K-region model, with its
gradient and Hessian in the local coordinates of the router chart (:mod:`.multi_region`).

**Closed-form derivatives (ours; the default).**  The critical-point search spends nearly all
of its time in Hessians.  Autograd computes one as ``D`` backward passes through a double
backward graph over the whole sample; the structure of the objective gives it in about the cost
of two forward passes instead:

* *envelope*: at the refit ``θ* = θ_τ(φ)`` the derivative of ``L̄_τ`` in the router is that of
  ``L_τ(θ*, ·)`` (``∂_θ L_τ = 0`` there), and its Hessian is the Schur complement
  ``L_φφ − L_φθ L_θθ⁻¹ L_θφ`` with ``L_θθ = 2(G + ridge·I)``, the refit's own Gram matrix;
* *per point*: with gates ``π = softmax(a/τ)``, expert outputs ``F_k = θ_k·x̃``, mixture
  ``m = πᵀF``, residual ``r = f* − m`` and ``q = π ∘ (F − m)`` (so ``∂m/∂a = q/τ``), the point's
  loss ``r²`` has, in the logits ``a``,

  ``∂_a = −2 r q / τ``,   ``∂²_aa = (2/τ²) (q qᵀ − r (diag q − q πᵀ − π qᵀ))``,
  ``∂²_{a_j θ_kl} = (2/τ) π_k (q_j − r (δ_jk − π_j)) x̃_l``;

* *linear chart*: the logits are ``a = H Φ x̃`` with ``Φ = [V | e]`` ((K−1)×p, H the Helmert
  basis), so every derivative in ``Φ`` is a sample average of a per-point (K−1)×(K−1) or
  (K−1)×K matrix times ``x̃x̃ᵀ`` — one matrix product against the p(p+1)/2 feature products
  that the refit already uses;
* *retraction*: ``V(z) = r (V₀ + T z)/|V₀ + T z|`` has Jacobian ``T`` at ``z = 0`` and second
  derivative ``−V₀ |T z|²/r²``, so the Riemannian Hessian is ``Jᵀ ∇²L̄ J − (∂_V L̄ · V₀ / r²)``
  on the sphere block.

``derivatives="autograd"`` keeps the direct autograd route as the reference: the tests hold the
two equal to rounding on every teacher, and ``benchmarks/bench_landscape_multi.py`` times them.

Shapes as in :mod:`.multi_region`: ``n`` sample points, ``S`` routers, ``K`` experts, ``d``
input dimension, ``p = d + 1``, ``M = (K−1)p`` chart coordinates, ``D = M − 1`` local ones.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from .. import validation as check
from .common import features, sobol_normal
from .multi_fit import _sample_moments, soft_refit, soft_risk
from .multi_region import (MultiRegionTeacher, chart_dim, chart_points, chart_radius, helmert,
                           normalise, retract, tangent_basis)

#: how :class:`ProfiledObjective` differentiates ``L̄_τ``
DERIVATIVES = ("closed_form", "autograd")

_CLOSED_FORM_ELEMENTS = 2 ** 23   # per chunk: S·n·K² doubles of per-point matrices (64 MiB)


@lru_cache(maxsize=16)
def _phi_order(K: int, d: int) -> np.ndarray:
    """Index of each entry of ``vec Φ`` ((K−1)·p, row-major, ``Φ = [V | e]``) in ``φ = (vec V,
    e)``: (M,) long."""
    p = d + 1
    idx = np.empty((K - 1) * p, dtype=np.int64)
    for a in range(K - 1):
        for i in range(p):
            idx[a * p + i] = a * d + i if i < d else (K - 1) * d + a
    return idx


def _full_sym(U: torch.Tensor, p: int) -> torch.Tensor:
    """Distinct feature products (…, p(p+1)/2) → the symmetric (…, p, p)."""
    iu = torch.triu_indices(p, p)
    out = U.new_zeros(U.shape[:-1] + (p, p))
    out[..., iu[0], iu[1]] = U
    out[..., iu[1], iu[0]] = U
    return out


class ProfiledObjective:
    """``L̄_τ(φ)`` of one teacher on one fixed sample, with its derivatives in local coordinates.

    ``X``: the sample (scrambled Sobol, ``n`` points); ``chunk``: routers per autograd pass
    (bounds memory: one pass holds a few ``(chunk, n, K·p)`` tensors); ``derivatives``:
    ``"closed_form"`` (default, see the module docstring) or ``"autograd"`` (the reference).
    """

    def __init__(self, teacher: MultiRegionTeacher, n: int, seed: int, chunk: int = 16,
                 derivatives: str = "closed_form"):
        check.instance("teacher", teacher, MultiRegionTeacher, "a MultiRegionTeacher")
        chunk = check.integer("chunk", chunk, low=1)
        self.derivatives = check.choice("derivatives", derivatives, DERIVATIVES)
        self.teacher = teacher
        self.K, self.d = teacher.K, teacher.d
        self.X = sobol_normal(n, self.d, seed)
        self.fstar = teacher.fstar(self.X)
        self.moments = _sample_moments(self.X, self.fstar)
        self.noise_var = teacher.noise_std ** 2
        self.chunk = int(chunk)
        self.D = chart_dim(self.K, self.d)

    def value(self, phi, tau: float) -> np.ndarray:
        """``L̄_τ`` (noise included) at routers (S, M) → (S,)."""
        tau = check.temperature("tau", tau)
        phi = torch.as_tensor(chart_points(phi, self.K, self.d, name="phi"))
        with torch.no_grad():
            out = [soft_refit(phi[i:i + self.chunk], tau, self.X, self.fstar, self.K,
                              moments=self.moments)[1]
                   for i in range(0, len(phi), self.chunk)]
        return torch.cat(out).numpy() + self.noise_var

    def refit(self, phi, tau: float) -> np.ndarray:
        """``θ_τ(φ)`` for one router: (K, p)."""
        tau = check.temperature("tau", tau)
        ph = torch.as_tensor(chart_points(phi, self.K, self.d, name="phi", single=True)).reshape(1, -1)
        with torch.no_grad():
            return soft_refit(ph, tau, self.X, self.fstar, self.K, moments=self.moments)[0][0].numpy()

    # --- derivatives in local coordinates ----------------------------------------------------

    def _local(self, phi, tau, order: int):
        tau = check.temperature("tau", tau)
        phi = normalise(phi, self.K, self.d)
        T = tangent_basis(phi, self.K, self.d)
        if self.derivatives == "closed_form":
            v, g, H = self._closed_form(phi, T, tau, order)
            return (phi, T, v, g, H) if order > 1 else (phi, T, v, g)
        vals, grads, hess = [], [], []
        for i in range(0, len(phi), self.chunk):
            p0 = torch.as_tensor(phi[i:i + self.chunk])
            T0 = torch.as_tensor(T[i:i + self.chunk])
            z = torch.zeros(len(p0), self.D, dtype=torch.float64, requires_grad=True)
            v = soft_refit(retract(p0, T0, z, self.K, self.d), tau, self.X, self.fstar, self.K,
                           moments=self.moments)[1]
            (g,) = torch.autograd.grad(v.sum(), z, create_graph=order > 1)      # (S, D)
            vals.append(v.detach())
            grads.append(g.detach())
            if order > 1:
                rows = [torch.autograd.grad(g[:, j].sum(), z, retain_graph=j < self.D - 1)[0]
                        for j in range(self.D)]
                H = torch.stack(rows, 1)
                hess.append(0.5 * (H + H.transpose(1, 2)))
        out = [torch.cat(vals).numpy() + self.noise_var, torch.cat(grads).numpy()]
        if order > 1:
            out.append(torch.cat(hess).numpy())
        return (phi, T, *out)

    @torch.no_grad()
    def _closed_form(self, phi: np.ndarray, T: np.ndarray, tau: float, order: int):
        """Value (S,), local gradient (S, D) and, for ``order`` 2, local Hessian (S, D, D) (else
        None) by the envelope / Schur-complement formulas of the module docstring."""
        K, d, n = self.K, self.d, self.X.shape[0]
        p, m = d + 1, (K - 1) * d
        Hk = torch.tensor(helmert(K), dtype=torch.float64)                  # (K, K−1)
        Xt = features(self.X)                                               # (n, p)
        Q = self.moments[0]                                                 # (n, p(p+1)/2)
        inv = torch.as_tensor(np.argsort(_phi_order(K, d)))                 # vec Φ → φ order
        step = max(1, min(self.chunk, _CLOSED_FORM_ELEMENTS // (n * K * K)))
        vals, grads, hess = [], [], []
        for s0 in range(0, len(phi), step):
            ph = torch.as_tensor(phi[s0:s0 + step])
            S = len(ph)
            theta, risk, P, G = soft_refit(ph, tau, self.X, self.fstar, K, moments=self.moments,
                                           return_gram=True)
            F = torch.einsum("np,skp->snk", Xt, theta)                      # (S, n, K)
            mix = (P * F).sum(-1, keepdim=True)                             # (S, n, 1)
            r = self.fstar[None, :, None] - mix                             # (S, n, 1)
            q = P * (F - mix)                                               # (S, n, K)
            da = (-2.0 / tau) * r * q                                       # (S, n, K)
            gPhi = Hk.T @ (da.transpose(1, 2) @ Xt) / n                     # (S, K−1, p)
            g_phi = gPhi.reshape(S, -1)[:, inv]                              # (S, M) in φ order
            vals.append(risk + self.noise_var)
            Tt = torch.as_tensor(T[s0:s0 + step])                           # (S, m, m−1)
            g_loc = torch.cat([torch.einsum("sm,smj->sj", g_phi[:, :m], Tt), g_phi[:, m:]], 1)
            grads.append(g_loc)
            if order < 2:
                continue
            # ∂²_aa and ∂²_{aθ} (without the x̃ factor), already through the Helmert basis:
            # Hᵀ(q qᵀ − r(diag q − q πᵀ − π qᵀ))H and Hᵀ[π_k (q_j − r(δ_jk − π_j))]_jk, built
            # from K−1-vectors so that no per-point K×K matrix is formed
            hq, hp = q @ Hk, P @ Hk                                         # (S, n, K−1)
            HH = (Hk[:, :, None] * Hk[:, None, :]).reshape(K, -1)           # (K, (K−1)²)
            outer = hq[..., :, None] * hq[..., None, :] + r[..., None] * (
                hq[..., :, None] * hp[..., None, :] + hp[..., :, None] * hq[..., None, :])
            HA = (2.0 / tau ** 2) * (outer.reshape(S, n, -1) - r * (q @ HH))
            HB = (2.0 / tau) * P[..., None, :] * ((hq + r * hp)[..., :, None]
                                                  - r[..., None] * Hk.T)   # (S, n, K−1, K)
            HB = HB.reshape(S, n, -1)
            U = torch.cat([HA, HB], 2).transpose(1, 2) @ Q / n              # (S, ·, p(p+1)/2)
            c2 = (K - 1) ** 2
            Hpp = _full_sym(U[:, :c2], p).reshape(S, K - 1, K - 1, p, p)    # [a, b, i, j]
            Hpp = Hpp.permute(0, 1, 3, 2, 4).reshape(S, (K - 1) * p, (K - 1) * p)
            Hpt = _full_sym(U[:, c2:], p).reshape(S, K - 1, K, p, p)        # [a, k, i, j]
            Hpt = Hpt.permute(0, 1, 3, 2, 4).reshape(S, (K - 1) * p, K * p)
            # profiled: Schur complement of L_θθ = 2 G (G ridged, as in the refit)
            Hbar = Hpp - 0.5 * Hpt @ torch.linalg.solve(G, Hpt.transpose(1, 2))
            Hphi = Hbar[:, inv][:, :, inv]                                  # (S, M, M) φ order
            # local coordinates: J = blockdiag(T, I); the sphere's curvature term
            J = torch.zeros(S, (K - 1) * p, self.D, dtype=torch.float64)
            J[:, :m, :m - 1] = Tt
            J[:, m:, m - 1:] = torch.eye(K - 1, dtype=torch.float64)
            Hl = J.transpose(1, 2) @ Hphi @ J
            curv = (g_phi[:, :m] * ph[:, :m]).sum(1) / chart_radius(K) ** 2  # (S,)
            Hl[:, :m - 1, :m - 1] -= curv[:, None, None] * torch.eye(m - 1, dtype=torch.float64)
            hess.append(0.5 * (Hl + Hl.transpose(1, 2)))
        return (torch.cat(vals).numpy(), torch.cat(grads).numpy(),
                torch.cat(hess).numpy() if order > 1 else None)

    def grad(self, phi, tau: float):
        """``(phi on the chart, T, value (S,), Riemannian gradient (S, D))``."""
        return self._local(phi, tau, 1)

    def grad_hess(self, phi, tau: float):
        """``(phi, T, value (S,), gradient (S, D), Hessian (S, D, D))`` in local coordinates."""
        return self._local(phi, tau, 2)

    def step(self, phi, T, z) -> np.ndarray:
        """Move by local coordinates z (S, D) from phi (S, M): the retraction, numpy."""
        phi = chart_points(phi, self.K, self.d, name="phi")
        T = check.finite_array("T", T, ndim=3)
        z = check.finite_array("z", z, ndim=2)
        with torch.no_grad():
            return retract(torch.as_tensor(phi), torch.as_tensor(T), torch.as_tensor(z),
                           self.K, self.d).numpy()

    def joint_hessian(self, theta, phi, tau: float) -> np.ndarray:
        """Hessian of ``L_τ(θ, φ)`` in ``(vec θ (K·p), z (D))`` at one point: (Kp+D, Kp+D)."""
        tau = check.temperature("tau", tau)
        theta = check.finite_array("theta", theta, shape=(self.K, self.d + 1))
        phi = normalise(chart_points(phi, self.K, self.d, name="phi", single=True), self.K, self.d)
        T = torch.as_tensor(tangent_basis(phi, self.K, self.d))
        p0 = torch.as_tensor(phi)
        Kp = self.K * (self.d + 1)
        x0 = torch.cat([torch.as_tensor(theta).reshape(Kp), torch.zeros(self.D, dtype=torch.float64)])

        def f(x):
            ph = retract(p0, T, x[Kp:][None], self.K, self.d)
            return soft_risk(x[:Kp].reshape(1, self.K, -1), ph, tau, self.X, self.fstar)[0]

        H = torch.autograd.functional.hessian(f, x0)
        return (0.5 * (H + H.T)).numpy()


