"""Rules of the knowledge chapter, on both sides of each threshold."""

import pytest

from moe_routing._internal.verdicts import Verdict
from moe_routing._internal.verdicts import knowledge as vk


def test_complexity_bound_all_or_nothing():
    v = vk.complexity_bound(50, 50)
    assert isinstance(v, Verdict) and v.verdict == "holds by definition"
    assert "50 tasks" in v.reason and "definitions" in v.reason
    assert v.rule.endswith("knowledge.complexity_bound")
    v = vk.complexity_bound(49, 50)
    assert v.verdict == "not reproduced" and "1 of 50" in v.reason


def test_complexity_bound_never_claims_a_reproduction():
    # a bound implied by the definitions is not a result that "came out again"
    assert {vk.complexity_bound(k, 50).verdict for k in range(51)} == {
        "holds by definition", "not reproduced"}


def test_complexity_bound_fails_on_a_task_measured_wrongly():
    # realistic bad input: complexity counted with the wildcards twice (each template of
    # length L counted as L + 2) for the tasks whose templates reach L
    lengths = [[7, 5], [7, 7], [4]]                       # |τ| per template, L = 7
    pairs, N, L = [3, 3, 2], 3, 7
    c_wrong = [sum(t + 2 for t in ts) + n for ts, n in zip(lengths, pairs)]
    bound = [L * len(ts) + N for ts in lengths]
    n_within = sum(c <= b for c, b in zip(c_wrong, bound))
    assert vk.complexity_bound(n_within, len(lengths)).verdict == "not reproduced"


def test_complexity_bound_refuses_impossible_counts():
    with pytest.raises(ValueError, match="n_within"):
        vk.complexity_bound(51, 50)
    with pytest.raises(ValueError, match="n_tasks"):
        vk.complexity_bound(0, 0)


def test_shared_prefixes_one_is_enough():
    assert vk.shared_prefixes(1, 100).verdict == "our extension"
    v = vk.shared_prefixes(0, 100)
    assert v.verdict == "not supported" and "100" in v.reason
    with pytest.raises(ValueError, match="n_ambiguous"):
        vk.shared_prefixes(101, 100)
