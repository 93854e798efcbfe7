"""Routers: maps from inputs x ∈ R^d to K logits a(x) (the softmax router's scores).

* :class:`LinearRouter` — a(x) = W x + b, any K ≥ 2: flat (hyperplane) interfaces.
* :class:`SphereRouter` — binary, g = a_1 − a_2 = s(|x − c|² − r²): a curved interface (circle in
  d = 2, sphere in d = 3), where the coarea constant needs a numerical surface integral.
* :class:`PowerRouter` — binary, g = s·|x_1|^p (or s·sign(x_1)|x_1|^p): |∇g| = 0 on the tie set
  {x_1 = 0} when p > 1, so transversality fails and P(Δ ≤ w) ∝ w^(1/p) (p = 2: paper B's α = 1/2).

Binary routers are given by their score difference g and put a = (g/2, −g/2), so that the top-two
margin is Δ = |g| and expert 0 wins where g > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check


class Router:
    """Interface: ``n_experts`` (K), ``dim`` (d), ``logits(x) -> (n, K)``.

    ``x`` is checked (finite, shape (n, d)) before anything is evaluated.
    """

    n_experts: int
    dim: int

    def logits(self, x) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class BinaryRouter(Router):
    """A K = 2 router given by its score difference g(x) = a_0(x) − a_1(x) and its gradient."""

    n_experts = 2

    def g(self, x) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def grad_g(self, x) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def logits(self, x) -> np.ndarray:
        g = self.g(x)  # (n,)
        return np.stack([0.5 * g, -0.5 * g], axis=1)  # (n, 2)


@dataclass(frozen=True)
class LinearRouter(Router):
    """a(x) = W x + b with W of shape (K, d) and b of shape (K,)."""

    weight: np.ndarray
    bias: np.ndarray | None = None

    def __post_init__(self):
        W = np.atleast_2d(check.finite_array("weight", self.weight, ndim=(1, 2)))
        K = W.shape[0]
        check.require(K >= 2, "weight.shape", W.shape,
                      "(K, d) with K ≥ 2 experts (K = 1 has nothing to route)")
        b = np.zeros(K) if self.bias is None else np.atleast_1d(
            check.finite_array("bias", self.bias, ndim=(0, 1)))
        check.require(b.shape == (K,), "bias.shape", b.shape, f"shape ({K},) to match K = {K}")
        # identical experts: every input is a K-way tie, and every constant of the interface 0/0
        check.require(not (np.all(W == W[0]) and np.all(b == b[0])), "weight", W,
                      "experts with different logits (all K rows of (weight, bias) are identical: "
                      "the router never decides)")
        object.__setattr__(self, "weight", W)
        object.__setattr__(self, "bias", b)

    @classmethod
    def binary(cls, v, b: float = 0.0) -> "LinearRouter":
        """The K = 2 router with g = a_0 − a_1 = v·x + b (v ≠ 0: otherwise there is no interface)."""
        v = np.atleast_1d(check.finite_array("v", v, ndim=(0, 1)))
        b = check.number("b", b)
        check.require(bool(np.any(v != 0)), "v", v, "a non-zero direction (v = 0 has no interface)")
        return cls(np.stack([v / 2, -v / 2]), np.array([b / 2, -b / 2]))

    @classmethod
    def random(cls, n_experts: int, dim: int, rng=None, scale: float = 1.0) -> "LinearRouter":
        """Gaussian weights N(0, scale²) and zero bias (all interfaces pass near the origin)."""
        K = check.integer("n_experts", n_experts, low=2)
        d = check.integer("dim", dim, low=1)
        scale = check.positive("scale", scale)
        W = scale * check.generator("rng", rng).standard_normal((K, d))
        return cls(W, np.zeros(K))

    @property
    def n_experts(self) -> int:
        return self.weight.shape[0]

    @property
    def dim(self) -> int:
        return self.weight.shape[1]

    def logits(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        return x @ self.weight.T + self.bias  # (n, K)

    def pair(self, j: int, k: int) -> tuple[np.ndarray, float]:
        """(v, c) with g_jk(x) = a_j(x) − a_k(x) = v·x + c."""
        K = self.n_experts
        j = check.integer("j", j, low=0, high=K - 1)
        k = check.integer("k", k, low=0, high=K - 1)
        check.require(j != k, "k", k, f"an expert other than j = {j} (g_jj ≡ 0 has no interface)")
        return self.weight[j] - self.weight[k], float(self.bias[j] - self.bias[k])

    def pairs(self) -> list[tuple[int, int]]:
        """Every pair j < k of experts (the interfaces of the pairwise union bound)."""
        K = self.n_experts
        return [(j, k) for j in range(K) for k in range(j + 1, K)]


@dataclass(frozen=True)
class SphereRouter(BinaryRouter):
    """g(x) = scale·(|x − center|² − radius²): expert 0 outside the sphere, expert 1 inside.

    On the interface |∇g| = 2·scale·radius (constant), so S = ∫_Σ p / |∇g| is the density's
    surface integral over the sphere divided by 2·scale·radius.
    """

    center: np.ndarray
    radius: float
    scale: float = 1.0

    def __post_init__(self):
        c = check.finite_array("center", self.center, ndim=1)
        check.require(c.size >= 2, "center.shape", c.shape,
                      "(d,) with d ≥ 2 (a sphere in d = 1 is two points)")
        object.__setattr__(self, "center", c)
        object.__setattr__(self, "radius", check.positive("radius", self.radius))
        object.__setattr__(self, "scale", check.positive("scale", self.scale))

    @property
    def dim(self) -> int:
        return self.center.size

    def g(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        return self.scale * (((x - self.center) ** 2).sum(1) - self.radius ** 2)

    def grad_g(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        return 2 * self.scale * (x - self.center)  # (n, d)


@dataclass(frozen=True)
class PowerRouter(BinaryRouter):
    """g(x) = scale·|x_1|^p (``signed=False``) or scale·sign(x_1)|x_1|^p (``signed=True``).

    For p > 1 the gradient vanishes on the tie set {x_1 = 0}: the router is *not transversal*
    and P(Δ ≤ w) = P(|x_1| ≤ (w/scale)^(1/p)) ∝ w^(1/p).  Paper B's example g = x_1² is
    ``PowerRouter(dim, power=2)`` (unsigned: expert 0 wins everywhere except on the tie set,
    where the soft router still mixes at temperature τ).
    """

    dim: int
    power: float = 2.0
    signed: bool = False
    scale: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "dim", check.integer("dim", self.dim, low=1))
        object.__setattr__(self, "power", check.positive("power", self.power))
        object.__setattr__(self, "signed", check.flag("signed", self.signed))
        object.__setattr__(self, "scale", check.positive("scale", self.scale))

    @property
    def alpha(self) -> float:
        """Margin exponent when the density is positive and bounded at the tie set."""
        return 1.0 / self.power

    def g(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        t = np.abs(x[:, 0]) ** self.power
        return self.scale * (np.sign(x[:, 0]) * t if self.signed else t)

    def grad_g(self, x) -> np.ndarray:
        x = check.points("x", x, self.dim)
        out = np.zeros_like(x)
        p = self.power
        d1 = p * np.abs(x[:, 0]) ** (p - 1)
        out[:, 0] = self.scale * (d1 if self.signed else np.sign(x[:, 0]) * d1)
        return out
