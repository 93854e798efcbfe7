"""Linear read-outs of the structural code fitted by convex optimisation, then verified exactly.

The router of Theorem 4.2 must be *linear* in the structural block.  With additive token and
position embeddings and linear attention values, head 1's output lives in a space of dimension
at most (number of token types) + (number of positions), far fewer than the L·|T| template
positions, so the paper's linearly independent template-position codes cannot exist here
(see the chapter).  Whether a linear router exists is therefore a property of the data: we
find one by minimising a multiclass squared hinge loss (L-BFGS), and *then check exactly* that
every node is classified with a positive margin.  The fit is ours; the check is what the
theorem needs.

When the fit stops without a separator, that is not yet a reason to refuse the dataset: a
linear program (:mod:`.separability`) decides.  If a separator exists, the LP supplies one and
the build continues with it (the :class:`FitOutcome` says so); if none exists, the fit raises
:class:`NotSeparable` carrying the LP's certificate; if the LP cannot decide either, it raises
:class:`FitDidNotConverge` with the numbers.  The knobs of each fit are a :class:`FitSettings`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .._internal.validation import finite_array, integer, number, positive, require

from .separability import (
    Certificate,
    LPResult,
    augment,
    gate_separator,
    hull_certificate,
    multiclass_certificate,
    multiclass_separator,
    point_separator,
)


@dataclass(frozen=True)
class FitSettings:
    """Knobs of one iterative separator fit (L-BFGS in chunks, stopped early once good).

    ``max_iter``: L-BFGS iterations in all; ``chunk``: iterations between two checks of the
    stopping rule (L-BFGS restarts after each); ``reg``: weight of the ‖w‖² penalty; ``tol``:
    the stopping rule's tolerance -- router: every margin > tol; gate: spread < tol·gap;
    detectors: every gap > tol."""

    max_iter: int = 600
    chunk: int = 50
    reg: float = 1e-6
    tol: float = 0.05

    def __post_init__(self):
        object.__setattr__(self, "max_iter", integer("FitSettings.max_iter", self.max_iter, low=1))
        object.__setattr__(self, "chunk", integer("FitSettings.chunk", self.chunk, low=1))
        object.__setattr__(self, "reg", number("FitSettings.reg", self.reg, low=0))
        object.__setattr__(self, "tol", positive("FitSettings.tol", self.tol))


ROUTER_FIT = FitSettings()
GATE_FIT = FitSettings()
DETECTOR_FIT = FitSettings(max_iter=2000, chunk=100, reg=1e-8)
LP_TIME_LIMIT = 120.0       # seconds HiGHS may spend on one LP (only when a fit stops short)


def check_settings(name: str, value) -> FitSettings:
    """``value`` if it is a :class:`FitSettings`, else the library's standard error."""
    require(isinstance(value, FitSettings), name, value, "a FitSettings")
    return value


@dataclass(frozen=True)
class FitOutcome:
    """How a separator was obtained: ``method`` "dual basis" (exact, no fit), "L-BFGS" (the
    fit found it) or "LP" (the fit stopped short and HiGHS supplied it)."""

    method: str
    iterations: int               # L-BFGS iterations run
    fit_margin: float             # the smallest margin the L-BFGS fit reached (≤ 0: it failed)
    lp: str = ""                  # HiGHS's message when the LP was solved

    def describe(self) -> str:
        if self.method != "LP":
            return f"{self.method} ({self.iterations} iterations)"
        return (f"L-BFGS stopped after {self.iterations} iterations at smallest margin "
                f"{self.fit_margin:.3g}; the LP found a separator ({self.lp})")


class NotSeparable(ValueError):
    """No strict linear separator exists; ``certificate`` is the LP's proof (rows indexed as in
    the fit's input)."""

    def __init__(self, what: str, certificate: Certificate, fit: FitOutcome):
        self.certificate, self.fit = certificate, fit
        exact = ("exact: no separator of any size" if certificate.residual == 0 else
                 f"any separator of margin 1 needs weights ≥ {certificate.min_weight_norm:.1e}")
        rows = list(dict.fromkeys(certificate.rows.tolist()))[:8]
        super().__init__(
            f"{what}: no linear separator exists -- LP certificate ({certificate.kind}) on rows "
            f"{rows} with residual {certificate.residual:.1e} ({exact}); the separator LP: "
            f"{certificate.primal}")


class FitDidNotConverge(RuntimeError):
    """Neither the fit nor the LP decided: nothing is proved, the numbers are reported."""

    def __init__(self, what: str, fit: FitOutcome, lp: LPResult, worst_rows):
        self.fit, self.lp, self.worst_rows = fit, lp, list(worst_rows)
        super().__init__(
            f"{what}: fit did not converge -- L-BFGS ran {fit.iterations} iterations and "
            f"reached smallest margin {fit.fit_margin:.3g}; the LP (HiGHS) did not decide "
            f"either (status {lp.status}: {lp.message}); worst rows {self.worst_rows[:8]} "
            "(raise the fit's max_iter or lp_time_limit)")


def _lbfgs(fun, x0, check, max_iter: int, chunk: int):
    """scipy L-BFGS in chunks of ``chunk`` iterations (``max_iter`` in all), stopping when
    ``check(x)`` holds.  Returns ``(x, iterations run)``."""
    from scipy.optimize import minimize

    try:        # L-BFGS-B's vector updates are tiny: BLAS threads only add overhead (10× here)
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(1)
    except ImportError:  # pragma: no cover - optional speed-up
        limit = None
    try:
        x, done = x0, 0
        while done < max_iter:
            n = min(chunk, max_iter - done)
            res = minimize(fun, x, jac=True, method="L-BFGS-B",
                           options=dict(maxiter=n, maxcor=20, gtol=1e-12, ftol=1e-15))
            x, done = res.x, done + res.nit
            if check(x) or res.nit < n:         # good enough, or converged before the chunk's end
                break
    finally:
        if limit is not None:
            limit.restore_original_limits()
    return x, done


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


def fit_multiclass(Z: np.ndarray, labels: np.ndarray, n_classes: int,
                   settings: FitSettings = ROUTER_FIT, *, lp_time_limit: float = LP_TIME_LIMIT
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, FitOutcome]:
    """Linear multiclass separator ``scores = Z W + b`` with ``argmax = labels``.

    Z (n, d) float64, labels (n,) in [0, n_classes).  Minimises Σ_i Σ_{c≠y_i}
    max(0, 1 + s_ic − s_iy)² + reg‖W‖² by L-BFGS in chunks, stopping as soon as every margin
    ``s_iy − max_{c≠y} s_ic`` exceeds ``settings.tol``; if it stops with a margin ≤ 0, the LP
    decides (module docstring).  Only the columns of Z that are not identically zero take part
    (the others get zero weight).  Returns ``(W (d, C), b (C,), margins (n,), outcome)`` --
    margins recomputed exactly from the returned weights."""
    Z = finite_array("Z", Z, ndim=2)
    n_classes = integer("n_classes", n_classes, low=1)
    labels = np.asarray(labels)
    require(labels.shape == (Z.shape[0],) and np.issubdtype(labels.dtype, np.integer)
            and bool(((labels >= 0) & (labels < n_classes)).all()), "labels",
            labels, f"({Z.shape[0]},) integers in [0, {n_classes})")
    settings = check_settings("settings", settings)
    lp_time_limit = positive("lp_time_limit", lp_time_limit)
    n, d = Z.shape
    cols = np.nonzero(np.abs(Z).sum(0) > 0)[0]
    X = _design(Z[:, cols])                                          # (n, d' + 1)
    dd = X.shape[1]
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), labels] = 1.0
    ar = np.arange(n)
    reg = settings.reg

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

    w, iters = _lbfgs(fun, np.zeros(dd * n_classes),
                      lambda w: margins(Z, labels, *unpack(w)).min() > settings.tol,
                      settings.max_iter, settings.chunk)
    Wf, b = unpack(w)
    m = margins(Z, labels, Wf, b)
    if m.min() > 0:
        return Wf, b, m, FitOutcome("L-BFGS", iters, float(m.min()))
    fit = FitOutcome("L-BFGS", iters, float(m.min()))
    Xa = augment(Z[:, cols])
    lp = multiclass_separator(Xa, labels, n_classes, time_limit=lp_time_limit)
    what = f"multiclass separator of {n} rows into {n_classes} classes"
    if lp.feasible:
        Wf, b = unpack(lp.x)
        m_lp = margins(Z, labels, Wf, b)
        if m_lp.min() > 0:
            return Wf, b, m_lp, dataclasses.replace(fit, method="LP", lp=lp.message)
    elif lp.infeasible:
        cert = multiclass_certificate(Xa, labels, n_classes, lp.message, time_limit=lp_time_limit)
        if cert is not None and cert.proves:
            raise NotSeparable(what, cert, fit)
    wrong = np.nonzero(m <= 0)[0]                                    # misclassified, worst first
    raise FitDidNotConverge(what, fit, lp, wrong[np.argsort(m[wrong], kind="stable")][:8].tolist())


def margins(Z: np.ndarray, labels: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``s_iy − max_{c≠y} s_ic`` for every row (positive ⇔ classified correctly)."""
    S = Z @ W + b
    n = len(labels)
    own = S[np.arange(n), labels].copy()
    S[np.arange(n), labels] = -np.inf
    return own - S.max(1) if S.shape[1] > 1 else np.full(n, np.inf)


@dataclass(frozen=True, eq=False)
class GateFit:
    """σ(z) = w·z + c with min σ on the positives = 1 and max σ on the negatives = 0."""

    w: np.ndarray                 # (d,)
    c: float
    spread: float                 # max σ on the positives − 1
    gap: float                    # separation before normalising
    outcome: FitOutcome


def _binary_rows(cert: Certificate, positive: np.ndarray) -> Certificate:
    """A hull certificate's rows (positives first, then negatives) as rows of the input."""
    pos, neg = np.nonzero(positive)[0], np.nonzero(~positive)[0]
    rows = np.where(cert.tag == 0, pos[np.minimum(cert.rows, len(pos) - 1)],
                    neg[np.maximum(cert.rows - len(pos), 0)])
    return dataclasses.replace(cert, rows=rows)


def fit_gate(Z: np.ndarray, positive: np.ndarray, settings: FitSettings = GATE_FIT, *,
             lp_time_limit: float = LP_TIME_LIMIT) -> GateFit:
    """A linear gate ``σ(z) = w·z + c`` with σ ≥ 1 on the positive rows and σ ≤ 0 on the others,
    nearly constant on the positives.

    Minimises Σ_pos (σ − 1)² + Σ_neg max(0, σ + 1)² + reg‖w‖² (positives pulled *to* 1, not
    only above it, because the semantic neurons' constants depend on the spread), then
    normalises affinely so that the smallest positive value is exactly 1 and the largest
    negative value exactly 0.  If the fit does not separate, the LP of least spread decides
    (module docstring): :class:`NotSeparable` when no gate exists."""
    Z = finite_array("Z", Z, ndim=2)
    positive = np.asarray(positive)
    require(positive.shape == (Z.shape[0],) and positive.dtype == bool, "positive", positive,
            f"a ({Z.shape[0]},) boolean array")
    require(bool(positive.any()) and not bool(positive.all()), "positive", positive,
            "both positive and negative rows (a gate needs both)")
    settings = check_settings("settings", settings)
    # (``positive`` names the rows here, so the bound is spelled out)
    lp_time_limit = number("lp_time_limit", lp_time_limit, low=0, low_open=True)
    n, d = Z.shape
    cols = np.nonzero(np.abs(Z).sum(0) > 0)[0]
    X = _design(Z[:, cols])
    reg = settings.reg

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
        return lo > hi and (s[positive].max() - lo) < settings.tol * (lo - hi)

    w, iters = _lbfgs(fun, np.zeros(X.shape[1]), ok, settings.max_iter, settings.chunk)
    s = X @ w
    lo, hi = s[positive].min(), s[~positive].max()
    outcome = FitOutcome("L-BFGS", iters, float(lo - hi))
    if not lo > hi:
        Xa = augment(Z[:, cols])
        lp = gate_separator(Xa, positive, time_limit=lp_time_limit)
        what = f"gate separating {int(positive.sum())} positive from {int((~positive).sum())} rows"
        if lp.infeasible:
            cert = hull_certificate(Xa[positive], Xa[~positive], lp.message,
                                    time_limit=lp_time_limit)
            if cert is not None and cert.proves:
                raise NotSeparable(what, _binary_rows(cert, positive), outcome)
        if not lp.feasible:
            worst = [int(np.argmin(np.where(positive, s, np.inf))),      # lowest positive
                     int(np.argmax(np.where(positive, -np.inf, s)))]     # highest negative
            raise FitDidNotConverge(what, outcome, lp, worst)
        w = lp.x
        s = Xa @ w
        lo, hi = s[positive].min(), s[~positive].max()
        outcome = dataclasses.replace(outcome, method="LP", lp=lp.message)
    wf = np.zeros(d)
    wf[cols] = w[:-1] / (lo - hi)
    c = (w[-1] - hi) / (lo - hi)
    sn = Z @ wf + c
    return GateFit(wf, float(c), float(sn[positive].max() - 1.0), float(lo - hi), outcome)


def fit_point_detectors(H: np.ndarray, settings: FitSettings = DETECTOR_FIT, *,
                        lp_time_limit: float = LP_TIME_LIMIT
                        ) -> tuple[np.ndarray, np.ndarray, FitOutcome]:
    """For m points (rows of H), affine functionals σ_u with σ_u(h_u) = 1 and σ_u(h_v) ≤ 0
    for v ≠ u -- each point cut off from the others (possible iff every point is a vertex of
    the convex hull of the set).

    When the points are linearly independent this is the dual basis (exact, no fit).
    Otherwise all m functionals are fitted jointly (squared hinge: S_uu ≥ 1, S_vu ≤ −1) and
    normalised; a point the fit does not cut off is cut off by an LP, or -- when it lies in
    the hull of the others -- :class:`NotSeparable` is raised with the convex combination as
    certificate (the point is the certificate's first row, tag 0).  Returns
    ``(W (m, d), c (m,), outcome)``."""
    H = finite_array("H", H, ndim=2)
    settings = check_settings("settings", settings)
    lp_time_limit = positive("lp_time_limit", lp_time_limit)
    m, d = H.shape
    sv = np.linalg.svd(H, compute_uv=False)                         # min(m, d) values
    if m <= d and sv.min() > 1e-9 * max(1.0, sv.max()):             # rows independent
        return np.linalg.pinv(H).T.copy(), np.zeros(m), FitOutcome("dual basis", 0, 1.0)
    cols = np.nonzero(np.abs(H).sum(0) > 0)[0]
    X = np.hstack([H[:, cols], np.ones((m, 1))])                    # (m, d'+1)
    dd = X.shape[1]
    eye = np.eye(m, dtype=bool)
    reg = settings.reg

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

    w, iters = _lbfgs(fun, np.zeros(dd * m), lambda w: sep(w).min() > settings.tol,
                      settings.max_iter, settings.chunk)
    gap = sep(w)
    outcome = FitOutcome("L-BFGS", iters, float(gap.min()))
    Wm = w.reshape(dd, m).copy()
    failed = np.nonzero(gap <= 0)[0]
    if len(failed):
        Xa = augment(H[:, cols])
        messages = []
        for u in failed:
            lp = point_separator(Xa, int(u), time_limit=lp_time_limit)
            what = f"point {int(u)} of {m}"
            if lp.feasible:
                Wm[:, u] = lp.x
                messages.append(lp.message)
                continue
            if lp.infeasible:
                others = np.setdiff1d(np.arange(m), [u])
                cert = hull_certificate(Xa[[int(u)]], Xa[others], lp.message,
                                        time_limit=lp_time_limit)
                if cert is not None and cert.proves:
                    rows = np.where(cert.tag == 0, int(u), others[np.maximum(cert.rows - 1, 0)])
                    raise NotSeparable(what + " cannot be cut off from the others: it lies in "
                                       f"their convex hull (the fit left points {failed.tolist()})",
                                       dataclasses.replace(cert, rows=rows), outcome)
            raise FitDidNotConverge(what + " (cut off from the others)", outcome, lp,
                                    failed.tolist())
        outcome = dataclasses.replace(outcome, method="LP", lp="; ".join(sorted(set(messages))))
    S = X @ Wm
    hi = np.where(eye, -np.inf, S).max(0)
    lo = np.diag(S)
    Wf = np.zeros((m, d))
    Wf[:, cols] = (Wm[:-1] / (lo - hi)).T
    return Wf, (Wm[-1] - hi) / (lo - hi), outcome
