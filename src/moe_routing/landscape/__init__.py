"""The dynamic half of paper B: landscape transfer (Theorem 5.17) and symmetry breaking
(Proposition 6.3).

* :mod:`.teacher_student` — the teacher–student model (K = 2 regions in d = 2, affine experts,
  fixed-scale linear router), soft/hard risks, closed-form expert refits;
* :mod:`.shape_derivative` — the boundary-integral gradient of the hard risk;
* :mod:`.hessian` — gradients and Hessians (autograd for soft, shape derivative for hard);
* :mod:`.critical_points` — the search for minima *and* saddles, and their classification;
* :mod:`.multi_region` — the same question beyond two regions: K ≥ 2 regions of R^d, linear
  softmax router in a chart without shift and scale redundancy, profiled soft objective on a
  fixed quasi-Monte Carlo sample;
* :mod:`.multi_critical` — the critical-point search for that model;
* :mod:`.symmetry` — the two-expert Gaussian model, the operator M and the gradient flow.
"""
