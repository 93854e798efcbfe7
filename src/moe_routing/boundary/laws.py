"""Input laws p_X: Gaussian, uniform on a box, and a density vanishing at a hyperplane.

Each law can ``sample(n, rng) -> (n, d)`` and evaluate ``pdf(x) -> (n,)``; that is all the
boundary-mass and risk estimators need.  The vanishing density is how paper B's margin exponent
α > 1 arises with a perfectly transversal router: P(|x1| ≤ w) = w^α when p(x1) ∝ |x1|^(α−1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special

from . import _checks


class InputLaw:
    """Interface: ``dim``, ``sample(n, rng)`` (shape (n, d)), ``pdf(x)`` (shape (n,))."""

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
        mean = np.atleast_1d(np.asarray(self.mean, dtype=float))
        cov = np.atleast_2d(np.asarray(self.cov, dtype=float))
        if mean.ndim != 1 or cov.shape != (mean.size, mean.size):
            raise ValueError(f"cov has shape {cov.shape}; accepted: ({mean.size}, {mean.size}) to match "
                             f"mean of dimension d = {mean.size}")
        if not np.allclose(cov, cov.T):
            raise ValueError("cov is not symmetric; accepted: a symmetric positive definite matrix")
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError as e:
            raise ValueError("cov is not positive definite; accepted: a symmetric positive definite "
                             "matrix") from e
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "cov", cov)
        object.__setattr__(self, "_chol", chol)

    @classmethod
    def standard(cls, dim: int, scale: float = 1.0, mean=None) -> "GaussianLaw":
        """N(mean, scale² I_d) (mean 0 by default)."""
        dim = _checks.count(dim, "dimension d")
        scale = _checks.positive(scale, "scale")
        m = np.zeros(dim) if mean is None else np.asarray(mean, dtype=float)
        return cls(m, scale ** 2 * np.eye(dim))

    @property
    def dim(self) -> int:
        return self.mean.size

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = _checks.count(n)
        z = _checks.rng(rng).standard_normal((n, self.dim))  # (n, d)
        return self.mean + z @ self._chol.T

    def logpdf(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
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
        lo = np.atleast_1d(np.asarray(self.low, dtype=float))
        hi = np.atleast_1d(np.asarray(self.high, dtype=float))
        if lo.shape != hi.shape or lo.ndim != 1:
            raise ValueError(f"low {lo.shape} and high {hi.shape} must be 1-D of the same dimension")
        if not np.all(hi > lo):
            raise ValueError(f"box is empty: need high > low in every coordinate; got low={lo}, high={hi}")
        object.__setattr__(self, "low", lo)
        object.__setattr__(self, "high", hi)

    @classmethod
    def cube(cls, dim: int, half_width: float = 1.0) -> "UniformBox":
        dim = _checks.count(dim, "dimension d")
        h = _checks.positive(half_width, "half_width")
        return cls(-h * np.ones(dim), h * np.ones(dim))

    @property
    def dim(self) -> int:
        return self.low.size

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = _checks.count(n)
        return _checks.rng(rng).uniform(self.low, self.high, size=(n, self.dim))

    def pdf(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
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
        _checks.count(self.dim, "dimension d")
        _checks.positive(self.alpha, "alpha")
        _checks.positive(self.half_width, "half_width")

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = _checks.count(n)
        g = _checks.rng(rng)
        h = self.half_width
        x = g.uniform(-h, h, size=(n, self.dim))
        u = g.random(n)
        sign = np.where(g.random(n) < 0.5, -1.0, 1.0)
        x[:, 0] = sign * h * u ** (1.0 / self.alpha)  # inverse CDF of |x1|
        return x

    def pdf(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
        h, a = self.half_width, self.alpha
        inside = np.all(np.abs(x) <= h, axis=1)
        with np.errstate(divide="ignore"):
            p1 = a * np.abs(x[:, 0]) ** (a - 1) / (2 * h ** a)
        return np.where(inside, p1 / (2 * h) ** (self.dim - 1), 0.0)

    def mass_within(self, w) -> np.ndarray:
        """P(|x1| ≤ w) = min(w/h, 1)^α (closed form)."""
        w = _checks.widths(w)
        return np.minimum(w / self.half_width, 1.0) ** self.alpha


def normal_cdf(z):
    return special.ndtr(z)


def normal_pdf(z):
    return np.exp(-0.5 * np.asarray(z, dtype=float) ** 2) / np.sqrt(2 * np.pi)
