"""Boundary mass and the soft-to-hard limit of softmax routing (paper B, arXiv 2605.02124 §2–4).

Modules, named after the paper's concepts:

* :mod:`.laws` — input distributions (Gaussian, uniform box, density vanishing at an interface);
* :mod:`.routers` — linear (K experts), sphere (curved interface), power (non-transversal) routers;
* :mod:`.margin` — top-two margin Δ and soft / hard gates;
* :mod:`.mass` — boundary mass BM(w) = P(Δ ≤ w): Monte Carlo, closed forms, pairwise union bound;
* :mod:`.coarea` — surface integrals S = ∫_Σ p/|∇g| (BM(w) ≈ 2wS), sharp junction-free constants;
* :mod:`.risk` — soft / hard risks of MoE regression, the gap L_τ − L_0, bound and first order;
* :mod:`.gamma` — Γ-convergence on a compact family and the counter-example without margin control;
* :mod:`.fits` — log–log fits with confidence intervals; :mod:`.quadrature` — graded quadrature.
"""

from .coarea import (JunctionConstants, SurfaceIntegral, coarea_constant, junction_free_constants,
                     linear_gaussian_constant, sphere_constant)
from .fits import LogLogFit, bootstrap_bm_fit, fit_loglog
from .gamma import Minimiser, ThresholdFamily
from .laws import GaussianLaw, InputLaw, UniformBox, VanishingDensityLaw
from .margin import gate_gap_bound, hard_gates, soft_gates, top_two_margin
from .mass import (BoundaryMass, boundary_mass_from_margins, boundary_mass_linear_gaussian,
                   boundary_mass_mc, pairwise_union_bound, sample_margins, slab_mass_linear_gaussian,
                   tail_constant, wilson_interval)
from .risk import (ConstantExperts, FunctionExperts, MoERegression, RiskGap, TanhExperts, Teacher,
                   first_order_constant, first_order_integrand, risk_bound, risk_layer_quadrature,
                   risk_mc, risk_polar_2d, risk_quad_1d)
from .routers import BinaryRouter, LinearRouter, PowerRouter, Router, SphereRouter

__all__ = [n for n in dir() if not n.startswith("_")]
