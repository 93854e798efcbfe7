"""Gauss–Legendre quadrature on panels graded geometrically towards interfaces.

The soft-to-hard gap lives in layers of width O(τ) (or O(τ^{1/p}) for a degenerate router)
around the routing interface, and the hard gate jumps there.  Panels whose edges are
c ± 2^k (k = −k_fine, …) around each interface point c integrate every such layer to near
machine precision whatever its width, and also tame algebraic singularities |x − c|^(α−1) of
the vanishing density law — without having to know the layer width in advance.
"""

from __future__ import annotations

import numpy as np

from .._internal import validation as check


def graded_nodes(a: float, b: float, breaks=(), n_gl: int = 16, k_fine: int = 50,
                 base: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights on [a, b] with panel edges at every break c and c ± base·2^(−k).

    Returns arrays of shape (m,).  A smooth integrand on each panel (it may jump at the breaks)
    is integrated with the error of an n_gl-point Gauss–Legendre rule per panel.  ``breaks``
    may be empty (then [a, b] is one panel); a break outside (a, b) still grades the panels
    near it.
    """
    a = check.number("a", a)
    b = check.number("b", b, low=a, low_open=True)
    breaks = np.atleast_1d(check.finite_array("breaks", breaks, ndim=(0, 1), nonempty=False))
    n_gl = check.integer("n_gl", n_gl, low=1)
    k_fine = check.integer("k_fine", k_fine, low=0)
    base = check.positive("base", base)
    edges = [a, b]
    steps = base * 2.0 ** -np.arange(k_fine + 1)  # base, base/2, …
    for c in breaks:
        if a < c < b:
            edges.append(c)
        big = base * 2.0 ** np.arange(1, 64)
        for e in np.concatenate([steps, big[big < (b - a)]]):
            for y in (c - e, c + e):
                if a < y < b:
                    edges.append(y)
    e = np.unique(np.asarray(edges))
    x0, w0 = np.polynomial.legendre.leggauss(n_gl)
    lo, hi = e[:-1, None], e[1:, None]
    nodes = (0.5 * (hi - lo) * x0 + 0.5 * (hi + lo)).ravel()
    weights = (0.5 * (hi - lo) * w0).ravel()
    return nodes, weights
