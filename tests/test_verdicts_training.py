"""Rules of the training chapter, on both sides of each threshold (the "not reproduced"
outcome included)."""

import math

import pytest

from moe_routing.verdicts import training as vt


# ---- runs_converged: CE drop < 5 %, accuracy change ≤ 2 pp ---------------------------------
def test_converged_both_sides_of_each_threshold():
    ok = vt.runs_converged({"a": 0.049, "b": 0.0}, {"a": 0.02, "b": -0.01})
    assert ok.verdict == "our extension" and "2 runs" in ok.reason
    v = vt.runs_converged({"a": 0.051, "b": 0.0}, {"a": 0.0, "b": 0.0})
    assert v.verdict == "not reproduced" and "(a)" in v.reason
    v = vt.runs_converged({"a": 0.0, "b": 0.0}, {"a": 0.0, "b": -0.021})
    assert v.verdict == "not reproduced" and "2.1 pp against its tolerance 2.0 pp (b)" in v.reason


def test_converged_tolerates_changes_the_test_set_cannot_resolve():
    drops, moves = {"a": 0.0}, {"a": 0.025}
    assert vt.runs_converged(drops, moves).verdict == "not reproduced"
    assert vt.runs_converged(drops, moves, {"a": 0.029}).verdict == "our extension"
    assert vt.runs_converged(drops, {"a": 0.03}, {"a": 0.029}).verdict == "not reproduced"
    assert vt.runs_converged(drops, moves, {"a": 0.001}).verdict == "not reproduced"  # 2 pp floor
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
    ((0.5, 0.5), "reproduced"), ((0.49, 0.9), "partly"), ((0.02, 0.02), "not reproduced")])
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


# ---- accuracy_comparable: on intervals; most cells failing = not reproduced ----------------
def iv(mean, half=0.01):
    return (mean, max(0.0, mean - half), min(1.0, mean + half))


GOOD = {(10, 3): (iv(0.95), iv(0.96), iv(0.96)), (10, 7): (iv(0.94), iv(0.95), iv(0.93))}


def test_comparable_reproduced_only_across_expert_counts():
    v = vt.accuracy_comparable(GOOD)
    assert v.verdict == "reproduced" and "E ∈ [3, 7]" in v.reason
    one = (iv(0.95), iv(0.95), iv(0.95))
    v = vt.accuracy_comparable({(10, 7): one, (20, 7): one})
    assert v.verdict == "partly" and "fewer than 2" in v.reason


def test_comparable_decides_on_intervals_both_sides():
    touching = {**GOOD, (20, 7): (iv(0.93), iv(0.95), iv(0.90))}     # 0.94 vs 0.94: overlap
    assert vt.accuracy_comparable(touching).verdict == "reproduced"
    apart = {**GOOD, (20, 7): (iv(0.929), iv(0.95), iv(0.90))}       # 0.939 < 0.940
    v = vt.accuracy_comparable(apart)
    assert v.verdict == "partly" and "1 resolvably worse" in v.reason
    assert "20 tasks × E=7" in v.reason


def test_comparable_the_same_gap_is_noise_with_wide_intervals():
    """−3 pp is a resolved loss at ±1 pp and noise at ±2 pp (but then uninformative)."""
    narrow = {(10, 3): (iv(0.90), iv(0.93), iv(0.93)), (10, 7): GOOD[10, 7]}
    wide = {(10, 3): (iv(0.90, 0.02), iv(0.93, 0.02), iv(0.93, 0.02)), (10, 7): GOOD[10, 7]}
    assert "1 resolvably worse" in vt.accuracy_comparable(narrow).reason
    assert vt.accuracy_comparable(wide).verdict == "reproduced"
    too_wide = {(10, 3): (iv(0.90, 0.04), iv(0.93, 0.04), iv(0.93, 0.04)), (10, 7): GOOD[10, 7]}
    v = vt.accuracy_comparable(too_wide)
    assert v.verdict == "partly" and "uninformative" in v.reason


def test_comparable_most_cells_failing_is_not_reproduced():
    """One saturated cell no longer rescues a router that loses everywhere else."""
    lose = (iv(0.80), iv(0.95), iv(0.95))
    saturated = (iv(0.999, 0.001), iv(0.999, 0.001), iv(0.999, 0.001))
    cells = {(10, 3): lose, (10, 7): lose, (20, 3): lose, (20, 7): saturated}
    assert vt.accuracy_comparable(cells).verdict == "not reproduced"
    half = {(10, 3): lose, (10, 7): GOOD[10, 7]}                     # 1 of 2: not most
    assert vt.accuracy_comparable(half).verdict == "partly"


def test_comparable_needs_learned_standard_objectives():
    low = (iv(0.49), iv(0.49), iv(0.49))
    assert vt.accuracy_comparable({**GOOD, (20, 7): low}).verdict == "partly"
    assert vt.accuracy_comparable({(10, 3): low, (10, 7): low}).verdict == "not reproduced"


def test_comparable_not_converged_is_partly():
    v = vt.accuracy_comparable(GOOD, converged=False)
    assert v.verdict == "partly" and "not converged" in v.reason


def test_comparable_refuses_bad_cells():
    with pytest.raises(ValueError, match="router, ce, lb"):
        vt.accuracy_comparable({(10, 3): (iv(0.9), iv(0.9))})
    with pytest.raises(ValueError, match="≤ 1"):
        vt.accuracy_comparable({(10, 3): ((95, 94, 96), iv(0.9), iv(0.9))})
    with pytest.raises(ValueError, match="low ≤ mean ≤ high"):
        vt.accuracy_comparable({(10, 3): ((0.9, 0.95, 0.97), iv(0.9), iv(0.9))})


def test_comparable_accepts_accuracy_intervals():
    from moe_routing.experiments import accuracy_interval

    a = accuracy_interval([0.95, 0.951], 1000)
    v = vt.accuracy_comparable({(10, 3): (a, a, a), (10, 7): (a, a, a)})
    assert v.verdict == "reproduced"


# ---- accuracy_in_band: never "reproduced" (absolute accuracies of other data) ----------------
def test_band_inside_is_only_partly():
    v = vt.accuracy_in_band([iv(0.87), iv(0.93)], [iv(0.90)])
    assert v.verdict == "partly" and "coincidence" in v.reason


def test_band_partly_above():
    v = vt.accuracy_in_band([iv(0.90), iv(0.96)], [iv(0.95)])
    assert v.verdict == "partly" and "1 of 2 cells above" in v.reason


def test_band_not_reproduced_below_on_intervals():
    # interval entirely below 86 %
    assert vt.accuracy_in_band([iv(0.84), iv(0.90)], [iv(0.90)]).verdict == "not reproduced"
    # overlapping the band's lower end: not below it
    assert vt.accuracy_in_band([iv(0.855), iv(0.90)], [iv(0.90)]).verdict == "partly"
    # router entirely at or below the floor
    assert vt.accuracy_in_band([iv(0.87), iv(0.90)], [iv(0.86)]).verdict == "not reproduced"


# ---- active_parameters: ratio ≤ 0.9, no resolved loss, informative (capacity binds) --------
BINDS = iv(0.80)                                       # one expert resolvably below dense


@pytest.mark.parametrize("r,d,s,ratio,verdict", [
    (0.95, 0.97, 0.97, 0.90, "reproduced"),          # 0.96 vs 0.96: overlap
    (0.95, 0.97, 0.97, 0.91, "not reproduced"),      # no reduction worth the name
    (0.95, 0.971, 0.95, 0.5, "partly"),              # resolvably below the dense model
    (0.95, 0.95, 0.971, 0.5, "partly"),              # resolvably below CE / CE + LB
    (0.90, 0.95, 0.95, 0.5, "not reproduced"),       # below both
])
def test_active_parameters_sides(r, d, s, ratio, verdict):
    assert vt.active_parameters(iv(r), iv(d), iv(s), BINDS, ratio).verdict == verdict


def test_active_parameters_is_uninformative_when_capacity_does_not_bind():
    """A one-expert model as accurate as the dense one: the saving is free for any model."""
    v = vt.active_parameters(iv(0.95), iv(0.95), iv(0.95), iv(0.945), 0.5)
    assert v.verdict == "partly" and "uninformative" in v.reason
    v = vt.active_parameters(iv(0.95), iv(0.95), iv(0.95), iv(0.92), 0.5)
    assert v.verdict == "reproduced"


def test_active_parameters_of_untrained_models_is_not_reproduced():
    low = iv(0.04, 0.03)
    v = vt.active_parameters(low, low, low, low, 0.5)
    assert v.verdict == "not reproduced" and "untrained" in v.reason


def test_active_parameters_not_converged_is_partly():
    v = vt.active_parameters(iv(0.95), iv(0.95), iv(0.95), BINDS, 0.5, converged=False)
    assert v.verdict == "partly" and "not converged" in v.reason


def test_the_chapter_states_the_rules_thresholds():
    """The training chapter's prose names the routing thresholds; they must be the rules' own
    defaults (a threshold changed in the rule and not in the text would mislead the reader)."""
    import inspect
    from pathlib import Path

    from moe_routing.verdicts import training as rules

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
    assert comparable["max_half_width"].default == 0.03 and "half-width at most 3 pp" in text
