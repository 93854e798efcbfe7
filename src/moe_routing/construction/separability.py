"""Linear programs that decide strict linear separability, and certificates when it fails.

The construction refuses a dataset when one of its hypotheses fails, and a refusal must be a
proof.  An iterative fit (L-BFGS on a hinge loss, :mod:`.separators`) that stops without a
separator proves nothing: it may have run out of iterations.  Strict separability with a margin
is a linear feasibility problem, small at these sizes, so when a fit stops short we ask HiGHS
(``scipy.optimize.linprog``):

* **feasible** -- the LP's solution *is* a separator (margin 1; for gates and detectors the
  one of least spread or ℓ1 norm, so that the weights stay moderate), and the build continues
  with it;
* **infeasible** -- we solve the *alternative* system of Farkas' lemma as a second LP and keep
  its solution as the certificate: non-negative weights on rows whose combination vanishes.
  It is checked in float64 after the solve (``residual``), and it is a quantitative proof:
  every separator with margin 1 has weights of ℓ1 (binary) or max (multiclass) norm at least
  ``1 / residual`` (``min_weight_norm``) -- no separator of usable size exists;
* anything else (time limit, numerical trouble, a certificate with a large residual) decides
  nothing, and the caller says so instead of refusing.

Rows are augmented with a constant 1, so "linear" means affine throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, csr_matrix, hstack, vstack

# A certificate is accepted as a proof when its combination vanishes to this accuracy: any
# separator of unit margin would then need weights of norm ≥ 1e6 (inputs here are ≤ 1).
PROOF_RESIDUAL = 1e-6


@dataclass(frozen=True)
class LPResult:
    """HiGHS's verdict on one linear program."""

    status: int           # scipy's code: 0 solved, 1 iteration/time limit, 2 infeasible, …
    message: str
    iterations: int
    x: np.ndarray | None  # the solution when status == 0

    @property
    def feasible(self) -> bool:
        return self.status == 0

    @property
    def infeasible(self) -> bool:
        return self.status == 2


@dataclass(frozen=True)
class Certificate:
    """LP proof that no strict linear separator exists.

    ``kind`` "convex hulls": weights ``λ`` (sum 1) on rows of side A and ``μ`` (sum 1) on rows
    of side B with Σλ x = Σμ x -- a point in both convex hulls.  ``kind`` "farkas" (multiclass):
    weights α_ic ≥ 0 (sum 1) on (row i, wrong class c) with Σ_ic α_ic (e_{y_i} − e_c) ⊗ x_i = 0;
    summing the margin constraints with these weights gives 0 ≥ 1.
    """

    kind: str
    rows: np.ndarray          # (r,) rows in the support, heaviest first (farkas: may repeat)
    weights: np.ndarray       # (r,) their weights: λ, μ (convex hulls) or α_ic (farkas)
    tag: np.ndarray           # (r,) convex hulls: 0 = side A, 1 = side B; farkas: the class c
    residual: float           # norm of the combination, recomputed in float64
    min_weight_norm: float    # every separator of margin 1 needs weights at least this large
    primal: str               # HiGHS's message on the separator LP

    @property
    def proves(self) -> bool:
        return self.residual <= PROOF_RESIDUAL


def solve(c, A_ub=None, b_ub=None, A_eq=None, b_eq=None, bounds=(None, None), *,
          time_limit: float) -> LPResult:
    """``linprog`` with HiGHS, returning the verdict in an :class:`LPResult`."""
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                  method="highs", options=dict(time_limit=float(time_limit)))
    return LPResult(int(res.status), str(res.message), int(getattr(res, "nit", 0) or 0),
                    np.asarray(res.x) if res.status == 0 and res.x is not None else None)


def augment(Z: np.ndarray) -> csr_matrix:
    """``[Z | 1]`` as a sparse matrix (the structural codes have few non-zeros)."""
    return hstack([csr_matrix(Z), csr_matrix(np.ones((Z.shape[0], 1)))], format="csr")


def _split_l1(A, n_free_tail: int):
    """Variables x = p − q (p, q ≥ 0) with objective Σ(p + q) over all but the last
    ``n_free_tail`` coordinates (biases, unpenalised): returns (c, A for [p | q])."""
    n = A.shape[1]
    c = np.ones(n)
    if n_free_tail:
        c[n - n_free_tail:] = 0.0
    return np.concatenate([c, c]), hstack([A, -A], format="csr")


def margin_constraints(X: csr_matrix, labels: np.ndarray, n_classes: int, rows: np.ndarray,
                       wrong: np.ndarray) -> csr_matrix:
    """Rows ``−(x_i·W[:, y_i] − x_i·W[:, c]) ≤ −1`` for the pairs (i, c) = (rows, wrong), over
    W (D, C) flattened row-major: (len(rows), D·C)."""
    D, C = X.shape[1], n_classes
    Xi = X[rows].tocoo()
    r, j, v = Xi.row, Xi.col, Xi.data
    return coo_matrix((np.concatenate([-v, v]),
                       (np.concatenate([r, r]),
                        np.concatenate([j * C + labels[rows][r], j * C + wrong[r]]))),
                      shape=(len(rows), D * C)).tocsr()


def multiclass_separator(X: csr_matrix, labels: np.ndarray, n_classes: int, *,
                         time_limit: float) -> LPResult:
    """Scores ``S = X W`` (X (n, D) augmented, W (D, C) flattened row-major in ``x``) with
    ``S[i, y_i] − S[i, c] ≥ 1`` for every c ≠ y_i: a feasibility LP over all n·(C − 1)
    constraints (seconds for the 50-task dataset).  No norm is minimised: the least-ℓ1 LP
    takes minutes there, so the separator is the LP's vertex, whose weights can be large
    (10⁴ on the 50-task dataset with the fit starved); the caller checks it in float32."""
    n, D = X.shape
    C = n_classes
    pi = np.concatenate([np.nonzero(labels != c)[0] for c in range(C)])     # pairs (i, c ≠ y_i)
    pc = np.concatenate([np.full(int((labels != c).sum()), c) for c in range(C)])
    A = margin_constraints(X, labels, C, pi, pc)                          # (n·(C−1), D·C)
    return solve(np.zeros(D * C), A_ub=A, b_ub=-np.ones(len(pi)), bounds=(None, None),
                 time_limit=time_limit)


def multiclass_certificate(X: csr_matrix, labels: np.ndarray, n_classes: int, primal: str, *,
                           time_limit: float) -> Certificate | None:
    """Farkas weights α_ic ≥ 0, Σα = 1, with Σ_ic α_ic (e_{y_i} − e_c) ⊗ x_i = 0; ``None``
    when the alternative LP finds none (then the data *are* separable, or HiGHS gave up)."""
    n, D = X.shape
    C = n_classes
    pairs = [(i, c) for c in range(C) for i in np.nonzero(labels != c)[0]]
    pi = np.array([p[0] for p in pairs], dtype=np.int64)
    pc = np.array([p[1] for p in pairs], dtype=np.int64)
    Xi = X[pi].tocoo()                              # row t of Xi = x_{pi[t]}
    t, j, v = Xi.row, Xi.col, Xi.data
    # equality row (class, feature): + x at the row's own class, − x at the wrong class
    A = coo_matrix((np.concatenate([v, -v]),
                    (np.concatenate([labels[pi[t]] * D + j, pc[t] * D + j]),
                     np.concatenate([t, t]))), shape=(C * D, len(pairs))).tocsr()
    A_eq = vstack([A, csr_matrix(np.ones((1, len(pairs))))], format="csr")
    b_eq = np.zeros(C * D + 1)
    b_eq[-1] = 1.0
    res = solve(np.zeros(len(pairs)), A_eq=A_eq, b_eq=b_eq, bounds=(0, None),
                time_limit=time_limit)
    if not res.feasible:
        return None
    alpha = np.maximum(res.x, 0.0)
    alpha /= alpha.sum()
    resid = float(np.abs(A @ alpha).sum())          # Σ_c ‖δ_c‖₁
    support = np.nonzero(alpha > 1e-9)[0]
    support = support[np.argsort(-alpha[support], kind="stable")]
    return Certificate("farkas", pi[support], alpha[support], pc[support],
                       resid, 1.0 / resid if resid > 0 else float("inf"), primal)


def gate_separator(X: csr_matrix, positive: np.ndarray, *, time_limit: float) -> LPResult:
    """``σ = X w`` with 1 ≤ σ ≤ 1 + s on the positive rows and σ ≤ 0 on the others, minimising
    the spread s (+ 10⁻³ ‖w‖₁ to pick moderate weights among the best gates).  ``x`` holds w
    (bias last) followed by s."""
    n, D = X.shape
    P, N = X[positive], X[~positive]
    # rows: −σ_pos ≤ −1 ; σ_pos − s ≤ 1 ; σ_neg ≤ 0
    A = vstack([-P, P, N], format="csr")
    s_col = csr_matrix(np.concatenate([np.zeros(P.shape[0]), -np.ones(P.shape[0]),
                                       np.zeros(N.shape[0])])[:, None])
    cost, A2 = _split_l1(A, 1)
    cost = np.concatenate([1e-3 * cost, [1.0]])
    A2 = hstack([A2, s_col], format="csr")
    b = np.concatenate([-np.ones(P.shape[0]), np.ones(P.shape[0]), np.zeros(N.shape[0])])
    res = solve(cost, A_ub=A2, b_ub=b, bounds=(0, None), time_limit=time_limit)
    if res.feasible:
        res = LPResult(res.status, res.message, res.iterations,
                       res.x[:D] - res.x[D:2 * D])
    return res


def point_separator(X: csr_matrix, u: int, *, time_limit: float) -> LPResult:
    """``σ = X w`` with σ(x_u) ≥ 1 and σ ≤ 0 at every other row, of least ℓ1 norm: row u
    cut off from the others."""
    n, D = X.shape
    others = np.setdiff1d(np.arange(n), [u])
    A = vstack([-X[[u]], X[others]], format="csr")
    b = np.concatenate([[-1.0], np.zeros(len(others))])
    cost, A2 = _split_l1(A, 1)
    res = solve(cost, A_ub=A2, b_ub=b, bounds=(0, None), time_limit=time_limit)
    if res.feasible:
        res = LPResult(res.status, res.message, res.iterations, res.x[:D] - res.x[D:])
    return res


def hull_certificate(A: csr_matrix, B: csr_matrix, primal: str, *,
                     time_limit: float) -> Certificate | None:
    """Convex weights λ on the rows of A and μ on the rows of B with Σλ a = Σμ b (a common
    point of the two convex hulls: no affine function is ≥ 1 on A and ≤ 0 on B); ``None``
    when the LP finds none.  ``rows`` index A's rows then B's (B's offset by len(A))."""
    nA, nB = A.shape[0], B.shape[0]
    M = hstack([A.T, -B.T], format="csr")                          # (D, nA + nB)
    sums = csr_matrix(np.block([[np.ones((1, nA)), np.zeros((1, nB))],
                                [np.zeros((1, nA)), np.ones((1, nB))]]))
    A_eq = vstack([M, sums], format="csr")
    b_eq = np.concatenate([np.zeros(M.shape[0]), [1.0, 1.0]])
    res = solve(np.zeros(nA + nB), A_eq=A_eq, b_eq=b_eq, bounds=(0, None),
                time_limit=time_limit)
    if not res.feasible:
        return None
    lam = np.maximum(res.x, 0.0)
    lam[:nA] /= lam[:nA].sum()
    lam[nA:] /= lam[nA:].sum()
    resid = float(np.abs(M @ lam).max())
    support = np.nonzero(lam > 1e-9)[0]
    support = support[np.argsort(-lam[support], kind="stable")]
    return Certificate("convex hulls", support, lam[support], (support >= nA).astype(np.int64),
                       resid, 1.0 / resid if resid > 0 else float("inf"), primal)
