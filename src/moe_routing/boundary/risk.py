"""Soft and hard risks of MoE regression and the soft-to-hard gap (paper B).

Model: logits a(x) from a router, expert predictions f_k(x) (|f_k| ≤ B), regression function
f*(x) = E[Y | X = x] (|f*| ≤ B*).  Population squared-loss risks

    mixture of predictions:  L_τ = E[(f* − Σ_k π_{k,τ} f_k)²] + E[Var(Y|X)]
    mixture of losses:       L_τ = E[Σ_k π_{k,τ} (f* − f_k)²] + E[Var(Y|X)]

with π_τ = softmax(a/τ) and π_0 the hard one-hot gate.  The noise term is the same for every τ
and cancels in L_τ − L_0, so the functions here return the noise-free part (add the noise
variance for absolute risks).
The model itself (experts, teacher, router, mixture) is :class:`.regression.MoERegression`.

The gap is integrated pointwise, (loss_τ − loss_0)(x), never as a difference of two large
integrals, so that O(τ) gaps stay accurate for tiny τ.  Estimators:

* :func:`risk_mc` — Monte Carlo with common random numbers (one sample for all τ);
* :func:`risk_quad_1d` — graded Gauss–Legendre quadrature for d = 1 (the reference for the tests);
* :func:`risk_layer_quadrature` — binary linear router, isotropic Gaussian input: exact
  quadrature along the interface normal, Monte Carlo across it (variance only from the
  directions in which nothing jumps);
* :func:`risk_polar_2d` — sphere router in d = 2: tensor quadrature in polar coordinates.

Bounds and first-order constants (our derivations, consistent with paper B's statements):

    |L_τ − L_0| ≤ 4(K−1) B (B + B*) C_m Γ(1+α) τ^α      if BM(w) ≤ C_m w^α,

    L_τ − L_0 = τ ∫_Σ [(2 ln 2 − 1) D² + 2 ln 2 · D (r_+ − r_−)] p/|∇g| dH^{d−1} + o(τ).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from .._internal import validation as check
from .laws import GaussianLaw, InputLaw, support_1d
from .quadrature import graded_nodes
from .regression import MIXTURES, MoERegression
from .routers import LinearRouter, SphereRouter

SOFTPLUS_SQ = np.log(2) - 0.5  # ∫_0^∞ σ(−s)² ds
SOFTPLUS = np.log(2)  # ∫_0^∞ σ(−s) ds
JUMP_SQ = 2 * np.log(2) - 1  # ∫_R (σ(s) − 1{s>0})² ds


@dataclass(frozen=True)
class RiskGap:
    """L_τ − L_0 at ``taus`` with standard errors (0 for pure quadrature); ``hard`` = L_0.

    ``first_order`` / ``first_order_se``: the first-order constant lim (L_τ − L_0)/τ and its
    standard error when the estimator computed it on the way (the control variate of
    :func:`risk_layer_quadrature`), NaN otherwise.
    """

    taus: np.ndarray
    gap: np.ndarray
    se: np.ndarray
    hard: float
    method: str
    first_order: float = float("nan")
    first_order_se: float = float("nan")

    @property
    def soft(self) -> np.ndarray:
        return self.hard + self.gap


def _model_and_law(model, law) -> None:
    check.instance("model", model, MoERegression, "a MoERegression")
    check.instance("law", law, InputLaw, "an InputLaw (GaussianLaw, UniformBox, VanishingDensityLaw)")
    check.require(model.router.dim == law.dim, "law.dim", law.dim,
                  f"the router's dimension d = {model.router.dim}")


def risk_mc(model: MoERegression, law: InputLaw, taus, n: int, rng=None, chunk: int = 1 << 16,
            method: str = "mc", n_rep: int = 16) -> RiskGap:
    """Monte Carlo with common random numbers: the same n ≥ 2 inputs for every τ and for L_0
    (two at least: the standard error of one draw is undefined).

    ``method="mc"`` (the reference): n independent draws, the standard error of their mean.
    ``method="rqmc"``: randomised quasi-Monte Carlo — ``n_rep`` independent scramblings of a
    Sobol' sequence of 2^k points each, 2^k the largest power of two ≤ n/n_rep, mapped to the law
    by ``law.from_unit_cube`` (GaussianLaw, UniformBox).  The pointwise gap is smooth except
    across the interfaces, where it is continuous or bounded, so in low dimension the error of
    one scrambling falls like ≈ n^(−3/4) instead of n^(−1/2); the standard error is that of the
    mean of the ``n_rep`` independent replicates (unbiased: each scrambled point is uniform).
    In d = 2, 16 × 2^17 points give the error of 10^7 independent draws (measured in
    ``benchmarks/bench_paper_profile.py``).
    """
    t = check.temperatures("taus", taus)
    n = check.integer("n", n, low=2)
    chunk = check.integer("chunk", chunk, low=1)
    check.choice("method", method, RISK_MC_METHODS)
    n_rep = check.integer("n_rep", n_rep, low=2)
    _model_and_law(model, law)
    g = check.generator("rng", rng)
    if method == "rqmc":
        return _risk_rqmc(model, law, t, n, n_rep, chunk, g)
    s1, s2 = np.zeros(t.size), np.zeros(t.size)
    hard_sum = 0.0
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        x = law.sample(m, g)
        hard_sum += model.hard_loss(x).sum()
        d = model.gap(x, t)  # (m_tau, m)
        s1 += d.sum(1)
        s2 += (d ** 2).sum(1)
    mean = s1 / n
    var = np.maximum(s2 / n - mean ** 2, 0) * n / max(n - 1, 1)
    return RiskGap(t, mean, np.sqrt(var / n), hard_sum / n, "Monte Carlo (common random numbers)")


RISK_MC_METHODS = ("mc", "rqmc")


def _risk_rqmc(model, law, t, n, n_rep, chunk, g) -> RiskGap:
    """:func:`risk_mc` with ``method="rqmc"`` on checked arguments."""
    from scipy.stats import qmc

    check.require(hasattr(law, "from_unit_cube"), "law", law,
                  "a law with a map from the unit cube (GaussianLaw, UniformBox) for "
                  "method='rqmc'; use method='mc' for this one")
    check.require(n >= 2 * n_rep, "n", n, f"at least 2 points per replicate (n ≥ 2·n_rep = {2 * n_rep})")
    m = 1 << int(np.floor(np.log2(n / n_rep)))             # points per replicate, a power of 2
    block = 1 << max(0, int(np.floor(np.log2(min(chunk, m)))))
    est, hard = np.empty((n_rep, t.size)), np.empty(n_rep)
    for r in range(n_rep):
        sob = qmc.Sobol(law.dim, scramble=True, seed=g)
        s1, h1 = np.zeros(t.size), 0.0
        for _ in range(m // block):
            u = np.clip(sob.random(block), 2.0 ** -60, 1 - 2.0 ** -53)  # (block, d), never 0 or 1
            x = law.from_unit_cube(u)
            h1 += model.hard_loss(x).sum()
            s1 += model.gap(x, t).sum(1)
        est[r], hard[r] = s1 / m, h1 / m
    se = est.std(0, ddof=1) / np.sqrt(n_rep)
    return RiskGap(t, est.mean(0), se, float(hard.mean()),
                   f"randomised quasi-Monte Carlo ({n_rep} × 2^{m.bit_length() - 1} Sobol' points)")


def risk_quad_1d(model: MoERegression, law: InputLaw, taus, interfaces=(0.0,), n_gl: int = 16) -> RiskGap:
    """d = 1: graded Gauss–Legendre quadrature of the pointwise gap (error ~ machine precision).

    ``interfaces`` are the tie points of the router (where the hard gate jumps or the margin
    vanishes) and the singular points of the density.
    """
    t = check.temperatures("taus", taus)
    _model_and_law(model, law)
    check.require(law.dim == 1, "law.dim", law.dim, "1 (risk_quad_1d integrates on the real line)")
    interfaces = check.finite_array("interfaces", interfaces, ndim=(0, 1), nonempty=False)
    n_gl = check.integer("n_gl", n_gl, low=1)
    a, b = support_1d(law)
    x, w = graded_nodes(a, b, interfaces, n_gl=n_gl)
    x = x[:, None]
    pw = law.pdf(x) * w  # (m,)
    gap = model.gap(x, t) @ pw
    hard = float(model.hard_loss(x) @ pw)
    return RiskGap(t, gap, np.zeros_like(gap), hard, "graded Gauss-Legendre (d = 1)")


def risk_layer_quadrature(model: MoERegression, law: GaussianLaw, taus, n_perp: int = 4000, rng=None,
                          n_gl: int = 12, layer: float = 32.0, chunk: int = 512,
                          n_lines: int | None = None, k_fine: int = 4, progress=None) -> RiskGap:
    """Binary linear router, X ~ N(μ, σ² I): quadrature across the interface, MC along it.

    Write X = μ + σ(T n̂ + Z_⊥) with n̂ = v/|v|, T ~ N(0, 1) ⟂ Z_⊥.  The gap vanishes like
    e^{−|g|/τ} away from the interface, so T is integrated by graded Gauss–Legendre over
    |g| ≤ ``layer``·τ (error ≤ e^{−layer} times the pointwise bound), and Z_⊥ is sampled
    (``n_perp`` draws, shared by every τ).  Experts and teacher may jump only on the interface
    (the T-panels are graded there, nowhere else; ``k_fine`` panels finer than τ/|v|σ next to
    it — 0 suffices when experts and teacher are smooth on each side: 8 nodes per panel then
    integrate the layer to ~10⁻¹³, with 96 nodes where the defaults use 240).  Returns
    L_τ − L_0 only: ``hard`` is NaN, a marker for "not computed" (nothing is computed from
    it).  ``n_perp`` ≥ 2 (a standard error needs two draws).

    ``n_lines=None`` (the reference): every direction's line integral is computed.  An integer
    ``n_lines`` ≤ ``n_perp`` selects the **control-variate** estimator (ours): a direction's
    line integral I(z) is, to first order in τ, τ·c(z) with c(z) = (first-order integrand at
    the interface point of the line) · φ(T₀)/(|v|σ) — the coarea limit of the layer, and
    E[c] is exactly the first-order constant of :func:`first_order_constant`.  c costs one
    point per direction where I costs a whole line, so

        L_τ − L_0 ≈ τ·mean_{n_perp}(c) + mean_{n_lines}(I − τc),

    unbiased for every τ, with variance τ²Var(c)/n_perp + Var(I − τc)/n_lines +
    2τCov(c, I − τc)/n_perp.  Since I − τc = O(τ²), a few hundred lines match the error of
    thousands; ``first_order`` / ``first_order_se`` of the result are mean(c) and its error
    (the first-order constant from the same directions).  Needs a transversal router and
    experts continuous across the interface (the conditions of the first-order term); if they
    fail the estimator stays unbiased, only less precise.  ``progress``: ``None`` or a callable
    ``progress(i, n)`` after each of the n temperatures.
    """
    t = check.temperatures("taus", taus)
    _model_and_law(model, law)
    n_perp = check.integer("n_perp", n_perp, low=2)
    n_gl = check.integer("n_gl", n_gl, low=1)
    layer = check.positive("layer", layer)
    chunk = check.integer("chunk", chunk, low=1)
    k_fine = check.integer("k_fine", k_fine, low=0)
    if n_lines is not None:
        n_lines = check.integer("n_lines", n_lines, low=2, high=n_perp)
    if progress is not None:
        check.function("progress", progress)
    r = model.router
    check.require(isinstance(r, LinearRouter) and r.n_experts == 2, "model.router", r,
                  "a binary LinearRouter")
    check.instance("law", law, GaussianLaw, "a GaussianLaw")
    sig2 = law.cov[0, 0]
    check.require(bool(np.allclose(law.cov, sig2 * np.eye(law.dim))), "law.cov", law.cov,
                  "an isotropic covariance σ² I")
    g_rng = check.generator("rng", rng)
    sig = float(np.sqrt(sig2))
    v, c = r.pair(0, 1)
    nv = float(np.linalg.norm(v))
    nhat = v / nv
    slope = nv * sig  # dg/dT
    T0 = -(v @ law.mean + c) / slope
    if n_lines is None:
        z = g_rng.standard_normal((n_perp, law.dim))
        z -= np.outer(z @ nhat, nhat)  # (n_perp, d): the component along n̂ removed
        ctrl = None
    else:
        z, ctrl = _interface_control(model, law, sig, nhat, T0, slope, n_perp, n_lines, g_rng)
    gaps, ses = [], []
    for i, ti in enumerate(t):
        inner = _line_integrals(model, law, sig, nhat, T0, slope, z, ti, n_gl, layer, chunk,
                                k_fine)
        if ctrl is None:
            gaps.append(inner.mean())
            ses.append(inner.std(ddof=1) / np.sqrt(n_perp))
        else:
            res = inner - ti * ctrl[:n_lines]                          # (n_lines,): O(τ²) each
            cov = np.cov(ctrl[:n_lines], res, ddof=1)[0, 1]
            var = (ti ** 2 * ctrl.var(ddof=1) + 2 * ti * cov) / n_perp + res.var(ddof=1) / n_lines
            gaps.append(ti * ctrl.mean() + res.mean())
            ses.append(np.sqrt(max(var, 0.0)))
        if progress is not None:
            progress(i + 1, t.size)
    fo = (float("nan"), float("nan")) if ctrl is None else (
        float(ctrl.mean()), float(ctrl.std(ddof=1) / np.sqrt(n_perp)))
    method = ("layer quadrature x Monte Carlo" if ctrl is None else
              "layer quadrature x Monte Carlo, first-order control variate")
    return RiskGap(t, np.array(gaps), np.array(ses), float("nan"), method, *fo)


def _line_integrals(model, law, sig, nhat, T0, slope, z, ti, n_gl, layer, chunk,
                    k_fine) -> np.ndarray:
    """∫ gap(μ + σ(z + T n̂)) φ(T) dT for every direction z (rows of z), at temperature ti."""
    n = z.shape[0]
    half = layer * ti / slope
    lo, hi = max(T0 - half, -14.0), min(T0 + half, 14.0)
    if hi <= lo:
        return np.zeros(n)
    T, wT = graded_nodes(lo, hi, [T0], n_gl=n_gl, k_fine=k_fine, base=max(ti / slope, 1e-300))
    wT = wT * np.exp(-0.5 * T ** 2) / np.sqrt(2 * np.pi)  # (m,)
    inner = np.empty(n)
    rows = max(1, min(chunk, (1 << 22) // (T.size * law.dim)))  # ≤ 4M floats per block
    for s in range(0, n, rows):
        zz = z[s:s + rows]  # (b, d)
        x = law.mean + sig * (zz[:, None, :] + T[None, :, None] * nhat)  # (b, m, d)
        g = model.gap(x.reshape(-1, law.dim), [ti])[0].reshape(zz.shape[0], T.size)
        inner[s:s + rows] = g @ wT
    return inner


def _interface_control(model, law, sig, nhat, T0, slope, n_perp, n_lines, g_rng):
    """n_perp directions z ⟂ n̂ in blocks of ≤ 4M floats; returns the first n_lines of them
    (n_lines, d) and the control c(z) = first-order integrand at μ + σ(z + T₀n̂) times
    φ(T₀)/slope for all n_perp, shape (n_perp,)."""
    d = law.dim
    weight = np.exp(-0.5 * T0 ** 2) / np.sqrt(2 * np.pi) / slope
    ctrl = np.empty(n_perp)
    keep = []
    rows = max(1, (1 << 22) // d)
    for s in range(0, n_perp, rows):
        m = min(rows, n_perp - s)
        zz = g_rng.standard_normal((m, d))
        zz -= np.outer(zz @ nhat, nhat)
        if s < n_lines:
            keep.append(zz[:n_lines - s])
        x = law.mean + sig * (zz + T0 * nhat)
        ctrl[s:s + m] = weight * first_order_integrand(model, x, nhat)
    return np.concatenate(keep), ctrl


def risk_polar_2d(model: MoERegression, law: InputLaw, taus, rho_max: float, n_theta: int = 256,
                  n_gl: int = 12) -> RiskGap:
    """Sphere router in d = 2: trapezoid in the angle × graded Gauss–Legendre in the radius."""
    t = check.temperatures("taus", taus)
    _model_and_law(model, law)
    r = model.router
    check.require(isinstance(r, SphereRouter) and r.dim == 2, "model.router", r, "a SphereRouter in d = 2")
    rho_max = check.positive("rho_max", rho_max)
    n_theta = check.integer("n_theta", n_theta, low=1)
    n_gl = check.integer("n_gl", n_gl, low=1)
    rho, wr = graded_nodes(0.0, rho_max, [r.radius], n_gl=n_gl)
    th = 2 * np.pi * np.arange(n_theta) / n_theta
    R, TH = np.meshgrid(rho, th, indexing="ij")  # (m, n_theta)
    x = r.center + np.stack([R * np.cos(TH), R * np.sin(TH)], -1).reshape(-1, 2)
    w = (wr[:, None] * R * (2 * np.pi / n_theta)).ravel() * law.pdf(x)
    gap = model.gap(x, t) @ w
    return RiskGap(t, gap, np.zeros_like(gap), float(model.hard_loss(x) @ w), "polar quadrature (d = 2)")


# ----------------------------------------------------------------------------- bound, first order

def risk_bound(taus, n_experts: int, B: float, B_star: float, C_m: float, alpha: float = 1.0,
               mixture: str = "predictions") -> np.ndarray:
    """Upper bound on |L_τ − L_0| from a margin tail BM(w) ≤ C_m w^α (our derivation).

    mixture of predictions: 4(K−1) B (B + B*) C_m Γ(1+α) τ^α (from |m_τ − m_0| ≤ B‖π_τ − π_0‖_1
    and |2f* − m_τ − m_0| ≤ 2(B + B*)); mixture of losses: (K−1)(B + B*)² C_m Γ(1+α) τ^α (from
    |Σ_k (π_τ − π_0)_k ℓ_k| ≤ ½‖π_τ − π_0‖_1 (max ℓ − min ℓ) with 0 ≤ ℓ_k ≤ (B + B*)²).  The layer
    cake E[e^{−Δ/τ}] = ∫_0^∞ τ^{−1} e^{−w/τ} BM(w) dw ≤ C_m Γ(1+α) τ^α gives the τ^α.
    """
    t = check.temperatures("taus", taus)
    K = check.integer("n_experts", n_experts, low=2)
    B, B_star, C_m, alpha = (check.positive(name, val) for name, val in
                             (("B", B), ("B_star", B_star), ("C_m", C_m), ("alpha", alpha)))
    check.choice("mixture", mixture, MIXTURES)
    pre = 4 * (K - 1) * B * (B + B_star) if mixture == "predictions" else (K - 1) * (B + B_star) ** 2
    return pre * C_m * special.gamma(1 + alpha) * t ** alpha


def first_order_integrand(model: MoERegression, x_sigma, normal, eps: float = 1e-9) -> np.ndarray:
    """Pointwise first-order density on the interface (binary, transversal router), shape (n,).

    predictions: (2 ln 2 − 1) D² + 2 ln 2 · D (r_+ − r_−);  losses (ours): ln 2 [(ℓ_1 − ℓ_0)_+ +
    (ℓ_0 − ℓ_1)_−].  Expert 0 is the one active on the side g > 0 (the "+" side, unit normal
    ``normal`` = ∇g/|∇g|); D = f_0 − f_1; one-sided teacher values f*_± = f*(x ± eps·n̂);
    r_+ = f*_+ − f_0, r_− = f*_− − f_1.  Multiply by τ p/|∇g| and integrate over Σ.
    ``normal`` is one unit normal per point, (n, d), or one for all points, (d,).
    """
    check.instance("model", model, MoERegression, "a MoERegression")
    check.require(model.n_experts == 2, "model.n_experts", model.n_experts,
                  "2 (the first-order constant is for a binary router)")
    x = check.points("x_sigma", x_sigma, model.router.dim)
    n, d = x.shape
    nrm = check.finite_array("normal", normal)
    check.require(nrm.size in (d, n * d), "normal.shape", nrm.shape, f"({n}, {d}) or ({d},)")
    nrm = nrm.reshape(-1, d)
    eps = check.positive("eps", eps)
    f = check.finite_array("experts(x)", model.experts(x), shape=(n, 2))  # (n, 2)
    yp = check.finite_array("teacher(x)", model.teacher(x + eps * nrm), shape=(n,))
    ym = check.finite_array("teacher(x)", model.teacher(x - eps * nrm), shape=(n,))
    if model.mixture == "predictions":
        D = f[:, 0] - f[:, 1]
        return JUMP_SQ * D ** 2 + 2 * SOFTPLUS * D * ((yp - f[:, 0]) - (ym - f[:, 1]))
    lp = (yp[:, None] - f) ** 2
    lm = (ym[:, None] - f) ** 2
    return SOFTPLUS * ((lp[:, 1] - lp[:, 0]) + (lm[:, 0] - lm[:, 1]))


def first_order_constant(model: MoERegression, law: InputLaw, n_cond: int = 100_000, rng=None,
                         n_theta: int = 512) -> tuple[float, float]:
    """lim (L_τ − L_0)/τ = ∫_Σ (first-order integrand) p/|∇g| dH^{d−1}; returns (value, se).

    Binary linear router: d = 1 exactly (Σ is one point); Gaussian input in any d by exact
    conditional sampling of X | g(X) = 0 (value = S · E[integrand | Σ]).  Sphere router, d = 2:
    trapezoid rule on the circle.  A density that is infinite on the interface (a vanishing
    density law with α < 1 whose tie set is the interface) has no finite constant: refused.
    """
    _model_and_law(model, law)
    r = model.router
    n_cond = check.integer("n_cond", n_cond, low=2)
    n_theta = check.integer("n_theta", n_theta, low=1)
    if isinstance(r, LinearRouter) and r.n_experts == 2:
        v, c = r.pair(0, 1)
        nv = float(np.linalg.norm(v))
        check.require(nv > 0, "model.router", r, "a router whose two experts have different weights "
                      "(v = 0: no interface)")
        if r.dim == 1:
            x = np.array([[-c / v[0]]])
            p = law.pdf(x)[0]
            check.require(bool(np.isfinite(p)), "law", law, "a density finite on the interface "
                          f"(p(x) = {p} at the tie point x = {x[0, 0]!r})")
            return float(first_order_integrand(model, x, v / nv)[0] * p / nv), 0.0
        if isinstance(law, GaussianLaw):
            from .coarea import linear_gaussian_constant

            S = linear_gaussian_constant(v, c, law)
            x0 = law.sample(n_cond, check.generator("rng", rng))
            u, gamma, h = law._conditioning(v, c)   # no vᵀΣv formed: it overflows at |v|σ ≳ 1e154
            xc = x0 - np.outer(x0 @ u + gamma, h)  # exact draws of X | g(X) = 0
            h = first_order_integrand(model, xc, np.broadcast_to(v / nv, xc.shape))
            return float(S * h.mean()), float(S * h.std(ddof=1) / np.sqrt(n_cond))
    if isinstance(r, SphereRouter) and r.dim == 2:
        th = 2 * np.pi * np.arange(n_theta) / n_theta
        u = np.stack([np.cos(th), np.sin(th)], 1)
        x = r.center + r.radius * u
        h = first_order_integrand(model, x, u)
        w = law.pdf(x) * r.radius * (2 * np.pi / n_theta) / (2 * r.scale * r.radius)
        return float(h @ w), 0.0
    check.fail("model.router", r, "a binary LinearRouter (d = 1, or any d with a GaussianLaw) or a "
               f"SphereRouter in d = 2 (not implemented for {type(r).__name__} in d = {r.dim} with "
               f"{type(law).__name__})")
