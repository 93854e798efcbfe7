"""The MoE regression model of paper B's soft-to-hard results: experts, teacher, router.

``MoERegression(router, experts, teacher, mixture)``: logits a(x) from a router
(:mod:`.routers`), expert predictions f_k(x) (|f_k| ≤ B), the regression function
f*(x) = E[Y | X = x] (|f*| ≤ B*) and how the gates mix (predictions or losses).  Its pointwise
gap ``(loss_τ − loss_0)(x)`` is what the estimators of :mod:`.risk` integrate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._internal import validation as check
from .margin import hard_gates, soft_gates
from .routers import Router

MIXTURES = ("predictions", "losses")


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
