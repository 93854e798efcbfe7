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

from .._internal import validation as check
from .common import features, sobol_normal
from .multi_fit import RIDGE, _normal_solve, _sample_moments, soft_refit, soft_risk
from .multi_region import (MultiRegionTeacher, chart_dim, chart_points, chart_radius, helmert,
                           logits_from_phi, normalise, retract, tangent_basis)

#: how :class:`ProfiledObjective` differentiates ``L̄_τ``
DERIVATIVES = ("closed_form", "autograd")

_CLOSED_FORM_ELEMENTS = 2 ** 23   # per chunk of routers: S·n·K doubles of gates (64 MiB)
_BLOCK = 2 ** 14                  # sample points per block of the closed form's passes


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


def _local_gradient(gPhi: torch.Tensor, Tt: torch.Tensor, K: int, d: int):
    """The gradient in ``Φ = [V | e]`` order (S, K−1, p) → ``(g_phi (S, M) in φ order, local
    gradient (S, D))`` through the tangent bases ``Tt`` (S, m, m−1)."""
    m = (K - 1) * d
    g_phi = gPhi.reshape(len(gPhi), -1)[:, torch.as_tensor(np.argsort(_phi_order(K, d)))]
    return g_phi, torch.cat([torch.einsum("sm,smj->sj", g_phi[:, :m], Tt), g_phi[:, m:]], 1)


def _local_hessian(U: torch.Tensor, G: torch.Tensor, g_phi: torch.Tensor, ph: torch.Tensor,
                  Tt: torch.Tensor, K: int, d: int) -> torch.Tensor:
    """The profiled Hessian in local coordinates from the sample averages of the closed form.

    ``U`` (S, (K−1)² + (K−1)K, p(p+1)/2): the ∂²_aa rows then the ∂²_{aθ} rows, each averaged
    against the distinct feature products; ``G`` (S, K·p, K·p): the refit's ridged Gram matrix;
    ``g_phi`` (S, M): the gradient in φ order; ``ph`` (S, M): the routers; ``Tt`` (S, m, m−1):
    their tangent bases.  Returns (S, D, D), symmetrised: the Schur complement of ``L_θθ = 2G``,
    through the chart (``J = blockdiag(T, I)``) with the sphere's curvature term."""
    S, p, m = len(U), d + 1, (K - 1) * d
    inv = torch.as_tensor(np.argsort(_phi_order(K, d)))                 # vec Φ → φ order
    c2 = (K - 1) ** 2
    Hpp = _full_sym(U[:, :c2], p).reshape(S, K - 1, K - 1, p, p)        # [a, b, i, j]
    Hpp = Hpp.permute(0, 1, 3, 2, 4).reshape(S, (K - 1) * p, (K - 1) * p)
    Hpt = _full_sym(U[:, c2:], p).reshape(S, K - 1, K, p, p)            # [a, k, i, j]
    Hpt = Hpt.permute(0, 1, 3, 2, 4).reshape(S, (K - 1) * p, K * p)
    # profiled: Schur complement of L_θθ = 2 G (G ridged, as in the refit)
    Hbar = Hpp - 0.5 * Hpt @ torch.linalg.solve(G, Hpt.transpose(1, 2))
    Hphi = Hbar[:, inv][:, :, inv]                                      # (S, M, M) φ order
    # local coordinates: J = blockdiag(T, I); the sphere's curvature term
    D = chart_dim(K, d)
    J = torch.zeros(S, (K - 1) * p, D, dtype=torch.float64)
    J[:, :m, :m - 1] = Tt
    J[:, m:, m - 1:] = torch.eye(K - 1, dtype=torch.float64)
    Hl = J.transpose(1, 2) @ Hphi @ J
    curv = (g_phi[:, :m] * ph[:, :m]).sum(1) / chart_radius(K) ** 2      # (S,)
    Hl[:, :m - 1, :m - 1] -= curv[:, None, None] * torch.eye(m - 1, dtype=torch.float64)
    return 0.5 * (Hl + Hl.transpose(1, 2))


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
        Xt = features(self.X)
        # the sample as rows, for the closed form's blocked passes: Xᵀ (d, n), x̃ᵀ (p, n), x̃ (n, p)
        self._rows = (self.X.T.contiguous(), Xt.T.contiguous(), Xt)
        self._f2 = (self.fstar ** 2).mean()

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

    def cell_masses(self, phi, tau: float) -> np.ndarray:
        """Mean gate of every cell, ``E[π_k]`` on the sample, at routers (S, M) → (S, K): what
        the search's domain check needs, without storing the gates."""
        tau = check.temperature("tau", tau)
        phi = torch.as_tensor(chart_points(phi, self.K, self.d, name="phi"))
        with torch.no_grad():
            W, b = logits_from_phi(phi, self.K, self.d)
            mass = torch.zeros(len(phi), self.K, dtype=torch.float64)
            for sl in self._blocks():
                mass += self._gate_block(W, b, tau, sl).sum(2)
        return (mass / len(self.X)).numpy()

    def _blocks(self):
        n = len(self.X)
        return [slice(n0, min(n, n0 + _BLOCK)) for n0 in range(0, n, _BLOCK)]

    def _gate_block(self, W, b, tau: float, sl: slice) -> torch.Tensor:
        """Gates of S routers on the sample points ``sl``, cells along dim 1: (S, K, nb)."""
        A = W @ self._rows[0][:, sl]                                        # (S, K, nb)
        A += b[:, :, None]
        A /= tau
        return torch.softmax(A, dim=1)

    def _refit_rows(self, ph: torch.Tensor, tau: float):
        """The refit of :func:`.multi_fit.soft_refit` (same normal equations, same ridge) for
        routers ph (S, M), accumulated block by block over the sample with the cells along
        dim 1: ``(P (S, K, n), G (S, K·p, K·p) ridged, theta (S, K, p), risk (S,))``."""
        K, p, n = self.K, self.d + 1, len(self.X)
        Q, _, XF = self.moments
        pairs = [(i, j) for i in range(K) for j in range(i, K)]
        W, b = logits_from_phi(ph, K, self.d)
        S = len(ph)
        P = torch.empty(S, K, n, dtype=torch.float64)
        Gu = torch.zeros(S, len(pairs), Q.shape[1], dtype=torch.float64)
        c = torch.zeros(S, K, p, dtype=torch.float64)
        PP = torch.empty(S, len(pairs), min(_BLOCK, n), dtype=torch.float64)
        for sl in self._blocks():
            nb = sl.stop - sl.start
            Pb = P[:, :, sl] = self._gate_block(W, b, tau, sl)
            for r, (i, j) in enumerate(pairs):                              # gate products
                torch.mul(Pb[:, i], Pb[:, j], out=PP[:, r, :nb])
            Gu += PP[:, :, :nb] @ Q[sl]                                     # (S, pairs, p(p+1)/2)
            c += Pb @ XF[sl]                                                # (S, K, p)
        G, theta, risk = _normal_solve(Gu, c, n, RIDGE, self._f2)
        return P, G, theta, risk

    @torch.no_grad()
    def _closed_form(self, phi: np.ndarray, T: np.ndarray, tau: float, order: int):
        """Value (S,), local gradient (S, D) and, for ``order`` 2, local Hessian (S, D, D) (else
        None) by the envelope / Schur-complement formulas of the module docstring.

        Two passes over the sample in blocks of ``_BLOCK`` points, the cells (or cell pairs)
        along dim 1 so that every per-point operation runs on long contiguous rows: the refit
        (:meth:`_refit_rows`), then the per-point derivative terms, accumulated against the
        feature products block by block (the intermediates of a block stay in cache)."""
        K, d, n = self.K, self.d, self.X.shape[0]
        p = d + 1
        Hk = torch.tensor(helmert(K), dtype=torch.float64)                  # (K, K−1)
        HkT = Hk.T.contiguous()                                             # (K−1, K)
        HHT = (Hk[:, :, None] * Hk[:, None, :]).reshape(K, -1).T.contiguous()   # ((K−1)², K)
        _, XtT, Xt = self._rows                                             # (p, n), (n, p)
        Q = self.moments[0]                                                 # (n, p(p+1)/2)
        step = max(1, min(self.chunk, _CLOSED_FORM_ELEMENTS // (n * K)))
        vals, grads, hess = [], [], []
        for s0 in range(0, len(phi), step):
            ph = torch.as_tensor(phi[s0:s0 + step])
            S = len(ph)
            P, G, theta, risk = self._refit_rows(ph, tau)
            g_acc = torch.zeros(S, K, p, dtype=torch.float64)               # Σ r q x̃ᵀ
            UA = torch.zeros(S, (K - 1) ** 2, Q.shape[1], dtype=torch.float64)
            UB = torch.zeros(S, (K - 1) * K, Q.shape[1], dtype=torch.float64)
            for sl in self._blocks():
                nb = sl.stop - sl.start
                Pb = P[:, :, sl]                                            # (S, K, nb)
                F = theta @ XtT[:, sl]                                      # (S, K, nb)
                mix = (Pb * F).sum(1, keepdim=True)                         # (S, 1, nb)
                r = self.fstar[sl] - mix                                    # (S, 1, nb)
                q = Pb * (F - mix)                                          # (S, K, nb)
                g_acc += (r * q) @ Xt[sl]
                if order < 2:
                    continue
                # ∂²_aa and ∂²_{aθ} (without the x̃ factor), already through the Helmert
                # basis: Hᵀ(q qᵀ − r(diag q − q πᵀ − π qᵀ))H and Hᵀ[π_k (q_j − r(δ_jk − π_j))]_jk,
                # built from K−1-vectors so that no per-point K×K matrix is formed
                hq, hp = HkT @ q, HkT @ Pb                                  # (S, K−1, nb)
                outer = hq[:, :, None] * hq[:, None, :] + r[:, None] * (
                    hq[:, :, None] * hp[:, None, :] + hp[:, :, None] * hq[:, None, :])
                UA += (outer.reshape(S, -1, nb) - r * (HHT @ q)) @ Q[sl]
                HB = Pb[:, None] * ((hq + r * hp)[:, :, None]
                                    - r[:, None] * HkT[None, :, :, None])   # (S, K−1, K, nb)
                UB += HB.reshape(S, -1, nb) @ Q[sl]
            gPhi = (-2.0 / tau) * (HkT @ g_acc) / n                         # (S, K−1, p)
            Tt = torch.as_tensor(T[s0:s0 + step])                           # (S, m, m−1)
            g_phi, g_loc = _local_gradient(gPhi, Tt, K, d)
            vals.append(risk + self.noise_var)
            grads.append(g_loc)
            if order < 2:
                continue
            U = torch.cat([(2.0 / tau ** 2) * UA, (2.0 / tau) * UB], 1) / n   # (S, ·, p(p+1)/2)
            hess.append(_local_hessian(U, G, g_phi, ph, Tt, K, d))
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


