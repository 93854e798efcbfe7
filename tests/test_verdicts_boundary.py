"""Rules of paper B's boundary-mass, soft-to-hard and Γ-convergence claims: every outcome, on
both sides of every threshold (moe_routing._internal.verdicts.boundary)."""

import inspect
import re

import numpy as np
import pytest

from moe_routing._internal.verdicts import Verdict
from moe_routing._internal.verdicts import boundary as rules

#: every public function the module defines (derived, not listed by hand)
ALL = [f for name, f in vars(rules).items() if inspect.isfunction(f)
       and f.__module__ == rules.__name__ and not name.startswith("_")]


def test_rules_are_rules():
    # a public function of the rules module that forgot @rule would return a bare tuple
    assert {f.__name__ for f in ALL} >= {"bm_binary", "bm_exponents", "bm_multi", "bm_sharp",
                                         "risk_rate", "layer_not_dimension",
                                         "gamma_convergence"}
    assert [f.__name__ for f in ALL if not getattr(f, "is_rule", False)] == []


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
    assert rules.bm_exponents(cis, [0.5, 2.09]).verdict == "not supported"  # 0.06 > 0.05
    assert rules.bm_exponents(cis, [0.43, 2.0]).verdict == "not supported"  # 0.06 below


# ---------------------------------------------------------------- B-bm-multi (paper B's claim)

# two routers, three widths each: Monte Carlo lower ends below the closed-form pairwise bound
MULTI = dict(slopes=[1.01, 0.98], slope_cis=[(0.99, 1.03), (0.96, 1.001)],
             bm_lower=[[0.0030, 0.0100, 0.0300], [0.0050, 0.0160, 0.0500]],
             union=[[0.0062, 0.0205, 0.0610], [0.0072, 0.0240, 0.0715]])


def test_bm_multi_is_inconclusive_when_the_setting_cannot_contradict_it():
    # the union bound holds by construction and linear routers' interfaces are transversal:
    # both halves holding checks the code, it does not reproduce the claim
    v = rules.bm_multi(**MULTI)
    assert v.verdict == "inconclusive" and "holds by construction" in v.reason
    assert "tests our code" in v.reason and "all 2 slopes agree with 1" in v.reason
    assert "sharp" not in v.reason                      # the book's constant decides nothing here


@pytest.mark.parametrize("scale,verdict", [(1.0, "inconclusive"), (1.001, "not reproduced")])
def test_bm_multi_bound_threshold(scale, verdict):
    # lower end exactly on the bound at one width (ratio 1): not contradicted; just above: is
    lo = [[0.0030, 0.0100, 0.0300], [0.0050, 0.0240 * scale, 0.0500]]
    assert rules.bm_multi(**dict(MULTI, bm_lower=lo)).verdict == verdict


def test_bm_multi_a_bound_that_is_not_the_pairwise_sum_is_caught():
    # realistic bad input: the largest pair's slab probability in place of the sum over the
    # pairs (K = 4: one of six pairs, here a quarter of the sum); BM(w) lies above it beyond
    # its interval
    one_pair = [[u / 4 for u in row] for row in MULTI["union"]]
    v = rules.bm_multi(**dict(MULTI, union=one_pair))
    assert v.verdict == "not reproduced" and "above the pairwise bound" in v.reason


@pytest.mark.parametrize("slope,verdict", [(1.049, "inconclusive"), (1.051, "not reproduced"),
                                           (0.949, "not reproduced")])
def test_bm_multi_slope_threshold(slope, verdict):
    narrow = [(0.99, 1.01), (slope - 0.001, slope + 0.001)]         # 1 outside the interval
    assert rules.bm_multi(**dict(MULTI, slopes=[1.0, slope], slope_cis=narrow)).verdict == verdict
    wide = [(0.99, 1.01), (slope - 0.1, slope + 0.1)]                # 1 inside: noise, not a miss
    assert rules.bm_multi(**dict(MULTI, slopes=[1.0, slope], slope_cis=wide)).verdict == "inconclusive"


def test_bm_multi_degenerate_interface_is_not_linear():
    # BM ∝ √w (a tie set where the gradient vanishes): the bound may hold, linearity does not
    v = rules.bm_multi(**dict(MULTI, slopes=[1.0, 0.5], slope_cis=[(0.99, 1.01), (0.48, 0.52)]))
    assert v.verdict == "not reproduced" and "slope 0.500" in v.reason


def test_bm_multi_refuses_mismatched_rows():
    with pytest.raises(ValueError, match="one of each per router"):
        rules.bm_multi(**dict(MULTI, union=MULTI["union"][:1]))
    with pytest.raises(ValueError, match=r"bm_lower\[1\] of shape \(2,\)"):
        rules.bm_multi(**dict(MULTI, bm_lower=[[0.003, 0.01, 0.03], [0.005, 0.016]]))


# ---------------------------------------------------------------- X-bm-sharp (ours)

SHARP = dict(constants=[0.40, 0.69], constant_cis=[(0.39, 0.41), (0.68, 0.70)],
             sharp=[0.398, 0.684], sharp_se=[0.0, 0.001])


def test_bm_sharp_is_our_extension():
    v = rules.bm_sharp(**SHARP)
    assert v.verdict == "our extension" and "sharp" in v.reason
    assert v.rule.endswith("boundary.bm_sharp")


def test_bm_sharp_standard_error_widens_the_test():
    # 0.6770 is 0.003 below the interval: inside with 2 se = 0.004, outside with z = 1
    m = dict(SHARP, sharp=[0.398, 0.677], sharp_se=[0.0, 0.002])
    assert rules.bm_sharp(**m).verdict == "our extension"
    assert rules.bm_sharp(**m, z=1.0).verdict == "partly"


@pytest.mark.parametrize("sharp,verdict", [
    ([0.398, 0.665], "partly"),              # outside, 3.8 % off
    ([0.398, 0.650], "not supported"),      # outside, 6.2 % off
])
def test_bm_sharp_constant_thresholds(sharp, verdict):
    assert rules.bm_sharp(**dict(SHARP, sharp=sharp, sharp_se=[0.0, 0.0])).verdict == verdict


def test_bm_sharp_union_constant_in_place_of_the_sharp_one_fails():
    # a union constant (twice the sharp one) is far outside the Monte Carlo interval
    assert rules.bm_sharp(**dict(SHARP, sharp=[0.8, 1.4])).verdict == "not supported"


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

# the chapter's grid at the default profile (τ = 0.01): d ∈ {1, 4, 256} × b ∈ {0, 1, 2};
# (L_τ − L_0)/τ at τ and τ/4 with standard errors, interface integral with its standard error
_D = [1, 1, 1, 4, 4, 4, 256, 256, 256]
_B = [0, 1, 2] * 3
LAYER = dict(
    cells=[f"d = {d}, b = {b}" for d, b in zip(_D, _B)],
    gap=[0.7410, 0.4014, -0.0077, 0.5555, 0.3447, 0.0806, 0.5649, 0.3461, 0.0760],
    gap_se=[0.0, 0.0, 0.0, 0.0077, 0.0038, 0.0007, 0.0072, 0.0045, 0.0010],
    gap_quarter=[0.7469, 0.3970, -0.0061, 0.5542, 0.3432, 0.0815, 0.5650, 0.3459, 0.0759],
    gap_quarter_se=[0.0, 0.0, 0.0, 0.0077, 0.0038, 0.0007, 0.0072, 0.0045, 0.0010],
    first_order=[0.7488, 0.3955, -0.0055, 0.5560, 0.3397, 0.0820, 0.5701, 0.3456, 0.0772],
    first_order_se=[0.0, 0.0, 0.0, 0.0017, 0.0009, 0.0002, 0.0016, 0.0010, 0.0002],
    envelope_ratio=1.0, gap_over_bound=0.052)


def test_layer_not_dimension_reproduced_on_the_chapters_grid():
    v = rules.layer_not_dimension(**LAYER)
    assert v.verdict == "reproduced" and "all 9 cells" in v.reason


def test_layer_not_dimension_fails_with_a_dimension_effect():
    # realistic bad input: a bulk contribution 0.02·log2(d) that the interface integral does
    # not contain (a variance-share rule puts 5 % of this grid's variation in the dimension,
    # 91 % in the interface mass, and would read "reproduced")
    bulk = [0.02 * np.log2(d) for d in _D]
    bad = dict(LAYER, gap=[g + e for g, e in zip(LAYER["gap"], bulk)],
               gap_quarter=[g + e for g, e in zip(LAYER["gap_quarter"], bulk)])
    v = rules.layer_not_dimension(**bad)
    assert v.verdict == "not reproduced" and "d = 256" in v.reason


def test_layer_not_dimension_fails_with_a_wrong_first_order_constant():
    # ln 2 in place of 2 ln 2 − 1 in front of D²: the integral of a D²-dominated grid grows
    # by the factor ln 2 / (2 ln 2 − 1) = 1.79
    wrong = [f * np.log(2) / (2 * np.log(2) - 1) for f in LAYER["first_order"]]
    assert rules.layer_not_dimension(**dict(LAYER, first_order=wrong)).verdict == \
        "not reproduced"


def test_layer_not_dimension_fails_with_a_tail_constant_that_is_no_envelope():
    # C_m = 2S for the offset b = 2: BM(w)/w reaches 0.2815 = 2.61 × 0.108 (the bound itself,
    # with its slack, would still hold)
    v = rules.layer_not_dimension(**dict(LAYER, envelope_ratio=2.61))
    assert v.verdict == "not reproduced" and "not an envelope" in v.reason
    assert rules.layer_not_dimension(**dict(LAYER, envelope_ratio=1 + 1e-7)).verdict == \
        "reproduced"


def test_layer_not_dimension_bound_threshold():
    assert rules.layer_not_dimension(**dict(LAYER, gap_over_bound=1.0)).verdict == "reproduced"
    assert rules.layer_not_dimension(**dict(LAYER, gap_over_bound=1.01)).verdict == \
        "not reproduced"


@pytest.mark.parametrize("offset,verdict", [
    (0.0099, "reproduced"),          # within rel_tol = 1 % of the scale 1
    (0.0101, "partly"),              # beyond 1 %, within loose_tol = 5 %
    (0.0499, "partly"),
    (0.0501, "not reproduced"),      # beyond 5 %
])
def test_layer_not_dimension_tolerances(offset, verdict):
    one = dict(cells=["d = 1, b = 0", "d = 2, b = 0"], gap=[1.0, 0.5], gap_se=[0.0, 0.0],
               gap_quarter=[1.0, 0.5], gap_quarter_se=[0.0, 0.0],
               first_order=[1.0, 0.5 + offset], first_order_se=[0.0, 0.0],
               envelope_ratio=1.0, gap_over_bound=0.1)
    assert rules.layer_not_dimension(**one).verdict == verdict


def test_layer_not_dimension_extrapolates_the_order_tau_term():
    # r(τ) = A + Bτ with A on the integral: r(τ/4) alone misses by 3B τ/4, the limit does not
    one = dict(cells=["c"], gap=[1.2], gap_se=[0.0], gap_quarter=[1.05], gap_quarter_se=[0.0],
               first_order=[1.0], first_order_se=[0.0], envelope_ratio=1.0,
               gap_over_bound=0.1)
    assert rules.layer_not_dimension(**one).verdict == "reproduced"
    # the standard errors widen the test: limit (4·1.03 − 1)/3 = 1.04 misses by 0.04 = z·se
    # with se = 4 × 0.01 / 3
    noisy = dict(one, gap=[1.0], gap_quarter=[1.03], gap_quarter_se=[0.01])
    assert rules.layer_not_dimension(**noisy).verdict == "reproduced"
    assert rules.layer_not_dimension(**noisy, z=1.0).verdict != "reproduced"


def test_layer_not_dimension_refuses_ragged_columns():
    with pytest.raises(ValueError, match="one value per cell"):
        rules.layer_not_dimension(**dict(LAYER, first_order=LAYER["first_order"][:-1]))
    with pytest.raises(ValueError, match="negative standard error"):
        rules.layer_not_dimension(**dict(LAYER, gap_se=[-0.1] + LAYER["gap_se"][1:]))


# ---------------------------------------------------------------- B-gamma

GAMMA = dict(taus=[0.1, 0.01, 0.001], distances=[0.64, 0.16, 0.017],
             minimum_gaps=[-0.10, -0.057, -0.007], sup_over_bound=[0.4, 0.34, 0.31],
             counter_minima=[0.0014780, 0.0014780, 0.0014780], counter_hard_minimum=0.107,
             counter_scale_ratios=[6.159, 6.159, 6.1591])


def test_gamma_reproduced_for_our_construction():
    v = rules.gamma_convergence(**GAMMA)
    assert v.verdict == "reproduced for our construction" and "rate τ^" in v.reason


def test_gamma_a_strictly_decreasing_stall_is_not_convergence():
    # the sequence the old rule ("strictly decreasing") accepted: slope 0.08, last step 0.01
    v = rules.gamma_convergence(**dict(GAMMA, distances=[0.30, 0.21, 0.205]))
    assert v.verdict == "not reproduced" and "τ^0.08" in v.reason
    # the same stall in the minima
    stall = dict(GAMMA, minimum_gaps=[-0.10, -0.07, -0.068])
    assert rules.gamma_convergence(**stall).verdict == "not reproduced"


def test_gamma_a_stall_at_the_smallest_tau_is_not_averaged_away():
    # fast early steps (overall slope 0.85 ≥ 0.5) but the last step stalls (slope 0.03)
    v = rules.gamma_convergence(**dict(GAMMA, distances=[1.0, 0.0216, 0.02]))
    assert v.verdict == "not reproduced" and "last step τ^0.03" in v.reason


@pytest.mark.parametrize("last,verdict", [
    (0.16 * 10 ** -0.51, "reproduced for our construction"),    # last-step rate 0.51
    (0.16 * 10 ** -0.49, "not reproduced"),                     # last-step rate 0.49
])
def test_gamma_rate_threshold(last, verdict):
    d = dict(GAMMA, distances=[0.16 * 10 ** 0.51, 0.16, last])    # overall rate 0.51 / 0.50
    assert rules.gamma_convergence(**d).verdict == verdict


def test_gamma_rate_min_is_a_keyword():
    assert rules.gamma_convergence(**GAMMA, rate_min=1.0).verdict == "not reproduced"


def test_gamma_an_exactly_converged_minimiser_is_converged():
    v = rules.gamma_convergence(**dict(GAMMA, distances=[0.64, 0.16, 0.0]))
    assert v.verdict == "reproduced for our construction"


@pytest.mark.parametrize("change,verdict", [
    (dict(sup_over_bound=[0.4, 1.02, 0.31]), "partly"),               # bound fails
    (dict(counter_minima=[0.0014780, 0.0014792, 0.0014780]), "partly"),   # range > 1e-6
    (dict(counter_minima=[0.0014780, 0.00147899, 0.0014780]), "reproduced for our construction"),
    (dict(counter_hard_minimum=0.0114), "partly"),                    # 0.0099 below < 0.01
    (dict(counter_hard_minimum=0.0116), "reproduced for our construction"),
    (dict(counter_scale_ratios=[6.1, 6.159, 6.2]), "partly"),         # s_τ/τ not constant
])
def test_gamma_thresholds(change, verdict):
    assert rules.gamma_convergence(**dict(GAMMA, **change)).verdict == verdict


@pytest.mark.parametrize("change,match", [
    (dict(taus=[0.1, 0.01]), "at least 3 temperatures"),
    (dict(taus=[0.001, 0.01, 0.1]), "decreasing order"),
    (dict(distances=[0.64, 0.16]), "one distance"),
])
def test_gamma_refuses_malformed_input(change, match):
    with pytest.raises(ValueError, match=match):
        rules.gamma_convergence(**dict(GAMMA, **change))


def test_every_reason_is_one_line():
    outs = [rules.bm_binary(**BIN), rules.bm_multi(**MULTI), rules.bm_sharp(**SHARP),
            rules.risk_rate(**RISK),
            rules.layer_not_dimension(**LAYER), rules.gamma_convergence(**GAMMA),
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

    from moe_routing._internal.verdicts import rule

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
