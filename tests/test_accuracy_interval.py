"""Accuracy intervals: the larger of the seed spread and the binomial error, refusals."""

import math

import numpy as np
import pytest

from moe_routing.experiments import accuracy_interval


def test_binomial_error_sets_the_width_when_seeds_agree():
    iv = accuracy_interval([0.9, 0.9, 0.9], 1000)
    assert iv.source == "binomial"
    assert iv.half_width == pytest.approx(1.96 * math.sqrt(0.9 * 0.1 / 3000))
    assert iv.low < 0.9 < iv.high


def test_seed_spread_sets_the_width_when_seeds_disagree():
    accs = [0.80, 0.90, 0.95]
    iv = accuracy_interval(accs, 10_000)
    assert iv.source == "seeds"
    assert iv.half_width == pytest.approx(1.96 * np.std(accs, ddof=1) / math.sqrt(3))


def test_one_seed_uses_the_binomial_error_and_says_so():
    iv = accuracy_interval([0.5], 400)
    assert iv.source == "binomial (one seed)"
    assert math.isnan(iv.seed_se)
    assert iv.half_width == pytest.approx(1.96 * 0.025)


def test_interval_is_clipped_to_the_unit_interval():
    iv = accuracy_interval([1.0, 0.98], 50)
    assert iv.high == 1.0 and iv.low >= 0


def test_intervals_resolve_a_real_difference_and_not_noise():
    a = accuracy_interval([0.90, 0.91, 0.90], 1000)
    b = accuracy_interval([0.84, 0.85, 0.845], 1000)
    assert not a.overlaps(b)
    c = accuracy_interval([0.905, 0.90, 0.895], 1000)
    assert a.overlaps(c)


@pytest.mark.parametrize("accs, n, match", [([], 100, "accuracies"), ([1.2], 100, "accuracies"),
                                            ([0.5, float("nan")], 100, "accuracies"),
                                            ([0.5], 0, "n_tests"), ([0.5], 10.5, "n_tests"),
                                            ([0.5, 0.6], [10, 20, 30], "n_tests")])
def test_bad_input_is_refused_with_its_name(accs, n, match):
    with pytest.raises(ValueError, match=match):
        accuracy_interval(accs, n)
