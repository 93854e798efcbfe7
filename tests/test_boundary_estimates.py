"""The boundary-mass chapter's measurement: predicted laws C·w^α and sharp K > 2 constants
confronted with Monte Carlo (moe_routing.boundary.estimates), and the statistics under it."""

import numpy as np
import pytest

from moe_routing.boundary import (GaussianLaw, LinearRouter, PowerRouter, bootstrap_bm_fit,
                                  check_junction_constant, check_power_law, coarea_constant,
                                  fit_interface_constant, simultaneous_confidence,
                                  variance_shares, widths_for)

pytestmark = pytest.mark.kernels


def test_widths_for_spans_the_boundary_mass_range():
    for alpha, pref in ((1.0, 0.7), (0.5, 0.8), (3.0, 1.0)):
        w = widths_for(alpha, pref, (2e-3, 4e-2), 9)
        assert w.shape == (9,)
        np.testing.assert_allclose(pref * w[[0, -1]] ** alpha, [2e-3, 4e-2], rtol=1e-12)
        np.testing.assert_allclose(np.diff(np.log(w)), np.log(w[1] / w[0]), rtol=1e-10)
    with pytest.raises(ValueError, match="bm_range"):
        widths_for(1.0, 1.0, (4e-2, 2e-3))


def test_simultaneous_confidence_is_bonferroni():
    assert simultaneous_confidence(1) == pytest.approx(0.95)
    assert simultaneous_confidence(8) == pytest.approx(1 - 0.05 / 8)
    assert simultaneous_confidence(4, family=0.9) == pytest.approx(0.975)


def test_misses_by_chance_in_a_table_of_eight():
    """The boundary-mass chapter's statement: with plain 95 % intervals a table of eight
    correct predictions shows 0.4 misses on average and at least one with probability
    1 − 0.95⁸ ≈ 0.34 (independent intervals); the Bonferroni levels bring that below 0.05."""
    from scipy import stats
    rng = np.random.default_rng(0)
    m, reps = 8, 200_000
    z = np.abs(rng.standard_normal((reps, m)))            # |estimate − truth| / standard error
    plain = z > stats.norm.ppf(0.975)
    simultaneous = z > stats.norm.ppf(1 - (1 - simultaneous_confidence(m)) / 2)
    assert plain.sum(1).mean() == pytest.approx(0.05 * m, abs=0.01)
    assert plain.any(1).mean() == pytest.approx(1 - 0.95**m, abs=0.005)
    assert 0.3 < plain.any(1).mean() < 0.4                 # far from certain, far from rare
    assert simultaneous.any(1).mean() <= 0.05 + 0.003
    assert simultaneous.any(1).mean() == pytest.approx(1 - simultaneous_confidence(m) ** m,
                                                       abs=0.003)


def test_check_power_law_accepts_the_true_law_and_rejects_a_wrong_constant():
    law = GaussianLaw.standard(3, mean=[0.3, 0.0, 0.0])
    router = LinearRouter.binary([1.0, 0.5, -0.5], b=0.2)
    two_s = 2 * coarea_constant(router, law).value
    good = check_power_law(router, law, 1.0, two_s, 1_000_000, n_widths=8, n_boot=300, rng=0)
    assert good.slope_covers and good.prefactor_covers
    assert abs(good.relative_error) < 0.02
    assert good.widths.shape == (8,) and good.bm.counts.shape == (8,)
    # a constant off by 5 % (the one a one-sided/two-sided slip would give is 100 %) is caught
    bad = check_power_law(router, law, 1.0, 1.05 * two_s, 1_000_000, n_boot=300, rng=0)
    assert not bad.prefactor_covers and bad.relative_error == pytest.approx(1 / 1.05 - 1, abs=0.02)


def test_check_power_law_finds_the_square_root_exponent():
    law = GaussianLaw.standard(2)
    router = PowerRouter(2, power=2.0)
    pref = 2 / np.sqrt(2 * np.pi)               # BM(w) = 2Φ(√w) − 1 ≈ 2φ(0)√w
    chk = check_power_law(router, law, 0.5, pref, 1_000_000, n_boot=300, rng=1)
    assert chk.slope_covers and abs(chk.free.slope - 0.5) < 0.02
    assert chk.fixed.slope == 0.5 and abs(chk.relative_error) < 0.03     # prefactor at slope α
    wrong = check_power_law(router, law, 1.0, pref, 1_000_000, n_boot=300, rng=1)
    assert not wrong.slope_covers                  # a linear law is rejected


def test_interface_constant_removes_the_linear_drift():
    """BM(w) = 2c·w + q·w² (a junction term): the intercept recovers c, a slope-1 fit does not."""
    c, q, n = 0.6, -3.0, 4_000_000
    w = widths_for(1.0, 2 * c, (2e-3, 4e-2), 10)
    bm = 2 * c * w + q * w ** 2
    exact_counts = np.round(n * bm)
    fit = fit_interface_constant(w, exact_counts, n, n_boot=200, rng=0)
    assert fit.constant == pytest.approx(c, rel=1e-3)
    assert fit.drift == pytest.approx(q / 2, rel=0.02)
    slope_one = bootstrap_bm_fit(w, exact_counts, n, n_boot=50, rng=0, fixed_slope=1.0)
    assert abs(slope_one.prefactor / (2 * c) - 1) > 0.02      # biased by the drift
    # sampled counts: the interval covers c and is a few per cent wide
    rng = np.random.default_rng(3)
    bins = rng.multinomial(n, np.diff(np.concatenate([[0], bm, [1]])))
    counts = np.cumsum(bins[:-1])
    fit = fit_interface_constant(w, counts, n, n_boot=400, rng=1)
    assert fit.constant_ci[0] < c < fit.constant_ci[1]
    assert fit.constant_ci[1] - fit.constant_ci[0] < 0.05 * c


@pytest.mark.parametrize("d", [2, 3])
def test_junction_check_covers_the_sharp_and_not_the_union_constant(d):
    law = GaussianLaw.standard(d, mean=0.2 * np.ones(d))
    router = LinearRouter.random(4, d, rng=7)
    chk = check_junction_constant(router, law, 1_000_000, n_widths=8, n_boot=300,
                                  n_cond=100_000, rng=2)
    J = chk.constants
    assert chk.sharp_covered and abs(chk.slope.slope - 1) < 0.05
    assert not (chk.constant.constant_ci[0] <= J.union_total <= chk.constant.constant_ci[1])
    assert np.all(chk.union >= chk.bm.estimate)                 # context: the bound holds


def test_variance_shares_split_rows_and_columns():
    cols = np.tile([1.0, 2.0, 5.0], (4, 1))                      # varies with columns only
    assert variance_shares(cols) == pytest.approx((0.0, 1.0, 0.0))
    rows = cols.T
    assert variance_shares(rows) == pytest.approx((1.0, 0.0, 0.0))
    y = np.add.outer([0.0, 0.1, 0.2], [1.0, 3.0]) + np.array([[0.01, -0.01]] * 3)
    r, c, e = variance_shares(y)
    assert r + c + e == pytest.approx(1.0) and c > 0.9 and r < 0.1
    with pytest.raises(ValueError, match="values"):
        variance_shares(np.ones((3, 2)))
