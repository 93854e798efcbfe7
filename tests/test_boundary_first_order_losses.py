"""The first-order term of the mixture of losses, as the soft-to-hard chapter states it:
τ ln 2 ∫_Σ [(ℓ_2⁺ − ℓ_1⁺) + (ℓ_1⁻ − ℓ_2⁻)] p/|∇g|, where ℓ_k^± = (f*_± − f_k)² are the one-sided
limits on Σ from the sides g > 0 and g < 0 (not positive and negative parts)."""

import math

import numpy as np
import pytest

from moe_routing.boundary import (FunctionExperts, LinearRouter, MoERegression, Teacher,
                                  UniformBox, first_order_constant, risk_quad_1d)

pytestmark = pytest.mark.kernels

F_PLUS, F_MINUS = 0.5, -0.5          # f* jumps at the interface x = 0
F1, F2 = 0.2, 0.9                    # the experts' values on the interface (continuous)


def model():
    teacher = Teacher(lambda x: np.where(x[:, 0] > 0, F_PLUS, F_MINUS) + 0.4 * x[:, 0], 0.9)
    experts = FunctionExperts(
        lambda x: np.stack([F1 + 0.5 * x[:, 0], F2 + 0.0 * x[:, 0]], 1), 2, 1.0)
    return MoERegression(LinearRouter.binary([1.0]), experts, teacher, mixture="losses")


def one_sided_formula():
    l1p, l2p = (F_PLUS - F1) ** 2, (F_PLUS - F2) ** 2     # limits from the side g > 0
    l1m, l2m = (F_MINUS - F1) ** 2, (F_MINUS - F2) ** 2   # limits from the side g < 0
    p, grad = 0.5, 1.0                                    # U[−1, 1], g(x) = x
    return math.log(2) * ((l2p - l1p) + (l1m - l2m)) * p / grad


def test_first_order_constant_is_the_one_sided_limit_formula():
    m, U1 = model(), UniformBox.cube(1)
    expected = one_sided_formula()
    assert expected < 0                    # this gap has no sign: soft beats hard here
    assert first_order_constant(m, U1)[0] == pytest.approx(expected, rel=1e-8)
    taus = np.array([1e-3, 1e-4])
    slope = risk_quad_1d(m, U1, taus).gap / taus
    assert slope == pytest.approx([expected] * 2, abs=2e-3)


def test_positive_and_negative_parts_would_be_a_different_number():
    """Read as (z)₊ = max(z, 0) and (z)₋ = max(−z, 0) of the one-sided differences, the
    bracket would be non-negative; the measured first-order term is negative."""
    l1p, l2p = (F_PLUS - F1) ** 2, (F_PLUS - F2) ** 2
    l1m, l2m = (F_MINUS - F1) ** 2, (F_MINUS - F2) ** 2
    parts = math.log(2) * 0.5 * (max(l2p - l1p, 0.0) + max(-(l1m - l2m), 0.0))
    measured = first_order_constant(model(), UniformBox.cube(1))[0]
    assert parts > 0 > measured
    assert abs(parts - measured) > 0.5
