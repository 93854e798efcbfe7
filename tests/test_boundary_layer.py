"""The layer, not the dimension (boundary.layer): the experiment the soft → hard chapter runs,
against the chapter's former inline code as the reference, and the properties it rests on."""

import numpy as np
import pytest
from scipy import stats

from moe_routing.boundary import (FunctionExperts, GaussianLaw, LinearRouter, MoERegression,
                                  Teacher, boundary_mass_linear_gaussian, coarea_constant,
                                  layer_experiment, margin_constants, risk_bound,
                                  risk_layer_quadrature, sine_feature, tail_constant)

pytestmark = pytest.mark.kernels

SMALL = dict(n_perp=40, n_lines=2, seed=3, progress=False)


def reference_rows(dims, biases, tau, n_perp, n_lines, seed):
    """The soft → hard chapter's inline code before the experiment moved to the library."""
    def feature(d, g):
        om, ph = g.uniform(0.5, 2.0, d), g.uniform(0, 2 * np.pi, d)
        centre = np.sin(ph) * np.exp(-om ** 2 / 2)
        om, ph, centre = (a.astype(np.float32) for a in (om, ph, centre))

        def h(x):
            s = (np.sin(x.astype(np.float32) * om + ph) - centre).sum(1, dtype=np.float64)
            return np.tanh(s / np.sqrt(d))
        return h

    def constants_of(b):
        router, law = LinearRouter.binary([1.0], b=-b), GaussianLaw.standard(1)
        return (coarea_constant(router, law).value,
                tail_constant(lambda w: boundary_mass_linear_gaussian(router, law, w).estimate,
                              1.0))

    constants = {b: constants_of(b) for b in biases}
    rows = []
    for d in dims:
        gd = np.random.default_rng([seed, d])
        vhat = gd.standard_normal(d)
        vhat /= np.linalg.norm(vhat)
        h1, h2, hs = feature(d, gd), feature(d, gd), feature(d, gd)
        experts = FunctionExperts(
            lambda x, h1=h1, h2=h2: np.stack([1 + 0.5 * h1(x), -1 + 0.5 * h2(x)], 1), 2, 1.5)
        for b in biases:
            teacher = Teacher(lambda x, hs=hs, vhat=vhat, b=b: np.sign(x @ vhat - b)
                              + 0.5 * hs(x), 1.5)
            model = MoERegression(LinearRouter.binary(vhat, b=-b), experts, teacher)
            gap = risk_layer_quadrature(model, GaussianLaw.standard(d), [tau, tau / 4],
                                        n_perp=n_perp, n_lines=n_lines, n_gl=8, k_fine=0,
                                        rng=gd)
            S, C_m = constants[b]
            rows.append({"d": d, "b": b, "2S": 2 * S, "C_m": C_m,
                         "(L_τ − L_0)/τ": gap.gap[0] / tau, "se": gap.se[0] / tau,
                         "same at τ/4": gap.gap[1] / (tau / 4),
                         "se at τ/4": gap.se[1] / (tau / 4), "first order": gap.first_order,
                         "first order se": gap.first_order_se,
                         "bound / τ": risk_bound(tau, 2, 1.5, 1.5, C_m, 1.0)[0] / tau})
    return rows


def test_the_library_experiment_is_the_chapters_former_code_exactly():
    run = layer_experiment([1, 3], [0.0, 1.5], 0.02, **SMALL)
    ref = reference_rows([1, 3], [0.0, 1.5], 0.02, SMALL["n_perp"], SMALL["n_lines"],
                         SMALL["seed"])
    assert [c.row() for c in run.cells] == ref
    assert run.constants_of(1.5) == (ref[1]["2S"] / 2, ref[1]["C_m"])
    assert list(run.frame().columns) == list(ref[0])


def test_a_dimensions_cells_do_not_depend_on_the_other_dimensions():
    both = layer_experiment([2, 5], [0.0, 1.0], 0.02, **SMALL)
    alone = layer_experiment([5], [0.0, 1.0], 0.02, **SMALL)
    assert both.cells[2:] == alone.cells
    # the offsets of one dimension share its generator, in order
    assert layer_experiment([5], [1.0], 0.02, **SMALL).cells[0] != both.cells[3]


def test_the_margin_constants_are_the_gaussian_ones():
    S0, C0 = margin_constants(0.0)
    assert S0 == pytest.approx(stats.norm.pdf(0.0), rel=1e-6)
    assert C0 == pytest.approx(2 * S0, rel=1e-4)      # b < 1: BM(w)/w is largest as w → 0
    S2, C2 = margin_constants(2.0)
    assert S2 == pytest.approx(stats.norm.pdf(2.0), rel=1e-6)
    assert C2 > 2 * (2 * S2)                           # b > 1: the supremum is far from 0


def test_the_sine_feature_is_centred_in_every_dimension():
    for d in (1, 16, 256):
        h = sine_feature(d, np.random.default_rng(d))
        x = np.random.default_rng(100 + d).standard_normal((2 ** 15, d))
        s = np.arctanh(h(x)) * np.sqrt(d)              # the centred sum inside the tanh
        assert abs(s.mean()) < 5 * s.std() / np.sqrt(len(s)), d
        assert 0.05 < np.arctanh(h(x)).std() < 1.0     # of order one whatever d is


def test_an_offset_not_in_the_run_is_refused_by_name():
    run = layer_experiment([1], [0.0], 0.02, **SMALL)
    with pytest.raises(ValueError, match=r"b = 0\.5.*one of the run's offsets 0"):
        run.constants_of(0.5)
