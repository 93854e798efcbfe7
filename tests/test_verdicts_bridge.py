"""The bridge chapter's rules on both sides of every threshold."""

import pytest

from moe_routing.verdicts import bridge as r


def test_margin_rule_needs_separated_intervals():
    assert r.router_buys_margin(0.1, 0.02, 0.04, 0.20, 0.15).verdict == "our extension"
    assert r.router_buys_margin(0.1, 0.10, 0.16, 0.20, 0.15).verdict == "partly"
    assert r.router_buys_margin(0.1, 0.25, 0.30, 0.20, 0.15).verdict == "not supported"
    with pytest.raises(ValueError, match="interval"):
        r.router_buys_margin(0.1, 0.05, 0.04, 0.20, 0.15)


def test_rate_rule():
    assert r.soft_hard_rate(True, True, 0.03, 0.94, 0.75, 1.12, 0.99, 5).verdict == "our extension"
    assert r.soft_hard_rate(True, False, 0.03, 2.0, 1.8, 2.2, 0.99, 5).verdict == "partly"
    assert r.soft_hard_rate(False, True, 1.7, 0.94, 0.75, 1.12, 0.99, 5).verdict == "not supported"
    # the gap underflows to 0 at all but one temperature: the rate is untested
    v = r.soft_hard_rate(True, False, 0.0, 0.0, 0.0, 0.0, 0.99, 1)
    assert v.verdict == "partly" and "rate untested" in v.reason
    # two temperatures fit no slope with an interval (the fit needs three): still untested
    v = r.soft_hard_rate(True, True, 0.02, 0.0, 0.0, 0.0, 0.99, 2)
    assert v.verdict == "partly" and "rate untested" in v.reason
    assert r.soft_hard_rate(False, True, 1.5, 0.0, 0.0, 0.0, 0.99, 2).verdict == "not supported"


def test_temperature_rule_reads_both_sides():
    # a 1/τ law measured with a tight interval
    assert r.temperature_amplifies(0.97, 0.88, 1.06, 12, 12).verdict == r.OURS
    # AdamW-like: the rate does not depend on τ (slope ≈ 0)
    v = r.temperature_amplifies(0.05, -0.10, 0.20, 12, 12)
    assert v.verdict == "not supported" and "no amplification" in v.reason
    # grows with 1/τ but as τ^(-1/2): the interval excludes 1
    assert r.temperature_amplifies(0.5, 0.4, 0.6, 12, 12).verdict == "partly"
    # 1 inside an interval too wide to tell 1/τ from τ^(-1/2)
    assert r.temperature_amplifies(0.9, 0.3, 1.5, 12, 12).verdict == "partly"
    # a run that never grew log-linearly keeps it from "reproduced"
    assert r.temperature_amplifies(0.97, 0.88, 1.06, 11, 12).verdict == "partly"
    # nothing fitted: not supported, whatever the (unread) slope
    assert r.temperature_amplifies(0.0, 0.0, 0.0, 1, 12).verdict == "not supported"
    with pytest.raises(ValueError, match="slope_lo"):
        r.temperature_amplifies(1.0, 1.2, 1.3, 12, 12)
    with pytest.raises(ValueError, match="n_fitted"):
        r.temperature_amplifies(1.0, 0.9, 1.1, 13, 12)
