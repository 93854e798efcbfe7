"""The layer, not the dimension (ours): the soft-to-hard gap of one linear interface in
``d`` dimensions, with experts and teacher that depend on all ``d`` coordinates.

Paper B's bound and first-order term involve the input law only through the boundary layer.
The soft → hard chapter's experiment makes that visible: ``X ~ N(0, I_d)``, a router
``g = v̂·x − b`` with a random unit normal ``v̂`` and offset ``b``, experts
``f_{1,2} = ±1 + 0.5 h_{ω_{1,2}}`` and teacher ``f* = sign(g) + 0.5 h_{ω*}`` built from the
centred sine features of :func:`sine_feature`.  Since ``g(X) ~ N(−b, 1)`` in every dimension,
the margin law -- the interface constant ``S = φ(b)`` and the margin-tail constant
``C_m = sup_w BM(w)/w`` -- is the same for every ``d`` (:func:`margin_constants`); each
(d, b) cell measures ``(L_τ − L_0)/τ`` at τ and τ/4 by quadrature across the interface and
Monte Carlo along it (:func:`~.risk.risk_layer_quadrature`) beside the interface integral of
the first-order term and the bound (:func:`layer_experiment`).

The features, the normal and the quadrature's samples of dimension ``d`` are drawn from one
generator seeded by ``[seed, d]``, in a fixed order (the offsets' cells one after another), so
a dimension's cells do not depend on the other dimensions of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check
from .coarea import coarea_constant
from .laws import GaussianLaw
from .mass import boundary_mass_linear_gaussian, tail_constant
from .regression import FunctionExperts, MoERegression, Teacher
from .risk import risk_bound, risk_layer_quadrature
from .routers import LinearRouter


@dataclass(frozen=True)
class SineFeature:
    """``h_ω(x) = tanh(d^{-1/2} Σ_i [sin(ω_i x_i + φ_i) − sin φ_i e^{−ω_i²/2}])``: frequencies
    ``omega`` and phases ``phase`` (d,), ``centre`` = E sin(ω_i X_i + φ_i) for X_i ~ N(0, 1),
    all float32 (the sines in float32 are 5× faster; the sum over coordinates is accumulated in
    float64).  Centred, so the sum stays of order one in every dimension.  ``h(x)``: (n, d) →
    (n,)."""

    omega: np.ndarray
    phase: np.ndarray
    centre: np.ndarray

    def __call__(self, x) -> np.ndarray:
        if not (isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64)
                and x.ndim == 2 and x.shape[1] == self.omega.size and x.size
                and np.isfinite(x).all()):
            x = check.finite_array("x", x, shape=(None, self.omega.size))   # names what is wrong
        s = (np.sin(x.astype(np.float32) * self.omega + self.phase)
             - self.centre).sum(1, dtype=np.float64)
        return np.tanh(s / np.sqrt(self.omega.size))


def sine_feature(d: int, rng) -> SineFeature:
    """A :class:`SineFeature` of dimension ``d`` with ``ω_i ~ U(0.5, 2)`` and ``φ_i ~ U(0, 2π)``
    drawn from ``rng`` (in that order)."""
    d = check.integer("d", d, low=1)
    rng = check.generator("rng", rng)
    om, ph = rng.uniform(0.5, 2.0, d), rng.uniform(0, 2 * np.pi, d)
    centre = np.sin(ph) * np.exp(-om ** 2 / 2)
    return SineFeature(*(a.astype(np.float32) for a in (om, ph, centre)))


def margin_constants(b: float) -> tuple[float, float]:
    """``(S, C_m)`` of the interface ``g = v̂·x − b`` under ``X ~ N(0, I)``: the coarea
    constant ``φ(b)`` and ``sup_w BM(w)/w`` -- the same in every dimension (``v̂·X`` is a
    standard normal), so computed in one."""
    b = check.number("b", b)
    router, law = LinearRouter.binary([1.0], b=-b), GaussianLaw.standard(1)

    def bm(w):
        return boundary_mass_linear_gaussian(router, law, w).estimate

    return coarea_constant(router, law).value, tail_constant(bm, 1.0)


@dataclass(frozen=True)
class LayerCell:
    """One (d, b) cell at temperature ``tau``: ``gap`` = (L_τ − L_0)/τ with its standard error
    ``se``, the same at τ/4 (``gap_quarter``, ``se_quarter``), the interface integral of the
    first-order term (``first_order``, ``first_order_se``), the margin constants ``two_S`` =
    2S and ``C_m``, and ``bound`` = the risk bound with that C_m, divided by τ."""

    d: int
    b: float
    tau: float
    two_S: float
    C_m: float
    gap: float
    se: float
    gap_quarter: float
    se_quarter: float
    first_order: float
    first_order_se: float
    bound: float

    def row(self) -> dict:
        """The chapter's table row (its column names)."""
        return {"d": self.d, "b": self.b, "2S": self.two_S, "C_m": self.C_m,
                "(L_τ − L_0)/τ": self.gap, "se": self.se, "same at τ/4": self.gap_quarter,
                "se at τ/4": self.se_quarter, "first order": self.first_order,
                "first order se": self.first_order_se, "bound / τ": self.bound}


@dataclass(frozen=True)
class LayerExperiment:
    """Every cell of the run, dimension by dimension (offsets within), and the margin
    constants ``(S, C_m)`` of each offset (:meth:`constants_of`)."""

    cells: tuple[LayerCell, ...]
    constants: tuple[tuple[float, float, float], ...]     # (b, S, C_m)

    def constants_of(self, b: float) -> tuple[float, float]:
        """``(S, C_m)`` of offset ``b`` (one of the run's)."""
        b = check.number("b", b)
        for b_, S, C_m in self.constants:
            if b_ == b:
                return S, C_m
        check.fail("b", b, "one of the run's offsets " + ", ".join(f"{c[0]:g}"
                                                                  for c in self.constants))

    def frame(self):
        """The cells as a DataFrame, one row each (:meth:`LayerCell.row`)."""
        import pandas as pd

        return pd.DataFrame([c.row() for c in self.cells])


def _cell(d: int, b: float, tau: float, S: float, C_m: float, vhat, experts, hs, law, *,
          n_perp: int, n_lines: int, rng) -> LayerCell:
    router = LinearRouter.binary(vhat, b=-b)
    teacher = Teacher(lambda x: np.sign(x @ vhat - b) + 0.5 * hs(x), 1.5)
    gap = risk_layer_quadrature(MoERegression(router, experts, teacher), law, [tau, tau / 4],
                                n_perp=n_perp, n_lines=n_lines, n_gl=8, k_fine=0, rng=rng)
    return LayerCell(d=d, b=b, tau=tau, two_S=2 * S, C_m=C_m, gap=gap.gap[0] / tau,
                     se=gap.se[0] / tau, gap_quarter=gap.gap[1] / (tau / 4),
                     se_quarter=gap.se[1] / (tau / 4), first_order=gap.first_order,
                     first_order_se=gap.first_order_se,
                     bound=risk_bound(tau, 2, 1.5, 1.5, C_m, 1.0)[0] / tau)


def layer_experiment(dims, biases, tau: float, *, n_perp: int, n_lines: int, seed: int,
                     progress: bool = True) -> LayerExperiment:
    """The (d, b) grid of the module docstring at temperature ``tau``: for each dimension, the
    normal ``v̂`` and the three sine features (experts' and teacher's) drawn from
    ``default_rng([seed, d])``, then each offset's cell with ``n_perp`` quadrature points across
    the interface and ``n_lines`` lines along it (the same generator).  Experts bounded by
    B = 1.5 and teacher by B* = 1.5 (the bound's constants).  ``progress``: "i of n cells,
    ETA" lines on stderr."""
    from .._internal.progress import Progress

    dims = [check.integer(f"dims[{i}]", d, low=1) for i, d in
            enumerate(check.sequence("dims", dims, "a non-empty sequence of dimensions ≥ 1"))]
    biases = [check.number(f"biases[{i}]", b) for i, b in
              enumerate(check.sequence("biases", biases, "a non-empty sequence of offsets"))]
    tau = check.temperature("tau", tau)
    n_perp = check.integer("n_perp", n_perp, low=1)
    n_lines = check.integer("n_lines", n_lines, low=1)
    seed = check.integer("seed", seed, low=0)
    progress = check.flag("progress", progress)
    constants = {b: margin_constants(b) for b in biases}
    bar = Progress("layer experiment: cells (d, b)", len(dims) * len(biases), every=5.0) \
        if progress else None
    cells = []
    for d in dims:
        rng = np.random.default_rng([seed, d])
        vhat = rng.standard_normal(d)
        vhat /= np.linalg.norm(vhat)
        h1, h2, hs = sine_feature(d, rng), sine_feature(d, rng), sine_feature(d, rng)
        experts = FunctionExperts(lambda x, h1=h1, h2=h2: np.stack([1 + 0.5 * h1(x),
                                                                     -1 + 0.5 * h2(x)], 1),
                                  2, 1.5)
        law = GaussianLaw.standard(d)
        for b in biases:
            cells.append(_cell(d, b, tau, *constants[b], vhat, experts, hs, law,
                               n_perp=n_perp, n_lines=n_lines, rng=rng))
            if bar is not None:
                bar.update(len(cells), note=f"d = {d}, b = {b:g}")
    return LayerExperiment(cells=tuple(cells),
                           constants=tuple((b, *constants[b]) for b in biases))


__all__ = ["LayerCell", "LayerExperiment", "SineFeature", "layer_experiment",
           "margin_constants", "sine_feature"]
