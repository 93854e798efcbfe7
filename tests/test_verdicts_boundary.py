"""Rules of paper B's boundary-mass, soft-to-hard and Γ-convergence claims: every outcome, on
both sides of every threshold (moe_routing.verdicts.boundary)."""

import re

import pytest

from moe_routing.verdicts import Verdict
from moe_routing.verdicts import boundary as rules

ALL = [rules.bm_binary, rules.bm_exponents, rules.bm_multi, rules.risk_rate,
       rules.layer_not_dimension, rules.gamma_convergence]


def test_rules_are_rules():
    assert all(getattr(r, "is_rule", False) for r in ALL)


# ---------------------------------------------------------------- B-bm-binary

BIN = dict(slope_cis=[(0.99, 1.01), (0.98, 1.02)], prefactors=[0.70, 0.48],
           prefactor_cis=[(0.69, 0.71), (0.47, 0.49)], predicted=[0.705, 0.483])


def test_bm_binary_reproduced():
    v = rules.bm_binary(**BIN)
    assert isinstance(v, Verdict) and v.verdict == "reproduced"
    assert v.rule.endswith("boundary.bm_binary") and "0.007" in v.reason


@pytest.mark.parametrize("predicted,verdict", [
    ([0.705, 0.4999], "partly"),            # just outside the interval, 3.4 % off: ≤ 5 %
    ([0.705, 0.5080], "not reproduced"),    # 5.5 % off: > rel_tol
])
def test_bm_binary_constant_thresholds(predicted, verdict):
    assert rules.bm_binary(**dict(BIN, predicted=predicted)).verdict == verdict


def test_bm_binary_rel_tol_is_a_keyword():
    off = dict(BIN, predicted=[0.705, 0.5080])
    assert rules.bm_binary(**off, rel_tol=0.06).verdict == "partly"


def test_bm_binary_slope_excluding_one_is_not_reproduced():
    v = rules.bm_binary(**dict(BIN, slope_cis=[(0.99, 1.01), (1.001, 1.02)]))
    assert v.verdict == "not reproduced" and "1 of 2 slope" in v.reason


# ---------------------------------------------------------------- X-bm-exponents

def test_bm_exponents_three_outcomes():
    cis = [(0.49, 0.51), (1.98, 2.03)]
    assert rules.bm_exponents(cis, [0.5, 2.0]).verdict == "our extension"
    assert rules.bm_exponents(cis, [0.5, 2.07]).verdict == "partly"          # 0.04 ≤ 0.05
    assert rules.bm_exponents(cis, [0.5, 2.09]).verdict == "not reproduced"  # 0.06 > 0.05
    assert rules.bm_exponents(cis, [0.43, 2.0]).verdict == "not reproduced"  # 0.06 below


# ---------------------------------------------------------------- B-bm-multi

MULTI = dict(constants=[0.40, 0.69], constant_cis=[(0.39, 0.41), (0.68, 0.70)],
             sharp=[0.398, 0.684], sharp_se=[0.0, 0.001], slopes=[1.01, 0.98],
             slope_cis=[(0.99, 1.03), (0.96, 1.001)])


def test_bm_multi_reproduced_uses_the_sharp_constant():
    v = rules.bm_multi(**MULTI)
    assert v.verdict == "reproduced" and "sharp" in v.reason


def test_bm_multi_sharp_standard_error_widens_the_test():
    # 0.6770 is 0.003 below the interval: inside with 2 se = 0.004, outside with z = 1
    m = dict(MULTI, sharp=[0.398, 0.677], sharp_se=[0.0, 0.002])
    assert rules.bm_multi(**m).verdict == "reproduced"
    assert rules.bm_multi(**m, z=1.0).verdict == "partly"


@pytest.mark.parametrize("sharp,verdict", [
    ([0.398, 0.665], "partly"),              # outside, 3.8 % off
    ([0.398, 0.650], "not reproduced"),      # outside, 6.2 % off
])
def test_bm_multi_constant_thresholds(sharp, verdict):
    assert rules.bm_multi(**dict(MULTI, sharp=sharp, sharp_se=[0.0, 0.0])).verdict == verdict


def test_bm_multi_union_constant_in_place_of_the_sharp_one_fails():
    # a union constant (twice the sharp one) is far outside the Monte Carlo interval
    assert rules.bm_multi(**dict(MULTI, sharp=[0.8, 1.4])).verdict == "not reproduced"


@pytest.mark.parametrize("slope,verdict", [(1.049, "reproduced"), (1.051, "not reproduced"),
                                           (0.949, "not reproduced")])
def test_bm_multi_slope_threshold(slope, verdict):
    narrow = [(0.99, 1.01), (slope - 0.001, slope + 0.001)]         # 1 outside the interval
    assert rules.bm_multi(**dict(MULTI, slopes=[1.0, slope], slope_cis=narrow)).verdict == verdict
    wide = [(0.99, 1.01), (slope - 0.1, slope + 0.1)]                # 1 inside: noise, not a miss
    assert rules.bm_multi(**dict(MULTI, slopes=[1.0, slope], slope_cis=wide)).verdict == "reproduced"


# ---------------------------------------------------------------- B-risk-linear / B-risk-alpha

RISK = dict(slopes=[1.0001, 0.9974], slope_cis=[(1.0, 1.0002), (0.992, 1.0025)],
            alphas=[1.0, 1.0], gap_over_bound=[0.1, 0.04])


def test_risk_rate_reproduced():
    v = rules.risk_rate(**RISK)
    assert v.verdict == "reproduced" and "0.100 ≤ 1" in v.reason


def test_risk_rate_bound_violation_is_not_reproduced():
    assert rules.risk_rate(**dict(RISK, gap_over_bound=[1.0, 0.04])).verdict == "reproduced"
    assert rules.risk_rate(**dict(RISK, gap_over_bound=[1.001, 0.04])).verdict == "not reproduced"


@pytest.mark.parametrize("slope,verdict", [
    (1.0099, "reproduced"),        # outside a collapsed interval, within slope_tol
    (1.0101, "partly"),            # falls faster than τ: bound not contradicted
    (0.9901, "reproduced"),
    (0.9899, "not reproduced"),    # falls slower than τ: no C·τ bound can hold
])
def test_risk_rate_slope_threshold(slope, verdict):
    r = dict(RISK, slopes=[slope, 0.9974], slope_cis=[(slope, slope), (0.992, 1.0025)])
    assert rules.risk_rate(**r).verdict == verdict


def test_risk_rate_alpha_not_one():
    r = dict(slopes=[0.5, 2.0], slope_cis=[(0.5, 0.5), (2.0, 2.0)], alphas=[0.5, 2.0],
             gap_over_bound=[0.11, 0.06])
    assert rules.risk_rate(**r).verdict == "reproduced"
    assert rules.risk_rate(**dict(r, alphas=[1.0, 2.0])).verdict == "not reproduced"


# ---------------------------------------------------------------- B-layer-not-dimension

@pytest.mark.parametrize("mass,dim,ratio,verdict", [
    (0.95, 0.01, 0.4, "reproduced"),
    (0.80, 0.10, 0.4, "reproduced"),       # both thresholds reached exactly
    (0.79, 0.05, 0.4, "partly"),           # the mass explains too little, the dimension nothing
    (0.85, 0.11, 0.4, "not reproduced"),   # the dimension explains too much
    (0.95, 0.01, 1.01, "not reproduced"),  # the dimension-free bound fails
])
def test_layer_not_dimension(mass, dim, ratio, verdict):
    assert rules.layer_not_dimension(mass, dim, ratio).verdict == verdict


# ---------------------------------------------------------------- B-gamma

GAMMA = dict(distances=[0.64, 0.16, 0.017], minimum_gaps=[-0.10, -0.057, -0.007],
             sup_over_bound=[0.4, 0.34, 0.31], counter_minima=[0.0014780, 0.0014780, 0.0014780],
             counter_hard_minimum=0.107, counter_scale_ratios=[6.159, 6.159, 6.1591])


def test_gamma_reproduced_for_our_construction():
    v = rules.gamma_convergence(**GAMMA)
    assert v.verdict == "reproduced for our construction"


@pytest.mark.parametrize("change,verdict", [
    (dict(distances=[0.64, 0.16, 0.16]), "not reproduced"),          # minimisers stall
    (dict(minimum_gaps=[-0.10, -0.11, -0.007]), "not reproduced"),    # minima move away
    (dict(sup_over_bound=[0.4, 1.02, 0.31]), "partly"),               # bound fails
    (dict(counter_minima=[0.0014780, 0.0014792, 0.0014780]), "partly"),   # range > 1e-6
    (dict(counter_minima=[0.0014780, 0.00147899, 0.0014780]), "reproduced for our construction"),
    (dict(counter_hard_minimum=0.0114), "partly"),                    # 0.0099 below < 0.01
    (dict(counter_hard_minimum=0.0116), "reproduced for our construction"),
    (dict(counter_scale_ratios=[6.1, 6.159, 6.2]), "partly"),         # s_τ/τ not constant
])
def test_gamma_thresholds(change, verdict):
    assert rules.gamma_convergence(**dict(GAMMA, **change)).verdict == verdict


def test_every_reason_is_one_line():
    outs = [rules.bm_binary(**BIN), rules.bm_multi(**MULTI), rules.risk_rate(**RISK),
            rules.layer_not_dimension(0.9, 0.0, 0.1), rules.gamma_convergence(**GAMMA),
            rules.gamma_convergence(**dict(GAMMA, counter_hard_minimum=0.0))]
    assert all(o.reason and "\n" not in o.reason for o in outs)


# ---------------------------------------------------------------- NaN is refused, not judged

@pytest.mark.parametrize("field,value,where", [
    ("predicted", [0.705, float("nan")], "predicted[1]"),
    ("slope_cis", [(0.99, 1.01), (float("nan"), 1.02)], "slope_cis[1][0]"),
])
def test_a_nan_measurement_is_refused_with_its_place(field, value, where):
    # without the refusal, a NaN constant fails both `<= rel_tol` and `> rel_tol` and the rule
    # would fall through to a verdict
    with pytest.raises(ValueError, match=rf"bm_binary: {re.escape(where)} = nan"):
        rules.bm_binary(**dict(BIN, **{field: value}))


def test_nan_in_arrays_mappings_and_keywords_is_refused():
    import numpy as np

    from moe_routing.verdicts import rule

    @rule
    def judge(values, table, *, tol=0.1):
        return "partly", "judged"

    assert judge([1.0], {"a": 2.0}).verdict == "partly"
    assert judge(np.ones(3), {"a": (1, "text")}, tol=float("inf")).verdict == "partly"
    for args, kwargs, where in [((np.array([1.0, np.nan]), {}), {}, r"values\[1\]"),
                                (([1.0], {"ce": [0.1, float("nan")]}), {}, r"table\['ce'\]\[1\]"),
                                (([1.0], {}), {"tol": float("nan")}, "tol = nan")]:
        with pytest.raises(ValueError, match=where):
            judge(*args, **kwargs)
