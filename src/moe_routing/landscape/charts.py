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

and :func:`dedupe` and :func:`descend` are the one implementation both searches call.

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

from .. import validation as check
from .multi_region import chart_points, normalise, relabel_all
from .profiled import ProfiledObjective
from .teacher_student import routers, wrap_phi

#: the descent oracle of a chart: phi (S, M) -> (phi on the chart, gradient (S, D), move), where
#: move(z (S, D)) -> the routers reached by the local steps z
Local = Callable[[np.ndarray], tuple]


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
        check.instance("obj", obj, ProfiledObjective, "a ProfiledObjective")
        check.require((obj.K, obj.d) == (self.K, self.d), "obj", f"K = {obj.K}, d = {obj.d}",
                      f"an objective of this chart's K = {self.K}, d = {self.d}")
        tau = check.temperature("tau", tau)

        def at(phi):
            phi, T, _, g = obj.grad(phi, tau)
            return phi, g, lambda z: obj.step(phi, T, z)
        return at


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
