"""The two-hop chapter's rules on both sides of every threshold."""

import numpy as np
import pytest

from moe_routing.verdicts import two_hop as r

GOOD = dict(max_invalid_by_eps={1e-4: 3e-5, 1e-8: 4e-9}, n_prefixes=8090, n_misrouted=0,
            n_wrong_facts=0, n_facts=1174, n_wrong_held_out=0, n_held_out=48)


def test_construction_holds_only_when_every_check_passes():
    assert r.two_layer_construction(**GOOD).verdict == "our extension"
    for bad in (dict(n_misrouted=1), dict(n_wrong_facts=1), dict(n_wrong_held_out=1),
                dict(max_invalid_by_eps={1e-4: 2e-4, 1e-8: 1e-3})):
        assert r.two_layer_construction(**{**GOOD, **bad}).verdict == "not supported", bad
    assert r.two_layer_construction(**{**GOOD, "n_held_out": 0}).verdict == "partly"
    assert r.two_layer_construction(
        **{**GOOD, "max_invalid_by_eps": {1e-4: 3e-5, 1e-8: 2e-8}}).verdict == "partly"


def test_construction_refuses_impossible_counts():
    with pytest.raises(ValueError, match="n_wrong_held_out = 49 is not allowed"):
        r.two_layer_construction(**{**GOOD, "n_wrong_held_out": 49})


def test_sizes_are_additive_only_if_no_expert_moves():
    assert r.additive_sizes([96, 100, 82, 0], [96, 100, 82, 0], 119, 10).verdict == "our extension"
    # a layer-2 expert that stored the composed dictionary shrinks with it
    assert r.additive_sizes([96, 100, 82, 0], [96, 100, 40, 0], 119, 10).verdict == "not supported"
    assert r.additive_sizes([96, 100], [96, 100], 119, 119).verdict == "partly"
    with pytest.raises(ValueError, match="one size per expert"):
        r.additive_sizes([1, 2], [1], 3, 1)


def test_held_out_against_the_majority_baseline():
    assert r.held_out_above_baseline(0.71, 0.63, 0.43, 60).verdict == "our extension"
    assert r.held_out_above_baseline(0.50, 0.40, 0.43, 60).verdict == "partly"
    assert r.held_out_above_baseline(0.43, 0.35, 0.43, 60).verdict == "not supported"
    with pytest.raises(ValueError, match="low = 0.8 is not allowed"):
        r.held_out_above_baseline(0.7, 0.8, 0.43, 60)


def test_depth_decides_on_intervals():
    assert r.depth_composes(0.90, 0.05, 0.60, 0.05).verdict == "our extension"
    assert r.depth_composes(0.708, 0.081, 0.708, 0.081).verdict == "not supported"
    assert r.depth_composes(0.692, 0.083, 0.592, 0.088).verdict == "partly"
    assert r.depth_composes(0.50, 0.05, 0.60, 0.05).verdict == "not supported"


def test_hop_by_hop_routing_against_hop_blind_routing():
    assert r.hop_by_hop(0.95, 0.92, 4, 0.40, 0.35).verdict == "our extension"
    assert r.hop_by_hop(0.52, 0.62, 4, 0.30, 0.30).verdict == "partly"
    assert r.hop_by_hop(0.30, 0.90, 4, 0.25, 0.25).verdict == "not supported"
    # a collapsed router: every query to one expert, which dominates every hop task. Its
    # reuse is 100 % at both layers, and so is a hop-blind router's: no evidence of hops.
    collapsed = r.hop_by_hop(1.0, 1.0, 4, 1.0, 1.0)
    assert collapsed.verdict == "not supported" and "layer 1 and layer 2" in collapsed.reason
    # high reuse that routing blind to the hop nearly reaches does not count either
    assert r.hop_by_hop(0.95, 0.95, 4, 0.30, 0.88).verdict == "not supported"
    with pytest.raises(ValueError, match="n_experts = 1 is not allowed"):
        r.hop_by_hop(0.5, 0.5, 1, 0.2, 0.2)
    with pytest.raises(ValueError, match="l2_blind = nan is not allowed"):
        r.hop_by_hop(0.5, 0.5, 4, 0.2, float("nan"))


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
