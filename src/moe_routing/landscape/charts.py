"""Router charts, and the parts of the critical-point search written once on top of them.

The landscape chapters search two models for critical points: K = 2 regions of the plane
(:mod:`.teacher_student`, :mod:`.critical_points`) and K ≥ 2 regions of R^d
(:mod:`.multi_region`, :mod:`.multi_critical`).  What differs between them is the *chart* --
how a router is written, when two routers are the same, how a descent step moves one -- not the
search.  A chart here is a small object with

* ``points(phi)``: the argument check, routers as an (S, M) array;
* ``distance(p, q)``: the distance between two routers modulo the model's symmetries;
* ``start(starts)`` / ``finish(phi)``: onto the chart before a descent, back onto it after;
* ``local(...)``: the descent oracle ``phi -> (phi, gradient in local coordinates, move)``,
  ``move(z)`` the router reached by the local step z;

* ``second(...)``: the second-order oracle (:class:`SecondOrder`) of Newton's method and of the
  descent on ``½|∇L̄|²``;

and :func:`dedupe`, :func:`descend`, :func:`descend_grad_norm` and :func:`newton` are the one
implementation both searches call.

The charts:

* :class:`TwoRegionChart`: ``φ = (α, b)``, the interface ``x·(cos α, sin α) = b``, with
  ``(α, b) ≡ (α + π, −b)``; descent moves in (α, b) and clips ``|b| ≤ b_max`` (beyond it a
  cell holds almost no probability mass and the objective is flat);
* :class:`MultiRegionChart`: ``φ = (vec V, e)`` on the sphere ``|vec V| = r``
  (:mod:`.multi_region`), routers equal modulo the K! relabellings of the experts; descent moves
  in the D local coordinates of the tangent space and retracts onto the sphere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .._internal import validation as check
from .multi_region import chart_points, normalise, relabel_all
from .profiled import ProfiledObjective
from .two_region import routers, wrap_phi

#: the descent oracle of a chart: phi (S, M) -> (phi on the chart, gradient (S, D), move), where
#: move(z (S, D)) -> the routers reached by the local steps z
Local = Callable[[np.ndarray], tuple]


@dataclass(frozen=True)
class SecondOrder:
    """What Newton's method and the descent on ``½|∇L̄|²`` need from a model in its chart.

    ``at(phi (S, M)) -> (phi on the chart, value (S,), gradient (S, D), Hessian (S, D, D),
    move)``, ``move(z (S, D))`` the routers reached by the local steps z; ``alive(phi) -> (S,)
    bool``: the routers still inside the search's domain (None: every router is), checked
    before a router is evaluated, so a router that left it costs no Hessian."""

    at: Callable[[np.ndarray], tuple]
    alive: Callable[[np.ndarray], np.ndarray] | None = None


def _oracle_values(fn, phi: np.ndarray, order: int) -> tuple:
    """Call a derivative oracle of the K = 2 model and check its answer: values (S,), gradients
    (S, 2) and, for ``order`` 2, Hessians (S, 2, 2), all finite (a NaN from an oracle stops the
    search with a ValueError instead of flowing into a "critical point")."""
    out = fn(phi)
    S = len(phi)
    v = check.finite_array("fn(phi)[0]", out[0], shape=(S,))
    g = check.finite_array("fn(phi)[1]", out[1], shape=(S, 2))
    if order == 1:
        return v, g
    return v, g, check.finite_array("fn(phi)[2]", out[2], shape=(S, 2, 2))


@dataclass(frozen=True)
class TwoRegionChart:
    """The (α, b) chart of the two-region model; ``b_max`` bounds |b| during descent."""

    b_max: float = 2.8

    def __post_init__(self):
        object.__setattr__(self, "b_max", check.positive("b_max", self.b_max))

    @property
    def M(self) -> int:
        return 2

    def points(self, phi, *, name: str = "phi", allow_empty: bool = False) -> np.ndarray:
        return routers(phi, name=name, allow_empty=allow_empty)

    def distance(self, p, q) -> float:
        """Distance between two routers in the chart, respecting α-periodicity and (α+π, −b)."""
        p = wrap_phi(check.finite_array("p", p, shape=(2,)))
        q = wrap_phi(check.finite_array("q", q, shape=(2,)))
        cands = [q, np.array([q[0] + np.pi, -q[1]]), np.array([q[0] - np.pi, -q[1]])]
        return float(min(np.linalg.norm(p - c) for c in cands))

    def start(self, starts) -> np.ndarray:
        return self.points(starts, name="starts")

    def finish(self, phi) -> np.ndarray:
        return self.points(phi)

    def local(self, fn_grad: Callable[[np.ndarray], tuple]) -> Local:
        """The descent oracle of ``fn_grad(phi) -> (value (S,), gradient (S, 2))``: local
        coordinates are (α, b) themselves; a move clips b to ±b_max."""
        check.function("fn_grad", fn_grad)

        def at(phi):
            _, g = _oracle_values(fn_grad, phi, 1)

            def move(z):
                out = phi + z
                out[:, 1] = np.clip(out[:, 1], -self.b_max, self.b_max)
                return out
            return phi, g, move
        return at

    def second(self, fn: Callable[[np.ndarray], tuple]) -> SecondOrder:
        """The second-order oracle of ``fn(phi) -> (value (S,), gradient (S, 2), Hessian (S, 2,
        2))``: local coordinates are (α, b); a router is alive while ``|b| < b_max``."""
        check.function("fn", fn)

        def at(phi):
            v, g, H = _oracle_values(fn, phi, 2)
            return phi, v, g, H, lambda z: phi + z
        return SecondOrder(at, lambda phi: np.abs(phi[:, 1]) < self.b_max)


@dataclass(frozen=True)
class MultiRegionChart:
    """The sphere chart of the K-region model in R^d (:mod:`.multi_region`)."""

    K: int
    d: int

    def __post_init__(self):
        object.__setattr__(self, "K", check.integer("K", self.K, low=2))
        object.__setattr__(self, "d", check.integer("d", self.d, low=1))

    @property
    def M(self) -> int:
        return (self.K - 1) * (self.d + 1)

    def points(self, phi, *, name: str = "phi", allow_empty: bool = False) -> np.ndarray:
        return chart_points(phi, self.K, self.d, name=name, allow_empty=allow_empty)

    def distance(self, p, q) -> float:
        """Euclidean distance in the chart, minimised over the relabellings of q."""
        p = check.finite_array("p", p, shape=(self.M,))
        q = chart_points(q, self.K, self.d, name="q", single=True)
        return float(np.linalg.norm(relabel_all(q, self.K, self.d) - p[None], axis=1).min())

    def start(self, starts) -> np.ndarray:
        return normalise(self.points(starts, name="starts"), self.K, self.d)

    def finish(self, phi) -> np.ndarray:
        return normalise(self.points(phi), self.K, self.d)

    def local(self, obj: ProfiledObjective, tau: float) -> Local:
        """The descent oracle of the profiled objective ``obj`` at temperature ``tau``: the
        Riemannian gradient in the tangent coordinates, moves retracted onto the sphere."""
        self._same(obj)
        tau = check.temperature("tau", tau)

        def at(phi):
            phi, T, _, g = obj.grad(phi, tau)
            return phi, g, lambda z: obj.step(phi, T, z)
        return at

    def second(self, obj: ProfiledObjective, tau: float, *, min_cell_mass: float | None = None,
               e_max: float = 3.0) -> SecondOrder:
        """The second-order oracle of ``obj`` at ``tau`` (closed-form or autograd Hessians in
        the tangent coordinates, moves retracted onto the sphere).  With ``min_cell_mass`` a
        router is alive while every cell has mean gate ≥ it and every offset ``|e| ≤ e_max``
        (a K-expert student with an empty cell is a (K−1)-expert one, outside the compact
        router set); None: every router is alive."""
        self._same(obj)
        tau = check.temperature("tau", tau)
        alive = None
        if min_cell_mass is not None:
            min_cell_mass = check.number("min_cell_mass", min_cell_mass, low=0,
                                         high=1.0 / obj.K)
            e_max = check.positive("e_max", e_max)
            m = (obj.K - 1) * obj.d

            def alive(phi):
                mass = obj.cell_masses(phi, tau).min(1)
                return (mass >= min_cell_mass) & (np.abs(phi[:, m:]).max(1) <= e_max)

        def at(phi):
            phi, T, v, g, H = obj.grad_hess(phi, tau)
            return phi, v, g, H, lambda z: obj.step(phi, T, z)
        return SecondOrder(at, alive)

    def _same(self, obj) -> None:
        check.instance("obj", obj, ProfiledObjective, "a ProfiledObjective")
        check.require((obj.K, obj.d) == (self.K, self.d), "obj", f"K = {obj.K}, d = {obj.d}",
                      f"an objective of this chart's K = {self.K}, d = {self.d}")


Chart = TwoRegionChart | MultiRegionChart


def _chart(chart) -> Chart:
    return check.instance("chart", chart, (TwoRegionChart, MultiRegionChart),
                          "a TwoRegionChart or a MultiRegionChart")


def dedupe(phis: np.ndarray, chart: Chart, radius: float) -> np.ndarray:
    """Drop routers within ``radius`` (the chart's distance) of an earlier one: descent sends
    many starts into the same basin, and refining each copy by Newton would repeat the same
    work.  (S, M) -> (S', M); an empty batch (S = 0) gives an empty batch."""
    chart = _chart(chart)
    radius = check.positive("radius", radius)
    kept: list[np.ndarray] = []
    for p in chart.points(phis, name="phis", allow_empty=True):
        if all(chart.distance(p, q) > radius for q in kept):
            kept.append(p)
    return np.array(kept).reshape(-1, chart.M)


def descend(local: Local, starts: np.ndarray, chart: Chart, *, steps: int,
            lr_start: float, lr_end: float, n_slow: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Normalised gradient descent from every start at once: ``(end points (S, M), slow points
    (≤ n_slow·S, M))``.

    Step lengths decay geometrically from ``lr_start`` to ``lr_end``: the soft objective near the
    teacher is V-shaped outside a boundary layer of width O(τ) (the teacher jumps across its
    interface), so plain Newton overshoots there; descent brings every start inside its basin's
    layer, where Newton then converges quadratically.  ``n_slow`` > 0 also keeps, per path, the
    ``n_slow`` deepest interior local minima of |∇L̄| below a fifth of its starting value:
    where a path slowed down near a saddle (candidates for the saddle search).
    """
    check.function("local", local)
    chart = _chart(chart)
    phi = chart.start(starts)
    steps = check.integer("steps", steps, low=1)
    lr_start, lr_end = check.positive("lr_start", lr_start), check.positive("lr_end", lr_end)
    n_slow = check.integer("n_slow", n_slow, low=0)
    hist_p, hist_g = [], []
    for lr in np.geomspace(lr_start, lr_end, steps):
        phi, g, move = local(phi)
        gn = np.linalg.norm(g, axis=1)
        if n_slow:
            hist_p.append(phi)
            hist_g.append(gn)
        phi = move(-lr * g / np.maximum(gn, 1e-300)[:, None])
    slow = []
    if n_slow:
        P, Gn = np.stack(hist_p, 1), np.stack(hist_g, 1)               # (S, steps, M), (S, steps)
        for s in range(len(phi)):
            g = Gn[s]
            idx = [t for t in range(1, len(g) - 1)
                   if g[t] < g[t - 1] and g[t] < g[t + 1] and g[t] < 0.2 * g[0]]
            idx = sorted(idx, key=lambda t: g[t])[:n_slow]
            slow.extend(P[s, idx])
    return chart.finish(phi), np.array(slow).reshape(-1, chart.M)


def descend_grad_norm(second: SecondOrder, starts: np.ndarray, chart: Chart, *, steps: int,
                      lr: float = 0.5, step_cap: float = 0.2) -> np.ndarray:
    """Capped descent on ``½|∇L̄|²`` (direction ``H∇L̄``) from every start at once: attracted by
    minima, saddles and maxima alike, it brings starts near saddles that descent on ``L̄``
    flows away from.  A router that leaves the domain (``second.alive``) stops where it is.
    (S, M) -> (S, M)."""
    check.instance("second", second, SecondOrder, "a chart's SecondOrder (chart.second(...))")
    chart = _chart(chart)
    phi = chart.start(starts)
    steps = check.integer("steps", steps, low=0)
    lr, step_cap = check.positive("lr", lr), check.positive("step_cap", step_cap)
    alive = np.ones(len(phi), dtype=bool)
    for _ in range(steps):
        phi, _, g, H, move = second.at(phi)
        dvec = np.einsum("sij,sj->si", H, g)                             # ∇(½|g|²)
        nrm = np.linalg.norm(dvec, axis=1, keepdims=True)
        new = move(-lr * dvec / np.maximum(nrm, 1e-300) * np.minimum(nrm, step_cap))
        phi = np.where(alive[:, None], new, phi)
        if second.alive is not None:
            alive &= second.alive(phi)
    return chart.finish(phi)


def newton(second: SecondOrder, cand: np.ndarray, chart: Chart, *, steps: int = 25,
           step_cap: float = 0.2, tol: float = 1e-7):
    """Capped Newton ``z = −H⁺g`` (pseudo-inverse, in local coordinates) on ``∇L̄ = 0`` from
    every candidate: ``(phi (S, M), converged (S,), value (S,), gradient (S, D), Hessian (S,
    D, D))``, the last three at the final points (NaN for a candidate that was never alive: a
    marker, never used in a computation).  Only the candidates still moving (alive, not yet
    critical) are evaluated; one counts as critical when ``|∇L̄| < tol``, and a candidate is
    given ``steps`` steps: at small τ one may first walk for many capped steps before it
    converges (measured on the K-region search: candidates still at ``|∇L̄| ≈ 0.1`` after 12
    steps that converge later).  An empty batch gives an empty batch."""
    check.instance("second", second, SecondOrder, "a chart's SecondOrder (chart.second(...))")
    chart = _chart(chart)
    phi = chart.points(cand, name="cand", allow_empty=True)
    phi = (chart.start(phi) if len(phi) else phi).copy()     # updated in place: not the caller's
    steps = check.integer("steps", steps, low=0)
    step_cap, tol = check.positive("step_cap", step_cap), check.positive("tol", tol)
    n = len(phi)
    val = np.full(n, np.nan)
    gr = He = None
    alive = np.ones(n, dtype=bool) if second.alive is None or n == 0 else second.alive(phi)
    done = np.zeros(n, dtype=bool)
    for it in range(steps + 1):
        act = np.flatnonzero(alive & ~done)
        if act.size == 0:
            break
        p, v, g, H, move = second.at(phi[act])
        if gr is None:
            gr, He = np.full((n, g.shape[1]), np.nan), np.full((n,) + H.shape[1:], np.nan)
        phi[act], val[act], gr[act], He[act] = p, v, g, H
        gn = np.linalg.norm(g, axis=1)
        done[act] = gn < tol
        if it == steps:
            break
        mv = ~(gn < tol)
        if not mv.any():
            continue
        z = -np.stack([np.linalg.lstsq(H[i], g[i], rcond=1e-10)[0] for i in np.flatnonzero(mv)])
        zn = np.linalg.norm(z, axis=1, keepdims=True)
        z = z * np.minimum(1.0, step_cap / np.maximum(zn, 1e-300))
        moved = act[mv]
        z_all = np.zeros_like(g)
        z_all[mv] = z
        phi[moved] = move(z_all)[mv]                  # the critical ones are not moved
        if second.alive is not None:
            alive[moved] = second.alive(phi[moved])
    if gr is None:                                    # nothing was ever evaluated
        D = chart.M - 1 if isinstance(chart, MultiRegionChart) else chart.M
        gr, He = np.full((n, D), np.nan), np.full((n, D, D), np.nan)
    return phi, done & alive, val, gr, He
