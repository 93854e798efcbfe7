"""Rules of the construction chapter, on both sides of each threshold."""

import pytest

from moe_routing._internal.verdicts import Verdict
from moe_routing._internal.verdicts import construction as vc

OURS = "reproduced for our construction"
EPS = (1e-2, 1e-4, 1e-8)


def test_accuracy_every_eps_or_less():
    v = vc.thm42_accuracy({1e-2: 1e-3, 1e-4: 1e-5, 1e-8: 9e-10}, 100)
    assert isinstance(v, Verdict) and v.verdict == OURS and v.rule.endswith("thm42_accuracy")
    assert vc.thm42_accuracy({1e-2: 1e-3, 1e-4: 1e-5, 1e-8: 1e-8}, 100).verdict == "partly"
    v = vc.thm42_accuracy({1e-2: 0.5, 1e-4: 0.5}, 100)
    assert v.verdict == "not reproduced" and "5.00e-01" in v.reason
    with pytest.raises(ValueError, match="max_invalid_by_eps"):
        vc.thm42_accuracy({}, 100)


def test_routing_thresholds():
    # every prefix determines its task: the statement holds as stated, for our router
    assert vc.thm42_routing(100, 100, 0, 0, True).verdict == OURS
    # shared prefixes, all sent to the junction expert: the conclusion changed there
    v = vc.thm42_routing(100, 100, 10, 10, True)
    assert v.verdict == "partly" and "10 prefixes are shared" in v.reason
    assert vc.thm42_routing(100, 100, 1, 1, True).verdict == "partly"
    # one shared prefix misrouted: partly
    assert vc.thm42_routing(100, 100, 9, 10, True).verdict == "partly"
    # 95 % exactly is partly, just below is not reproduced
    assert vc.thm42_routing(95, 100, 0, 0, True).verdict == "partly"
    assert vc.thm42_routing(94, 100, 0, 0, True).verdict == "not reproduced"
    v = vc.thm42_routing(0, 100, 10, 10, True)
    assert v.verdict == "not reproduced" and "0/100" in v.reason
    v = vc.thm42_routing(100, 100, 10, 10, False)
    assert v.verdict == "not reproduced" and "outside the structural block" in v.reason
    with pytest.raises(ValueError, match="n_routed"):
        vc.thm42_routing(101, 100, 10, 10, True)
    with pytest.raises(ValueError, match="structural_only"):
        vc.thm42_routing(100, 100, 10, 10, 1)


def test_routing_never_reads_reproduced_with_shared_prefixes():
    # the old rule read "reproduced for our construction" whenever the shared prefixes went to
    # the junction expert, though "each input to its task's expert" is false at them
    for n_shared in (1, 5, 1000):
        assert vc.thm42_routing(100, 100, n_shared, n_shared, True).verdict != OURS


ARGS = dict(n_within=8, n_experts=8, additive=True, same_tasks=True,
            task_experts_never_grow=True)


def test_expert_size_is_decided_by_the_task_experts():
    v = vc.thm42_expert_size(**ARGS, n_nested=3)
    assert v.verdict == OURS and "3 nested datasets" in v.reason
    assert vc.thm42_expert_size(**ARGS, n_nested=2).verdict == OURS
    assert vc.thm42_expert_size(**ARGS, n_nested=1).verdict == "partly"
    assert vc.thm42_expert_size(**{**ARGS, "same_tasks": False}, n_nested=3).verdict == "partly"
    for bad in ({"n_within": 7}, {"additive": False}, {"task_experts_never_grow": False}):
        v = vc.thm42_expert_size(**{**ARGS, **bad}, n_nested=3)
        assert v.verdict == "not reproduced", bad


def test_junction_expert_is_our_extension_when_it_grows():
    v = vc.junction_expert([5, 10, 20], [29, 61, 134])
    assert v.verdict == "our extension" and "29 (5 tasks) → 61 (10 tasks)" in v.reason
    assert vc.junction_expert([5, 10], [29, 29]).verdict == "not supported"       # no growth
    assert vc.junction_expert([5, 10, 20], [29, 61, 60]).verdict == "not supported"  # shrinks
    assert vc.junction_expert([5, 10], [29, 30]).verdict == "our extension"
    assert vc.junction_expert([5], [29]).verdict == "partly"
    with pytest.raises(ValueError, match="junction_sizes"):
        vc.junction_expert([5, 10], [29])
    with pytest.raises(ValueError, match="n_tasks"):
        vc.junction_expert([10, 5], [29, 61])


def test_disentangle_compares_head2_with_eta():
    assert vc.disentangle(0.0, 2.5e-5, 0.01).verdict == OURS
    assert vc.disentangle(0.0, 0.01, 0.01).verdict == OURS          # the bound is inclusive
    v = vc.disentangle(0.0, 0.02, 0.01)
    assert v.verdict == "partly" and "> η = 0.01" in v.reason
    assert vc.disentangle(1e-5, 0.0, 0.01).verdict == OURS
    assert vc.disentangle(2e-5, 0.0, 0.01).verdict == "partly"
    assert vc.disentangle(0.1, 0.5, 0.01).verdict == "not reproduced"
    with pytest.raises(ValueError, match="eta"):
        vc.disentangle(0.0, 0.0, 0.0)


def test_dense_full_sub_and_failures():
    good = {e: e / 10 for e in EPS}
    assert vc.thm41_dense(good, 8, 8, 0, 8, 8).verdict == OURS
    v = vc.thm41_dense(good, 8, 8, 0, 4, 8)
    assert v.verdict == "partly" and "4 of 8 tasks" in v.reason
    assert vc.thm41_dense(good, 8, 8, 1, 8, 8).verdict == "partly"
    assert vc.thm41_dense({**good, 1e-8: 2e-8}, 8, 8, 0, 8, 8).verdict == "not reproduced"
    assert vc.thm41_dense(good, 7, 8, 0, 8, 8).verdict == "not reproduced"
    with pytest.raises(ValueError, match="n_tasks_checked"):
        vc.thm41_dense(good, 8, 8, 0, 9, 8)
