"""Paper B's library refuses bad input before any work, and names the argument.

Every public constructor and function of ``moe_routing.boundary`` and ``moe_routing.landscape``
is driven here with values it must refuse — NaN, ±∞ (Python, NumPy and torch scalars), empty
arrays, wrong shapes, wrong dtypes, objects of the wrong kind — and three properties are
checked:

(a) a ``ValueError`` whose message starts with the argument's name (``x[3, 0] = nan …``,
    ``theta.shape = …``, ``tau = 0.0 …``), raised before any long work;
(b) NumPy and torch scalars are accepted where a Python number is, and give the same result as
    that number (same code path: the result must be identical);
(c) degenerate input (identical experts, zero-variance directions, fits with too few points,
    empty boxes, teachers without a partition, …) is refused instead of producing a NaN.

``test_every_public_callable_is_driven`` lists the public callables of both packages and fails
when one is neither driven here nor exempted with a reason (interfaces, result records, methods
without arguments): a new public function must come with its refusals.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import time
from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moe_routing.boundary as boundary
from moe_routing.boundary.layer import layer_experiment, margin_constants, sine_feature
from moe_routing.boundary.rates import RateCase, fit_rate
import moe_routing.landscape as landscape
from moe_routing.boundary import (
    ConstantExperts,
    FunctionExperts,
    GaussianLaw,
    LinearRouter,
    MoERegression,
    PowerRouter,
    SphereRouter,
    TanhExperts,
    Teacher,
    ThresholdFamily,
    UniformBox,
    VanishingDensityLaw,
    bootstrap_bm_fit,
    boundary_mass_from_margins,
    boundary_mass_linear_gaussian,
    boundary_mass_mc,
    box_qp,
    check_junction_constant,
    check_power_law,
    coarea_constant,
    first_order_constant,
    first_order_integrand,
    fit_interface_constant,
    fit_loglog,
    gate_gap_bound,
    hard_gates,
    junction_free_constants,
    linear_gaussian_constant,
    logit_sampler,
    pairwise_union_bound,
    risk_bound,
    risk_layer_quadrature,
    risk_mc,
    risk_polar_2d,
    risk_quad_1d,
    sample_margins,
    simultaneous_confidence,
    slab_mass_linear_gaussian,
    soft_gates,
    sphere_constant,
    support_1d,
    tail_constant,
    top_two_margin,
    variance_shares,
    widths_for,
    wilson_interval,
)
from moe_routing.boundary.laws import normal_cdf, normal_pdf
from moe_routing.boundary.quadrature import graded_nodes
from moe_routing.landscape import charts as ch
from moe_routing.landscape import critical_points as cp
from moe_routing.landscape import first_order as fo
from moe_routing.landscape import hessian as hs
from moe_routing.landscape import multi_critical as mc
from moe_routing.landscape import multi_fit as mf
from moe_routing.landscape import multi_region as mr
from moe_routing.landscape.profiled import ProfiledObjective
from moe_routing.landscape import recovery as rc
from moe_routing.landscape import saddles as sa
from moe_routing.landscape import sample_check as sc
from moe_routing.landscape import shape_derivative as sd
from moe_routing.landscape import symmetry as sy
from moe_routing.landscape import teacher_student as ts
from moe_routing.landscape import common
from moe_routing.landscape.common import features, sobol_normal
from moe_routing.landscape import hard_quadrature
from moe_routing.landscape import soft_quadrature
from moe_routing.landscape import symmetry_flow
from moe_routing.landscape import two_region

F64 = torch.float64
NAN, INF = float("nan"), float("inf")
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------ bad values by kind

NON_FINITE = [NAN, INF, -INF, np.float64(NAN), np.float32(INF), np.float32(-INF),
              torch.tensor(NAN, dtype=F64), np.array(NAN)]


def pick(values: list):
    """Draw one of ``values`` (a ``sampled_from`` built once: strategies are cheap to reuse)."""
    strategy = st.sampled_from(values)
    return lambda data, _valid, label: data.draw(strategy, label=label)


class Kind:
    """A kind of argument and the values it must refuse: ``draw(data, valid, label)``."""


@dataclasses.dataclass(frozen=True)
class Real(Kind):
    """A finite real scalar."""

    draw = staticmethod(pick(NON_FINITE + ["0.5", 1j, [0.5, 0.5], np.ones(2), True]))


@dataclasses.dataclass(frozen=True)
class Count(Kind):
    """An integer (Python or NumPy)."""

    draw = staticmethod(pick(NON_FINITE + [2.5, "3", True, [2], np.ones(2), 1j]))


@dataclasses.dataclass(frozen=True)
class Flag(Kind):
    """True or False (never 0/1 or a string)."""

    draw = staticmethod(pick([1, 0, "yes", 1.0, None, NAN]))


@dataclasses.dataclass(frozen=True)
class Obj(Kind):
    """An object of a given kind (a law, a router, a model, a config)."""

    draw = staticmethod(pick([None, 1.0, NAN, "object", np.zeros(2), object()]))


@dataclasses.dataclass(frozen=True)
class Func(Kind):
    """A callable (a teacher, experts, a derivative oracle)."""

    draw = staticmethod(pick([None, 1.0, NAN, "f", np.zeros(2)]))


@dataclasses.dataclass(frozen=True)
class OptFunc(Kind):
    """A callable or None (a progress callback)."""

    draw = staticmethod(pick([1.0, NAN, "f", np.zeros(2)]))


@dataclasses.dataclass(frozen=True)
class OptObj(Kind):
    """An object of a given kind or None (an optional guide objective)."""

    draw = staticmethod(pick([1.0, NAN, "object", np.zeros(2), object()]))


@dataclasses.dataclass(frozen=True)
class Seed(Kind):
    draw = staticmethod(pick([-1, NAN, 1.5, "seed", [1, 2], True, INF]))


@dataclasses.dataclass(frozen=True)
class Name(Kind):
    """An argument's name, used in messages: a string."""

    draw = staticmethod(pick([None, 1.0, NAN, np.zeros(2), b"phi", object()]))


@dataclasses.dataclass(frozen=True)
class Choice(Kind):
    draw = staticmethod(pick(["nope", None, 1.0, NAN]))


ARRAY_MODES = ("nan", "inf", "-inf", "empty", "deep", "complex", "str", "list-nan")
MODE_STRATEGIES: dict = {}
POSITIONS = {n: st.integers(0, n - 1) for n in range(1, 257)}


@dataclasses.dataclass(frozen=True)
class Arr(Kind):
    """A finite real array like the valid one: corrupt one entry (NaN, ±∞, or ``low`` — a value
    below the accepted range), or give it no entries, two extra dimensions, complex or string
    entries (a NumPy array where a tensor is required).  ``skip``: corruptions that are
    legitimately accepted for this argument."""

    skip: tuple = ()
    low: float | None = None
    tensor: bool = False

    def modes(self, valid) -> tuple:
        m = [x for x in ARRAY_MODES if x not in self.skip and not (x == "empty" and np.ndim(valid) == 0)]
        return tuple(m + ["low"] * (self.low is not None) + ["numpy"] * self.tensor)

    def draw(self, data, valid, label):
        v = np.asarray(valid.detach() if isinstance(valid, torch.Tensor) else valid)
        modes = self.modes(valid)
        mode = data.draw(MODE_STRATEGIES.setdefault(modes, st.sampled_from(modes)), label=f"{label} (how)")
        a = np.array(v, dtype=float)
        if mode in ("nan", "inf", "-inf", "low", "list-nan"):
            pos = data.draw(POSITIONS[min(a.size, 256)], label=f"{label} (where)")
            a.flat[pos] = {"nan": NAN, "inf": INF, "-inf": -INF, "low": self.low, "list-nan": NAN}[mode]
            if mode == "list-nan" and not self.tensor:
                return a.tolist()
        elif mode == "empty":
            a = np.empty((0,) + v.shape[1:])
        elif mode == "deep":
            a = a[None, None]
        elif mode == "complex":
            a = a.astype(complex) + 1j
        elif mode == "str":
            return np.full(v.shape or (1,), "a")
        if mode == "numpy" or not self.tensor:
            return a
        return torch.as_tensor(a) if a.dtype.kind == "c" else torch.as_tensor(a, dtype=F64)


def Ten(skip=(), low=None):
    return Arr(skip=skip, low=low, tensor=True)


TAUS = Arr(low=0.0)                     # a temperature grid: finite τ > 0
WIDTHS = Arr(low=-1.0)                  # slab widths: finite w ≥ 0


@dataclasses.dataclass
class Case:
    fn: Callable
    kwargs: dict
    kinds: dict                          # argument -> kind of bad values
    accept: bool = True                  # run (b): the valid call is cheap and deterministic
    tol: float = 0.0                     # (b) compares exactly, except through a least-squares
                                         # solve: LAPACK's is not bitwise reproducible between calls
                                         # (its kernels depend on memory alignment; seen at 1 ulp)

    @property
    def label(self) -> str:
        f = self.fn
        f = getattr(f, "__func__", f)
        return f"{f.__module__}.{f.__qualname__}"


# ------------------------------------------------------------------------------ valid fixtures

RNG = np.random.default_rng(0)
LAW1, LAW2, BOX2 = UniformBox.cube(1), GaussianLaw.standard(2), UniformBox.cube(2)
VAN = VanishingDensityLaw(2, 2.0)
R1, R2 = LinearRouter.binary([1.0]), LinearRouter.binary([1.0, 0.5], b=0.1)
R3 = LinearRouter.random(3, 2, rng=0)
SPH, POW = SphereRouter([0.0, 0.0], 1.0), PowerRouter(2, 2.0)
PM1 = ConstantExperts([1.0, -1.0])
SIGN = Teacher(lambda x: np.sign(x[:, 0]), 1.0)
SMOOTH = Teacher(lambda x: np.tanh(x[:, 0] - x[:, 1]), 1.0)
M1 = MoERegression(R1, PM1, SIGN)
M2 = MoERegression(R2, PM1, SMOOTH)
MS = MoERegression(SPH, PM1, SMOOTH)
X2 = RNG.standard_normal((5, 2))
A3 = RNG.standard_normal((6, 3))
W4 = np.array([0.01, 0.1, 0.5])
FAM = ThresholdFamily(lambda x: np.tanh(4 * x), s_range=(0.25, 1.0))
GQ = np.stack([np.eye(2), 2 * np.eye(2)])
BM = boundary_mass_mc(R2, LAW2, np.geomspace(0.05, 0.5, 4), 2000, rng=0)
XF = np.geomspace(1e-2, 1.0, 5)
SCORE = LAW2.score([1.0, 0.5], 0.2)
GAP1 = risk_quad_1d(M1, LAW1, [0.05, 0.1, 0.2], n_gl=4)
RATE1 = RateCase("c", GAP1, alpha=1.0, K=2, B=1.0, B_star=1.0, C_m=0.5)
LAYER = layer_experiment([1], [0.5], 0.05, n_perp=4, n_lines=2, seed=0, progress=False)
U2 = RNG.uniform(0.05, 0.95, (5, 2))   # points of the open unit cube

CFG = two_region.TeacherStudentConfig()
XS = sobol_normal(16, 2, seed=0)
FS = CFG.fstar(XS)
PHI_T = torch.tensor([[0.4, 0.1]], dtype=F64)
TH_T = torch.zeros(1, 2, 3, dtype=F64)
PHI = np.array([0.4, 0.1])
TH = hard_quadrature.hard_refit(CFG, PHI)
Q = hard_quadrature.cell_moments(CFG, PHI, 16)


def quad_oracle(phi):
    """A cheap derivative oracle: L = |φ|², ∇L = 2φ, H = 2I."""
    phi = np.asarray(phi, float)
    return (phi ** 2).sum(1), 2 * phi, np.broadcast_to(2 * np.eye(2), (len(phi), 2, 2)).copy()


T3 = mr.three_region_plane()
OBJ = ProfiledObjective(T3, 64, seed=0)
GUIDE3 = ProfiledObjective(T3, 32, seed=0)
SEARCH3 = mc.search_teacher("t", T3, 2 ** 10, 0, [0.3], eval_n=2 ** 10, n_starts=4, saddles=False,
                           descent_steps=20, newton_steps=10, progress=False)
X3 = OBJ.X
PHI3 = T3.phi()
STARTS3 = mc.start_routers(OBJ, 2, seed=0, tau=0.1)
PHI3_T = torch.tensor(STARTS3)
TH3 = OBJ.refit(PHI3, 0.1)
TB3 = mr.tangent_basis(STARTS3, 3, 2)
Z3 = np.zeros((2, mr.chart_dim(3, 2)))

C2 = fo.two_region_constants(CFG, nodes=16)
CM3 = fo.multi_region_constants(T3, X3, width=0.4)
HARD_PTS = [cp.CriticalPoint(phi=np.array([2.0, -0.5]), value=1.0, grad_norm=0.0,
                             hess_eigs=np.array([-1.0, 0.1]), teacher=False)]
SOFT_PTS = [cp.SoftCriticalPoint(tau=0.1, point=cp.CriticalPoint(
    phi=np.array(p), value=v, grad_norm=0.0, hess_eigs=np.array(e), teacher=t),
    theta=np.zeros((2, 3)), joint_eigs=np.zeros(8), partition_error=0.01, expert_error=0.1)
    for p, v, e, t in (([0.0, 0.3], 0.1, [1.0, 2.0], True), ([2.0, -0.5], 1.0, [-1.0, 0.1], False))]
MULTI_PTS = [mc.MultiCriticalPoint(tau=0.1, phi=PHI3, value=0.1, grad_norm=0.0,
                                   hess_eigs=np.array([1.0, 2.0, 3.0, 4.0, 5.0]), teacher=True,
                                   partition_error=0.01, expert_error=0.1, theta=TH3,
                                   partition="{1}{2}{3}", hard_value=0.1)]

TWO = sy.TwoExpertGaussian.abs_teacher(2)
XG, YG = TWO.sample(32, seed=0)
MG = sy.m_operator_closed_form(TWO)
TG = np.array([1.0, 0.5])
TH1, TH2, WG = symmetry_flow.symmetric_start(XG, YG, 2, scale_w=0.1, scale_delta=0.1, seed=0, tau=TG)
FLOW = symmetry_flow.gradient_flow(XG, YG, TH1, TH2, WG, TG, steps=30, h=0.1)

R, C, F, O, SEED, B = Real(), Count(), Func(), Obj(), Seed(), Flag()

CASES = [
    # ---------------------------------------------------------------- boundary: laws
    Case(GaussianLaw, dict(mean=[0.0, 1.0], cov=np.eye(2)), dict(mean=Arr(), cov=Arr())),
    Case(GaussianLaw.standard, dict(dim=2, scale=1.5, mean=[0.0, 1.0]),
         dict(dim=C, scale=R, mean=Arr())),
    Case(LAW2.sample, dict(n=4, rng=0), dict(n=C, rng=SEED)),
    Case(LAW2.linear_moments, dict(v=[1.0, 0.5], c=0.2), dict(v=Arr(), c=R)),
    Case(LAW2.score, dict(v=[1.0, 0.5], c=0.2), dict(v=Arr(), c=R)),
    Case(SCORE.slab, dict(widths=W4), dict(widths=WIDTHS)),
    Case(SCORE.density_at_zero, dict(name="v", value=1.0), dict(name=Name())),
    Case(LAW2.logpdf, dict(x=X2), dict(x=Arr())),
    Case(LAW2.pdf, dict(x=X2), dict(x=Arr())),
    Case(UniformBox, dict(low=[-1.0, 0.0], high=[1.0, 2.0]), dict(low=Arr(), high=Arr())),
    Case(UniformBox.cube, dict(dim=2, half_width=0.5), dict(dim=C, half_width=R)),
    Case(BOX2.sample, dict(n=4, rng=0), dict(n=C, rng=SEED)),
    Case(BOX2.pdf, dict(x=X2), dict(x=Arr())),
    Case(LAW2.from_unit_cube, dict(u=U2), dict(u=Arr(low=0.0))),
    Case(BOX2.from_unit_cube, dict(u=U2), dict(u=Arr(low=-0.5))),
    Case(VanishingDensityLaw, dict(dim=2, alpha=2.0, half_width=1.5), dict(dim=C, alpha=R, half_width=R)),
    Case(VAN.sample, dict(n=4, rng=0), dict(n=C, rng=SEED)),
    Case(VAN.pdf, dict(x=0.5 * X2), dict(x=Arr())),
    Case(VAN.mass_within, dict(w=W4), dict(w=WIDTHS)),
    Case(support_1d, dict(law=LAW1), dict(law=O)),
    Case(normal_cdf, dict(z=[0.0, 1.0]), dict(z=Arr(skip=("inf", "-inf", "empty", "deep")))),
    Case(normal_pdf, dict(z=0.5), dict(z=Arr(skip=("inf", "-inf", "empty", "deep")))),
    # ---------------------------------------------------------------- routers, margins
    Case(LinearRouter, dict(weight=np.eye(3, 2), bias=[0.0, 0.1, 0.2]), dict(weight=Arr(), bias=Arr())),
    Case(LinearRouter.binary, dict(v=[1.0, 2.0], b=0.5), dict(v=Arr(), b=R)),
    Case(LinearRouter.random, dict(n_experts=3, dim=2, rng=0, scale=2.0),
         dict(n_experts=C, dim=C, rng=SEED, scale=R)),
    Case(R3.logits, dict(x=X2), dict(x=Arr())),
    Case(R3.pair, dict(j=0, k=2), dict(j=C, k=C)),
    Case(SphereRouter, dict(center=[0.0, 1.0], radius=0.5, scale=2.0), dict(center=Arr(), radius=R, scale=R)),
    Case(SPH.g, dict(x=X2), dict(x=Arr())),
    Case(SPH.grad_g, dict(x=X2), dict(x=Arr())),
    Case(SPH.logits, dict(x=X2), dict(x=Arr())),
    Case(PowerRouter, dict(dim=2, power=1.5, signed=True, scale=2.0),
         dict(dim=C, power=R, signed=B, scale=R)),
    Case(POW.g, dict(x=X2), dict(x=Arr())),
    Case(POW.grad_g, dict(x=X2), dict(x=Arr())),
    Case(top_two_margin, dict(logits=A3), dict(logits=Arr())),
    Case(soft_gates, dict(logits=A3, tau=0.3), dict(logits=Arr(), tau=R)),
    Case(hard_gates, dict(logits=A3), dict(logits=Arr())),
    Case(gate_gap_bound, dict(margin=[0.1, 0.2], tau=0.3, n_experts=3),
         dict(margin=Arr(skip=("deep",), low=-1.0), tau=R, n_experts=C)),
    # ---------------------------------------------------------------- boundary mass
    Case(wilson_interval, dict(k=[0, 3, 10], n=10, confidence=0.9),
         dict(k=Arr(skip=("deep",), low=-1.0), n=C, confidence=R)),
    Case(logit_sampler, dict(router=R2, law=LAW2), dict(router=O, law=O), accept=False),
    Case(sample_margins, dict(router=R3, law=LAW2, n=50, rng=0, chunk=16),
         dict(router=O, law=O, n=C, rng=SEED, chunk=C)),
    Case(boundary_mass_from_margins, dict(margins=[0.1, 0.3, 0.05], widths=W4, confidence=0.9),
         dict(margins=Arr(low=-1.0), widths=WIDTHS, confidence=R)),
    Case(boundary_mass_mc, dict(router=R2, law=LAW2, widths=W4, n=50, rng=0, confidence=0.9, chunk=16),
         dict(router=O, law=O, widths=WIDTHS, n=C, rng=SEED, confidence=R, chunk=C)),
    Case(slab_mass_linear_gaussian, dict(v=[1.0, 0.5], c=0.1, law=LAW2, widths=W4),
         dict(v=Arr(), c=R, law=O, widths=WIDTHS)),
    Case(boundary_mass_linear_gaussian, dict(router=R2, law=LAW2, widths=W4),
         dict(router=O, law=O, widths=WIDTHS)),
    Case(pairwise_union_bound, dict(router=R3, law=BOX2, widths=W4, n=50, rng=0),
         dict(router=O, law=O, widths=WIDTHS, n=C, rng=SEED)),
    Case(tail_constant, dict(bm=lambda w: np.minimum(w, 1.0), alpha=1.0, w_grid=W4),
         dict(bm=F, alpha=R, w_grid=WIDTHS)),
    # ---------------------------------------------------------------- coarea, fits, quadrature
    Case(linear_gaussian_constant, dict(v=[1.0, 0.5], c=0.1, law=LAW2), dict(v=Arr(), c=R, law=O)),
    Case(sphere_constant, dict(router=SPH, law=LAW2, n_nodes=8, rng=0),
         dict(router=O, law=O, n_nodes=C, rng=SEED)),
    Case(junction_free_constants, dict(router=R3, law=LAW2, n_cond=16, rng=0),
         dict(router=O, law=O, n_cond=C, rng=SEED)),
    Case(coarea_constant, dict(router=R2, law=LAW2), dict(router=O, law=O)),
    Case(fit_loglog, dict(x=XF, y=2 * XF ** 1.5, y_se=0.1 * XF, confidence=0.9),
         dict(x=Arr(low=0.0), y=Arr(), y_se=Arr(low=0.0), confidence=R)),
    Case(bootstrap_bm_fit, dict(widths=BM.widths, counts=BM.counts, n=BM.n, n_boot=8, rng=0,
                                confidence=0.9, fixed_slope=1.0),
         dict(widths=Arr(low=0.0), counts=Arr(low=-1.0), n=C, n_boot=C, rng=SEED, confidence=R,
              fixed_slope=R)),
    Case(fit_interface_constant, dict(widths=BM.widths, counts=BM.counts, n=BM.n, n_boot=8, rng=0,
                                      confidence=0.9),
         dict(widths=Arr(low=0.0), counts=Arr(low=-1.0), n=C, n_boot=C, rng=SEED, confidence=R)),
    Case(simultaneous_confidence, dict(m=4, family=0.9), dict(m=C, family=R)),
    Case(variance_shares, dict(values=[[1.0, 2.0], [1.5, 3.0]]), dict(values=Arr(skip=("deep",)))),
    # ---------------------------------------------------------------- estimates vs Monte Carlo
    Case(widths_for, dict(alpha=0.5, prefactor=0.8, bm_range=(1e-3, 1e-1), n_widths=4),
         dict(alpha=R, prefactor=R, bm_range=Arr(), n_widths=C)),
    Case(check_power_law, dict(router=R2, law=LAW2, alpha=1.0, prefactor=0.5, n=4000,
                               bm_range=(0.01, 0.1), n_widths=3, n_boot=4, confidence=0.9, rng=0),
         dict(router=O, law=O, alpha=R, prefactor=R, n=C, bm_range=Arr(), n_widths=C, n_boot=C,
              confidence=R, rng=SEED)),
    Case(check_junction_constant, dict(router=R3, law=LAW2, n=4000, bm_range=(0.01, 0.1),
                                       n_widths=3, n_boot=4, confidence=0.9, n_cond=16, rng=0),
         dict(router=O, law=O, n=C, bm_range=Arr(), n_widths=C, n_boot=C, confidence=R, n_cond=C,
              rng=SEED)),
    Case(graded_nodes, dict(a=-1.0, b=2.0, breaks=[0.0], n_gl=4, k_fine=3, base=0.5),
         dict(a=R, b=R, breaks=Arr(skip=("empty",)), n_gl=C, k_fine=C, base=R)),
    # ---------------------------------------------------------------- risks
    Case(ConstantExperts, dict(values=[1.0, -1.0, 0.5]), dict(values=Arr())),
    Case(PM1.__call__, dict(x=X2), dict(x=Arr())),
    Case(TanhExperts, dict(offset=[0.1, -0.1], amplitude=[0.5, 0.5], theta=np.eye(2)),
         dict(offset=Arr(), amplitude=Arr(), theta=Arr())),
    Case(TanhExperts([0.1, -0.1], [0.5, 0.5], np.eye(2)).__call__, dict(x=X2), dict(x=Arr())),
    Case(FunctionExperts, dict(fn=lambda x: np.ones((len(x), 2)), n_experts=2, bound=1.0),
         dict(fn=F, n_experts=C, bound=R), accept=False),
    Case(FunctionExperts(lambda x: np.ones((len(x), 2)), 2, 1.0).__call__, dict(x=X2), dict(x=Arr())),
    Case(Teacher, dict(fn=np.sin, bound=1.0), dict(fn=F, bound=R), accept=False),
    Case(SIGN.__call__, dict(x=X2), dict(x=Arr())),
    Case(MoERegression, dict(router=R2, experts=PM1, teacher=SIGN, mixture="losses"),
         dict(router=O, experts=F, teacher=F, mixture=Choice())),
    Case(M2.soft_loss, dict(x=X2, tau=0.2), dict(x=Arr(), tau=R)),
    Case(M2.hard_loss, dict(x=X2), dict(x=Arr())),
    Case(M2.gap, dict(x=X2, taus=[0.1, 0.2]), dict(x=Arr(), taus=TAUS)),
    Case(risk_mc, dict(model=M2, law=LAW2, taus=[0.1, 0.2], n=40, rng=0, chunk=16),
         dict(model=O, law=O, taus=TAUS, n=C, rng=SEED, chunk=C)),
    Case(risk_mc, dict(model=M2, law=LAW2, taus=[0.1, 0.2], n=32, rng=0, chunk=16,
                       method="rqmc", n_rep=4),
         dict(model=O, law=O, taus=TAUS, n=C, rng=SEED, chunk=C, method=Choice(), n_rep=C)),
    Case(risk_quad_1d, dict(model=M1, law=LAW1, taus=[0.1, 0.2], interfaces=[0.0], n_gl=4),
         dict(model=O, law=O, taus=TAUS, interfaces=Arr(skip=("empty",)), n_gl=C)),
    Case(RateCase, dict(name="c", gap=GAP1, alpha=1.0, K=2, B=1.0, B_star=1.0, C_m=0.5,
                         first=0.3),
         dict(name=Name(), gap=O, alpha=R, K=C, B=R, B_star=R, C_m=R, first=R)),
    Case(fit_rate, dict(case=RATE1), dict(case=O)),
    Case(sine_feature, dict(d=2, rng=0), dict(d=C, rng=SEED)),
    Case(sine_feature(2, 0).__call__, dict(x=X2), dict(x=Arr())),
    Case(margin_constants, dict(b=0.5), dict(b=R)),
    Case(layer_experiment, dict(dims=[1], biases=[0.5], tau=0.05, n_perp=4, n_lines=2, seed=0,
                                progress=False),
         dict(dims=Arr(), biases=Arr(), tau=R, n_perp=C, n_lines=C, seed=SEED, progress=B)),
    Case(LAYER.constants_of, dict(b=0.5), dict(b=R)),
    Case(risk_layer_quadrature, dict(model=M2, law=LAW2, taus=[0.1], n_perp=4, rng=0, n_gl=4,
                                     layer=8.0, chunk=2, n_lines=2, k_fine=0),
         dict(model=O, law=O, taus=TAUS, n_perp=C, rng=SEED, n_gl=C, layer=R, chunk=C,
              n_lines=C, k_fine=C)),
    Case(risk_polar_2d, dict(model=MS, law=LAW2, taus=[0.1], rho_max=4.0, n_theta=8, n_gl=4),
         dict(model=O, law=O, taus=TAUS, rho_max=R, n_theta=C, n_gl=C)),
    Case(risk_bound, dict(taus=[0.1, 0.01], n_experts=3, B=1.0, B_star=0.5, C_m=2.0, alpha=0.5,
                          mixture="losses"),
         dict(taus=TAUS, n_experts=C, B=R, B_star=R, C_m=R, alpha=R, mixture=Choice())),
    Case(first_order_integrand, dict(model=M2, x_sigma=[[0.0, -0.2]], normal=[[0.9, 0.45]], eps=1e-6),
         dict(model=O, x_sigma=Arr(), normal=Arr(skip=("deep",)), eps=R)),
    Case(first_order_constant, dict(model=M2, law=LAW2, n_cond=16, rng=0, n_theta=8),
         dict(model=O, law=O, n_cond=C, rng=SEED, n_theta=C)),
    # ---------------------------------------------------------------- Γ-convergence family
    Case(box_qp, dict(G=GQ, h=np.ones((2, 2)), e2=1.0, C=0.5), dict(G=Arr(), h=Arr(), e2=R, C=R)),
    Case(ThresholdFamily, dict(teacher=np.tanh, law=LAW1, b_range=(-0.5, 0.5), s_range=(0.1, 1.0),
                               c_bound=1.0),
         dict(teacher=F, law=O, b_range=Arr(), s_range=Arr(), c_bound=R), accept=False),
    Case(FAM.soft_profile, dict(b=0.1, s=[0.5, 1.0], tau=0.1), dict(b=R, s=Arr(low=-1.0), tau=R)),
    Case(FAM.hard_profile, dict(b=0.1, s=[0.5, 1.0]), dict(b=R, s=Arr(low=-1.0))),
    Case(FAM.minimise, dict(tau=0.1, n_b=3, n_s=2, refine=False), dict(tau=R, n_b=C, n_s=C, refine=B)),
    Case(FAM.sup_gap, dict(tau=0.1, n_b=2, n_s=2, n_c=2), dict(tau=R, n_b=C, n_s=C, n_c=C)),
    # ---------------------------------------------------------------- landscape: K = 2 model
    Case(features, dict(X=XS), dict(X=Ten())),
    Case(sobol_normal, dict(n=16, d=2, seed=1), dict(n=C, d=C, seed=C)),
    Case(two_region.normal, dict(alpha=0.3), dict(alpha=R)),
    Case(two_region.normal_perp, dict(alpha=0.3), dict(alpha=R)),
    Case(two_region.TeacherStudentConfig, dict(teacher_angle=0.2, teacher_offset=0.1, beta1=(1.0, 0.0, 0.5),
                                       beta2=(0.0, 1.0, -0.5), noise_std=0.2),
         dict(teacher_angle=R, teacher_offset=R, beta1=Arr(), beta2=Arr(), noise_std=R)),
    Case(CFG.fstar, dict(X=XS), dict(X=Ten())),
    Case(two_region.wrap_phi, dict(phi=[4.0, 0.2]), dict(phi=Arr())),
    Case(two_region.routers, dict(phi=[PHI], name="phi", allow_empty=False), dict(phi=Arr(), name=Name(),
                                                                         allow_empty=B)),
    Case(ts.gate, dict(X=XS, phi=PHI_T, tau=0.2), dict(X=Ten(), phi=Ten(), tau=R)),
    Case(ts.soft_risk, dict(theta=TH_T, phi=PHI_T, tau=0.2, X=XS, fstar=FS, noise_var=0.01),
         dict(theta=Ten(), phi=Ten(), tau=R, X=Ten(), fstar=Ten(), noise_var=R)),
    Case(ts.soft_refit, dict(phi=PHI_T, tau=0.2, X=XS, fstar=FS),
         dict(phi=Ten(), tau=R, X=Ten(), fstar=Ten())),
    Case(ts.profiled_soft, dict(phi=PHI_T, tau=0.2, X=XS, fstar=FS, noise_var=0.01),
         dict(phi=Ten(), tau=R, X=Ten(), fstar=Ten(), noise_var=R)),
    Case(hard_quadrature.t_pieces, dict(cfg=CFG, phi=PHI, nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(hard_quadrature.cell_moments, dict(cfg=CFG, phi=PHI, nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(hard_quadrature.hard_refit, dict(cfg=CFG, phi=PHI, nodes=4, Q=Q),
         dict(cfg=O, phi=Arr(), nodes=C, Q=Arr())),
    Case(hard_quadrature.hard_risk, dict(cfg=CFG, theta=TH, phi=PHI, nodes=4, Q=Q),
         dict(cfg=O, theta=Arr(), phi=Arr(), nodes=C, Q=Arr())),
    Case(hard_quadrature.profiled_hard, dict(cfg=CFG, phi=PHI, nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(hard_quadrature.partition_error, dict(cfg=CFG, phi=PHI, nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(hard_quadrature.expert_error, dict(cfg=CFG, theta=TH), dict(cfg=O, theta=Arr())),
    Case(soft_quadrature.soft_moments, dict(cfg=CFG, phi=PHI_T, tau=0.2, nodes=4),
         dict(cfg=O, phi=Ten(), tau=R, nodes=C)),
    Case(soft_quadrature.soft_risk_quad, dict(cfg=CFG, theta=TH_T, phi=PHI_T, tau=0.2, nodes=4),
         dict(cfg=O, theta=Ten(), phi=Ten(), tau=R, nodes=C)),
    Case(soft_quadrature.soft_refit_quad, dict(cfg=CFG, phi=PHI_T, tau=0.2, nodes=4),
         dict(cfg=O, phi=Ten(), tau=R, nodes=C)),
    Case(sd.boundary_integral_gradient, dict(cfg=CFG, theta=TH, phi=PHI, nodes=4),
         dict(cfg=O, theta=Arr(), phi=Arr(), nodes=C)),
    Case(sd.finite_difference_gradient, dict(cfg=CFG, theta=TH, phi=PHI, h=1e-4, nodes=4),
         dict(cfg=O, theta=Arr(), phi=Arr(), h=R, nodes=C)),
    Case(hs.joint_hessian, dict(cfg=CFG, theta=TH, phi=PHI, tau=0.2, nodes=4),
         dict(cfg=O, theta=Arr(), phi=Arr(), tau=R, nodes=C)),
    Case(hs.joint_gradient, dict(cfg=CFG, theta=TH, phi=PHI, tau=0.2, nodes=4),
         dict(cfg=O, theta=Arr(), phi=Arr(), tau=R, nodes=C)),
    Case(hs.profiled_soft_grad_hess, dict(cfg=CFG, phi=[PHI], tau=0.2, nodes=4),
         dict(cfg=O, phi=Arr(), tau=R, nodes=C)),
    Case(hs.soft_refit_np, dict(cfg=CFG, phi=PHI, tau=0.2, nodes=4), dict(cfg=O, phi=Arr(), tau=R, nodes=C)),
    Case(hs.profiled_hard_gradient, dict(cfg=CFG, phi=PHI, nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(hs.profiled_hard_hessian, dict(cfg=CFG, phi=PHI, h=1e-3, nodes=4),
         dict(cfg=O, phi=Arr(), h=R, nodes=C)),
    Case(hs.profiled_soft_grad, dict(cfg=CFG, phi=[PHI], tau=0.2, nodes=4),
         dict(cfg=O, phi=Arr(), tau=R, nodes=C)),
    Case(hs.profiled_hard_grad_hess, dict(cfg=CFG, phi=[PHI], nodes=4), dict(cfg=O, phi=Arr(), nodes=C)),
    Case(ch.TwoRegionChart, dict(b_max=2.8), dict(b_max=R)),
    *[Case(getattr(cp.TWO_REGION, m), dict(phi=[[0.3, 0.2]]), dict(phi=Arr()))
      for m in ("points", "finish")],
    Case(cp.TWO_REGION.start, dict(starts=[[0.3, 0.2]]), dict(starts=Arr())),
    Case(cp.TWO_REGION.distance, dict(p=PHI, q=[0.5, -0.1]), dict(p=Arr(), q=Arr())),
    Case(cp.TWO_REGION.local, dict(fn_grad=lambda p: quad_oracle(p)[:2]), dict(fn_grad=F),
         accept=False),
    Case(cp.TWO_REGION.second, dict(fn=quad_oracle), dict(fn=F), accept=False),
    Case(ch.descend_grad_norm, dict(second=cp.TWO_REGION.second(quad_oracle), starts=[[0.3, 0.2]],
                                    chart=cp.TWO_REGION, steps=1, lr=0.5, step_cap=0.2),
         dict(second=O, starts=Arr(), chart=O, steps=C, lr=R, step_cap=R)),
    Case(ch.newton, dict(second=cp.TWO_REGION.second(quad_oracle), cand=[[0.3, 0.2]],
                         chart=cp.TWO_REGION, steps=2, step_cap=0.2, tol=1e-7),
         dict(second=O, cand=Arr(skip=("empty",)), chart=O, steps=C, step_cap=R, tol=R)),
    Case(cp.collect, dict(fn=quad_oracle, phis=[[0.0, 0.0], [0.3, 0.2]], ok=np.array([True, False]),
                          cfg=CFG, teacher_radius=0.1, merge=1e-3),
         dict(fn=F, phis=Arr(), ok=Arr(), cfg=O, teacher_radius=R, merge=R)),
    Case(ch.dedupe, dict(phis=[[0.0, 0.0], [0.3, 0.2]], chart=cp.TWO_REGION, radius=1e-3),
         dict(phis=Arr(skip=("empty",)), chart=O, radius=R)),
    Case(cp.start_grid, dict(n_alpha=2, n_b=2, b_range=1.0), dict(n_alpha=C, n_b=C, b_range=R)),
    Case(ch.descend, dict(local=cp.TWO_REGION.local(lambda p: quad_oracle(p)[:2]),
                          starts=[[0.3, 0.2]], chart=cp.TWO_REGION, steps=2, lr_start=0.1,
                          lr_end=0.01, n_slow=1),
         dict(local=F, starts=Arr(), chart=O, steps=C, lr_start=R, lr_end=R, n_slow=C)),
    Case(cp.hard_critical_points, dict(cfg=CFG, starts=[[2.0, -0.5]]), dict(cfg=O, starts=Arr()),
         accept=False),
    Case(cp.soft_critical_points, dict(cfg=CFG, taus=[0.1], starts=[[2.0, -0.5]], seeds=[[2.0, -0.5]],
                                       descent_steps=2, progress=None),
         dict(cfg=O, taus=TAUS, starts=Arr(), seeds=Arr(skip=("empty",)), descent_steps=C,
              progress=OptFunc()), accept=False),
    # ---------------------------------------------------------------- landscape: K regions
    Case(mr.helmert, dict(K=3), dict(K=C)),
    Case(mr.chart_radius, dict(K=3), dict(K=C)),
    Case(mr.adjacent_pairs, dict(W=T3.W, c=T3.c, box=4.0), dict(W=Arr(), c=Arr(), box=R)),
    Case(mr.MultiRegionTeacher, dict(scores_w=T3.scores_w, scores_b=T3.scores_b, experts=T3.experts,
                                     noise_std=0.2, min_mass=0.05),
         dict(scores_w=Arr(), scores_b=Arr(), experts=Arr(), noise_std=R, min_mass=R), accept=False),
    Case(mr.MultiRegionTeacher.from_arrays, dict(W=T3.W, c=T3.c, B=T3.beta, noise_std=0.2, min_mass=0.05),
         dict(W=Arr(), c=Arr(), B=Arr(), noise_std=R, min_mass=R), accept=False),
    Case(T3.region, dict(X=X3), dict(X=Ten())),
    Case(T3.fstar, dict(X=X3), dict(X=Ten())),
    Case(T3.region_masses, dict(n=32, seed=3), dict(n=C, seed=C)),
    Case(mr.three_region_plane, dict(noise_std=0.2), dict(noise_std=R), accept=False),
    Case(mr.three_region_space, dict(noise_std=0.2), dict(noise_std=R), accept=False),
    Case(mr.four_region_space, dict(noise_std=0.2), dict(noise_std=R), accept=False),
    Case(mr.from_two_region, dict(cfg=CFG), dict(cfg=O), accept=False),
    Case(mr.phi_from_logits, dict(W=T3.W, b=T3.c), dict(W=Arr(), b=Arr())),
    Case(mr.chart_points, dict(phi=STARTS3, K=3, d=2, name="phi", single=False, allow_empty=False),
         dict(phi=Arr(), K=C, d=C, name=Name(), single=B, allow_empty=B)),
    Case(mr.logits_from_phi, dict(phi=PHI3_T, K=3, d=2), dict(phi=Ten(), K=C, d=C)),
    Case(mr.tangent_basis, dict(phi=STARTS3, K=3, d=2), dict(phi=Arr(), K=C, d=C)),
    Case(mr.retract, dict(phi0=PHI3_T, T=torch.tensor(TB3), z=torch.tensor(Z3), K=3, d=2),
         dict(phi0=Ten(), T=Ten(), z=Ten(), K=C, d=C)),
    Case(mr.normalise, dict(phi=STARTS3, K=3, d=2), dict(phi=Arr(), K=C, d=C)),
    Case(mr.chart_dim, dict(K=3, d=2), dict(K=C, d=C)),
    Case(mr.relabel_all, dict(phi=PHI3, K=3, d=2), dict(phi=Arr(), K=C, d=C)),
    Case(ch.MultiRegionChart, dict(K=3, d=2), dict(K=C, d=C)),
    *[Case(getattr(ch.MultiRegionChart(3, 2), m), dict(phi=STARTS3), dict(phi=Arr()))
      for m in ("points", "finish")],
    Case(ch.MultiRegionChart(3, 2).start, dict(starts=STARTS3), dict(starts=Arr())),
    Case(ch.MultiRegionChart(3, 2).distance, dict(p=PHI3, q=STARTS3[0]), dict(p=Arr(), q=Arr())),
    Case(ch.MultiRegionChart(3, 2).local, dict(obj=OBJ, tau=0.2), dict(obj=O, tau=R),
         accept=False),
    Case(mr.random_routers, dict(S=2, K=3, d=2, rng=0, offset_scale=0.3),
         dict(S=C, K=C, d=C, rng=SEED, offset_scale=R)),
    Case(mf.gates, dict(X=X3, phi=PHI3_T, tau=0.2, K=3), dict(X=Ten(), phi=Ten(), tau=R, K=C)),
    Case(mf.soft_risk, dict(theta=torch.tensor(np.stack([TH3, TH3])), phi=PHI3_T, tau=0.2, X=X3,
                            fstar=OBJ.fstar, noise_var=0.01),
         dict(theta=Ten(), phi=Ten(), tau=R, X=Ten(), fstar=Ten(), noise_var=R)),
    Case(mf.soft_refit, dict(phi=PHI3_T, tau=0.2, X=X3, fstar=OBJ.fstar, K=3, ridge=1e-9,
                            return_gram=True),
         dict(phi=Ten(), tau=R, X=Ten(), fstar=Ten(), K=C, ridge=R, return_gram=B)),
    Case(mf.soft_refit_reference, dict(phi=PHI3_T, tau=0.2, X=X3, fstar=OBJ.fstar, K=3, ridge=1e-9),
         dict(phi=Ten(), tau=R, X=Ten(), fstar=Ten(), K=C, ridge=R)),
    Case(mf.hard_refit, dict(phi=PHI3, X=X3, fstar=OBJ.fstar, K=3, ridge=1e-9),
         dict(phi=Arr(), X=Ten(), fstar=Ten(), K=C, ridge=R)),
    Case(ProfiledObjective, dict(teacher=T3, n=32, seed=1, chunk=4, derivatives="autograd"),
         dict(teacher=O, n=C, seed=C, chunk=C, derivatives=Choice())),
    Case(OBJ.value, dict(phi=STARTS3, tau=0.2), dict(phi=Arr(), tau=R)),
    Case(OBJ.cell_masses, dict(phi=STARTS3, tau=0.2), dict(phi=Arr(), tau=R)),
    Case(mc.search_teacher, dict(name="t", teacher=T3, n=64, seed=1, taus=[0.2], eval_n=64,
                                 n_starts=2, saddles=True, descent_steps=2, grad_norm_steps=1,
                                 newton_steps=1, continuation_steps=1, n_guide=32,
                                 progress=False),
         dict(name=Name(), teacher=O, n=C, seed=C, taus=TAUS, eval_n=C, n_starts=C,
              saddles=B, descent_steps=C, grad_norm_steps=C, newton_steps=C,
              continuation_steps=C, n_guide=C, progress=B)),
    Case(sc.check_index, dict(search=SEARCH3, tau=0.3, seed=5, factor=2, steps=2, tol=1e-7,
                              radius=0.05),
         dict(search=O, tau=R, seed=C, factor=C, steps=C, tol=R, radius=R)),
    Case(common.count_table, dict(points=list(SEARCH3.points)), dict(points=O)),
    Case(mc.point_table, dict(points=list(SEARCH3.points)), dict(points=O)),
    Case(rc.first_order_check, dict(search=SEARCH3, taus=[0.3], floor=1e-3, width=0.05),
         dict(search=O, taus=TAUS, floor=R, width=R)),
    Case(mf.two_region_agreement, dict(taus=[0.1], seed=1, n=64), dict(taus=TAUS, seed=C, n=C)),
    Case(OBJ.refit, dict(phi=PHI3, tau=0.2), dict(phi=Arr(), tau=R)),
    Case(OBJ.grad, dict(phi=STARTS3, tau=0.2), dict(phi=Arr(), tau=R)),
    Case(OBJ.grad_hess, dict(phi=STARTS3, tau=0.2), dict(phi=Arr(), tau=R)),
    Case(OBJ.step, dict(phi=STARTS3, T=TB3, z=Z3), dict(phi=Arr(), T=Arr(), z=Arr())),
    Case(OBJ.joint_hessian, dict(theta=TH3, phi=PHI3, tau=0.2), dict(theta=Arr(), phi=Arr(), tau=R)),
    Case(mf.confusion, dict(phi=PHI3, teacher=T3, X=X3), dict(phi=Arr(), teacher=O, X=Ten())),
    Case(mf.best_permutation, dict(M=np.eye(3)), dict(M=Arr())),
    Case(mf.partition_error, dict(phi=PHI3, teacher=T3, X=X3), dict(phi=Arr(), teacher=O, X=Ten())),
    Case(mf.expert_error, dict(theta=TH3, phi=PHI3, teacher=T3, X=X3),
         dict(theta=Arr(), phi=Arr(), teacher=O, X=Ten())),
    Case(mf.describe_partition, dict(phi=PHI3, teacher=T3, X=X3, share=0.2),
         dict(phi=Arr(), teacher=O, X=Ten(), share=R)),
    Case(ch.dedupe, dict(phis=STARTS3, chart=ch.MultiRegionChart(3, 2), radius=1e-3),
         dict(phis=Arr(skip=("empty",)), chart=O, radius=R)),
    Case(mc.start_routers, dict(obj=OBJ, S=2, seed=1, tau=0.2, min_cell_mass=0.05),
         dict(obj=O, S=C, seed=SEED, tau=R, min_cell_mass=R)),
    Case(ch.descend, dict(local=ch.MultiRegionChart(3, 2).local(OBJ, 0.2), starts=STARTS3,
                          chart=ch.MultiRegionChart(3, 2), steps=2, lr_start=0.1, lr_end=0.01,
                          n_slow=1),
         dict(local=F, starts=Arr(), chart=O, steps=C, lr_start=R, lr_end=R, n_slow=C)),
    Case(ch.MultiRegionChart(3, 2).second, dict(obj=OBJ, tau=0.2, min_cell_mass=0.01, e_max=3.0),
         dict(obj=O, tau=R, min_cell_mass=R, e_max=R), accept=False),
    Case(mc.most_critical, dict(obj=OBJ, phi=STARTS3, tau=0.2, keep=1),
         dict(obj=O, phi=Arr(skip=("empty",)), tau=R, keep=C)),
    Case(mc.critical_points, dict(obj=OBJ, taus=[0.2], starts=STARTS3, eval_X=X3, descent_steps=1,
                                  grad_norm_steps=0, newton_steps=1, tol=1e-7, teacher_radius=0.1,
                                  merge=1e-3, joint=False, candidate_radius=0.03, continuation_steps=0,
                                  n_slow=0, saddle_candidates=1, guide=GUIDE3, progress=None),
         dict(obj=O, taus=TAUS, starts=Arr(), eval_X=Ten(), descent_steps=C, grad_norm_steps=C,
              newton_steps=C, tol=R, teacher_radius=R, merge=R, joint=B, candidate_radius=R,
              continuation_steps=C, n_slow=C, saddle_candidates=C, guide=OptObj(),
              progress=OptFunc()), accept=False),
    # ---------------------------------------------------------------- landscape: first order
    Case(fo.two_region_constants, dict(cfg=CFG, nodes=16), dict(cfg=O, nodes=C)),
    Case(fo.two_region_boundary_mass, dict(cfg=CFG, widths=W4), dict(cfg=O, widths=WIDTHS)),
    Case(fo.two_region_growth, dict(cfg=CFG, directions=8, nodes=16),
         dict(cfg=O, directions=C, nodes=C)),
    Case(fo.teacher_boundary_mass, dict(teacher=T3, widths=W4, X=X3),
         dict(teacher=O, widths=WIDTHS, X=Ten())),
    Case(fo.multi_region_constants, dict(teacher=T3, X=X3, width=0.4), dict(teacher=O, X=Ten(), width=R),
         tol=64 * np.finfo(float).eps),
    Case(fo.expert_error_first_order, dict(constants=C2, taus=[0.1, 0.01]), dict(constants=O, taus=TAUS)),
    Case(fo.hessian_first_order, dict(constants=CM3, tau=0.1), dict(constants=O, tau=R)),
    # ---------------------------------------------------------------- landscape: recovery, saddles
    Case(rc.fit_exponent, dict(taus=[0.1, 0.01], values=[1.0, 0.1], floor=0.05),
         dict(taus=TAUS, values=Arr(), floor=R)),
    Case(rc.two_region_recovery, dict(points=SOFT_PTS, taus=[0.1], name="K2"),
         dict(points=O, taus=TAUS, name=Name())),
    Case(rc.multi_region_recovery, dict(points=MULTI_PTS, taus=[0.1], name="K3", floor=1e-5),
         dict(points=O, taus=TAUS, name=Name(), floor=R)),
    Case(sa.track_hard_points, dict(points=SOFT_PTS, hard_points=HARD_PTS, taus=[0.1], radius=0.2),
         dict(points=O, hard_points=O, taus=TAUS, radius=R)),
    Case(sa.two_region_tally, dict(points=SOFT_PTS, hard_points=HARD_PTS, taus=[0.1], radius=0.2,
                                   name="K2"),
         dict(points=O, hard_points=O, taus=TAUS, radius=R, name=Name())),
    Case(sa.multi_region_tally, dict(points=MULTI_PTS, taus=[0.1], name="K3"),
         dict(points=O, taus=TAUS, name=Name())),
    # ---------------------------------------------------------------- symmetry breaking
    Case(sy.TwoExpertGaussian, dict(u=(1.0, 1.0), beta1=(1.0, 0.0), beta2=(0.0, 1.0), noise_std=0.1),
         dict(u=Arr(), beta1=Arr(), beta2=Arr(), noise_std=R)),
    Case(sy.TwoExpertGaussian.abs_teacher, dict(d=2, u=(1.0, 2.0)), dict(d=C, u=Arr())),
    Case(TWO.sample, dict(n=8, seed=2), dict(n=C, seed=C)),
    Case(TWO.sample, dict(n=8, seed=2, method="sobol"), dict(n=C, seed=C, method=Choice())),
    Case(sy.m_operator_closed_form, dict(model=TWO), dict(model=O)),
    Case(sy.m_operator_mc, dict(X=XG, Y=YG, theta_bar=[0.1, 0.2]), dict(X=Arr(), Y=Arr(), theta_bar=Arr())),
    Case(sy.linear_growth_rates, dict(M=MG, tau=[1.0, 0.5]), dict(M=Arr(), tau=TAUS)),
    Case(sy.top_direction, dict(M=MG), dict(M=Arr())),
    Case(sy.fastest_rate_times_tau, dict(M=MG), dict(M=Arr())),
    Case(symmetry_flow.soft_risk, dict(X=XG, Y=YG, theta1=TH1, theta2=TH2, w=WG, tau=torch.tensor(TG)),
         dict(X=Ten(), Y=Ten(), theta1=Ten(), theta2=Ten(), w=Ten(), tau=Ten(low=0.0))),
    Case(symmetry_flow.population_gradients, dict(X=XG, Y=YG, theta1=TH1, theta2=TH2, w=WG, tau=TG,
                                       Xt=XG.T.contiguous()),
         dict(X=Ten(), Y=Ten(), theta1=Ten(), theta2=Ten(), w=Ten(), tau=TAUS, Xt=Ten())),
    Case(symmetry_flow.gradient_flow, dict(X=XG, Y=YG, theta1=TH1, theta2=TH2, w=WG, tau=TG, steps=2, h=0.1,
                                train_experts=True, record_path=True),
         dict(X=Ten(), Y=Ten(), theta1=Ten(), theta2=Ten(), w=Ten(), tau=TAUS, steps=C, h=R,
              train_experts=B, record_path=B)),
    Case(symmetry_flow.naive_gradient_flow_step,
         dict(X=XG, Y=YG, theta1=TH1, theta2=TH2, w=WG, tau=TG, h=0.1),
         dict(X=Ten(), Y=Ten(), theta1=Ten(), theta2=Ten(), w=Ten(), tau=TAUS, h=R)),
    Case(symmetry_flow.symmetric_start, dict(X=XG, Y=YG, B=2, scale_w=0.1, scale_delta=0.2, seed=1, tau=TG,
                                  scale_with_tau=True, shared=False),
         dict(X=Ten(), Y=Ten(), B=C, scale_w=R, scale_delta=R, seed=C, tau=TAUS, scale_with_tau=B,
              shared=B), tol=64 * np.finfo(float).eps),
    Case(symmetry_flow.fit_growth_rate, dict(res=FLOW, lo=0.11, hi=1.0, relative_to_tau=False),
         dict(res=O, lo=R, hi=R, relative_to_tau=B)),
    Case(symmetry_flow.fit_power_law, dict(x=XF, y=2 * XF), dict(x=Arr(low=0.0), y=Arr(low=0.0))),
]

def case_id(c: Case) -> str:
    return c.label.split(".", 2)[-1]


def names_argument(message: str, arg: str) -> bool:
    """The library's messages start with the argument: ``x = …``, ``x[2] = …``, ``x.shape = …``."""
    return re.match(rf"{re.escape(arg)}( =|\[|\.)", message) is not None


# ------------------------------------------------------------------------------ (a) refusals

def test_every_valid_call_runs():
    """The valid arguments really are valid (otherwise (a) would test nothing)."""
    for c in CASES:
        if c.accept:
            c.fn(**c.kwargs)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@SETTINGS
@given(data=st.data())
def test_bad_argument_is_refused_by_name(case, data):
    """Each example corrupts every argument in turn (the others valid)."""
    for arg, kind in case.kinds.items():
        bad = kind.draw(data, case.kwargs[arg], arg)
        with pytest.raises(ValueError) as err:
            case.fn(**dict(case.kwargs, **{arg: bad}))
        assert names_argument(str(err.value), arg), f"{arg}: {err.value}"


# ------------------------------------------------------------------------------ (b) NumPy scalars

def same(a: Any, b: Any, tol: float = 0.0) -> bool:
    """Identical results (the same code path), or within ``tol`` relative to the largest entry."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and same(a.detach().numpy(), b.detach().numpy(), tol))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if np.shape(a) != np.shape(b):
            return False
        if tol == 0.0 or np.size(a) == 0:
            return np.array_equal(a, b, equal_nan=True)
        return np.allclose(a, b, rtol=0.0, atol=tol * max(1.0, float(np.abs(a).max())))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name), tol)
                                          for f in dataclasses.fields(a) if f.compare)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and np.isnan(b)
    if hasattr(a, "__dict__") and not callable(a):
        return type(a) is type(b) and same(vars(a), vars(b), tol)
    return type(a) is type(b) and a == b


def scalar_variants(value):
    """(NumPy or torch scalar, the Python number it stands for)."""
    if isinstance(value, bool):
        return [(np.bool_(value), value)]
    if isinstance(value, int):                  # (validation.integer takes NumPy integers only)
        return [(np.int64(value), value), (np.int32(value), value)]
    return [(np.float64(value), value), (np.float32(value), float(np.float32(value))),
            (torch.tensor(value, dtype=F64), value), (np.array(value), value)]


def scalar_arguments(c: Case) -> list[str]:
    return [a for a, k in c.kinds.items() if isinstance(k, (Real, Count, Flag))
            and isinstance(c.kwargs[a], (int, float))]


ACCEPT = [c for c in CASES if c.accept and scalar_arguments(c)]


@pytest.mark.parametrize("case", ACCEPT, ids=case_id)
def test_numpy_and_torch_scalars_give_the_python_result(case):
    for arg in scalar_arguments(case):
        wanted = {}                                 # result for each Python value, computed once
        for numpy_value, python_value in scalar_variants(case.kwargs[arg]):
            if python_value not in wanted:
                wanted[python_value] = case.fn(**dict(case.kwargs, **{arg: python_value}))
            want = wanted[python_value]
            got = case.fn(**dict(case.kwargs, **{arg: numpy_value}))
            assert same(got, want, case.tol), (arg, type(numpy_value), got, want)


# ------------------------------------------------------------------------------ (c) degenerate input

finite = st.floats(-5, 5, allow_nan=False)


@SETTINGS
@given(row=st.lists(finite, min_size=2, max_size=2), bias=finite, K=st.integers(2, 4))
def test_router_with_identical_experts_is_refused(row, bias, K):
    with pytest.raises(ValueError, match=r"^weight = "):
        LinearRouter(np.tile(row, (K, 1)), np.full(K, bias))


@SETTINGS
@given(beta=st.lists(finite, min_size=3, max_size=3))
def test_teacher_with_identical_experts_is_refused(beta):
    with pytest.raises(ValueError, match=r"^beta2 = .*degenerate teacher"):
        two_region.TeacherStudentConfig(beta1=tuple(beta), beta2=tuple(beta))
    with pytest.raises(ValueError, match=r"^beta2 = .*degenerate teacher"):
        sy.TwoExpertGaussian(u=(1.0, 0.0, 0.0), beta1=tuple(beta), beta2=tuple(beta))


@SETTINGS
@given(x=finite.filter(lambda v: v > 0.01), n=st.integers(1, 6))
def test_fits_need_a_spread_of_points(x, n):
    xs = np.full(n, x)
    with pytest.raises(ValueError, match=r"^x(\.size)? = "):
        fit_loglog(xs, 2 * xs)
    with pytest.raises(ValueError, match=r"^x(\.size)? = "):
        symmetry_flow.fit_power_law(xs, 2 * xs)
    with pytest.raises(ValueError, match=r"^widths = "):
        bootstrap_bm_fit(np.full(3, x), [1, 2, 3], 10)


@SETTINGS
@given(scale=st.floats(0.1, 10), zero=st.integers(0, 2))
def test_zero_variance_law_and_direction_are_refused(scale, zero):
    cov = np.diag([scale, scale, scale])
    cov[zero, zero] = 0.0                                       # a direction with no variance
    with pytest.raises(ValueError, match=r"(?s)^cov = .*positive definite"):
        GaussianLaw(np.zeros(3), cov)
    law = GaussianLaw.standard(3, scale=np.sqrt(scale))
    for f in (linear_gaussian_constant, lambda v, c, law: slab_mass_linear_gaussian(v, c, law, [0.1])):
        with pytest.raises(ValueError, match=r"^v = .*non-zero"):
            f(np.zeros(3), 0.1, law)


DEGENERATE = {
    "empty box": (lambda: UniformBox([0.0, 1.0], [1.0, 1.0]), "high[1]"),
    "binary router without direction": (lambda: LinearRouter.binary([0.0, 0.0], b=1.0), "v"),
    "pair of an expert with itself": (lambda: R3.pair(1, 1), "k"),
    "experts with equal weights": (lambda: junction_free_constants(
        LinearRouter([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [0.0, 1.0, 0.0]), LAW2), "router"),
    "first-order constant of a router without interface": (lambda: first_order_constant(
        MoERegression(LinearRouter([[1.0], [1.0]], [0.0, 1.0]), PM1, SIGN), LAW1), "model.router"),
    "unbounded density on the interface": (lambda: first_order_constant(
        MoERegression(R1, PM1, SIGN), VanishingDensityLaw(1, 0.5)), "law"),
    "count above n": (lambda: wilson_interval([3, 11], 10), "k[1]"),
    "counts not cumulative": (lambda: bootstrap_bm_fit([0.1, 0.2, 0.3], [5, 3, 8], 10), "counts"),
    "two widths for an intercept and a drift": (lambda: fit_interface_constant([0.1, 0.2], [3, 5], 10),
                                               "widths"),
    "a constant table has no variation to share": (lambda: variance_shares(np.ones((3, 2))), "values"),
    "an empty range of boundary masses": (lambda: widths_for(1.0, 1.0, (0.1, 0.1)), "bm_range"),
    "too few margins below the smallest width": (lambda: check_power_law(
        R2, LAW2, 1.0, 0.5, 5, bm_range=(1e-4, 1e-3), n_boot=2, rng=0), "n"),
    "one Monte Carlo draw (no standard error)": (lambda: risk_mc(M2, LAW2, [0.1], 1), "n"),
    "one perpendicular draw": (lambda: risk_layer_quadrature(M2, LAW2, [0.1], n_perp=1), "n_perp"),
    "a unit-cube point on the cube's face, for a Gaussian": (
        lambda: LAW2.from_unit_cube([[0.5, 0.0]]), "u"),
    "a point outside the unit cube, for a box": (lambda: BOX2.from_unit_cube([[0.5, 1.5]]), "u"),
    "a Sobol' sample whose size is no power of two": (
        lambda: TWO.sample(12, seed=0, method="sobol"), "n"),
    "randomised QMC for a law without a unit-cube map": (
        lambda: risk_mc(M2, VAN, [0.1], 32, rng=0, method="rqmc"), "law"),
    "one direction in d = 4": (lambda: sphere_constant(SphereRouter(np.zeros(4), 1.0),
                                                       GaussianLaw.standard(4), 1), "n_nodes"),
    "one sample for M_n": (lambda: sy.m_operator_mc(XG[:1], YG[:1]), "X.shape"),
    "NaN from a teacher": (lambda: risk_mc(MoERegression(R2, PM1, Teacher(lambda x: np.log(x[:, 0]), 1.0)),
                                           LAW2, [0.1], 64, rng=0), "fn(x)"),
    "NaN from expert values": (lambda: M2.__class__(R2, lambda x: np.full((len(x), 2), NAN),
                                                    SIGN).gap(X2, [0.1]),
                               "experts(x)"),
    "NaN from a family's teacher": (lambda: ThresholdFamily(lambda x: np.log(x)).sup_gap(0.1, 2, 2, 2),
                                    "teacher(x)"),
    "NaN from a boundary-mass curve": (lambda: tail_constant(lambda w: w * NAN, 1.0, W4), "bm(w)"),
    "NaN from a derivative oracle": (lambda: ch.newton(cp.TWO_REGION.second(
                                         lambda p: (p[:, 0], p * NAN, np.zeros((len(p), 2, 2)))),
                                         [[0.1, 0.2]], cp.TWO_REGION), "fn(phi)"),
    "teacher without a partition": (lambda: mr.MultiRegionTeacher.from_arrays(
        np.ones((3, 2)), [0.0, 0.0, 0.0], T3.beta), "scores_w"),
    "chart point without weights": (lambda: mr.tangent_basis(np.zeros((1, 6)), 3, 2), "phi"),
    "logits without a partition": (lambda: mr.phi_from_logits(np.ones((3, 2)), [0.0, 1.0, 2.0]), "W"),
    "a window holding no steps": (lambda: symmetry_flow.fit_growth_rate(FLOW, 1e3, 1e4), "hi"),
    "a hard cell left empty": (lambda: hard_quadrature.hard_refit(CFG, [0.0, 45.0]), "phi"),
    "a non-symmetric M": (lambda: sy.top_direction([[1.0, 2.0], [0.0, 1.0]]), "M"),
}


@pytest.mark.parametrize("name", list(DEGENERATE))
@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
def test_degenerate_input_is_refused(name):
    call, arg = DEGENERATE[name]
    with pytest.raises(ValueError) as err:
        call()
    assert names_argument(str(err.value), arg), str(err.value)


# ------------------------------------------------------------------------------ (d) extreme sizes

HUGE = 10 ** 20
SIZES = {
    "GaussianLaw.sample": (lambda: LAW2.sample(HUGE, 0), "n"),
    "UniformBox.sample": (lambda: BOX2.sample(HUGE, 0), "n"),
    "VanishingDensityLaw.sample": (lambda: VAN.sample(HUGE, 0), "n"),
    "sample_margins": (lambda: sample_margins(R3, LAW2, HUGE, 0), "n"),
    "boundary_mass_mc": (lambda: boundary_mass_mc(R2, LAW2, W4, HUGE, 0), "n"),
    "boundary_mass_mc, 10^15 (a MemoryError, not 'too big')": (
        lambda: boundary_mass_mc(R2, LAW2, W4, 10 ** 15, 0), "n"),
    "pairwise_union_bound": (lambda: pairwise_union_bound(R3, BOX2, W4, n=HUGE, rng=0), "n"),
    "junction_free_constants": (lambda: junction_free_constants(
        LinearRouter.random(3, 3, rng=0), GaussianLaw.standard(3), n_cond=HUGE), "n_cond"),
    "check_power_law": (lambda: check_power_law(R2, LAW2, 1.0, 0.5, HUGE), "n"),
    "check_junction_constant": (lambda: check_junction_constant(R3, LAW2, HUGE), "n"),
    "sphere_constant": (lambda: sphere_constant(SphereRouter(np.zeros(3), 1.0),
                                                GaussianLaw.standard(3), 10 ** 10), "n_nodes"),
}


@pytest.mark.parametrize("name", list(SIZES))
def test_a_sample_that_cannot_fit_in_memory_is_refused_by_name(name):
    """Not NumPy's "array is too big" or a MemoryError naming nothing: the count, by name,
    with the largest one accepted, before any work."""
    call, arg = SIZES[name]
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as err:
        call()
    msg = str(err.value)
    assert names_argument(msg, arg) and "must fit in this machine's" in msg, msg
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e160, 1e-160])
def test_a_law_whose_covariance_is_no_float64_is_refused_by_its_scale(scale):
    """scale² overflows to ∞ (an OverflowError before) or underflows to 0 (then "cov is not
    positive definite", a value the user never gave)."""
    with pytest.raises(ValueError, match=r"^scale = .*scale²"):
        GaussianLaw.standard(2, scale=scale)
    GaussianLaw.standard(2, scale=1e150)                         # scale² = 1e300 is a float64
    GaussianLaw.standard(2, scale=1e-150)


@pytest.mark.parametrize("make, arg", [
    (lambda: UniformBox.cube(2, 1e300), "high"), (lambda: UniformBox.cube(2, 1e-300), "high"),
    (lambda: VanishingDensityLaw(2, 2.0, 1e300), "half_width"),
    (lambda: VanishingDensityLaw(2, 2.0, 1e-300), "half_width")])
def test_a_law_whose_density_is_no_float64_is_refused(make, arg):
    """A box of side 2e300 had pdf ≡ 0 (1/∞), and every surface integral over it was a silent
    0; a side of 2e−300 had pdf ≡ ∞."""
    with pytest.raises(ValueError) as err:
        make()
    assert names_argument(str(err.value), arg) and "normal float64" in str(err.value)


def test_tiny_weights_give_their_constants_not_a_nan_refusal():
    """Weights ×1e−300: the constants are 1e300 times larger (S(λW) = S(W)/λ); before, the
    refusal was "z = nan is not allowed" about an argument nobody passed."""
    lam = 1e-300
    ref = junction_free_constants(R3, LAW2)
    got = junction_free_constants(LinearRouter(lam * R3.weight), LAW2)
    assert got.sharp_total * lam == pytest.approx(ref.sharp_total, rel=1e-12)
    assert coarea_constant(LinearRouter.binary([lam, lam]), LAW2).value * lam == pytest.approx(
        coarea_constant(LinearRouter.binary([1.0, 1.0]), LAW2).value, rel=1e-12)


def test_coarea_constant_for_k3_and_a_uniform_law_points_to_a_route_that_works():
    """The refusal names the Monte Carlo route, and that route, followed as written, measures
    the sharp constant: tie lines x₁ = ±1/2 of length 2 under density 1/4 with |∇g| = 1 give
    S = 2·(2·1/4) = 1 (and no junction inside the box, so BM(w) = 2w exactly)."""
    router = LinearRouter([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], [0.0, 0.0, 0.5])
    with pytest.raises(ValueError) as err:
        coarea_constant(router, BOX2)
    msg = str(err.value)
    assert msg.startswith("router.n_experts = 3 ")
    assert "boundary_mass_mc" in msg and "fit_interface_constant" in msg, msg
    with pytest.raises(ValueError, match="^law = "):             # not the way for this law
        junction_free_constants(router, BOX2)
    w, n = np.geomspace(0.01, 0.1, 6), 200_000
    bm = boundary_mass_mc(router, BOX2, w, n, rng=0)
    fit = fit_interface_constant(w, bm.counts, n, rng=0)
    assert fit.constant_ci[0] <= 1.0 <= fit.constant_ci[1] and abs(fit.constant - 1) < 0.05
    with pytest.raises(ValueError) as err:                        # Gaussian: the exact route
        coarea_constant(router, LAW2)
    assert "junction_free_constants" in str(err.value) and "boundary_mass_mc" not in str(err.value)
    assert junction_free_constants(router, LAW2).sharp_total > 0


# ------------------------------------------------------------------------------ completeness

EXEMPT = {
    # interfaces: they raise NotImplementedError, their implementations are driven above
    "moe_routing.boundary.laws.InputLaw", "moe_routing.boundary.laws.InputLaw.sample",
    "moe_routing.boundary.laws.InputLaw.pdf", "moe_routing.boundary.routers.Router",
    "moe_routing.boundary.routers.Router.logits", "moe_routing.boundary.routers.BinaryRouter",
    "moe_routing.boundary.routers.BinaryRouter.g", "moe_routing.boundary.routers.BinaryRouter.grad_g",
    # result records: built by the library from checked values, never from user input
    "moe_routing.boundary.coarea.SurfaceIntegral", "moe_routing.boundary.coarea.JunctionConstants",
    "moe_routing.boundary.laws.LinearScore",
    "moe_routing.boundary.fits.LogLogFit", "moe_routing.boundary.gamma.Profiled",
    "moe_routing.boundary.fits.InterfaceConstantFit", "moe_routing.boundary.estimates.PowerLawCheck",
    "moe_routing.boundary.estimates.JunctionCheck",
    "moe_routing.boundary.gamma.Minimiser", "moe_routing.boundary.mass.BoundaryMass",
    "moe_routing.boundary.risk.RiskGap", "moe_routing.boundary.rates.RateFit",
    "moe_routing.boundary.rates.RateFit.row", "moe_routing.boundary.layer.LayerCell",
    "moe_routing.boundary.layer.LayerCell.row", "moe_routing.boundary.layer.LayerExperiment",
    "moe_routing.boundary.layer.LayerExperiment.frame", "moe_routing.boundary.layer.SineFeature",
    "moe_routing.landscape.critical_points.CriticalPoint",
    "moe_routing.landscape.critical_points.SoftCriticalPoint",
    "moe_routing.landscape.multi_critical.MultiCriticalPoint",
    "moe_routing.landscape.symmetry_flow.FlowResult",
    "moe_routing.landscape.first_order.InterfaceConstants", "moe_routing.landscape.recovery.RecoveryCurve",
    "moe_routing.landscape.saddles.SaddleTally", "moe_routing.landscape.recovery.FirstOrderCheck",
    "moe_routing.landscape.multi_critical.TeacherSearch", "moe_routing.landscape.charts.SecondOrder",
    "moe_routing.landscape.sample_check.IndexCheck",
    # methods without arguments: nothing to refuse
    "moe_routing.boundary.routers.LinearRouter.pairs",
    "moe_routing.boundary.gamma.ThresholdFamily.margin_constant",
    "moe_routing.landscape.two_region.TeacherStudentConfig.teacher_equivalents",
    "moe_routing.landscape.multi_region.MultiRegionTeacher.phi",
    "moe_routing.landscape.multi_region.MultiRegionTeacher.teacher_equivalents",
    "moe_routing.landscape.symmetry.TwoExpertGaussian.arrays",
    "moe_routing.landscape.multi_critical.TeacherSearch.describe",
}


def public_callables() -> set[str]:
    """Public functions, classes and their public methods defined in boundary/ and landscape/."""
    found = set()
    for pkg in (boundary, landscape):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for name, obj in vars(mod).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                    continue
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    found.add(f"{mod.__name__}.{obj.__qualname__}")
                if inspect.isclass(obj):
                    for k, v in vars(obj).items():
                        f = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
                        if not k.startswith("_") and inspect.isfunction(f):
                            found.add(f"{mod.__name__}.{f.__qualname__}")
    return found


def driven() -> set[str]:
    return {c.label for c in CASES}


def test_every_public_callable_is_driven():
    public = public_callables()
    missing = public - driven() - EXEMPT
    assert not missing, f"public callables without refusal tests: {sorted(missing)}"
    assert not (EXEMPT - public), f"stale exemptions: {sorted(EXEMPT - public)}"
    assert len(driven() & public) == len(public - EXEMPT)
