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
from scipy import stats

from . import _checks
from .laws import GaussianLaw, InputLaw, normal_cdf
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
    """Wilson score interval for a binomial proportion k/n (good even when k is 0 or small)."""
    n = _checks.count(n)
    confidence = _checks.confidence(confidence)
    k = np.asarray(k, float)
    z = stats.norm.ppf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z ** 2 / n
    centre = (p + z ** 2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / denom
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0, 1))  # exact ends (no rounding residue)
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0, 1))
    return lo, hi


def _logit_sampler(router: Router, law: InputLaw):
    """For a linear router and Gaussian input the router sees X only through its K logits,
    a ~ N(Wμ + b, WΣWᵀ): when K < d, sampling that K-dimensional Gaussian is exact and costs
    O(K²) per input instead of O(d(d + K)).  Returns None when the shortcut does not apply."""
    if not (isinstance(router, LinearRouter) and isinstance(law, GaussianLaw)
            and router.n_experts < law.dim):
        return None
    W = router.weight
    mean = W @ law.mean + router.bias  # (K,)
    lam, vec = np.linalg.eigh(W @ law.cov @ W.T)  # PSD (K, K); singular when rank W < K
    root = vec * np.sqrt(np.clip(lam, 0, None))  # (K, K): root @ rootᵀ = WΣWᵀ
    return lambda m, g: mean + g.standard_normal((m, mean.size)) @ root.T


def _top_two(a: np.ndarray) -> np.ndarray:
    """Margin of each row; a full sort is faster than a partial one for the small K of routers."""
    if a.shape[1] == 2:
        return np.abs(a[:, 0] - a[:, 1])
    if a.shape[1] <= 64:
        s = np.sort(a, axis=1)
        return s[:, -1] - s[:, -2]
    return top_two_margin(a)


def sample_margins(router: Router, law: InputLaw, n: int, rng=None, chunk: int = 1 << 18) -> np.ndarray:
    """n i.i.d. margins Δ(X_i), X_i ~ law; computed in chunks so memory stays O(chunk · K)."""
    n = _checks.count(n)
    chunk = _checks.count(chunk, "chunk")
    if router.dim != law.dim:
        raise ValueError(f"router dimension d = {router.dim} does not match the law's d = {law.dim}")
    g = _checks.rng(rng)
    direct = _logit_sampler(router, law)
    out = np.empty(n)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        a = direct(m, g) if direct is not None else router.logits(law.sample(m, g))  # (m, K)
        out[s:s + m] = _top_two(a)
    return out


def boundary_mass_from_margins(margins, widths, confidence: float = 0.95) -> BoundaryMass:
    w = _checks.widths(widths)
    d = np.sort(np.asarray(margins, float))
    n = _checks.count(d.size, "number of margins")
    counts = np.searchsorted(d, w, side="right")
    lo, hi = wilson_interval(counts, n, confidence)
    return BoundaryMass(w, counts / n, lo, hi, n, counts)


def boundary_mass_mc(router: Router, law: InputLaw, widths, n: int, rng=None,
                     confidence: float = 0.95, chunk: int = 1 << 18) -> BoundaryMass:
    """Monte Carlo BM at every width from one sample of n inputs (common random numbers)."""
    _checks.widths(widths)
    _checks.confidence(confidence)
    return boundary_mass_from_margins(sample_margins(router, law, n, rng, chunk), widths, confidence)


def _gaussian_projection(v, c: float, law: GaussianLaw) -> tuple[float, float]:
    """Mean and standard deviation of g(X) = v·X + c for X ~ law."""
    v = np.asarray(v, float)
    if v.shape != (law.dim,):
        raise ValueError(f"router direction has shape {v.shape}; accepted: ({law.dim},) to match the law")
    s2 = float(v @ law.cov @ v)
    if s2 <= 0:
        raise ValueError("router direction v = 0: the interface is empty or everything (degenerate router)")
    return float(v @ law.mean + c), np.sqrt(s2)


def slab_mass_linear_gaussian(v, c: float, law: GaussianLaw, widths) -> np.ndarray:
    """P(|v·X + c| ≤ w) for X ~ N(μ, Σ), exactly."""
    w = _checks.widths(widths)
    m, s = _gaussian_projection(v, c, law)
    return normal_cdf((w - m) / s) - normal_cdf((-w - m) / s)


def boundary_mass_linear_gaussian(router: LinearRouter, law: GaussianLaw, widths) -> BoundaryMass:
    """Exact BM(w) for a binary linear router and Gaussian input."""
    if router.n_experts != 2:
        raise ValueError(f"closed form is for K = 2; got K = {router.n_experts} (use pairwise_union_bound)")
    v, c = router.pair(0, 1)
    bm = slab_mass_linear_gaussian(v, c, law, widths)
    w = _checks.widths(widths)
    return BoundaryMass(w, bm, bm, bm, 0)


def pairwise_union_bound(router: LinearRouter, law: InputLaw, widths, n: int | None = None,
                         rng=None) -> np.ndarray:
    """Σ_{j<k} P(|g_jk(X)| ≤ w): exact for Gaussian input, Monte Carlo (n samples) otherwise."""
    w = _checks.widths(widths)
    if not isinstance(router, LinearRouter):
        raise ValueError("the pairwise bound is implemented for LinearRouter")
    if router.dim != law.dim:
        raise ValueError(f"router dimension d = {router.dim} does not match the law's d = {law.dim}")
    if isinstance(law, GaussianLaw):
        return sum(slab_mass_linear_gaussian(*router.pair(j, k), law, w) for j, k in router.pairs())
    if n is None:
        raise ValueError("non-Gaussian law: pass n (Monte Carlo sample size ≥ 1)")
    x = law.sample(_checks.count(n), _checks.rng(rng))
    a = router.logits(x)
    out = np.zeros_like(w)
    for j, k in router.pairs():
        gjk = np.sort(np.abs(a[:, j] - a[:, k]))
        out += np.searchsorted(gjk, w, side="right") / gjk.size
    return out


def tail_constant(bm, alpha: float, w_grid=None) -> float:
    """C_m = sup_{w>0} BM(w) / w^α over a grid (``bm`` is a callable w -> BM(w)).

    BM ≤ 1 bounds the ratio by w^(−α) for large w, so a log grid up to 10^4 suffices unless α
    is tiny; the default grid runs from 10^−8 to 10^4.
    """
    alpha = _checks.positive(alpha, "alpha")
    w = np.logspace(-8, 4, 4001) if w_grid is None else _checks.widths(w_grid)
    w = w[w > 0]
    return float(np.max(np.asarray(bm(w), float) / w ** alpha))
