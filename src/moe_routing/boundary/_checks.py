"""Input validation shared by the boundary-mass modules.

Every public function checks its arguments *before* any sampling or quadrature starts, and says
which value was wrong and what range is accepted.
"""

from __future__ import annotations

import numpy as np


def temperatures(tau) -> np.ndarray:
    """Temperatures τ as a 1-D float array; each must be finite and > 0 (τ = 0 is the hard
    router, which has its own functions)."""
    t = np.atleast_1d(np.asarray(tau, dtype=float))
    bad = t[~(np.isfinite(t) & (t > 0))]
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"temperature must be a positive number or a 1-D array of them; got {tau!r}")
    if bad.size:
        raise ValueError(f"temperature τ = {float(bad[0])!r} is not allowed; accepted: finite τ > 0")
    return t


def widths(w) -> np.ndarray:
    """Slab widths w as a 1-D float array; each must be finite and ≥ 0."""
    a = np.atleast_1d(np.asarray(w, dtype=float))
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"width must be a number ≥ 0 or a 1-D array of them; got {w!r}")
    bad = a[~(np.isfinite(a) & (a >= 0))]
    if bad.size:
        raise ValueError(f"width w = {float(bad[0])!r} is not allowed; accepted: finite w ≥ 0")
    return a


def count(n, name: str = "n") -> int:
    """A sample / node count: an integer ≥ 1."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) and not (
            isinstance(n, float) and float(n).is_integer()):
        raise ValueError(f"{name} = {n!r} is not allowed; accepted: an integer ≥ 1")
    if int(n) < 1:
        raise ValueError(f"{name} = {n!r} is not allowed; accepted: an integer ≥ 1")
    return int(n)


def n_experts(K) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or int(K) < 2:
        raise ValueError(f"number of experts K = {K!r} is not allowed; accepted: an integer K ≥ 2")
    return int(K)


def points(x, dim: int, name: str = "x") -> np.ndarray:
    """Inputs as an (n, d) float array whose d matches the router / law."""
    a = np.asarray(x, dtype=float)
    if a.ndim == 1 and dim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{name} has shape {a.shape}; accepted: (n, {dim}) to match dimension d = {dim}")
    return a


def positive(value, name: str) -> float:
    v = float(value)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} = {value!r} is not allowed; accepted: a finite number > 0")
    return v


def confidence(c) -> float:
    c = float(c)
    if not 0 < c < 1:
        raise ValueError(f"confidence = {c!r} is not allowed; accepted: 0 < confidence < 1")
    return c


def rng(seed_or_rng) -> np.random.Generator:
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    return np.random.default_rng(seed_or_rng)
