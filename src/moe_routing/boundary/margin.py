"""Top-two margin Δ(x) and the soft / hard gates of a softmax router.

Δ(x) = a_(1)(x) − a_(2)(x) ≥ 0 (largest minus second-largest logit, a_(1) ≥ a_(2) ≥ … the
logits sorted in descending order).  For a router that sends each token to its k largest
logits the boundary that changes its choice is where the k-th and the (k+1)-th logits meet, so
its margin is Δ_k(x) = a_(k)(x) − a_(k+1)(x) (``top_two_margin(a, k)``: the two logits either
side of that boundary); k = 1 is paper B's Δ.  The soft gate at
temperature τ is π_τ = softmax(a/τ); the hard gate π_0 is the one-hot of argmax a (ties, a
null set for the routers of this book, go to the lowest index).  The two facts the risk bound
rests on (paper B, our derivation):

    1 − π_{k*,τ} ≤ (K − 1) e^{−Δ/τ},     ‖π_τ − π_0‖_1 ≤ 2 min{1, (K − 1) e^{−Δ/τ}},

with equality 1 − π_{k*,τ} = σ(−Δ/τ) when K = 2.
"""

from __future__ import annotations

import numpy as np

from .._internal import validation as check


def _logits(a) -> np.ndarray:
    """Logits as a finite (n, K) float array with n ≥ 1 and K ≥ 2."""
    a = check.finite_array("logits", a, ndim=2)
    check.require(a.shape[1] >= 2, "logits.shape", a.shape, "(n, K) with K ≥ 2 experts")
    return a


def top_two_margin(logits, k: int = 1) -> np.ndarray:
    """Δ_k = a_(k) − a_(k+1), shape (n,): the k-th largest logit minus the (k+1)-th.

    k = 1 (the default) is paper B's top-two margin, top logit minus second; a top-k router
    changes its set of experts exactly where Δ_k = 0, so Δ_k is its margin (1 ≤ k < K: with
    k = K every expert is chosen and there is no boundary to be near).  A full sort is faster
    than a partial one for the small K of routers (K ≤ 64); beyond, the O(nK) partial sort
    wins.  Both pick the same two entries, so Δ_k does not depend on the path.
    """
    a = _logits(logits)
    k = check.integer("k", k, low=1, high=a.shape[1] - 1)
    if a.shape[1] == 2:
        return np.abs(a[:, 0] - a[:, 1])
    if a.shape[1] <= 64:
        s = np.sort(a, axis=1)
        return s[:, -k] - s[:, -k - 1]
    top = -np.partition(-a, k, axis=1)[:, :k + 1]   # (n, k+1): the k largest, then a_(k+1)
    return top[:, :k].min(axis=1) - top[:, k]


def soft_gates(logits, tau: float) -> np.ndarray:
    """softmax(a/τ), shape (n, K); stable for tiny τ (the max is subtracted first)."""
    a = _logits(logits)
    tau = check.temperature("tau", tau)
    z = (a - a.max(axis=1, keepdims=True)) / tau
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def hard_gates(logits) -> np.ndarray:
    """One-hot of argmax a, shape (n, K) (ties to the lowest index)."""
    a = _logits(logits)
    out = np.zeros_like(a)
    out[np.arange(a.shape[0]), a.argmax(axis=1)] = 1.0
    return out


def gate_gap_bound(margin, tau: float, n_experts: int) -> np.ndarray:
    """(K − 1) e^{−Δ/τ}: bound on 1 − π_{k*,τ} (half the bound on ‖π_τ − π_0‖_1)."""
    K = check.integer("n_experts", n_experts, low=2)
    check.require(K - 1 < 2 ** 1023, "n_experts", K,
                  "an expert count a float can hold (< 2**1023)")
    tau = check.temperature("tau", tau)
    margin = check.finite_array("margin", margin, low=0)
    return float(K - 1) * np.exp(-margin / tau)
