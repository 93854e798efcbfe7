"""Codes written into the residual stream of the hand-built transformer (our construction).

Two codes are needed (the summaries of paper A's construction leave them open; ours):

* **Entity codes** -- unit vectors ``c(e) ∈ R^{d_c}`` with small *coherence*
  ``μ = max_{e≠e'} ⟨c(e), c(e')⟩``.  One-hot codes (μ = 0) would make the embedding and the
  unembedding ``V × V``; the issue asks for memory linear in the vocabulary.  We use the classic
  polynomial (Reed–Solomon) construction: entity ``i`` ↦ the polynomial ``f_i`` of degree < m
  over GF(p) whose coefficients are the base-p digits of ``i``; ``c(i)`` is the concatenation,
  over the p points ``x ∈ GF(p)``, of the one-hot of ``f_i(x)``, scaled by ``1/√p``.  Two distinct
  polynomials of degree < m agree on at most m − 1 points, so ``⟨c(i), c(j)⟩ ≤ (m−1)/p`` exactly
  (not only with high probability, as for random codes), entries are ≥ 0 and ``d_c = p²``.
* **Structural codes** -- what head 1 writes: for a prefix whose token types (entities collapsed
  to one type ENT) are ``s_0 = BOS, s_1, …, s_t``, the vector ``h1 = Σ_j α_j e_{s_j}`` with
  ``α_j ∝ ρ^j`` (0 < ρ < 1: the start of the sentence weighs most, so the code reads the
  prefix from its beginning like a base-1/ρ expansion).  The router and the structural
  detectors read ``z = [e_{s_t} | e_t | h1]`` (current token type, current position, h1).
"""

from __future__ import annotations

import math

import numpy as np

from .._internal.validation import fail, integer, probability


def _is_prime(p: int) -> bool:
    return p >= 2 and all(p % q for q in range(2, int(math.isqrt(p)) + 1))


def polynomial_code_params(n: int, max_coherence: float = 0.3) -> tuple[int, int]:
    """Smallest dimension ``p²`` of a polynomial code with ≥ n words and coherence
    ``(m−1)/p ≤ max_coherence``; returns ``(p, m)``."""
    n = integer("n", n, low=1)
    max_coherence = probability("max_coherence", max_coherence)
    best = None
    for m in range(1, 64):
        p = max(2, math.ceil(n ** (1.0 / m)) if m > 1 else n)
        while not _is_prime(p) or p ** m < n:
            p += 1
        if (m - 1) / p <= max_coherence and (best is None or p < best[0]):
            best = (p, m)
        if m > 1 and p <= 2:
            break
    if best is None:
        fail("max_coherence", max_coherence, f"a bound some polynomial code with {n} words meets")
    return best


def polynomial_code(n: int, max_coherence: float = 0.3) -> tuple[np.ndarray, float]:
    """``(codes (n, p²) float64, μ)``: unit-norm, non-negative codes with exact coherence bound
    ``μ = (m−1)/p`` (see module docstring).  Deterministic."""
    p, m = polynomial_code_params(n, max_coherence)
    idx = np.arange(n, dtype=np.int64)
    digits = np.stack([(idx // p ** i) % p for i in range(m)], 1)            # (n, m) coefficients
    x = np.arange(p, dtype=np.int64)
    powers = np.stack([x ** i % p for i in range(m)], 0)                    # (m, p)
    vals = (digits @ powers) % p                                            # (n, p) f_i(x)
    codes = np.zeros((n, p, p))
    codes[np.arange(n)[:, None], x[None, :], vals] = 1.0 / math.sqrt(p)
    return codes.reshape(n, p * p), (m - 1) / p


def coherence(codes: np.ndarray, block: int = 4096) -> float:
    """Measured ``max_{i≠j} ⟨c_i, c_j⟩`` (blocked, so memory stays O(block · n)).

    The maximum may be negative (the regular simplex has ``-1/(n-1)``), so it starts at
    ``-inf``, not 0; a code of fewer than two words has no pair and is refused."""
    n = len(codes)
    if n < 2:
        raise ValueError(f"coherence needs at least 2 codewords, got {n}")
    best = -np.inf
    for s in range(0, n, block):
        g = codes[s:s + block] @ codes.T                                    # (b, n)
        g[np.arange(g.shape[0]), np.arange(s, s + g.shape[0])] = -np.inf
        best = max(best, float(g.max()))
    return best


def prefix_weights(t: int, rho: float) -> np.ndarray:
    """Head 1's attention at position t: ``α_j = ρ^j / Σ_{i≤t} ρ^i`` for j = 0..t."""
    a = rho ** np.arange(t + 1, dtype=np.float64)
    return a / a.sum()


def structural_code(types: np.ndarray, n_types: int, max_len: int, rho: float) -> np.ndarray:
    """``z = [e_{s_t} | e_t | Σ_j α_j e_{s_j}]`` for one prefix of token types (BOS first)."""
    t = len(types) - 1
    z = np.zeros(2 * n_types + max_len)
    z[types[-1]] = 1.0
    z[n_types + t] = 1.0
    np.add.at(z[n_types + max_len:], types, prefix_weights(t, rho))
    return z
