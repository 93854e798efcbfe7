"""Input laws p_X: Gaussian, uniform on a box, and a density vanishing at a hyperplane.

Each law can ``sample(n, rng) -> (n, d)`` and evaluate ``pdf(x) -> (n,)``; that is all the
boundary-mass and risk estimators need.  The vanishing density is how paper B's margin exponent
α > 1 arises with a perfectly transversal router: P(|x1| ≤ w) = w^α when p(x1) ∝ |x1|^(α−1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special

from .. import validation as check


class InputLaw:
    """Interface: ``dim``, ``sample(n, rng)`` (shape (n, d)), ``pdf(x)`` (shape (n,)).

    Implementations check ``n`` (an integer ≥ 1) and ``x`` (finite points of shape (n, d)) with
    :mod:`moe_routing.validation` before sampling or evaluating anything.
    """

    dim: int

    def sample(self, n: int, rng=None) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def pdf(self, x) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class GaussianLaw(InputLaw):
    """X ~ N(mean, cov).  ``cov`` must be symmetric positive definite."""

    mean: np.ndarray
    cov: np.ndarray
    _chol: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        mean = np.atleast_1d(check.finite_array("mean", self.mean, ndim=(0, 1)))
        d = mean.size
        cov = np.atleast_2d(check.finite_array("cov", self.cov, ndim=(0, 2)))
        check.require(cov.shape == (d, d), "cov.shape", cov.shape,
                      f"shape ({d}, {d}) to match mean of dimension d = {d}")
        check.require(bool(np.allclose(cov, cov.T)), "cov", cov, "a symmetric positive definite matrix")
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            check.fail("cov", cov, "a symmetric positive definite matrix (this one is not positive "
                       "definite: some direction has zero or negative variance)")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "cov", cov)
        object.__setattr__(self, "_chol", chol)

    @classmethod
    def standard(cls, dim: int, scale: float = 1.0, mean=None) -> "GaussianLaw":
        """N(mean, scale² I_d) (mean 0 by default)."""
        dim = check.integer("dim", dim, low=1)
        scale = check.positive("scale", scale)
        m = np.zeros(dim) if mean is None else check.finite_array("mean", mean, shape=(dim,))
        return cls(m, scale ** 2 * np.eye(dim))

    @property
    def dim(self) -> int:
        return self.mean.size

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = check.integer("n", n, low=1)
        z = check.generator("rng", rng).standard_normal((n, self.dim))  # (n, d)
        return self.mean + z @ self._chol.T

    def linear_moments(self, v, c) -> tuple[float, float]:
        """Mean and variance of the score g(X) = v·X + c: (v·μ + c, vᵀΣv).

        The closed-form boundary mass, the coarea constant and the conditional law on the
        interface of a linear router all rest on these two numbers.  v = 0 is refused: that
        router has no interface, and every constant built on it would be 0/0.
        """
        v = check.finite_array("v", v, shape=(self.dim,))
        c = check.number("c", c)
        var = float(v @ self.cov @ v)
        check.require(var > 0, "v", v, "a non-zero direction (vᵀΣv > 0; v = 0 has no interface)")
        return float(v @ self.mean + c), var

    def logpdf(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        z = np.linalg.solve(self._chol, (x - self.mean).T)  # (d, n)
        logdet = 2 * np.log(np.diag(self._chol)).sum()
        return -0.5 * (z ** 2).sum(0) - 0.5 * (self.dim * np.log(2 * np.pi) + logdet)

    def pdf(self, x) -> np.ndarray:
        return np.exp(self.logpdf(x))


@dataclass(frozen=True)
class UniformBox(InputLaw):
    """X uniform on the box Π_i [low_i, high_i]."""

    low: np.ndarray
    high: np.ndarray

    def __post_init__(self):
        lo = np.atleast_1d(check.finite_array("low", self.low, ndim=(0, 1)))
        hi = np.atleast_1d(check.finite_array("high", self.high, ndim=(0, 1)))
        check.require(hi.shape == lo.shape, "high.shape", hi.shape, f"shape {lo.shape} (that of low)")
        bad = np.flatnonzero(~(hi > lo))
        if bad.size:
            i = int(bad[0])
            check.fail(f"high[{i}]", float(hi[i]), f"high > low in every coordinate (low[{i}] = "
                       f"{float(lo[i])!r}; an empty box has no uniform law)")
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)

    @classmethod
    def cube(cls, dim: int, half_width: float = 1.0) -> "UniformBox":
        dim = check.integer("dim", dim, low=1)
        h = check.positive("half_width", half_width)
        return cls(-h * np.ones(dim), h * np.ones(dim))

    @property
    def dim(self) -> int:
        return self.low.size

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = check.integer("n", n, low=1)
        return check.generator("rng", rng).uniform(self.low, self.high, size=(n, self.dim))

    def pdf(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        inside = np.all((x >= self.low) & (x <= self.high), axis=1)
        return inside / np.prod(self.high - self.low)


@dataclass(frozen=True)
class VanishingDensityLaw(InputLaw):
    """A density on [−h, h]^d that behaves like |x1|^(α−1) near the hyperplane x1 = 0.

    x1 has density α |x1|^(α−1) / (2 h^α) on [−h, h]; the other coordinates are uniform on
    [−h, h].  With the interface {x1 = 0}, P(|x1| ≤ w) = (w/h)^α exactly: α > 1 gives a
    boundary mass *smaller* than linear (density vanishing at the interface), α < 1 a larger one.
    """

    dim: int
    alpha: float
    half_width: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "dim", check.integer("dim", self.dim, low=1))
        object.__setattr__(self, "alpha", check.positive("alpha", self.alpha))
        object.__setattr__(self, "half_width", check.positive("half_width", self.half_width))

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = check.integer("n", n, low=1)
        g = check.generator("rng", rng)
        h = self.half_width
        x = g.uniform(-h, h, size=(n, self.dim))
        u = g.random(n)
        sign = np.where(g.random(n) < 0.5, -1.0, 1.0)
        x[:, 0] = sign * h * u ** (1.0 / self.alpha)  # inverse CDF of |x1|
        return x

    def pdf(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        h, a = self.half_width, self.alpha
        inside = np.all(np.abs(x) <= h, axis=1)
        with np.errstate(divide="ignore"):
            p1 = a * np.abs(x[:, 0]) ** (a - 1) / (2 * h ** a)
        return np.where(inside, p1 / (2 * h) ** (self.dim - 1), 0.0)

    def mass_within(self, w) -> np.ndarray:
        """P(|x1| ≤ w) = min(w/h, 1)^α (closed form)."""
        w = check.widths("w", w)
        return np.minimum(w / self.half_width, 1.0) ** self.alpha


def support_1d(law: InputLaw) -> tuple[float, float]:
    """An interval [a, b] carrying all the mass of a 1-D law: where 1-D quadratures integrate.

    Exact for the box and the vanishing density; μ ± 14σ for a Gaussian (the mass outside,
    2Φ(−14) ≈ 1.6e−44, is far below double precision relative to any risk).
    """
    check.instance("law", law, InputLaw, "an InputLaw (GaussianLaw, UniformBox, VanishingDensityLaw)")
    check.require(law.dim == 1, "law.dim", law.dim, "1 (a law on the real line)")
    if isinstance(law, UniformBox):
        return float(law.low[0]), float(law.high[0])
    if isinstance(law, VanishingDensityLaw):
        return -law.half_width, law.half_width
    if isinstance(law, GaussianLaw):
        m, s = float(law.mean[0]), float(np.sqrt(law.cov[0, 0]))
        return m - 14 * s, m + 14 * s
    check.fail("law", law, "a UniformBox, VanishingDensityLaw or GaussianLaw (no 1-D support known "
               f"for {type(law).__name__})")


def _extended_real(name: str, z) -> np.ndarray:
    """z as a float array of its shape: numbers or ±∞ (where Φ and φ have limits), never NaN."""
    a = np.asarray(z.detach().cpu() if hasattr(z, "detach") else z)
    if a.dtype == np.bool_ or a.dtype.kind not in "iuf":
        check.fail(name, z, "real numbers (±inf allowed)")
    a = a.astype(float)
    if np.isnan(a).any():
        idx = "".join(f"[{int(i)}]" for i in np.argwhere(np.isnan(a))[0]) if a.ndim else ""
        check.fail(name + idx, float("nan"), "real numbers or ±inf (no NaN)")
    return a


def normal_cdf(z):
    """Standard normal CDF Φ(z), elementwise (Φ(−∞) = 0, Φ(∞) = 1; NaN is refused)."""
    return special.ndtr(_extended_real("z", z))


def normal_pdf(z):
    """Standard normal density φ(z), elementwise (φ(±∞) = 0; NaN is refused)."""
    z = _extended_real("z", z)
    return np.exp(-0.5 * z ** 2) / np.sqrt(2 * np.pi)
