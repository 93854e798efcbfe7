"""The dynamic half of paper B: landscape transfer (B-Thm 5.17) and symmetry breaking
(B-Prop 6.3).

* :mod:`.common` — what both teacher–student models share: affine features x̃ = (x, 1) and the
  fixed scrambled-Sobol normal sample (common random numbers);
* :mod:`.teacher_student` — the teacher–student model (K = 2 regions in d = 2, affine experts,
  fixed-scale linear router), soft/hard risks, closed-form expert refits (every public name of
  the next three modules is importable from it; it holds the soft risk on a fixed sample);
* :mod:`.two_region` — that model's teacher and the router chart (α, b);
* :mod:`.hard_quadrature` — its hard risk, refits and errors against the teacher by
  semi-analytic quadrature;
* :mod:`.soft_quadrature` — its soft risk and refits by quadrature, differentiable in φ;
* :mod:`.shape_derivative` — the boundary-integral gradient of the hard risk;
* :mod:`.hessian` — gradients and Hessians (autograd for soft, shape derivative for hard);
* :mod:`.critical_points` — the search for minima *and* saddles, and their classification;
* :mod:`.recovery` — the global minimiser against the teacher, per τ (Theorem 5.17's first
  conclusion);
* :mod:`.saddles` — the non-teacher critical points at small τ: strict saddles, or inherited
  from a spurious minimum of the hard objective (Theorem 5.17's second conclusion);
* :mod:`.first_order` — the soft minimiser near the teacher to first order in τ: an expert bias
  set by the boundary mass, a curvature set by the specialisation gap (our derivation);
* :mod:`.multi_region` — the same question beyond two regions: K ≥ 2 regions of R^d (the
  teacher family) and the linear softmax router in a chart without shift and scale redundancy;
* :mod:`.multi_fit` — that model's gates, soft risk and refits on a fixed quasi-Monte Carlo
  sample, and the errors of a student against the teacher;
* :mod:`.profiled` — that model's profiled soft objective with closed-form gradients and
  Hessians (envelope theorem, Schur complement), autograd kept as the reference;
* :mod:`.multi_critical` — the critical-point search for that model, one teacher at a time
  (:func:`.multi_critical.search_teacher`), and its tables;
* :mod:`.sample_check` — whether a critical point's index is that of ``L̄_τ`` or of the
  sample: each point re-solved on an independent, larger sample (ours);
* :mod:`.charts` — the router charts of both models, and the deduplication and descent both
  searches share;
* :mod:`.symmetry` — the two-expert Gaussian model, the operator M and the gradient flow.

Arguments are checked with :mod:`moe_routing._internal.validation` (one idiom for the whole library).
"""

import pkgutil as _pkgutil

# The sub-modules are imported by name (``from moe_routing.landscape import multi_region``);
# ``__all__`` is every one of them whose name does not start with an underscore, so that a new
# module needs no second edit (tests/test_exports.py checks it against the files).
__all__ = sorted(m.name for m in _pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
