"""Soft and hard risks of MoE regression and the soft-to-hard gap (paper B).

Model: logits a(x) from a router, expert predictions f_k(x) (|f_k| ≤ B), regression function
f*(x) = E[Y | X = x] (|f*| ≤ B*).  Population squared-loss risks

    mixture of predictions:  L_τ = E[(f* − Σ_k π_{k,τ} f_k)²] + E[Var(Y|X)]
    mixture of losses:       L_τ = E[Σ_k π_{k,τ} (f* − f_k)²] + E[Var(Y|X)]

with π_τ = softmax(a/τ) and π_0 the hard one-hot gate.  The noise term is the same for every τ
and cancels in L_τ − L_0, so the functions here return the noise-free part (add the noise
variance for absolute risks).

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
from typing import Callable

import numpy as np
from scipy import special

from .. import validation as check
from .laws import GaussianLaw, InputLaw, support_1d
from .margin import hard_gates, soft_gates
from .quadrature import graded_nodes
from .routers import LinearRouter, Router, SphereRouter

MIXTURES = ("predictions", "losses")
SOFTPLUS_SQ = np.log(2) - 0.5  # ∫_0^∞ σ(−s)² ds
SOFTPLUS = np.log(2)  # ∫_0^∞ σ(−s) ds
JUMP_SQ = 2 * np.log(2) - 1  # ∫_R (σ(s) − 1{s>0})² ds


# ----------------------------------------------------------------------------- experts, teachers

@dataclass(frozen=True)
class ConstantExperts:
    """f_k(x) = values[k] (works in any dimension)."""

    values: np.ndarray

    def __post_init__(self):
        v = check.finite_array("values", self.values, ndim=1)
        check.require(v.size >= 2, "values.size", v.size, "K ≥ 2 expert values")
        object.__setattr__(self, "values", v)

    @property
    def n_experts(self) -> int:
        return self.values.size

    @property
    def bound(self) -> float:
        return float(np.abs(self.values).max())

    def __call__(self, x) -> np.ndarray:
        x = check.finite_array("x", x, ndim=(1, 2))
        return np.broadcast_to(self.values, (x.shape[0], self.values.size))  # (n, K)


@dataclass(frozen=True)
class TanhExperts:
    """f_k(x) = offset_k + amplitude_k · tanh(θ_k · x): bounded by max_k |offset_k| + |amplitude_k|."""

    offset: np.ndarray
    amplitude: np.ndarray
    theta: np.ndarray

    def __post_init__(self):
        o = check.finite_array("offset", self.offset, ndim=1)
        K = o.size
        check.require(K >= 2, "offset.size", K, "K ≥ 2 experts")
        a = check.finite_array("amplitude", self.amplitude, shape=(K,))
        t = check.finite_array("theta", self.theta, shape=(K, None))
        for name, val in (("offset", o), ("amplitude", a), ("theta", t)):
            object.__setattr__(self, name, val)

    @property
    def n_experts(self) -> int:
        return self.offset.size

    @property
    def dim(self) -> int:
        return self.theta.shape[1]

    @property
    def bound(self) -> float:
        return float(np.max(np.abs(self.offset) + np.abs(self.amplitude)))

    def __call__(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        return self.offset + self.amplitude * np.tanh(x @ self.theta.T)  # (n, K)


@dataclass(frozen=True)
class FunctionExperts:
    """Experts given by a vectorised callable x (n, d) -> (n, K) and a known bound B.

    The values are checked on every call: finite, of shape (n, K) — a NaN from ``fn`` is
    refused rather than averaged into a risk.
    """

    fn: Callable[[np.ndarray], np.ndarray]
    n_experts: int
    bound: float

    def __post_init__(self):
        check.function("fn", self.fn)
        object.__setattr__(self, "n_experts", check.integer("n_experts", self.n_experts, low=2))
        object.__setattr__(self, "bound", check.number("bound", self.bound, low=0))

    def __call__(self, x) -> np.ndarray:
        x = check.finite_array("x", x, ndim=2)
        return check.finite_array("fn(x)", self.fn(x), shape=(x.shape[0], self.n_experts))


@dataclass(frozen=True)
class Teacher:
    """Regression function f*(x) = E[Y | X = x] as a vectorised callable, with a bound B*.

    The values are checked on every call: finite, of shape (n,).
    """

    fn: Callable[[np.ndarray], np.ndarray]
    bound: float

    def __post_init__(self):
        check.function("fn", self.fn)
        object.__setattr__(self, "bound", check.number("bound", self.bound, low=0))

    def __call__(self, x) -> np.ndarray:
        x = check.finite_array("x", x, ndim=2)
        return check.finite_array("fn(x)", self.fn(x), shape=(x.shape[0],))


# ----------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class MoERegression:
    """Router + experts + regression function; ``mixture`` = "predictions" (default) or "losses"."""

    router: Router
    experts: Callable
    teacher: Callable
    mixture: str = "predictions"

    def __post_init__(self):
        check.instance("router", self.router, Router, "a Router (LinearRouter, SphereRouter, PowerRouter, …)")
        check.function("experts", self.experts)
        check.function("teacher", self.teacher)
        check.choice("mixture", self.mixture, MIXTURES)
        K = getattr(self.experts, "n_experts", self.router.n_experts)
        check.require(K == self.router.n_experts, "experts.n_experts", K,
                      f"the router's number of experts K = {self.router.n_experts}")

    @property
    def n_experts(self) -> int:
        return self.router.n_experts

    def _parts(self, x):
        x = check.points("x", x, self.router.dim)
        n, K = x.shape[0], self.router.n_experts
        f = check.finite_array("experts(x)", self.experts(x), shape=(n, K))
        y = check.finite_array("teacher(x)", self.teacher(x), shape=(n,))
        return self.router.logits(x), f, y  # (n,K), (n,K), (n,)

    def _loss(self, gates, f, y):
        if self.mixture == "predictions":
            return (y - (gates * f).sum(1)) ** 2
        return (gates * (y[:, None] - f) ** 2).sum(1)

    def soft_loss(self, x, tau: float) -> np.ndarray:
        """Pointwise noise-free loss at temperature τ, shape (n,)."""
        a, f, y = self._parts(x)
        return self._loss(soft_gates(a, tau), f, y)

    def hard_loss(self, x) -> np.ndarray:
        a, f, y = self._parts(x)
        return self._loss(hard_gates(a), f, y)

    def gap(self, x, taus) -> np.ndarray:
        """(loss_τ − loss_0)(x) for every τ, shape (m, n); router/experts evaluated once."""
        t = check.temperatures("taus", taus)
        a, f, y = self._parts(x)
        hard = self._loss(hard_gates(a), f, y)
        return np.stack([self._loss(soft_gates(a, ti), f, y) - hard for ti in t])


@dataclass(frozen=True)
class RiskGap:
    """L_τ − L_0 at ``taus`` with standard errors (0 for pure quadrature); ``hard`` = L_0."""

    taus: np.ndarray
    gap: np.ndarray
    se: np.ndarray
    hard: float
    method: str

    @property
    def soft(self) -> np.ndarray:
        return self.hard + self.gap


def _model_and_law(model, law) -> None:
    check.instance("model", model, MoERegression, "a MoERegression")
    check.instance("law", law, InputLaw, "an InputLaw (GaussianLaw, UniformBox, VanishingDensityLaw)")
    check.require(model.router.dim == law.dim, "law.dim", law.dim,
                  f"the router's dimension d = {model.router.dim}")


def risk_mc(model: MoERegression, law: InputLaw, taus, n: int, rng=None, chunk: int = 1 << 16) -> RiskGap:
    """Monte Carlo with common random numbers: the same n ≥ 2 inputs for every τ and for L_0
    (two at least: the standard error of one draw is undefined)."""
    t = check.temperatures("taus", taus)
    n = check.integer("n", n, low=2)
    chunk = check.integer("chunk", chunk, low=1)
    _model_and_law(model, law)
    g = check.generator("rng", rng)
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
                          n_gl: int = 12, layer: float = 32.0, chunk: int = 512) -> RiskGap:
    """Binary linear router, X ~ N(μ, σ² I): quadrature across the interface, MC along it.

    Write X = μ + σ(T n̂ + Z_⊥) with n̂ = v/|v|, T ~ N(0, 1) ⟂ Z_⊥.  The gap vanishes like
    e^{−|g|/τ} away from the interface, so T is integrated by graded Gauss–Legendre over
    |g| ≤ ``layer``·τ (error ≤ e^{−layer} times the pointwise bound), and Z_⊥ is sampled
    (``n_perp`` draws, shared by every τ).  Experts and teacher may jump only on the interface
    (the T-panels are graded there, nowhere else).  Returns L_τ − L_0 only: ``hard`` is NaN,
    a marker for "not computed" (nothing is computed from it).  ``n_perp`` ≥ 2 (a standard
    error needs two draws).
    """
    t = check.temperatures("taus", taus)
    _model_and_law(model, law)
    n_perp = check.integer("n_perp", n_perp, low=2)
    n_gl = check.integer("n_gl", n_gl, low=1)
    layer = check.positive("layer", layer)
    chunk = check.integer("chunk", chunk, low=1)
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
    z = g_rng.standard_normal((n_perp, law.dim))
    z -= np.outer(z @ nhat, nhat)  # (n_perp, d): the component along n̂ removed
    gaps, ses = [], []
    for ti in t:
        half = layer * ti / slope
        lo, hi = max(T0 - half, -14.0), min(T0 + half, 14.0)
        if hi <= lo:
            gaps.append(0.0)
            ses.append(0.0)
            continue
        T, wT = graded_nodes(lo, hi, [T0], n_gl=n_gl, k_fine=4, base=max(ti / slope, 1e-300))
        wT = wT * np.exp(-0.5 * T ** 2) / np.sqrt(2 * np.pi)  # (m,)
        inner = np.empty(n_perp)
        rows = max(1, min(chunk, (1 << 22) // (T.size * law.dim)))  # ≤ 4M floats per block
        for s in range(0, n_perp, rows):
            zz = z[s:s + rows]  # (b, d)
            x = law.mean + sig * (zz[:, None, :] + T[None, :, None] * nhat)  # (b, m, d)
            g = model.gap(x.reshape(-1, law.dim), [ti])[0].reshape(zz.shape[0], T.size)
            inner[s:s + rows] = g @ wT
        gaps.append(inner.mean())
        ses.append(inner.std(ddof=1) / np.sqrt(n_perp))
    return RiskGap(t, np.array(gaps), np.array(ses), float("nan"), "layer quadrature x Monte Carlo")


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
