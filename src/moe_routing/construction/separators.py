"""Linear read-outs of the structural code fitted by convex optimisation, then verified exactly.

The router of Theorem 4.2 must be *linear* in the structural block.  With additive token and
position embeddings and linear attention values, head 1's output lives in a space of dimension
at most (number of token types) + (number of positions), far fewer than the L·|T| template
positions, so the paper's linearly independent template-position codes cannot exist here
(see the chapter).  Whether a linear router exists is therefore a property of the data: we
find one by minimising a multiclass squared hinge loss (L-BFGS), and *then check exactly* that
every node is classified with a positive margin.  The fit is ours; the check is what the
theorem needs.
"""

from __future__ import annotations

import numpy as np


def _lbfgs(fun, x0, check, max_iter: int, chunk: int):
    """scipy L-BFGS in chunks of ``chunk`` iterations, stopping when ``check(x)`` holds."""
    from scipy.optimize import minimize

    try:        # L-BFGS-B's vector updates are tiny: BLAS threads only add overhead (10× here)
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(1)
    except ImportError:  # pragma: no cover - optional speed-up
        limit = None
    try:
        x = x0
        for _ in range(max(1, max_iter // chunk)):
            res = minimize(fun, x, jac=True, method="L-BFGS-B",
                           options=dict(maxiter=chunk, maxcor=20, gtol=1e-12, ftol=1e-15))
            x = res.x
            if check(x) or res.nit < chunk:
                break
    finally:
        if limit is not None:
            limit.restore_original_limits()
    return x


def _design(Z: np.ndarray):
    """``[Z | 1]``, as a CSR matrix when Z is sparse (the structural codes have ≤ L + 2
    non-zeros among hundreds of coordinates): the products in the L-BFGS objective then cost
    O(non-zeros) instead of O(n·d) -- 20× faster on the 50-task dataset, same solution up to
    the order of floating-point additions."""
    X = np.hstack([Z, np.ones((Z.shape[0], 1))])
    if X.size and np.count_nonzero(X) < 0.1 * X.size:
        from scipy.sparse import csr_matrix
        return csr_matrix(X)
    return X


def fit_multiclass(Z: np.ndarray, labels: np.ndarray, n_classes: int, *, max_iter: int = 600,
                   reg: float = 1e-6, chunk: int = 50, target_margin: float = 0.05
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear multiclass separator ``scores = Z W + b`` with ``argmax = labels``.

    Z (n, d) float64, labels (n,) in [0, n_classes).  Minimises Σ_i Σ_{c≠y_i}
    max(0, 1 + s_ic − s_iy)² + reg‖W‖² by L-BFGS in chunks, stopping as soon as every margin
    ``s_iy − max_{c≠y} s_ic`` exceeds ``target_margin``.  Only the columns of Z that are not
    identically zero take part (the others get zero weight).  Returns
    ``(W (d, C), b (C,), margins (n,))`` -- margins recomputed exactly from the returned weights.
    """
    n, d = Z.shape
    cols = np.nonzero(np.abs(Z).sum(0) > 0)[0]
    X = _design(Z[:, cols])                                          # (n, d' + 1)
    dd = X.shape[1]
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), labels] = 1.0
    ar = np.arange(n)

    def fun(w):
        Wm = w.reshape(dd, n_classes)
        S = X @ Wm
        H = np.maximum(0.0, 1.0 + S - S[ar, labels][:, None]) * (1.0 - onehot)
        G = 2.0 * H
        G[ar, labels] = -G.sum(1)
        loss = (H ** 2).sum() + reg * (Wm[:-1] ** 2).sum()
        grad = X.T @ G
        grad[:-1] += 2.0 * reg * Wm[:-1]
        return loss, grad.ravel()

    def unpack(w):
        Wm = w.reshape(dd, n_classes)
        Wf = np.zeros((d, n_classes))
        Wf[cols] = Wm[:-1]
        return Wf, Wm[-1].copy()

    w = _lbfgs(fun, np.zeros(dd * n_classes),
               lambda w: margins(Z, labels, *unpack(w)).min() > target_margin, max_iter, chunk)
    Wf, b = unpack(w)
    return Wf, b, margins(Z, labels, Wf, b)


def margins(Z: np.ndarray, labels: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``s_iy − max_{c≠y} s_ic`` for every row (positive ⇔ classified correctly)."""
    S = Z @ W + b
    n = len(labels)
    own = S[np.arange(n), labels].copy()
    S[np.arange(n), labels] = -np.inf
    return own - S.max(1) if S.shape[1] > 1 else np.full(n, np.inf)


def fit_gate(Z: np.ndarray, positive: np.ndarray, *, max_iter: int = 600, reg: float = 1e-6,
             chunk: int = 50) -> tuple[np.ndarray, float, dict]:
    """A linear gate ``σ(z) = w·z + c`` with σ ≥ 1 on the positive rows and σ ≤ 0 on the others,
    nearly constant on the positives.

    Minimises Σ_pos (σ − 1)² + Σ_neg max(0, σ + 1)² + reg‖w‖² (positives pulled *to* 1, not
    only above it, because the semantic neurons' constants depend on the spread), then
    normalises affinely so that the smallest positive value is exactly 1 and the largest
    negative value exactly 0.  Returns ``(w, c, info)`` with ``info = {spread: max σ on
    positives − 1, gap: separation before normalising}``; ValueError when not separated.
    """
    positive = np.asarray(positive, dtype=bool)
    if positive.all() or not positive.any():
        raise ValueError("a gate needs both positive and negative rows")
    n, d = Z.shape
    cols = np.nonzero(np.abs(Z).sum(0) > 0)[0]
    X = _design(Z[:, cols])

    def fun(w):
        s = X @ w
        r = np.where(positive, s - 1.0, np.maximum(0.0, s + 1.0))
        loss = (r ** 2).sum() + reg * (w[:-1] ** 2).sum()
        g = X.T @ (2.0 * r)
        g[:-1] += 2.0 * reg * w[:-1]
        return loss, g

    def ok(w):
        s = X @ w
        lo, hi = s[positive].min(), s[~positive].max()
        return lo > hi and (s[positive].max() - lo) < 0.05 * (lo - hi)

    w = _lbfgs(fun, np.zeros(X.shape[1]), ok, max_iter, chunk)
    s = X @ w
    lo, hi = s[positive].min(), s[~positive].max()
    if not lo > hi:
        raise ValueError(f"gate not linearly separable by the fit: min positive {lo:.3g} ≤ "
                         f"max negative {hi:.3g}")
    wf = np.zeros(d)
    wf[cols] = w[:-1] / (lo - hi)
    c = (w[-1] - hi) / (lo - hi)
    sn = Z @ wf + c
    return wf, float(c), dict(spread=float(sn[positive].max() - 1.0), gap=float(lo - hi))


def fit_point_detectors(H: np.ndarray, *, max_iter: int = 2000, reg: float = 1e-8,
                        chunk: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """For m points (rows of H), affine functionals σ_u with σ_u(h_u) = 1 and σ_u(h_v) ≤ 0
    for v ≠ u -- each point cut off from the others (possible iff every point is a vertex of
    the convex hull of the set).

    When the points are linearly independent this is the dual basis (exact, no fit).
    Otherwise all m functionals are fitted jointly (squared hinge: S_uu ≥ 1, S_vu ≤ −1) and
    normalised.  Returns ``(W (m, d), c (m,))``; raises ValueError listing the points that
    could not be cut off.
    """
    m, d = H.shape
    sv = np.linalg.svd(H, compute_uv=False)
    if sv.min() > 1e-9 * max(1.0, sv.max()):
        return np.linalg.pinv(H).T.copy(), np.zeros(m)
    cols = np.nonzero(np.abs(H).sum(0) > 0)[0]
    X = np.hstack([H[:, cols], np.ones((m, 1))])                    # (m, d'+1)
    dd = X.shape[1]
    eye = np.eye(m, dtype=bool)

    def fun(w):
        Wm = w.reshape(dd, m)
        S = X @ Wm                                                  # S[v, u] = σ_u(h_v)
        R = np.where(eye, np.maximum(0.0, 1.0 - S), np.maximum(0.0, 1.0 + S))
        G = np.where(eye, -2.0 * R, 2.0 * R)
        g = X.T @ G
        g[:-1] += 2.0 * reg * Wm[:-1]
        return (R ** 2).sum() + reg * (Wm[:-1] ** 2).sum(), g.ravel()

    def sep(w):
        S = X @ w.reshape(dd, m)
        off = np.where(eye, -np.inf, S).max(0)
        return np.diag(S) - off

    w = _lbfgs(fun, np.zeros(dd * m), lambda w: sep(w).min() > 0.05, max_iter, chunk)
    gap = sep(w)
    if not gap.min() > 0:
        raise ValueError(f"points {np.nonzero(gap <= 0)[0].tolist()} cannot be cut off from "
                         f"the others by an affine functional (not vertices of the hull)")
    Wm = w.reshape(dd, m)
    S = X @ Wm
    hi = np.where(eye, -np.inf, S).max(0)
    lo = np.diag(S)
    Wf = np.zeros((m, d))
    Wf[:, cols] = (Wm[:-1] / (lo - hi)).T
    return Wf, (Wm[-1] - hi) / (lo - hi)
