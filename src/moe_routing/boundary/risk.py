"""Soft and hard risks of MoE regression and the soft-to-hard gap (paper B §2 and §5).

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
* :func:`risk_quad_1d` — graded Gauss–Legendre quadrature for d = 1 (the §9 checks);
* :func:`risk_layer_quadrature` — binary linear router, isotropic Gaussian input: exact
  quadrature along the interface normal, Monte Carlo across it (variance only from the
  directions in which nothing jumps);
* :func:`risk_polar_2d` — sphere router in d = 2: tensor quadrature in polar coordinates.

Bounds and first-order constants (our derivations, paper B §5 of the team notes):

    |L_τ − L_0| ≤ 4(K−1) B (B + B*) C_m Γ(1+α) τ^α      if BM(w) ≤ C_m w^α,

    L_τ − L_0 = τ ∫_Σ [(2 ln 2 − 1) D² + 2 ln 2 · D (r_+ − r_−)] p/|∇g| dH^{d−1} + o(τ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

from . import _checks
from .laws import GaussianLaw, InputLaw, UniformBox, VanishingDensityLaw
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
        v = np.atleast_1d(np.asarray(self.values, float))
        _checks.n_experts(v.size)
        object.__setattr__(self, "values", v)

    @property
    def n_experts(self) -> int:
        return self.values.size

    @property
    def bound(self) -> float:
        return float(np.abs(self.values).max())

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, float)
        return np.broadcast_to(self.values, (x.shape[0], self.values.size))  # (n, K)


@dataclass(frozen=True)
class TanhExperts:
    """f_k(x) = offset_k + amplitude_k · tanh(θ_k · x): bounded by max_k |offset_k| + |amplitude_k|."""

    offset: np.ndarray
    amplitude: np.ndarray
    theta: np.ndarray

    def __post_init__(self):
        o = np.atleast_1d(np.asarray(self.offset, float))
        a = np.atleast_1d(np.asarray(self.amplitude, float))
        t = np.atleast_2d(np.asarray(self.theta, float))
        _checks.n_experts(o.size)
        if a.shape != o.shape or t.shape[0] != o.size:
            raise ValueError(f"offset {o.shape}, amplitude {a.shape}, theta {t.shape}: need (K,), (K,), (K, d)")
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
        x = _checks.points(x, self.dim)
        return self.offset + self.amplitude * np.tanh(x @ self.theta.T)  # (n, K)


@dataclass(frozen=True)
class FunctionExperts:
    """Experts given by a vectorised callable x (n, d) -> (n, K) and a known bound B."""

    fn: Callable[[np.ndarray], np.ndarray]
    n_experts: int
    bound: float

    def __call__(self, x) -> np.ndarray:
        return np.asarray(self.fn(np.asarray(x, float)), float)


@dataclass(frozen=True)
class Teacher:
    """Regression function f*(x) = E[Y | X = x] as a vectorised callable, with a bound B*."""

    fn: Callable[[np.ndarray], np.ndarray]
    bound: float

    def __call__(self, x) -> np.ndarray:
        return np.asarray(self.fn(np.asarray(x, float)), float)


# ----------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class MoERegression:
    """Router + experts + regression function; ``mixture`` = "predictions" (default) or "losses"."""

    router: Router
    experts: Callable
    teacher: Callable
    mixture: str = "predictions"

    def __post_init__(self):
        if self.mixture not in MIXTURES:
            raise ValueError(f"mixture = {self.mixture!r}; accepted: {', '.join(MIXTURES)}")
        K = getattr(self.experts, "n_experts", self.router.n_experts)
        if K != self.router.n_experts:
            raise ValueError(f"router has K = {self.router.n_experts} experts but the experts give K = {K}")

    @property
    def n_experts(self) -> int:
        return self.router.n_experts

    def _parts(self, x):
        x = _checks.points(x, self.router.dim)
        return self.router.logits(x), self.experts(x), self.teacher(x)  # (n,K), (n,K), (n,)

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
        t = _checks.temperatures(taus)
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


def _law_dim_check(model: MoERegression, law: InputLaw):
    if model.router.dim != law.dim:
        raise ValueError(f"router dimension d = {model.router.dim} does not match the law's d = {law.dim}")


def risk_mc(model: MoERegression, law: InputLaw, taus, n: int, rng=None, chunk: int = 1 << 16) -> RiskGap:
    """Monte Carlo with common random numbers: the same n inputs for every τ and for L_0."""
    t = _checks.temperatures(taus)
    n = _checks.count(n)
    chunk = _checks.count(chunk, "chunk")
    _law_dim_check(model, law)
    g = _checks.rng(rng)
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


def _support_1d(law: InputLaw) -> tuple[float, float]:
    if isinstance(law, UniformBox):
        return float(law.low[0]), float(law.high[0])
    if isinstance(law, VanishingDensityLaw):
        return -law.half_width, law.half_width
    if isinstance(law, GaussianLaw):
        m, s = float(law.mean[0]), float(np.sqrt(law.cov[0, 0]))
        return m - 14 * s, m + 14 * s
    raise ValueError(f"no 1-D support known for {type(law).__name__}")


def risk_quad_1d(model: MoERegression, law: InputLaw, taus, interfaces=(0.0,), n_gl: int = 16) -> RiskGap:
    """d = 1: graded Gauss–Legendre quadrature of the pointwise gap (error ~ machine precision).

    ``interfaces`` are the tie points of the router (where the hard gate jumps or the margin
    vanishes) and the singular points of the density.
    """
    t = _checks.temperatures(taus)
    if law.dim != 1 or model.router.dim != 1:
        raise ValueError(f"risk_quad_1d needs d = 1; got router d = {model.router.dim}, law d = {law.dim}")
    a, b = _support_1d(law)
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
    (the T-panels are graded there, nowhere else).  Returns L_τ − L_0 only (``hard`` is NaN).
    """
    t = _checks.temperatures(taus)
    n_perp = _checks.count(n_perp, "n_perp")
    r = model.router
    if not (isinstance(r, LinearRouter) and r.n_experts == 2 and isinstance(law, GaussianLaw)):
        raise ValueError("risk_layer_quadrature needs a binary LinearRouter and a GaussianLaw")
    _law_dim_check(model, law)
    sig2 = law.cov[0, 0]
    if not np.allclose(law.cov, sig2 * np.eye(law.dim)):
        raise ValueError("risk_layer_quadrature needs an isotropic covariance σ² I")
    sig = float(np.sqrt(sig2))
    v, c = r.pair(0, 1)
    nv = float(np.linalg.norm(v))
    nhat = v / nv
    slope = nv * sig  # dg/dT
    T0 = -(v @ law.mean + c) / slope
    z = _checks.rng(rng).standard_normal((n_perp, law.dim))
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
        ses.append(inner.std(ddof=1) / np.sqrt(n_perp) if n_perp > 1 else np.nan)
    return RiskGap(t, np.array(gaps), np.array(ses), float("nan"), "layer quadrature x Monte Carlo")


def risk_polar_2d(model: MoERegression, law: InputLaw, taus, rho_max: float, n_theta: int = 256,
                  n_gl: int = 12) -> RiskGap:
    """Sphere router in d = 2: trapezoid in the angle × graded Gauss–Legendre in the radius."""
    t = _checks.temperatures(taus)
    r = model.router
    if not (isinstance(r, SphereRouter) and r.dim == 2):
        raise ValueError("risk_polar_2d needs a SphereRouter in d = 2")
    _law_dim_check(model, law)
    rho_max = _checks.positive(rho_max, "rho_max")
    n_theta = _checks.count(n_theta, "n_theta")
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
    t = _checks.temperatures(taus)
    K = _checks.n_experts(n_experts)
    for name, val in (("B", B), ("B_star", B_star), ("C_m", C_m), ("alpha", alpha)):
        _checks.positive(val, name)
    if mixture not in MIXTURES:
        raise ValueError(f"mixture = {mixture!r}; accepted: {', '.join(MIXTURES)}")
    pre = 4 * (K - 1) * B * (B + B_star) if mixture == "predictions" else (K - 1) * (B + B_star) ** 2
    return pre * C_m * special.gamma(1 + alpha) * t ** alpha


def first_order_integrand(model: MoERegression, x_sigma, normal, eps: float = 1e-9) -> np.ndarray:
    """Pointwise first-order density on the interface (binary, transversal router), shape (n,).

    predictions: (2 ln 2 − 1) D² + 2 ln 2 · D (r_+ − r_−);  losses (ours): ln 2 [(ℓ_1 − ℓ_0)_+ +
    (ℓ_0 − ℓ_1)_−].  Expert 0 is the one active on the side g > 0 (the "+" side, unit normal
    ``normal`` = ∇g/|∇g|); D = f_0 − f_1; one-sided teacher values f*_± = f*(x ± eps·n̂);
    r_+ = f*_+ − f_0, r_− = f*_− − f_1.  Multiply by τ p/|∇g| and integrate over Σ.
    """
    if model.n_experts != 2:
        raise ValueError(f"first-order constant is for K = 2; got K = {model.n_experts}")
    x = _checks.points(x_sigma, model.router.dim)
    nrm = np.asarray(normal, float).reshape(-1, x.shape[1])
    f = model.experts(x)  # (n, 2)
    yp, ym = model.teacher(x + eps * nrm), model.teacher(x - eps * nrm)
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
    trapezoid rule on the circle.
    """
    r = model.router
    if isinstance(r, LinearRouter) and r.n_experts == 2:
        v, c = r.pair(0, 1)
        nv = float(np.linalg.norm(v))
        if r.dim == 1:
            x = np.array([[-c / v[0]]])
            return float(first_order_integrand(model, x, v / nv)[0] * law.pdf(x)[0] / nv), 0.0
        if isinstance(law, GaussianLaw):
            from .coarea import linear_gaussian_constant

            S = linear_gaussian_constant(v, c, law)
            n_cond = _checks.count(n_cond, "n_cond")
            x0 = law.sample(n_cond, _checks.rng(rng))
            s2 = float(v @ law.cov @ v)
            xc = x0 - np.outer(x0 @ v + c, law.cov @ v) / s2  # exact draws of X | g(X) = 0
            h = first_order_integrand(model, xc, np.broadcast_to(v / nv, xc.shape))
            return float(S * h.mean()), float(S * h.std(ddof=1) / np.sqrt(n_cond))
    if isinstance(r, SphereRouter) and r.dim == 2:
        th = 2 * np.pi * np.arange(n_theta) / n_theta
        u = np.stack([np.cos(th), np.sin(th)], 1)
        x = r.center + r.radius * u
        h = first_order_integrand(model, x, u)
        w = law.pdf(x) * r.radius * (2 * np.pi / n_theta) / (2 * r.scale * r.radius)
        return float(h @ w), 0.0
    raise ValueError(f"first_order_constant: not implemented for {type(r).__name__} in d = {r.dim} "
                     f"with {type(law).__name__}")
