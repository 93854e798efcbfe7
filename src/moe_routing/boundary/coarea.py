"""Coarea constants S = ∫_Σ p(x) / |∇g(x)| dH^{d−1}(x) (paper B, our derivation).

By the coarea formula, P(|g(X)| ≤ w) = ∫_{−w}^{w} ∫_{g=s} p/|∇g| dH^{d−1} ds, so for a binary
router with |∇g| bounded away from 0 near the interface Σ = {g = 0},

    BM(w) = 2 w S + O(w²).

(The 2 is the two-sided slab of Δ = |g|; the paper's summary writes w·C·∫…, i.e. C = 2 here.)
S is also the density of g(X) at 0, which is what makes the linear–Gaussian case closed-form.

For K > 2 the top-two interface between experts j and k is only the part Γ_jk of the tie
hyperplane {a_j = a_k} where both beat every other expert, and (junctions being O(w²))

    BM(w) = 2 w Σ_{j<k} ∫_{Γ_jk} p/|∇g_jk| dH^{d−1} + o(w)        ("sharp, junction-free"),

whereas the pairwise union bound counts the whole hyperplanes: 2 w Σ_{j<k} ∫_{g_jk=0} p/|∇g_jk|.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from .. import validation as check
from .laws import GaussianLaw, InputLaw, normal_cdf, normal_pdf
from .routers import LinearRouter, SphereRouter


@dataclass(frozen=True)
class SurfaceIntegral:
    """A coarea constant with its numerical standard error (0 for quadrature / closed forms)."""

    value: float
    se: float
    method: str


def linear_gaussian_constant(v, c: float, law: GaussianLaw) -> float:
    """S for g = v·x + c, X ~ N(μ, Σ): the density of g(X) ~ N(m, s²) at 0, φ(m/s)/s."""
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    m, s2 = law.linear_moments(v, c)
    s = float(np.sqrt(s2))
    return float(normal_pdf(m / s) / s)


def sphere_constant(router: SphereRouter, law: InputLaw, n_nodes: int = 256, rng=None) -> SurfaceIntegral:
    """S = (2·scale·r)^{−1} ∫_{|x−c|=r} p dH^{d−1} for the sphere router.

    d = 2: trapezoid rule in the angle (spectrally accurate for a smooth periodic integrand);
    d = 3: Gauss–Legendre in cos θ × trapezoid in φ; d ≥ 4: Monte Carlo over uniform directions
    with ``n_nodes`` ≥ 2 samples (standard error returned).
    """
    check.instance("router", router, SphereRouter, "a SphereRouter")
    check.instance("law", law, InputLaw, "an InputLaw (GaussianLaw, UniformBox, VanishingDensityLaw)")
    d, r, c = router.dim, router.radius, router.center
    check.require(law.dim == d, "law.dim", law.dim, f"the router's dimension d = {d}")
    n = check.integer("n_nodes", n_nodes, low=1 if d <= 3 else 2)
    g = check.generator("rng", rng)
    norm = 2 * router.scale * r
    if d == 2:
        th = 2 * np.pi * np.arange(n) / n
        x = c + r * np.stack([np.cos(th), np.sin(th)], 1)  # (n, 2)
        return SurfaceIntegral(float(law.pdf(x).sum() * (2 * np.pi / n) * r / norm), 0.0, "trapezoid")
    if d == 3:
        u, wu = np.polynomial.legendre.leggauss(n)
        ph = 2 * np.pi * np.arange(2 * n) / (2 * n)
        U, P = np.meshgrid(u, ph, indexing="ij")  # (n, 2n)
        st = np.sqrt(1 - U ** 2)
        x = c + r * np.stack([st * np.cos(P), st * np.sin(P), U], -1).reshape(-1, 3)
        p = law.pdf(x).reshape(U.shape)
        val = (p * wu[:, None]).sum() * (2 * np.pi / (2 * n)) * r ** 2
        return SurfaceIntegral(float(val / norm), 0.0, "gauss-legendre x trapezoid")
    z = g.standard_normal((n, d))
    x = c + r * z / np.linalg.norm(z, axis=1, keepdims=True)
    area = 2 * np.pi ** (d / 2) / special.gamma(d / 2) * r ** (d - 1)
    p = law.pdf(x)
    return SurfaceIntegral(float(area * p.mean() / norm), float(area * p.std(ddof=1) / np.sqrt(n) / norm),
                           "Monte Carlo over directions")


@dataclass(frozen=True)
class JunctionConstants:
    """Per-pair interface constants of a K-expert linear router.

    ``full[j, k]`` = ∫_{g_jk = 0} p/|∇g_jk| (whole tie hyperplane: the union bound's slope / 2);
    ``sharp[j, k]`` = ∫_{Γ_jk} p/|∇g_jk| (top-two part only); ``sharp_se`` its standard error
    (0 when computed exactly).  Totals are sums over j < k.
    """

    full: np.ndarray
    sharp: np.ndarray
    sharp_se: np.ndarray
    method: str

    @property
    def union_total(self) -> float:
        return float(np.triu(self.full, 1).sum())

    @property
    def sharp_total(self) -> float:
        return float(np.triu(self.sharp, 1).sum())

    @property
    def sharp_total_se(self) -> float:
        return float(np.sqrt((np.triu(self.sharp_se, 1) ** 2).sum()))


def junction_free_constants(router: LinearRouter, law: GaussianLaw, n_cond: int = 200_000,
                            rng=None) -> JunctionConstants:
    """Sharp constants ∫_{Γ_jk} p/|∇g_jk| for a linear router and Gaussian input.

    ∫_{Γ_jk} p/|∇g_jk| dH^{d−1} = f_{g_jk(X)}(0) · P(a_j(X) > a_l(X) ∀ l ≠ j, k | g_jk(X) = 0).
    The conditional law of X given g_jk(X) = 0 is Gaussian; X − Σv (g_jk(X))/s² samples it
    exactly.  In d = 2 it lives on a line and the probability is an interval of a 1-D normal
    (exact); for d ≥ 3 it is estimated from ``n_cond`` conditional samples.  A pair of experts
    with the same weights (``v = 0``) has no interface and is refused.
    """
    check.instance("router", router, LinearRouter, "a LinearRouter")
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    check.require(router.dim == law.dim, "law.dim", law.dim, f"the router's dimension d = {router.dim}")
    n_cond = check.integer("n_cond", n_cond, low=1)
    g = check.generator("rng", rng)
    for j, k in router.pairs():
        check.require(bool(np.any(router.weight[j] != router.weight[k])), "router", router,
                      f"experts with distinct weights (experts {j} and {k} have the same weights: "
                      "their tie set has no interface)")
    K, d = router.n_experts, router.dim
    full, sharp, se = np.zeros((K, K)), np.zeros((K, K)), np.zeros((K, K))
    W, b = router.weight, router.bias
    x0 = law.sample(n_cond, g) if d > 2 else None
    for j, k in router.pairs():
        v, c = router.pair(j, k)
        s2 = float(v @ law.cov @ v)
        m = float(v @ law.mean + c)
        f0 = float(normal_pdf(m / np.sqrt(s2)) / np.sqrt(s2))
        full[j, k] = full[k, j] = f0
        others = [l for l in range(K) if l not in (j, k)]
        if not others:
            q, q_se = 1.0, 0.0
        elif d == 2:
            mu_c = law.mean - law.cov @ v * m / s2
            cov_c = law.cov - np.outer(law.cov @ v, law.cov @ v) / s2
            lam, vec = np.linalg.eigh(cov_c)
            e, sd = vec[:, -1], np.sqrt(max(lam[-1], 0.0))
            lo, hi = -np.inf, np.inf
            for l in others:  # condition (W_j − W_l)·(μ_c + sd e z) + b_j − b_l > 0
                alpha = float((W[j] - W[l]) @ mu_c + b[j] - b[l])
                beta = float((W[j] - W[l]) @ e) * sd
                if abs(beta) < 1e-14:
                    if alpha <= 0:
                        lo, hi = 0.0, 0.0
                    continue
                t = -alpha / beta
                if beta > 0:
                    lo = max(lo, t)
                else:
                    hi = min(hi, t)
            q = float(max(normal_cdf(hi) - normal_cdf(lo), 0.0)) if hi > lo else 0.0
            q_se = 0.0
        else:
            xc = x0 - np.outer(x0 @ v + c, law.cov @ v) / s2  # (n, d): exact draws of X | g_jk = 0
            a = xc @ W.T + b  # (n, K)
            win = np.all(a[:, [j]] > a[:, others], axis=1)
            q = float(win.mean())
            q_se = float(np.sqrt(max(q * (1 - q), 1.0 / n_cond) / n_cond))
        sharp[j, k] = sharp[k, j] = f0 * q
        se[j, k] = se[k, j] = f0 * q_se
    return JunctionConstants(full, sharp, se, "exact (d = 2)" if d == 2 else "conditional Monte Carlo")


def coarea_constant(router, law: InputLaw, **kw) -> SurfaceIntegral:
    """S for a binary router: closed form (linear, Gaussian) or surface quadrature (sphere)."""
    if isinstance(router, LinearRouter):
        check.require(router.n_experts == 2, "router.n_experts", router.n_experts,
                      "2 (for K > 2 use junction_free_constants)")
        check.instance("law", law, GaussianLaw, "a GaussianLaw (closed-form S for a linear router)")
        check.require(router.dim == law.dim, "law.dim", law.dim, f"the router's dimension d = {router.dim}")
        return SurfaceIntegral(linear_gaussian_constant(*router.pair(0, 1), law), 0.0, "closed form")
    if isinstance(router, SphereRouter):
        return sphere_constant(router, law, **kw)
    check.fail("router", router, "a binary LinearRouter or a SphereRouter (the coarea constant of "
               f"{type(router).__name__} is not implemented, or its interface is not transversal)")
