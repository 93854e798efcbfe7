"""The capacity-bound variant's rule (ours): a resolved cost, no cost, and undecidable input."""

import pytest

from moe_routing._internal.verdicts import codes_variant as vc


def dv(mean, half=0.01):
    return (mean, mean - half, mean + half)


@pytest.mark.parametrize("ce,lb,word", [
    (dv(-0.10), dv(-0.08), "our extension"),       # a resolved cost against both
    (dv(0.0), dv(-0.01), "not supported"),         # within 3 pp of both
    (dv(-0.10), dv(0.0), "partly"),
    (dv(-0.03, 0.05), dv(-0.10), "inconclusive"),  # straddles −3 pp
])
def test_router_cost_sides(ce, lb, word):
    assert vc.router_cost(ce, lb).verdict == word


def test_router_cost_unconverged_decides_nothing():
    for d in (dv(-0.10), dv(0.0)):
        v = vc.router_cost(d, d, converged=False)
        assert v.verdict == "inconclusive" and "not converged" in v.reason


def test_router_cost_refuses_bad_input():
    with pytest.raises(ValueError, match="router_vs_ce"):
        vc.router_cost((0.1, 0.2, 0.0), dv(0.0))
    with pytest.raises(ValueError, match="router_vs_lb"):
        vc.router_cost(dv(0.0), "x")
