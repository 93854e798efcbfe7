"""Input laws p_X: Gaussian, uniform on a box, and a density vanishing at a hyperplane.

Each law can ``sample(n, rng) -> (n, d)`` and evaluate ``pdf(x) -> (n,)``; that is all the
boundary-mass and risk estimators need.  The vanishing density is how paper B's margin exponent
α > 1 arises with a perfectly transversal router: P(|x1| ≤ w) = w^α when p(x1) ∝ |x1|^(α−1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import special

from .._internal import validation as check


class InputLaw:
    """Interface: ``dim``, ``sample(n, rng)`` (shape (n, d)), ``pdf(x)`` (shape (n,)).

    Implementations check ``n`` (an integer ≥ 1) and ``x`` (finite points of shape (n, d)) with
    :mod:`moe_routing._internal.validation` before sampling or evaluating anything.
    """

    dim: int

    def sample(self, n: int, rng=None) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def pdf(self, x) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


_SCALE_MAX = float(np.sqrt(np.finfo(float).max))    # ≈ 1.34e154: scale² still finite
_SCALE_MIN = float(np.sqrt(np.finfo(float).tiny))   # ≈ 1.49e−154: scale² still a normal float


@dataclass(frozen=True)
class LinearScore:
    """g(X) ~ N(m, s²) for a linear score of a Gaussian input, held in a form that never
    overflows: ``z`` = m/s (scale-free) and s = ``unit``·2^``exponent`` (``unit`` of order 1).

    Made by :meth:`GaussianLaw.score`.  The boundary-mass quantities of a linear router are
    scale-covariant — BM is a function of w/s and z, the coarea constant φ(z)/s — so only the
    last step meets the scale, as an exact power of two.
    """

    z: float
    unit: float
    exponent: int

    @property
    def sd(self) -> float:
        """s itself (∞ or 0 when it lies outside float64's range; the methods never need it)."""
        with np.errstate(over="ignore", under="ignore"):
            return float(np.ldexp(self.unit, self.exponent))

    @property
    def log10_sd(self) -> float:
        return float(np.log10(self.unit) + self.exponent * np.log10(2.0))

    def slab(self, widths) -> np.ndarray:
        """P(|g(X)| ≤ w) = Φ(w/s − |z|) − Φ(−w/s − |z|) at every width (1-D array).

        The law of |g| depends on m only through |m|; using −|z| puts both arguments in the
        lower tail whenever w/s < |z| (an interface far from the mean), where Φ keeps its
        relative precision — with the sign of m they could be a difference of two numbers ≈ 1.
        """
        w = check.widths("widths", widths)
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            r = np.ldexp(w / self.unit, -self.exponent)          # w/s: ∞ or 0 are exact limits
        a = abs(self.z)
        return special.ndtr(r - a) - special.ndtr(-r - a)

    def density_at_zero(self, name: str = "v", value=None) -> float:
        """f_{g(X)}(0) = φ(z)/s, refused (naming ``name``) when 1/s is outside float64's range.

        φ(z) = 0 (an interface ≳ 38 standard deviations from the mean) gives a true 0 — the
        density there is below 1e−308 for any s that is representable; a value that would
        overflow, or underflow *because of the scale*, is refused instead of returned as ∞ or 0.
        """
        check.require(isinstance(name, str), "name", name, "a string (the argument a refusal names)")
        phi = float(np.exp(-0.5 * self.z ** 2) / np.sqrt(2 * np.pi))
        if phi == 0.0:
            return 0.0
        with np.errstate(over="ignore", under="ignore"):
            val = float(np.ldexp(phi / self.unit, -self.exponent))
        check.require(np.finfo(float).tiny <= val < np.inf, name, value,
                      "weights and a law whose score g(X) = v·X + c has a standard deviation s "
                      f"with φ(z)/s inside float64's normal range (here s ≈ 10^{self.log10_sd:.1f} "
                      f"and φ(z) = {phi:.3g}); the constant is scale-covariant, S(λW, λb) = "
                      "S(W, b)/λ: rescale the weights or the inputs and rescale S back")
        return val


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
        # the law is stored by its covariance scale²·I: scale² must be a (normal) float64
        check.require(_SCALE_MIN <= scale <= _SCALE_MAX, "scale", scale,
                      f"a number with {_SCALE_MIN:.3g} ≤ scale ≤ {_SCALE_MAX:.3g} (the covariance "
                      "scale²·I must be a finite, normal float64: beyond, scale² overflows to ∞ "
                      "or underflows to 0)")
        m = np.zeros(dim) if mean is None else check.finite_array("mean", mean, shape=(dim,))
        return cls(m, (scale * scale) * np.eye(dim))

    @property
    def dim(self) -> int:
        return self.mean.size

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = check.sample_size("n", n, row_bytes=16 * self.dim)   # z and the result
        z = check.generator("rng", rng).standard_normal((n, self.dim))  # (n, d)
        return self.mean + z @ self._chol.T

    def from_unit_cube(self, u) -> np.ndarray:
        """Points u of the open unit cube (n, d) mapped to this law: μ + L Φ⁻¹(u) coordinatewise.

        The map of quasi-Monte Carlo: uniform (or low-discrepancy) u give N(μ, Σ) draws (or a
        low-discrepancy sample of the law).  Entries must lie in (0, 1) (Φ⁻¹ is infinite at
        the ends)."""
        u = check.points("u", u, self.dim)
        check.require(bool(np.all((u > 0) & (u < 1))), "u", u, "points of the open unit cube (0, 1)^d")
        return self.mean + special.ndtri(u) @ self._chol.T

    def linear_moments(self, v, c) -> tuple[float, float]:
        """Mean and variance of the score g(X) = v·X + c: (v·μ + c, vᵀΣv).

        The closed forms of the boundary mass and the coarea constant use :meth:`score`, the
        same law in a form that cannot overflow; these two numbers are refused (naming ``v``)
        when vᵀΣv is not a finite, non-zero float64.  v = 0 is refused: that router has no
        interface, and every constant built on it would be 0/0.
        """
        v = check.finite_array("v", v, shape=(self.dim,))
        score = self.score(v, c)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            var = float(v @ self.cov @ v)
        check.require(np.finfo(float).tiny <= var < np.inf, "v", v, "a direction whose score "
                      f"variance vᵀΣv is a finite, normal float64 (here vᵀΣv ≈ "
                      f"10^{2 * score.log10_sd:.1f}; score(v, c) gives the same law in a form "
                      "that never overflows)")
        return float(v @ self.mean + float(c)), var

    def score(self, v, c) -> "LinearScore":
        """The law of g(X) = v·X + c, N(m, s²), as z = m/s and s = unit·2^exponent.

        Why not (m, s²): vᵀΣv overflows once |v|·σ ≳ 1e154 and underflows below 1e−154, and
        every boundary-mass quantity would then silently become 0 (or 0/0).  Here v is divided
        by the power of two nearest its largest entry and Σ by the one nearest its largest
        variance — exact operations — so ``unit`` is of order 1 and the scales are carried in
        the exponent, which only the final result sees.  v = 0 is refused: that router has no
        interface, and every constant built on it would be 0/0.
        """
        v = check.finite_array("v", v, shape=(self.dim,))
        c = check.number("c", c)
        vmax = float(np.abs(v).max())
        check.require(vmax > 0, "v", v, "a non-zero direction (v = 0 has no interface)")
        ev = int(np.frexp(vmax)[1])                     # vmax = f·2^ev, f ∈ [1/2, 1)
        es = self._exponent()
        u = np.ldexp(v, -ev)                            # exact
        unit = float(np.linalg.norm(np.ldexp(self._chol, -es).T @ u))  # √(uᵀΣu)/2^es
        check.require(unit > 0, "v", v, "a direction with positive variance vᵀΣv > 0 under the law")
        with np.errstate(over="ignore", invalid="ignore"):
            m = float(u @ np.ldexp(self.mean, -es) + np.ldexp(c, -ev - es))   # m / 2^(ev + es)
            z = m / unit
        check.require(not np.isnan(z), "c", c, "an offset for which (v·μ + c)/s is defined (here "
                      "v·μ and c are infinite of opposite signs at float64 precision)")
        return LinearScore(float(z), unit, ev + es)

    def _exponent(self) -> int:
        """es with 2^(2·es) within a factor 4 of the largest variance: Σ/4^es and the Cholesky
        factor /2^es are exact and of order 1."""
        return int(np.frexp(float(np.diag(self.cov).max()))[1]) // 2

    def _standardized(self) -> tuple["GaussianLaw", int]:
        """(N(μ/2^es, Σ/4^es), es): the law of X/2^es, with its largest variance of order 1.

        Dividing by a power of two is exact, so a quantity computed on the standardized law
        and rescaled by 2^es is the one of this law, up to rounding of order 1e−16 — however
        large or small Σ is (used where the interface constants of a router are computed).
        """
        es = self._exponent()
        with np.errstate(over="ignore"):
            mean = np.ldexp(self.mean, -es)
        check.require(bool(np.all(np.isfinite(mean))), "law.mean", self.mean,
                      "a mean whose ratio to the law's scale √max Σ_ii is a finite float64")
        return GaussianLaw(mean, np.ldexp(self.cov, -2 * es)), es

    def _conditioning(self, v, c) -> tuple[np.ndarray, float, np.ndarray]:
        """(u, γ, h) with g(x) = v·x + c = 2^e (u·x + γ), u of order 1, and h = Σu/(uᵀΣu):
        X − (u·X + γ) h has the law of X given g(X) = 0 (exact Gaussian conditioning).

        h does not depend on the scale of v, and it is computed from the standardized Σ, so no
        product vᵀΣv is ever formed (see :meth:`score`).
        """
        v = check.finite_array("v", v, shape=(self.dim,))
        c = check.number("c", c)
        vmax = float(np.abs(v).max())
        check.require(vmax > 0, "v", v, "a non-zero direction (v = 0 has no interface)")
        ev = int(np.frexp(vmax)[1])
        u, gamma = np.ldexp(v, -ev), float(np.ldexp(c, -ev))
        cov = np.ldexp(self.cov, -2 * self._exponent())
        su = cov @ u
        return u, gamma, su / float(u @ su)

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
        # the density is 1/volume: a volume that over- or underflows would make it 0 or ∞
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            volume = np.prod(hi - lo)
            density = float(np.float64(1.0) / volume)
        check.require(bool(np.finfo(float).tiny <= density < np.inf), "high", hi,
                      "a box whose uniform density 1/Π(high − low) is a finite, normal float64 "
                      f"(here the volume is {float(volume)!r} and the density {density!r})")
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
        n = check.sample_size("n", n, row_bytes=8 * self.dim)
        return check.generator("rng", rng).uniform(self.low, self.high, size=(n, self.dim))

    def from_unit_cube(self, u) -> np.ndarray:
        """Points u of the unit cube [0, 1]^d (n, d) mapped affinely onto the box."""
        u = check.points("u", u, self.dim)
        check.require(bool(np.all((u >= 0) & (u <= 1))), "u", u, "points of the unit cube [0, 1]^d")
        return self.low + u * (self.high - self.low)

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
        # the density's constant α/(2h^α)·(2h)^(1−d): refuse a scale where it is not a float64
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            h = np.float64(self.half_width)
            const = float(self.alpha / (2 * h ** self.alpha) / (2 * h) ** (self.dim - 1))
        check.require(bool(np.finfo(float).tiny <= const < np.inf), "half_width", self.half_width,
                      f"a half-width h for which the density's constant α/(2h^α)/(2h)^(d−1) is a "
                      f"finite, normal float64 (here {const!r}, with α = {self.alpha!r}, d = {self.dim})")

    def sample(self, n: int, rng=None) -> np.ndarray:
        n = check.sample_size("n", n, row_bytes=8 * self.dim + 24)
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
