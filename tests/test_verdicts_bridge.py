"""The bridge chapter's rules on both sides of every threshold."""

import pytest

from moe_routing.verdicts import bridge as r


def test_margin_rule_needs_separated_intervals():
    assert r.router_buys_margin(0.1, 0.02, 0.04, 0.20, 0.15).verdict == "our extension"
    assert r.router_buys_margin(0.1, 0.10, 0.16, 0.20, 0.15).verdict == "partly"
    assert r.router_buys_margin(0.1, 0.25, 0.30, 0.20, 0.15).verdict == "not reproduced"
    with pytest.raises(ValueError, match="interval"):
        r.router_buys_margin(0.1, 0.05, 0.04, 0.20, 0.15)


def test_rate_rule():
    assert r.soft_hard_rate(True, True, 0.03, 0.94, 0.75, 1.12, 0.99, 5).verdict == "our extension"
    assert r.soft_hard_rate(True, False, 0.03, 2.0, 1.8, 2.2, 0.99, 5).verdict == "partly"
    assert r.soft_hard_rate(False, True, 1.7, 0.94, 0.75, 1.12, 0.99, 5).verdict == "not reproduced"
    # the gap underflows to 0 at all but one temperature: the rate is untested
    v = r.soft_hard_rate(True, False, 0.0, 0.0, 0.0, 0.0, 0.99, 1)
    assert v.verdict == "partly" and "rate untested" in v.reason
