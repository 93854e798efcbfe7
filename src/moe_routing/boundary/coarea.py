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

from .._internal import validation as check
from .laws import GaussianLaw, InputLaw, normal_cdf
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
    return law.score(v, c).density_at_zero("v", v)   # scale-free (see GaussianLaw.score)


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
    # arrays: n points (d = 2), an n × 2n grid of 3-D points (d = 3), n draws in R^d (d ≥ 4)
    check.sample_size("n_nodes", n, row_bytes=8 * (d + 2) * (2 * n if d == 3 else 1),
                      low=1 if d <= 3 else 2)
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

    Scale: the constants obey S(λW, λb; N(μ, Σ)) = S(W, b; N(μ, Σ))/λ and
    S(W, σb; N(σμ, σ²Σ)) = S(W, b; N(μ, Σ))/σ (g_jk and X scale together; the top-two event
    does not change).  So the computation runs on the standardized problem — W and X divided
    by the powers of two nearest max|W| and √max Σ_ii, exact operations — and only the result
    is scaled back; the test whether another expert's tie line is parallel to the interface is
    relative to that expert's weights.  Weights or laws of any float64 scale give the same
    constants (×1/λ), and a constant outside float64's range is refused, never returned as 0.
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
    if d > 2:
        check.sample_size("n_cond", n_cond, row_bytes=8 * (3 * d + 2 * K))
    # the standardized problem: W̃ = W/2^ew, X̃ = X/2^es ~ N(μ̃, Σ̃), b̃ = b/2^(ew+es); the logits
    # are 2^(ew+es)·(W̃X̃ + b̃), so every constant is 2^−(ew+es) times the standardized one
    ew = int(np.frexp(float(np.abs(router.weight).max()))[1])
    std, es = law._standardized()
    W = np.ldexp(router.weight, -ew)
    with np.errstate(over="ignore"):
        b = np.ldexp(router.bias, -ew - es)
    check.require(bool(np.all(np.isfinite(b))), "router.bias", router.bias,
                  "biases whose ratio to |W|·σ (weights times the law's scale) is a finite float64")
    full, sharp, se = np.zeros((K, K)), np.zeros((K, K)), np.zeros((K, K))
    x0 = std.sample(n_cond, g) if d > 2 else None
    for j, k in router.pairs():
        v, c = W[j] - W[k], float(b[j] - b[k])
        f0 = std.score(v, c).density_at_zero("router", router)   # standardized f_{g_jk(X̃)}(0)
        full[j, k] = full[k, j] = f0
        others = [l for l in range(K) if l not in (j, k)]
        u, gamma, h = std._conditioning(v, c)    # X̃ − (u·X̃ + γ) h ~ X̃ | g_jk(X̃) = 0
        if not others:
            q, q_se = 1.0, 0.0
        elif d == 2:
            mu_c = std.mean - (u @ std.mean + gamma) * h
            cov_c = std.cov - np.outer(h, std.cov @ u)
            lam, vec = np.linalg.eigh((cov_c + cov_c.T) / 2)
            e, sd = vec[:, -1], np.sqrt(max(lam[-1], 0.0))
            lo, hi = -np.inf, np.inf
            for l in others:  # condition (W_j − W_l)·(μ_c + sd e z) + b_j − b_l > 0
                alpha = float((W[j] - W[l]) @ mu_c + b[j] - b[l])
                beta = float((W[j] - W[l]) @ e) * sd
                # relative test: |β| is at most |W_j − W_l|·sd; a cosine below 1e−12 means the
                # tie line of (j, l) is parallel to the interface (rounding, not geometry)
                if abs(beta) <= 1e-12 * float(np.linalg.norm(W[j] - W[l])) * sd:
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
            xc = x0 - np.outer(x0 @ u + gamma, h)  # (n, d): exact draws of X̃ | g_jk = 0
            a = xc @ W.T + b  # (n, K)
            win = np.all(a[:, [j]] > a[:, others], axis=1)
            q = float(win.mean())
            q_se = float(np.sqrt(max(q * (1 - q), 1.0 / n_cond) / n_cond))
        sharp[j, k] = sharp[k, j] = f0 * q
        se[j, k] = se[k, j] = f0 * q_se
    # back to the original scale: an exact power of two, refused when it leaves float64's range
    with np.errstate(over="ignore", under="ignore"):
        scaled = [np.ldexp(a, -ew - es) for a in (full, sharp, se)]
    bad = (full > 0) & ~((scaled[0] >= np.finfo(float).tiny) & (scaled[0] < np.inf))
    check.require(not bool(bad.any()), "router", router,
                  "weights and a law whose interface constants 1/(|W|·σ) are inside float64's "
                  f"normal range (here |W|·σ ≈ 2^{ew + es}); the constants are scale-covariant, "
                  "S(λW, λb) = S(W, b)/λ: rescale the weights or the inputs and S back")
    return JunctionConstants(*scaled, "exact (d = 2)" if d == 2 else "conditional Monte Carlo")


def coarea_constant(router, law: InputLaw, **kw) -> SurfaceIntegral:
    """S for a binary router: closed form (linear, Gaussian) or surface quadrature (sphere)."""
    if isinstance(router, LinearRouter):
        if router.n_experts != 2:
            route = ("for K > 2 and a Gaussian law, junction_free_constants(router, law) gives "
                     "the sharp and union constants" if isinstance(law, GaussianLaw) else
                     "for K > 2 and a non-Gaussian law (junction_free_constants needs a GaussianLaw) "
                     "measure the sharp constant lim BM(w)/(2w) by Monte Carlo: "
                     "bm = boundary_mass_mc(router, law, w, n) at ≥ 3 small widths w, then "
                     "fit_interface_constant(w, bm.counts, n).constant; "
                     "pairwise_union_bound(router, law, w, n=n) gives the union bound")
            check.fail("router.n_experts", router.n_experts, f"2 ({route})")
        check.instance("law", law, GaussianLaw, "a GaussianLaw (closed-form S for a linear router)")
        check.require(router.dim == law.dim, "law.dim", law.dim, f"the router's dimension d = {router.dim}")
        S = law.score(*router.pair(0, 1)).density_at_zero("router", router)   # scale-free
        return SurfaceIntegral(S, 0.0, "closed form")
    if isinstance(router, SphereRouter):
        return sphere_constant(router, law, **kw)
    check.fail("router", router, "a binary LinearRouter or a SphereRouter (the coarea constant of "
               f"{type(router).__name__} is not implemented, or its interface is not transversal)")
