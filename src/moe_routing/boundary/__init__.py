"""Boundary mass and the soft-to-hard limit of softmax routing (paper B, arXiv 2605.02124).

Modules, named after the paper's concepts:

* :mod:`.laws` — input distributions (Gaussian, uniform box, density vanishing at an interface);
* :mod:`.routers` — linear (K experts), sphere (curved interface), power (non-transversal) routers;
* :mod:`.margin` — top-two margin Δ and soft / hard gates;
* :mod:`.mass` — boundary mass BM(w) = P(Δ ≤ w): Monte Carlo, closed forms, pairwise union bound;
* :mod:`.coarea` — surface integrals S = ∫_Σ p/|∇g| (BM(w) ≈ 2wS), sharp junction-free constants;
* :mod:`.regression` — the MoE regression model: experts, teacher, router and how gates mix;
* :mod:`.risk` — soft / hard risks of MoE regression, the gap L_τ − L_0, bound and first order;
* :mod:`.rates` — one margin law's measured gap against τ: fitted slope, bound and their ratio;
* :mod:`.layer` — the layer, not the dimension (ours): one interface's gap in d dimensions;
* :mod:`.gamma` — Γ-convergence on a compact family and the counter-example without margin control;
* :mod:`.estimates` — a predicted law C·w^α (or a sharp K > 2 constant) confronted with Monte
  Carlo: the measurement the boundary-mass chapter repeats;
* :mod:`.fits` — log–log fits, interface constants and variance shares with confidence
  intervals; :mod:`.quadrature` — graded quadrature.

Every public constructor and function checks its arguments with :mod:`moe_routing._internal.validation`
before any sampling or quadrature starts (ValueError naming the argument; NaN, ±∞, empty or
mis-shaped input and degenerate cases are refused, NumPy scalars accepted).
"""

from .coarea import (JunctionConstants, SurfaceIntegral, coarea_constant, junction_free_constants,
                     linear_gaussian_constant, sphere_constant)
from .estimates import (JunctionCheck, PowerLawCheck, check_junction_constant, check_power_law,
                        widths_for)
from .fits import (InterfaceConstantFit, LogLogFit, bootstrap_bm_fit, fit_interface_constant,
                   fit_loglog, simultaneous_confidence, variance_shares)
from .gamma import Minimiser, ThresholdFamily, box_qp
from .laws import GaussianLaw, InputLaw, UniformBox, VanishingDensityLaw, support_1d
from .margin import gate_gap_bound, hard_gates, soft_gates, top_two_margin
from .layer import (LayerCell, LayerExperiment, SineFeature, layer_experiment,
                    margin_constants, sine_feature)
from .mass import (BoundaryMass, boundary_mass_from_margins, boundary_mass_linear_gaussian,
                   boundary_mass_mc, logit_sampler, pairwise_union_bound, sample_margins,
                   slab_mass_linear_gaussian, tail_constant, wilson_interval)
from .rates import RateCase, RateFit, fit_rate
from .regression import ConstantExperts, FunctionExperts, MoERegression, TanhExperts, Teacher
from .risk import (RiskGap, first_order_constant, first_order_integrand, risk_bound,
                   risk_layer_quadrature, risk_mc, risk_polar_2d, risk_quad_1d)
from .routers import BinaryRouter, LinearRouter, PowerRouter, Router, SphereRouter

__all__ = [
    "BinaryRouter", "BoundaryMass", "ConstantExperts", "FunctionExperts", "GaussianLaw",
    "InputLaw", "InterfaceConstantFit", "JunctionCheck", "JunctionConstants", "LayerCell",
    "LayerExperiment", "LinearRouter",
    "LogLogFit", "Minimiser", "MoERegression", "PowerLawCheck", "PowerRouter", "RateCase",
    "RateFit", "RiskGap", "SineFeature",
    "Router", "SphereRouter", "SurfaceIntegral", "TanhExperts", "Teacher", "ThresholdFamily",
    "UniformBox", "VanishingDensityLaw", "bootstrap_bm_fit", "boundary_mass_from_margins",
    "boundary_mass_linear_gaussian", "boundary_mass_mc", "box_qp", "check_junction_constant",
    "check_power_law", "coarea_constant", "first_order_constant", "first_order_integrand",
    "fit_interface_constant", "fit_loglog", "fit_rate", "gate_gap_bound", "hard_gates",
    "junction_free_constants", "layer_experiment", "linear_gaussian_constant", "logit_sampler",
    "margin_constants",
    "pairwise_union_bound", "risk_bound", "risk_layer_quadrature", "risk_mc", "risk_polar_2d",
    "risk_quad_1d", "sample_margins", "simultaneous_confidence", "slab_mass_linear_gaussian",
    "sine_feature", "soft_gates", "sphere_constant", "support_1d", "tail_constant", "top_two_margin",
    "variance_shares", "widths_for", "wilson_interval",
]
