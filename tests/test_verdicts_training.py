"""Rules of the training chapter, on both sides of each threshold (the "not reproduced"
outcome included)."""

import math

import pytest

from moe_routing._internal.verdicts import training as vt


# ---- runs_converged: CE drop < 5 %, accuracy change ≤ 2 pp ---------------------------------
def test_converged_both_sides_of_each_threshold():
    ok = vt.runs_converged({"a": 0.049, "b": 0.0}, {"a": 0.02, "b": -0.01})
    assert ok.verdict == "our extension" and "2 runs" in ok.reason
    v = vt.runs_converged({"a": 0.051, "b": 0.0}, {"a": 0.0, "b": 0.0})
    assert v.verdict == "not supported" and "(a)" in v.reason
    v = vt.runs_converged({"a": 0.0, "b": 0.0}, {"a": 0.0, "b": -0.021})
    assert v.verdict == "not supported" and "2.1 pp against its tolerance 2.0 pp (b)" in v.reason


def test_converged_tolerates_changes_the_test_set_cannot_resolve():
    drops, moves = {"a": 0.0}, {"a": 0.025}
    assert vt.runs_converged(drops, moves).verdict == "not supported"
    assert vt.runs_converged(drops, moves, {"a": 0.029}).verdict == "our extension"
    assert vt.runs_converged(drops, {"a": 0.03}, {"a": 0.029}).verdict == "not supported"
    assert vt.runs_converged(drops, moves, {"a": 0.001}).verdict == "not supported"  # 2 pp floor
    with pytest.raises(ValueError, match="acc_noise"):
        vt.runs_converged(drops, moves, {"b": 0.01})


def test_converged_refuses_mismatched_runs_and_nan():
    with pytest.raises(ValueError, match="acc_changes"):
        vt.runs_converged({"a": 0.0}, {"b": 0.0})
    with pytest.raises(ValueError, match="acc_changes"):
        vt.runs_converged({"a": 0.0}, {"a": math.nan})


# ---- routing_diffuse: NMI < min(0.2, 0.2 × ceiling), loads shared, models trained ----------
CEIL = 0.79                                            # threshold 0.158
SHARED, TRAINED = (0.9, 0.9), (0.9, 0.9)               # load entropies, accuracies


def diffuse(nmis, ceiling=CEIL, loads=SHARED, accs=TRAINED, **kw):
    return vt.routing_diffuse(*nmis, ceiling, *loads, *accs, **kw)


@pytest.mark.parametrize("nmis,verdict", [
    ((0.15, 0.15, 0.15, 0.15), "reproduced"),
    ((0.15, 0.15, 0.16, 0.15), "partly"),              # object position above
    ((0.16, 0.15, 0.0, 0.0), "partly"),                # only CE + LB diffuse
    ((0.16, 0.16, 0.0, 0.0), "not reproduced"),
])
def test_diffuse_sides(nmis, verdict):
    assert diffuse(nmis).verdict == verdict


def test_diffuse_absolute_cap_applies_when_ceiling_is_one():
    assert diffuse((0.19, 0.19, 0.1, 0.1), 1.0).verdict == "reproduced"
    assert diffuse((0.21, 0.21, 0.1, 0.1), 1.0).verdict == "not reproduced"


@pytest.mark.parametrize("loads,verdict", [
    ((0.80, 0.80), "reproduced"), ((0.79, 0.80), "partly"), ((0.0, 0.0), "not reproduced")])
def test_diffuse_needs_the_load_shared(loads, verdict):
    """NMI 0 with every token at one expert (constant logits) is not diffuse routing."""
    v = diffuse((0.0, 0.0, 0.0, 0.0), loads=loads)
    assert v.verdict == verdict
    if verdict != "reproduced":
        assert "load not shared" in v.reason


@pytest.mark.parametrize("accs,verdict", [
    ((0.5, 0.5), "reproduced"), ((0.49, 0.9), "inconclusive"), ((0.02, 0.02), "inconclusive")])
def test_diffuse_judges_trained_models_only(accs, verdict):
    v = diffuse((0.0, 0.0, 0.0, 0.0), accs=accs)
    assert v.verdict == verdict
    if verdict != "reproduced":
        assert "untrained" in v.reason


# ---- routing_aligned: diagonal ≥ 0.75 and NMI ≥ 2 ×; partly: diagonal ≥ 0.5, NMI > ----------
@pytest.mark.parametrize("diag,nmi,verdict", [
    (0.75, 0.40, "reproduced"),
    (0.74, 0.40, "partly"),
    (0.80, 0.39, "partly"),                            # NMI ratio 1.95 < 2
    (0.50, 0.21, "partly"),
    (0.49, 0.40, "not reproduced"),
    (0.80, 0.20, "not reproduced"),                    # NMI not above the standard ones
])
def test_aligned_sides(diag, nmi, verdict):
    assert vt.routing_aligned(diag, nmi, 0.20, 0.10).verdict == verdict


def test_aligned_is_inconclusive_for_an_untrained_router():
    v = vt.routing_aligned(0.10, 0.05, 0.20, 0.10, 0.02)
    assert v.verdict == "inconclusive" and "untrained" in v.reason
    assert vt.routing_aligned(0.10, 0.05, 0.20, 0.10, 0.9).verdict == "not reproduced"


# ---- accuracy_comparable: paired differences, equivalence within 3 pp ----------------------
def dv(mean, half=0.01):
    """A paired difference (mean, low, high)."""
    return (mean, mean - half, mean + half)


def iv(mean, half=0.01):
    return (mean, max(0.0, mean - half), min(1.0, mean + half))


HOLD = (dv(-0.01), dv(0.0), 0.9)            # router within 3 pp of both
LOSE = (dv(-0.10), dv(-0.08), 0.9)          # resolvably more than 3 pp worse
UNDECIDED = (dv(0.0, 0.08), dv(0.0, 0.08), 0.9)  # identical cells, wide intervals


def test_comparable_sound_broken_and_undecidable():
    assert vt.accuracy_comparable({(10, 3): HOLD, (10, 7): HOLD}).verdict == "reproduced"
    assert vt.accuracy_comparable({(10, 3): LOSE, (10, 7): LOSE}).verdict == "not reproduced"
    v = vt.accuracy_comparable({(10, 3): UNDECIDED, (10, 7): UNDECIDED})
    assert v.verdict == "inconclusive" and "cannot decide" in v.reason


def test_comparable_of_identical_wide_cells_is_not_a_refutation():
    """The issue's case: three identical wide intervals were read "not reproduced"."""
    assert vt.accuracy_comparable({(10, 7): UNDECIDED}, min_expert_counts=1).verdict == \
        "inconclusive"


@pytest.mark.parametrize("low,word", [(-0.03, "reproduced"), (-0.031, "inconclusive")])
def test_comparable_margin_is_three_points(low, word):
    d = (-0.01, low, 0.01)
    assert vt.accuracy_comparable({(10, 3): (d, d, 0.9), (10, 7): (d, d, 0.9)}).verdict == word


def test_comparable_unconverged_runs_decide_nothing_either_way():
    for cells in ({(10, 3): HOLD, (10, 7): HOLD}, {(10, 3): LOSE, (10, 7): LOSE}):
        v = vt.accuracy_comparable(cells, converged=False)
        assert v.verdict == "inconclusive" and "not converged" in v.reason


def test_comparable_partly_and_needs_two_expert_counts():
    cells = {(10, 3): HOLD, (10, 5): HOLD, (10, 7): LOSE}
    assert vt.accuracy_comparable(cells).verdict == "partly"
    v = vt.accuracy_comparable({(10, 3): HOLD, (20, 3): HOLD})
    assert v.verdict == "partly" and "fewer than 2" in v.reason


def test_comparable_needs_trained_standard_models():
    weak = (dv(0.0), dv(0.0), 0.3)
    v = vt.accuracy_comparable({(10, 3): weak, (10, 7): weak})
    assert v.verdict == "inconclusive" and "no cell informative" in v.reason


def test_comparable_accepts_paired_differences():
    from moe_routing.experiments.accuracy import paired_difference

    d = paired_difference([0.95, 0.90, 0.93], [0.951, 0.905, 0.93])
    assert vt.accuracy_comparable({(10, 3): (d, d, 0.9), (10, 7): (d, d, 0.9)}).verdict == \
        "reproduced"


def test_comparable_refuses_bad_input():
    with pytest.raises(ValueError, match="cells"):
        vt.accuracy_comparable({})
    with pytest.raises(ValueError, match=r"cells\[\(10, 3\)\]"):
        vt.accuracy_comparable({(10, 3): (dv(0.0), dv(0.0))})
    with pytest.raises(ValueError, match="low ≤ mean ≤ high"):
        vt.accuracy_comparable({(10, 3): ((0.0, 0.1, -0.1), dv(0.0), 0.9)})


# ---- accuracy_in_band: the router's level where the standard objectives reach the band ----
def test_in_band_sound_broken_and_undecidable():
    assert vt.accuracy_in_band([iv(0.90), iv(0.91)], [iv(0.90)]).verdict == "reproduced"
    v = vt.accuracy_in_band([iv(0.90), iv(0.91)], [iv(0.80), iv(0.82)])
    assert v.verdict == "not reproduced" and "2 of 2 router cells" in v.reason
    v = vt.accuracy_in_band([iv(0.70), iv(0.91)], [iv(0.60)])
    assert v.verdict == "inconclusive" and "not a refutation" in v.reason


def test_in_band_partly_and_undecided_router():
    assert vt.accuracy_in_band([iv(0.9)], [iv(0.80), iv(0.9), iv(0.9)]).verdict == "partly"
    v = vt.accuracy_in_band([iv(0.9)], [iv(0.875, 0.02)])
    assert v.verdict == "inconclusive" and "interval reaches" in v.reason


def test_in_band_unconverged_is_inconclusive_both_ways():
    for router in ([iv(0.90)], [iv(0.80)]):
        assert vt.accuracy_in_band([iv(0.9)], router, converged=False).verdict == \
            "inconclusive"


def test_in_band_above_the_band_is_reported_not_held_against():
    v = vt.accuracy_in_band([iv(0.97)], [iv(0.96)])
    assert v.verdict == "reproduced" and "above the band" in v.reason


# ---- active_parameters: testable only where it could fail ----------------------------------
BINDS = dv(-0.10)                                       # one expert resolvably 10 pp below dense
ACC = (0.9, 0.9, 0.9)
EVEN = dv(0.0)


def active(d_dense=EVEN, d_std=EVEN, d_one=BINDS, accs=ACC, ratio=0.5, share=0.2,
           e=7, **kw):
    return vt.active_parameters(d_dense, d_std, d_one, accs, ratio, share, e, **kw)


@pytest.mark.parametrize("d_dense,d_std,verdict", [
    (dv(0.0), dv(0.0), "reproduced"),
    (dv(-0.10), dv(0.0), "partly"),
    (dv(0.0), dv(-0.10), "partly"),
    (dv(-0.10), dv(-0.10), "not reproduced"),
    (dv(-0.03, 0.02), dv(0.0), "inconclusive"),          # straddles −3 pp
])
def test_active_parameters_sides(d_dense, d_std, verdict):
    assert active(d_dense, d_std).verdict == verdict


def test_active_parameters_is_untestable_without_a_reduction():
    """At the chapter's size one expert is ~1 % of a token's active parameters: the ratio is
    ~0.95 whatever the routing, and the rule must say it cannot test the claim."""
    v = active(ratio=0.95, share=0.01)
    assert v.verdict == "inconclusive" and "untestable at this size" in v.reason
    assert "1.9 %" in v.reason                   # (1/0.9 − 1)/6 = 1.85 %


def test_active_parameters_is_inconclusive_when_capacity_does_not_bind():
    v = active(d_one=dv(-0.01))
    assert v.verdict == "inconclusive" and "capacity does not bind" in v.reason


def test_active_parameters_of_untrained_or_unconverged_models_is_inconclusive():
    assert "untrained" in active(accs=(0.04, 0.9, 0.9)).reason
    assert active(accs=(0.04, 0.9, 0.9)).verdict == "inconclusive"
    v = active(d_dense=dv(-0.10), d_std=dv(-0.10), converged=False)
    assert v.verdict == "inconclusive" and "not converged" in v.reason


def test_the_chapter_states_the_rules_thresholds():
    """The training chapter's prose names the routing thresholds; they must be the rules' own
    defaults (a threshold changed in the rule and not in the text would mislead the reader)."""
    import inspect
    from pathlib import Path

    from moe_routing._internal.verdicts import training as rules

    text = " ".join((Path(__file__).resolve().parents[1] / "notebooks" / "training.md")
                    .read_text(encoding="utf-8").split())
    diffuse = inspect.signature(rules.routing_diffuse).parameters
    aligned = inspect.signature(rules.routing_aligned).parameters
    assert diffuse["max_share_of_ceiling"].default == 0.2      # "a fifth of the ceiling"
    assert f"below a fifth of the ceiling and below {diffuse['max_nmi'].default:g}" in text
    assert f"diagonal mass of at least {aligned['min_diagonal'].default:g}" in text
    assert aligned["min_nmi_ratio"].default == 2.0 and "an NMI at least twice" in text
    assert f"load entropy of at least {diffuse['min_load_entropy'].default:g}" in text
    assert diffuse["min_accuracy"].default == 0.5 and "test accuracy at least 50 %" in text
    comparable = inspect.signature(rules.accuracy_comparable).parameters
    assert comparable["margin"].default == 0.03 and "within 3 pp" in text
