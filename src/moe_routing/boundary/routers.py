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

from . import _checks


class Router:
    """Interface: ``n_experts`` (K), ``dim`` (d), ``logits(x) -> (n, K)``."""

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
        W = np.atleast_2d(np.asarray(self.weight, dtype=float))
        _checks.n_experts(W.shape[0])
        b = np.zeros(W.shape[0]) if self.bias is None else np.atleast_1d(np.asarray(self.bias, float))
        if b.shape != (W.shape[0],):
            raise ValueError(f"bias has shape {b.shape}; accepted: ({W.shape[0]},) to match K = {W.shape[0]}")
        object.__setattr__(self, "weight", W)
        object.__setattr__(self, "bias", b)

    @classmethod
    def binary(cls, v, b: float = 0.0) -> "LinearRouter":
        """The K = 2 router with g = a_0 − a_1 = v·x + b."""
        v = np.atleast_1d(np.asarray(v, dtype=float))
        return cls(np.stack([v / 2, -v / 2]), np.array([b / 2, -b / 2]))

    @classmethod
    def random(cls, n_experts: int, dim: int, rng=None, scale: float = 1.0) -> "LinearRouter":
        """Gaussian weights N(0, scale²) and zero bias (all interfaces pass near the origin)."""
        K = _checks.n_experts(n_experts)
        d = _checks.count(dim, "dimension d")
        W = scale * _checks.rng(rng).standard_normal((K, d))
        return cls(W, np.zeros(K))

    @property
    def n_experts(self) -> int:
        return self.weight.shape[0]

    @property
    def dim(self) -> int:
        return self.weight.shape[1]

    def logits(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
        return x @ self.weight.T + self.bias  # (n, K)

    def pair(self, j: int, k: int) -> tuple[np.ndarray, float]:
        """(v, c) with g_jk(x) = a_j(x) − a_k(x) = v·x + c."""
        return self.weight[j] - self.weight[k], float(self.bias[j] - self.bias[k])

    def pairs(self):
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
        c = np.atleast_1d(np.asarray(self.center, dtype=float))
        if c.ndim != 1 or c.size < 2:
            raise ValueError(f"center has shape {c.shape}; accepted: (d,) with d ≥ 2")
        object.__setattr__(self, "center", c)
        _checks.positive(self.radius, "radius")
        _checks.positive(self.scale, "scale")

    @property
    def dim(self) -> int:
        return self.center.size

    def g(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
        return self.scale * (((x - self.center) ** 2).sum(1) - self.radius ** 2)

    def grad_g(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
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
        _checks.count(self.dim, "dimension d")
        _checks.positive(self.power, "power")
        _checks.positive(self.scale, "scale")

    @property
    def alpha(self) -> float:
        """Margin exponent when the density is positive and bounded at the tie set."""
        return 1.0 / self.power

    def g(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
        t = np.abs(x[:, 0]) ** self.power
        return self.scale * (np.sign(x[:, 0]) * t if self.signed else t)

    def grad_g(self, x) -> np.ndarray:
        x = _checks.points(x, self.dim)
        out = np.zeros_like(x)
        p = self.power
        d1 = p * np.abs(x[:, 0]) ** (p - 1)
        out[:, 0] = self.scale * (d1 if self.signed else np.sign(x[:, 0]) * d1)
        return out
