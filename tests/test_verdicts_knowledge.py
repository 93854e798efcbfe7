"""Rules of the knowledge chapter, on both sides of each threshold."""

import pytest

from moe_routing.verdicts import Verdict
from moe_routing.verdicts import knowledge as vk


def test_complexity_bound_all_or_nothing():
    v = vk.complexity_bound(50, 50)
    assert isinstance(v, Verdict) and v.verdict == "reproduced" and "50 tasks" in v.reason
    assert v.rule.endswith("knowledge.complexity_bound")
    v = vk.complexity_bound(49, 50)
    assert v.verdict == "not reproduced" and "1 of 50" in v.reason


def test_complexity_bound_refuses_impossible_counts():
    with pytest.raises(ValueError, match="n_within"):
        vk.complexity_bound(51, 50)
    with pytest.raises(ValueError, match="n_tasks"):
        vk.complexity_bound(0, 0)


def test_shared_prefixes_one_is_enough():
    assert vk.shared_prefixes(1, 100).verdict == "our extension"
    v = vk.shared_prefixes(0, 100)
    assert v.verdict == "not reproduced" and "100" in v.reason
    with pytest.raises(ValueError, match="n_ambiguous"):
        vk.shared_prefixes(101, 100)
