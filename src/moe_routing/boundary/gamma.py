"""Γ-convergence of L_τ to L_0 on a compact parameter family (paper B Theorem 4.7).

The family (ours, chosen so that every risk is an exact 1-D quadrature): X has a 1-D law,
two constant experts c = (c_0, c_1) ∈ [−C, C]², and the router logits s(x − b)(½, −½), i.e.
g = s(x − b) with threshold b ∈ [b_lo, b_hi] and scale s ∈ [s_min, s_max]:

    L_τ(b, s, c) = E[(f*(X) − c_0 σ(s(X − b)/τ) − c_1 σ(−s(X − b)/τ))²].

The margin is Δ = s|x − b|, so BM(w) ≤ ‖p‖_∞ · 2w / s_min: the margin control is *uniform* over
the family exactly when s_min > 0.  Then sup |L_τ − L_0| → 0 (at rate τ) and minimisers of L_τ
converge to minimisers of L_0.  With s_min = 0 the soft risk depends on (s, τ) only through
s/τ: choosing s = t·τ keeps a fixed effective temperature 1/t for every τ, the soft model keeps
blending its experts, min L_τ stays at the best *soft* risk and its minimisers s_τ → 0 converge
to a router (s = 0) that is not a minimiser of L_0 — the counter-example.

The experts are profiled out exactly: for fixed gates L is a convex quadratic in c, minimised
over the box by checking the interior solution and the four edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import optimize, special

from .._internal import validation as check
from .laws import InputLaw, UniformBox, support_1d
from .quadrature import graded_nodes


@dataclass(frozen=True)
class Profiled:
    """Profiled risk min_c L(b, s, c) and its minimising experts c (arrays over the s grid)."""

    risk: np.ndarray
    c: np.ndarray


@dataclass(frozen=True)
class Minimiser:
    b: float
    s: float
    c: np.ndarray
    risk: float


def box_qp(G, h, e2, C) -> tuple[np.ndarray, np.ndarray]:
    """min_c e2 − 2 h·c + cᵀ G c over the box c ∈ [−C, C]², batched over m problems.

    G (m, 2, 2) symmetric positive semi-definite, h (m, 2), e2 a number, C > 0; returns the
    minima (m,) and minimisers (m, 2).  This profiles the two constant experts out of the
    family's risk exactly: a convex quadratic attains its minimum over the box either at the
    unconstrained solution (pseudo-inverse, so singular G is fine) or on one of the four edges,
    where it is a 1-D quadratic minimised by clipping.
    """
    G = check.finite_array("G", G, shape=(None, 2, 2))
    m = G.shape[0]
    h = check.finite_array("h", h, shape=(m, 2))
    e2 = check.number("e2", e2)
    C = check.positive("C", C)
    cands = [np.einsum("mij,mj->mi", np.linalg.pinv(G), h)]
    for i in (0, 1):
        o = 1 - i
        for val in (-C, C):
            c = np.empty((m, 2))
            c[:, i] = val
            denom = np.where(G[:, o, o] > 1e-300, G[:, o, o], 1.0)
            c[:, o] = np.clip((h[:, o] - G[:, o, i] * val) / denom, -C, C)
            cands.append(c)
    best_r, best_c = np.full(m, np.inf), np.zeros((m, 2))
    for c in cands:
        ok = np.all(np.abs(c) <= C * (1 + 1e-12), axis=1)
        r = e2 - 2 * (h * c).sum(1) + np.einsum("mi,mij,mj->m", c, G, c)
        better = ok & (r < best_r)
        best_r = np.where(better, r, best_r)
        best_c[better] = c[better]
    return best_r, best_c


@dataclass(frozen=True)
class ThresholdFamily:
    """The compact family above; ``teacher`` maps a 1-D array of x to f*(x)."""

    teacher: Callable[[np.ndarray], np.ndarray]
    law: InputLaw = UniformBox.cube(1)
    b_range: tuple[float, float] = (-0.9, 0.9)
    s_range: tuple[float, float] = (0.25, 1.0)
    c_bound: float = 2.0

    def __post_init__(self):
        check.function("teacher", self.teacher)
        check.instance("law", self.law, InputLaw, "an InputLaw on the real line")
        check.require(self.law.dim == 1, "law.dim", self.law.dim, "1 (the family lives on the real line)")
        b = check.finite_array("b_range", self.b_range, shape=(2,))
        check.require(b[0] <= b[1], "b_range", self.b_range, "(b_lo, b_hi) with b_lo ≤ b_hi")
        s = check.finite_array("s_range", self.s_range, shape=(2,))
        check.require(0 <= s[0] <= s[1] and s[1] > 0, "s_range", self.s_range,
                      "(s_min, s_max) with 0 ≤ s_min ≤ s_max and s_max > 0")
        object.__setattr__(self, "b_range", (float(b[0]), float(b[1])))
        object.__setattr__(self, "s_range", (float(s[0]), float(s[1])))
        object.__setattr__(self, "c_bound", check.positive("c_bound", self.c_bound))

    @property
    def uniform_margin_control(self) -> bool:
        return self.s_range[0] > 0

    def margin_constant(self) -> float:
        """C_m with BM(w) ≤ C_m w for every member: 2 sup p / s_min (∞ when s_min = 0: no
        uniform margin control, which is the point of the counter-example, not a failure)."""
        a, b = support_1d(self.law)
        x = np.linspace(a, b, 20001)
        pmax = float(self.law.pdf(x[:, None]).max())
        return np.inf if self.s_range[0] == 0 else 2 * pmax / self.s_range[0]

    def _nodes(self, b):
        a, hi = support_1d(self.law)
        x, w = graded_nodes(a, hi, [b], n_gl=12, k_fine=45)
        return x, w * self.law.pdf(x[:, None])

    def _profile(self, gate0: np.ndarray, x, pw) -> Profiled:
        """gate0: (n_s, m) weight of expert 0 at the nodes."""
        y = check.finite_array("teacher(x)", self.teacher(x), shape=x.shape)  # (m,)
        p0, p1 = gate0, 1 - gate0
        G = np.stack([np.stack([(p0 * p0) @ pw, (p0 * p1) @ pw], -1),
                      np.stack([(p0 * p1) @ pw, (p1 * p1) @ pw], -1)], -2)  # (n_s, 2, 2)
        h = np.stack([(p0 * y) @ pw, (p1 * y) @ pw], -1)  # (n_s, 2)
        r, c = box_qp(G, h, float((y * y) @ pw), self.c_bound)
        return Profiled(r, c)

    def soft_profile(self, b: float, s, tau: float) -> Profiled:
        """min_c L_τ(b, s, c) for each s ≥ 0 in ``s`` (scale 0 allowed: equal gates)."""
        b = check.number("b", b)
        tau = check.temperature("tau", tau)
        s = np.atleast_1d(check.finite_array("s", s, ndim=(0, 1), low=0))
        x, pw = self._nodes(b)
        gate0 = special.expit(s[:, None] * (x - b)[None, :] / tau)
        return self._profile(gate0, x, pw)

    def hard_profile(self, b: float, s) -> Profiled:
        """min_c L_0(b, s, c): expert 0 on x > b when s > 0; s = 0 is a tie everywhere and the
        hard gate (argmax, ties to the lowest index) sends every input to expert 0."""
        b = check.number("b", b)
        s = np.atleast_1d(check.finite_array("s", s, ndim=(0, 1), low=0))
        x, pw = self._nodes(b)
        gate0 = np.where(s[:, None] > 0, (x > b)[None, :].astype(float), 1.0)
        return self._profile(gate0, x, pw)

    def minimise(self, tau: float | None, n_b: int = 121, n_s: int = 41, refine: bool = True) -> Minimiser:
        """Global minimiser over (b, s, c): grid over (b, s), then a bounded local refinement.

        ``tau=None`` minimises the hard risk L_0, which is the same for every s > 0: the returned
        s is then s_min (or the smallest positive grid value when s_min = 0), standing for the
        whole minimising segment.
        """
        n_b, n_s = check.integer("n_b", n_b, low=1), check.integer("n_s", n_s, low=1)
        refine = check.flag("refine", refine)
        if tau is not None:
            tau = check.temperature("tau", tau)
        bs = np.linspace(*self.b_range, n_b)
        s_lo, s_hi = self.s_range
        # geometric s grid resolves the s ~ τ scale of the counter-example; plus s_lo itself
        ss = np.unique(np.concatenate([[s_lo, s_hi], np.geomspace(max(s_lo, 1e-6 * s_hi), s_hi, n_s)]))
        if tau is None:  # L_0 is the same for every s > 0: the smallest positive s stands for all
            ss = ss[ss <= ss[ss > 0][0]]
        prof = ((lambda b, s: self.hard_profile(b, s)) if tau is None
                else (lambda b, s: self.soft_profile(b, s, tau)))
        R = np.stack([prof(b, ss).risk for b in bs])  # (n_b, n_s)
        i, j = np.unravel_index(np.argmin(R), R.shape)
        b0, s0 = bs[i], ss[j]
        if refine:
            if tau is None:
                res = optimize.minimize_scalar(lambda b: prof(b, [s0]).risk[0], method="bounded",
                                               bounds=(bs[max(i - 1, 0)], bs[min(i + 1, n_b - 1)]),
                                               options={"xatol": 1e-10})
                b0 = float(res.x) if res.fun <= R[i, j] else b0
            else:
                def f(z):
                    return prof(z[0], [z[1]]).risk[0]
                res = optimize.minimize(f, [b0, s0], method="L-BFGS-B",
                                        bounds=[self.b_range, (s_lo, s_hi)],
                                        options={"ftol": 1e-15, "gtol": 1e-12})
                if res.fun <= R[i, j]:
                    b0, s0 = float(res.x[0]), float(res.x[1])
        p = prof(b0, [s0])
        return Minimiser(float(b0), float(s0), p.c[0], float(p.risk[0]))

    def sup_gap(self, tau: float, n_b: int = 41, n_s: int = 9, n_c: int = 9) -> float:
        """sup over a grid of the whole compact set (b, s, c) of |L_τ − L_0|."""
        tau = check.temperature("tau", tau)
        bs = np.linspace(*self.b_range, check.integer("n_b", n_b, low=1))
        ss = np.linspace(*self.s_range, check.integer("n_s", n_s, low=1))
        cs = np.linspace(-self.c_bound, self.c_bound, check.integer("n_c", n_c, low=1))
        C0, C1 = np.meshgrid(cs, cs, indexing="ij")
        c = np.stack([C0.ravel(), C1.ravel()], 1)  # (n_c², 2)
        out = 0.0
        for b in bs:
            x, pw = self._nodes(b)
            y = check.finite_array("teacher(x)", self.teacher(x), shape=x.shape)
            soft = special.expit(ss[:, None] * (x - b) / tau)  # (n_s, m)
            hard = np.where(ss[:, None] > 0, (x > b).astype(float)[None, :], 1.0)
            ms = soft[:, None, :] * c[None, :, 0, None] + (1 - soft[:, None, :]) * c[None, :, 1, None]
            mh = hard[:, None, :] * c[None, :, 0, None] + (1 - hard[:, None, :]) * c[None, :, 1, None]
            d = ((y - ms) ** 2 - (y - mh) ** 2) @ pw  # (n_s, n_c²)
            out = max(out, float(np.abs(d).max()))
        return out
