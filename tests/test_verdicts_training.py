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
    assert v.verdict == "not reproduced" and "2.1 pp (b)" in v.reason


def test_converged_refuses_mismatched_runs_and_nan():
    with pytest.raises(ValueError, match="acc_changes"):
        vt.runs_converged({"a": 0.0}, {"b": 0.0})
    with pytest.raises(ValueError, match="acc_changes"):
        vt.runs_converged({"a": 0.0}, {"a": math.nan})


# ---- routing_diffuse: threshold min(0.2, 0.2 × ceiling) -------------------------------------
CEIL = 0.79                                            # threshold 0.158


@pytest.mark.parametrize("nmis,verdict", [
    ((0.15, 0.15, 0.15, 0.15), "reproduced"),
    ((0.15, 0.15, 0.16, 0.15), "partly"),              # object position above
    ((0.16, 0.15, 0.0, 0.0), "partly"),                # only CE + LB diffuse
    ((0.16, 0.16, 0.0, 0.0), "not reproduced"),
])
def test_diffuse_sides(nmis, verdict):
    assert vt.routing_diffuse(*nmis, CEIL).verdict == verdict


def test_diffuse_absolute_cap_applies_when_ceiling_is_one():
    assert vt.routing_diffuse(0.19, 0.19, 0.1, 0.1, 1.0).verdict == "reproduced"
    assert vt.routing_diffuse(0.21, 0.21, 0.1, 0.1, 1.0).verdict == "not reproduced"


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


# ---- accuracy_comparable: every cell within 2 pp, ≥ 2 expert counts, converged -------------
GOOD = {(10, 3): (0.95, 0.96, 0.96), (10, 7): (0.94, 0.95, 0.93)}


def test_comparable_reproduced_only_across_expert_counts():
    v = vt.accuracy_comparable(GOOD)
    assert v.verdict == "reproduced" and "E ∈ [3, 7]" in v.reason
    # one multi-expert count only: not "across numbers of experts"
    v = vt.accuracy_comparable({(10, 7): (0.95, 0.95, 0.95), (20, 7): (0.95, 0.95, 0.95)})
    assert v.verdict == "partly" and "fewer than 2" in v.reason


def test_comparable_tolerance_both_sides():
    at_edge = {**GOOD, (20, 7): (0.931, 0.95, 0.90)}            # −1.9 pp
    assert vt.accuracy_comparable(at_edge).verdict == "reproduced"
    beyond = {**GOOD, (20, 7): (0.929, 0.95, 0.90)}             # −2.1 pp
    v = vt.accuracy_comparable(beyond)
    assert v.verdict == "partly" and "20 tasks × E=7" in v.reason


def test_comparable_needs_learned_standard_objectives():
    low = {**GOOD, (20, 7): (0.49, 0.49, 0.49)}                 # equal but below 50 %
    assert vt.accuracy_comparable(low).verdict == "partly"
    assert vt.accuracy_comparable({(10, 3): (0.49, 0.49, 0.49),
                                   (10, 7): (0.49, 0.49, 0.49)}).verdict == "not reproduced"


def test_comparable_not_reproduced_and_not_converged():
    worse = {k: (a[0] - 0.1, a[1], a[2]) for k, a in GOOD.items()}
    assert vt.accuracy_comparable(worse).verdict == "not reproduced"
    v = vt.accuracy_comparable(GOOD, converged=False)
    assert v.verdict == "partly" and "not converged" in v.reason


def test_comparable_refuses_bad_cells():
    with pytest.raises(ValueError, match="router, ce, lb"):
        vt.accuracy_comparable({(10, 3): (0.9, 0.9)})
    with pytest.raises(ValueError, match="fractions"):
        vt.accuracy_comparable({(10, 3): (95, 96, 96)})


# ---- accuracy_in_band: 86–94 %, router > 88 % ----------------------------------------------
def test_band_reproduced_inside_only():
    assert vt.accuracy_in_band([0.86, 0.94], [0.881]).verdict == "reproduced"
    assert vt.accuracy_in_band([0.86, 0.94], [0.881], converged=False).verdict == "partly"


def test_band_partly_means_lower_limits_hold_and_above():
    v = vt.accuracy_in_band([0.90, 0.941], [0.95])
    assert v.verdict == "partly" and "1 of 2 cells above" in v.reason


def test_band_overlap_alone_is_not_partly():
    # overlaps the band, but one cell below it: the claim's lower limit fails
    assert vt.accuracy_in_band([0.859, 0.90], [0.90]).verdict == "not reproduced"
    # every cell in the band, router at the floor
    assert vt.accuracy_in_band([0.87, 0.90], [0.88]).verdict == "not reproduced"


# ---- active_parameters: ratio ≤ 0.9, within 2 pp of dense and of CE / CE + LB --------------
@pytest.mark.parametrize("r,d,s,ratio,verdict", [
    (0.95, 0.97, 0.97, 0.90, "reproduced"),
    (0.95, 0.97, 0.97, 0.91, "not reproduced"),      # no reduction worth the name
    (0.95, 0.971, 0.95, 0.5, "partly"),              # loses 2.1 pp against the dense model
    (0.95, 0.95, 0.971, 0.5, "partly"),              # loses 2.1 pp against CE / CE + LB
    (0.90, 0.95, 0.95, 0.5, "not reproduced"),       # loses against both
])
def test_active_parameters_sides(r, d, s, ratio, verdict):
    assert vt.active_parameters(r, d, s, ratio).verdict == verdict


def test_active_parameters_not_converged_is_partly():
    v = vt.active_parameters(0.95, 0.95, 0.95, 0.5, converged=False)
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
