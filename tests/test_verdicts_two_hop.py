"""The two-hop chapter's rules on both sides of every threshold."""

import numpy as np
import pytest

from moe_routing._internal.verdicts import two_hop as r

GOOD = dict(max_invalid_by_eps={1e-4: 3e-5, 1e-8: 4e-9}, n_prefixes=8090, n_misrouted=0,
            n_wrong_facts=0, n_facts=1174, n_wrong_held_out=0, n_held_out=48)


def test_construction_holds_only_when_every_check_passes():
    assert r.two_layer_construction(**GOOD).verdict == "our extension"
    for bad in (dict(n_misrouted=1), dict(n_wrong_facts=1), dict(n_wrong_held_out=1),
                dict(max_invalid_by_eps={1e-4: 2e-4, 1e-8: 1e-3})):
        assert r.two_layer_construction(**{**GOOD, **bad}).verdict == "not supported", bad
    # undecidable: no composition held out, none asked apart
    untested = r.two_layer_construction(**{**GOOD, "n_held_out": 0})
    assert untested.verdict == "inconclusive" and "untested" in untested.reason
    assert r.two_layer_construction(
        **{**GOOD, "max_invalid_by_eps": {1e-4: 3e-5, 1e-8: 2e-8}}).verdict == "partly"


def test_construction_refuses_impossible_counts():
    with pytest.raises(ValueError, match="n_wrong_held_out = 49 is not allowed"):
        r.two_layer_construction(**{**GOOD, "n_wrong_held_out": 49})


def test_sizes_hold_by_definition_only_if_no_expert_moves():
    sound = r.additive_sizes([96, 100, 82, 0], [96, 100, 82, 0], 119, 10)
    assert sound.verdict == "holds by definition"
    assert "counted from the second hops' dictionaries" in sound.reason
    # broken: a layer-2 expert that stored the composed dictionary shrinks with it
    assert r.additive_sizes([96, 100, 82, 0], [96, 100, 40, 0], 119, 10).verdict == "not supported"
    # undecidable: nothing cut
    assert r.additive_sizes([96, 100], [96, 100], 119, 119).verdict == "inconclusive"
    with pytest.raises(ValueError, match="one size per expert"):
        r.additive_sizes([1, 2], [1], 3, 1)


def test_every_two_hop_verdict_is_one_the_ledger_allows_for_an_x_claim():
    from moe_routing._internal.verdicts import OUR_VERDICTS

    assert {"holds by definition", "not supported", "inconclusive"} <= set(OUR_VERDICTS)


# held-out: model − control, model − majority, model − copy the middle entity (mean, low, high)
BEATS = dict(vs_control=(0.20, 0.08, 0.32), vs_majority=(0.30, 0.18, 0.42),
             vs_copy_middle=(0.70, 0.60, 0.80), n_compositions=21, hops_learned=0.95)


def test_held_out_must_beat_the_control_and_both_shortcuts():
    assert r.held_out_composes(**BEATS).verdict == "our extension"
    # broken: the one-layer control, which cannot compose, scores the same on every query
    tie = r.held_out_composes(**{**BEATS, "vs_control": (0.0, 0.0, 0.0)})
    assert tie.verdict == "not supported" and "one-layer control" in tie.reason
    # broken: the majority answer does better (the whole interval below 0)
    assert r.held_out_composes(
        **{**BEATS, "vs_majority": (-0.1, -0.2, -0.01)}).verdict == "not supported"
    # undecidable: the difference with the control straddles 0
    open_ = r.held_out_composes(**{**BEATS, "vs_control": (0.04, -0.06, 0.14)})
    assert open_.verdict == "inconclusive" and "one-layer control" in open_.reason
    # a resolved loss decides even when another comparison is open
    assert r.held_out_composes(**{**BEATS, "vs_control": (0.04, -0.06, 0.14),
                                  "vs_copy_middle": (-0.3, -0.4, -0.2)}).verdict == \
        "not supported"
    # undecidable: untrained models tie at 0 on everything -- no evidence either way
    untrained = r.held_out_composes(vs_control=(0.0, 0.0, 0.0), vs_majority=(-0.5, -0.8, -0.2),
                                    vs_copy_middle=(0.0, 0.0, 0.0), n_compositions=14,
                                    hops_learned=0.02)
    assert untrained.verdict == "inconclusive" and "learned too little" in untrained.reason
    with pytest.raises(ValueError, match="vs_majority"):
        r.held_out_composes(**{**BEATS, "vs_majority": (0.3, 0.4, 0.5)})
    with pytest.raises(ValueError, match="n_compositions = 0 is not allowed"):
        r.held_out_composes(**{**BEATS, "n_compositions": 0})


def test_held_out_reads_paired_differences():
    from moe_routing.experiments.accuracy import paired_difference, shared_sampling_error

    rng = np.random.default_rng(0)
    facts = np.repeat(np.arange(20), 3)                     # 20 compositions, 3 templates
    two = (rng.random((2, 60)) < 0.8).astype(float)
    d = paired_difference(two.mean(1), two.mean(1), test=shared_sampling_error(two - two, facts))
    same = r.held_out_composes(d, BEATS["vs_majority"], BEATS["vs_copy_middle"], 20, 0.9)
    assert same.verdict == "not supported"                   # identical to the control


def test_depth_decides_on_the_paired_difference():
    assert r.depth_composes((0.30, 0.15, 0.45), 0.9).verdict == "our extension"
    assert r.depth_composes((0.0, 0.0, 0.0), 0.9).verdict == "not supported"
    assert r.depth_composes((-0.2, -0.3, -0.1), 0.9).verdict == "not supported"
    assert r.depth_composes((0.10, -0.05, 0.25), 0.9).verdict == "inconclusive"
    assert r.depth_composes((0.0, 0.0, 0.0), 0.1).verdict == "inconclusive"
    with pytest.raises(ValueError, match="hops_learned = 1.5 is not allowed"):
        r.depth_composes((0.0, 0.0, 0.0), 1.5)


def test_hop_by_hop_routing_against_hop_blind_routing():
    assert r.hop_by_hop(0.95, 0.92, 4, 0.40, 0.35, 0.03, 0.03, 0.9).verdict == "our extension"
    assert r.hop_by_hop(0.62, 0.62, 4, 0.30, 0.30, 0.05, 0.05, 0.9).verdict == "partly"
    assert r.hop_by_hop(0.30, 0.90, 4, 0.25, 0.25, 0.02, 0.02, 0.9).verdict == "not supported"
    # the same shares with wide intervals: undecidable
    # two seeds: a Student half-width above 1 is a real interval (it straddles), not an error
    assert r.hop_by_hop(0.57, 0.54, 4, 0.54, 0.29, 4.0, 3.1, 0.9).verdict == "inconclusive"
    wide = r.hop_by_hop(0.62, 0.62, 4, 0.30, 0.30, 0.30, 0.30, 0.9)
    assert wide.verdict == "inconclusive" and "straddles" in wide.reason
    # a collapsed router: every query to one expert, which dominates every hop task. Its
    # reuse is 100 % at both layers, and so is a hop-blind router's: the share cannot tell
    collapsed = r.hop_by_hop(1.0, 1.0, 4, 1.0, 1.0, 0.0, 0.0, 0.9)
    assert collapsed.verdict == "inconclusive" and "no room" in collapsed.reason
    # high reuse that routing blind to the hop nearly reaches does not count
    assert r.hop_by_hop(0.95, 0.95, 4, 0.30, 0.88, 0.01, 0.01, 0.9).verdict == "not supported"
    # undecidable: a model that has not learned the hops
    assert r.hop_by_hop(0.95, 0.92, 4, 0.40, 0.35, 0.03, 0.03, 0.1).verdict == "inconclusive"
    with pytest.raises(ValueError, match="n_experts = 1 is not allowed"):
        r.hop_by_hop(0.5, 0.5, 1, 0.2, 0.2, 0.0, 0.0, 0.9)
    with pytest.raises(ValueError, match="l2_blind = nan is not allowed"):
        r.hop_by_hop(0.5, 0.5, 4, 0.2, float("nan"), 0.0, 0.0, 0.9)


def test_hop_blind_reuse_is_the_reuse_of_a_router_that_ignores_the_hop():
    # two hop tasks, 3 experts; task 0's single-hop queries use expert 0, task 1's expert 2
    counts = np.array([[30, 10, 0],            # hop task 0: 40 two-hop queries
                       [0, 20, 40]])           # hop task 1: 60
    dominant = [0, 2]
    # hop-blind: every query to expert e with share q = (30, 30, 40) / 100
    assert r.hop_blind_reuse(counts, dominant) == pytest.approx(0.4 * 0.3 + 0.6 * 0.4)
    # ...which a simulated hop-blind router reaches (the routing of these counts reuses 70 %)
    rng = np.random.default_rng(0)
    tasks = np.repeat([0, 1], [4000, 6000])
    experts = rng.choice(3, size=tasks.size, p=[0.3, 0.3, 0.4])
    assert np.mean(experts == np.array(dominant)[tasks]) == pytest.approx(0.36, abs=0.02)
    # collapse: one expert takes all and dominates every task
    assert r.hop_blind_reuse([[50, 0], [70, 0]], [0, 0]) == 1.0
    # a task row without two-hop queries plays no part, whatever its dominant expert
    assert r.hop_blind_reuse([[10, 0], [0, 0]], [0, 1]) == 1.0
    with pytest.raises(ValueError, match="dominant"):
        r.hop_blind_reuse(counts, [0])
    with pytest.raises(ValueError, match=r"dominant\[1\] = 3 is not allowed"):
        r.hop_blind_reuse(counts, [0, 3])
    with pytest.raises(ValueError, match="at least one query"):
        r.hop_blind_reuse([[0, 0]], [0])


def test_runs_still_moving_decide_neither_held_out_verdict():
    """A result that would read *our extension* (every difference resolved above 0) or *not
    supported* reads *inconclusive* when the runs had not converged, naming the convergence
    claim; converged runs keep their verdicts."""
    up, down = (0.2, 0.1, 0.3), (-0.2, -0.3, -0.1)
    assert r.held_out_composes(up, up, up, 20, 0.9).verdict == "our extension"
    assert r.depth_composes(down, 0.9).verdict == "not supported"
    for verdict in (r.held_out_composes(up, up, up, 20, 0.9, converged=False),
                    r.depth_composes(down, 0.9, converged=False)):
        assert verdict.verdict == "inconclusive"
        assert "X-two-hop-converged" in verdict.reason
    with pytest.raises(ValueError, match="converged"):
        r.depth_composes(up, 0.9, converged="yes")
