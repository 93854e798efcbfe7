"""Boundary mass BM(w) = P(Δ(X) ≤ w): Monte Carlo with intervals, closed forms and bounds.

* :func:`boundary_mass_mc` — one sample of margins serves every width (sorted once, counted with
  ``searchsorted``), Wilson score intervals per width.
* :func:`boundary_mass_linear_gaussian` — exact for K = 2, g = v·x + b, X ~ N(μ, Σ):
  g(X) ~ N(m, s²), BM(w) = Φ((w − m)/s) − Φ((−w − m)/s).
* :func:`pairwise_union_bound` — for K > 2, BM(w) ≤ Σ_{j<k} P(|g_jk(X)| ≤ w) (paper B's
  pairwise-slab bound; exact per pair for linear routers and Gaussian input, Monte Carlo
  otherwise).
* :func:`tail_constant` — C_m = sup_w BM(w)/w^α, the constant the risk bound needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from .._internal import validation as check
from .laws import GaussianLaw, InputLaw
from .margin import top_two_margin
from .routers import LinearRouter, Router


@dataclass(frozen=True)
class BoundaryMass:
    """Estimates of BM at ``widths`` (all shape (m,)), from ``n`` samples (0 for exact values)."""

    widths: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n: int
    counts: np.ndarray | None = None


def wilson_interval(k, n: int, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion k/n (good even when k is 0 or small).

    ``k`` (a count or an array of counts) must lie in [0, n]: outside, p(1 − p) < 0 and the
    interval would be NaN.
    """
    n = check.integer("n", n, low=1)
    confidence = check.probability("confidence", confidence)
    k = check.finite_array("k", k, low=0)
    big = np.argwhere(k > n)
    if big.size:
        idx = "".join(f"[{int(i)}]" for i in big[0])
        check.fail("k" + idx, float(k[tuple(big[0])]), f"counts 0 ≤ k ≤ n = {n}")
    z = stats.norm.ppf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z ** 2 / n
    centre = (p + z ** 2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / denom
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0, 1))  # exact ends (no rounding residue)
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0, 1))
    return lo, hi


def _router_and_law(router, law) -> None:
    check.instance("router", router, Router, "a Router (LinearRouter, SphereRouter, PowerRouter, …)")
    check.instance("law", law, InputLaw, "an InputLaw (GaussianLaw, UniformBox, VanishingDensityLaw)")
    check.require(router.dim == law.dim, "law.dim", law.dim, f"the router's dimension d = {router.dim}")


def logit_sampler(router: Router, law: InputLaw):
    """Sampler of the logits a(X) without sampling X, or None when no shortcut applies.

    For a linear router and Gaussian input the router sees X only through its K logits,
    a ~ N(Wμ + b, WΣWᵀ): when K < d, sampling that K-dimensional Gaussian is exact and costs
    O(K²) per input instead of O(d(d + K)).  The sampler is ``(m, generator) -> (m, K)``.
    """
    _router_and_law(router, law)
    if not (isinstance(router, LinearRouter) and isinstance(law, GaussianLaw)
            and router.n_experts < law.dim):
        return None
    W = router.weight
    mean = W @ law.mean + router.bias  # (K,)
    # WΣWᵀ overflows once |W|·σ ≳ 1e154 although the logits do not: factor it as 2^e·W̃ Σ̃ W̃ᵀ
    # (W̃, Σ̃ of order 1, exact powers of two) and scale the root back by 2^e
    ew = int(np.frexp(float(np.abs(W).max()))[1])
    std, es = law._standardized()
    Wt = np.ldexp(W, -ew)
    lam, vec = np.linalg.eigh(Wt @ std.cov @ Wt.T)  # PSD (K, K); singular when rank W < K
    with np.errstate(over="ignore"):
        root = np.ldexp(vec * np.sqrt(np.clip(lam, 0, None)), ew + es)  # root @ rootᵀ = WΣWᵀ
    check.require(bool(np.all(np.isfinite(root)) and np.all(np.isfinite(mean))), "router", router,
                  "weights whose logits W·X + b are finite float64 numbers under the law "
                  "(here their scale |W|·σ overflows)")
    return lambda m, g: mean + g.standard_normal((m, mean.size)) @ root.T


def sample_margins(router: Router, law: InputLaw, n: int, rng=None, chunk: int = 1 << 18) -> np.ndarray:
    """n i.i.d. margins Δ(X_i), X_i ~ law; computed in chunks so memory stays O(chunk · K)."""
    _router_and_law(router, law)
    n = check.sample_size("n", n, row_bytes=8)          # the margins (inputs come in chunks)
    chunk = check.integer("chunk", chunk, low=1)
    g = check.generator("rng", rng)
    direct = logit_sampler(router, law)
    out = np.empty(n)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        a = direct(m, g) if direct is not None else router.logits(law.sample(m, g))  # (m, K)
        out[s:s + m] = top_two_margin(a)
    return out


def boundary_mass_from_margins(margins, widths, confidence: float = 0.95) -> BoundaryMass:
    """BM at every width from a sample of margins Δ_i ≥ 0 (sorted once, counted by bisection)."""
    w = check.widths("widths", widths)
    d = np.sort(check.finite_array("margins", margins, ndim=1, low=0))
    n = d.size
    counts = np.searchsorted(d, w, side="right")
    lo, hi = wilson_interval(counts, n, confidence)
    return BoundaryMass(w, counts / n, lo, hi, n, counts)


def boundary_mass_mc(router: Router, law: InputLaw, widths, n: int, rng=None,
                     confidence: float = 0.95, chunk: int = 1 << 18) -> BoundaryMass:
    """Monte Carlo BM at every width from one sample of n inputs (common random numbers)."""
    _router_and_law(router, law)
    check.widths("widths", widths)
    check.probability("confidence", confidence)
    check.sample_size("n", n, row_bytes=16)              # the margins and their sorted copy
    return boundary_mass_from_margins(sample_margins(router, law, n, rng, chunk), widths, confidence)


def slab_mass_linear_gaussian(v, c: float, law: GaussianLaw, widths) -> np.ndarray:
    """P(|v·X + c| ≤ w) for X ~ N(μ, Σ), exactly: g(X) ~ N(m, s²)."""
    w = check.widths("widths", widths)
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    return law.score(v, c).slab(w)   # scale-free: no vᵀΣv is formed (it overflows at |v|σ ≳ 1e154)


def boundary_mass_linear_gaussian(router: LinearRouter, law: GaussianLaw, widths) -> BoundaryMass:
    """Exact BM(w) for a binary linear router and Gaussian input."""
    check.instance("router", router, LinearRouter, "a LinearRouter")
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    check.require(router.n_experts == 2, "router.n_experts", router.n_experts,
                  "2 (the closed form is for K = 2; use pairwise_union_bound for K > 2)")
    check.require(router.dim == law.dim, "law.dim", law.dim, f"the router's dimension d = {router.dim}")
    w = check.widths("widths", widths)
    v, c = router.pair(0, 1)
    bm = slab_mass_linear_gaussian(v, c, law, w)
    return BoundaryMass(w, bm, bm, bm, 0)


def pairwise_union_bound(router: LinearRouter, law: InputLaw, widths, n: int | None = None,
                         rng=None) -> np.ndarray:
    """Σ_{j<k} P(|g_jk(X)| ≤ w): exact for Gaussian input, Monte Carlo (n samples) otherwise."""
    w = check.widths("widths", widths)
    check.instance("router", router, LinearRouter, "a LinearRouter (the bound needs linear pairwise scores)")
    _router_and_law(router, law)
    if isinstance(law, GaussianLaw):
        return sum(slab_mass_linear_gaussian(*router.pair(j, k), law, w) for j, k in router.pairs())
    check.require(n is not None, "n", n, "a Monte Carlo sample size ≥ 1 (the law is not Gaussian)")
    n = check.sample_size("n", n, row_bytes=8 * (router.dim + 2 * router.n_experts))
    x = law.sample(n, check.generator("rng", rng))
    a = router.logits(x)
    out = np.zeros_like(w)
    for j, k in router.pairs():
        gjk = np.sort(np.abs(a[:, j] - a[:, k]))
        out += np.searchsorted(gjk, w, side="right") / gjk.size
    return out


def tail_constant(bm, alpha: float, w_grid=None) -> float:
    """C_m = sup_{w>0} BM(w) / w^α (``bm`` is a callable w -> BM(w)): the margin-tail constant
    of the risk bound, which needs BM(w) ≤ C_m w^α at *every* width.

    Why a supremum over all w and not the small-w limit 2S: for an interface away from the
    bulk of the density, BM(w)/w first grows with w (the slab reaches more mass), so the
    limit underestimates the constant — g = x − 2, X ~ N(0, 1) has 2S ≈ 0.108 but
    C_m ≈ 0.282.  The maximum over a log grid (default 10^−8 … 10^4, 4001 points; BM ≤ 1
    bounds the ratio by w^(−α) beyond) is refined by a bounded scalar search between the grid
    neighbours of the best point, so that C_m is not a grid point's underestimate of the sup.
    ``bm`` must return finite values in [0, 1] (a probability) on the grid.
    """
    check.function("bm", bm)
    alpha = check.positive("alpha", alpha)
    w = np.logspace(-8, 4, 4001) if w_grid is None else check.widths("w_grid", w_grid)
    w = np.sort(w[w > 0])
    check.require(w.size > 0, "w_grid", w_grid, "at least one width w > 0")
    vals = check.finite_array("bm(w)", bm(w), shape=w.shape, low=0)
    ratio = vals / w ** alpha
    i = int(np.argmax(ratio))
    best = float(ratio[i])
    if w.size >= 3:
        lo, hi = np.log(w[max(i - 1, 0)]), np.log(w[min(i + 1, w.size - 1)])

        def neg(lw):
            x = np.array([np.exp(lw)])
            return -float(check.finite_array("bm(w)", bm(x), shape=(1,), low=0)[0]) / x[0] ** alpha

        res = optimize.minimize_scalar(neg, bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-10})
        best = max(best, -float(res.fun))
    return best
