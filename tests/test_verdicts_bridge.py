"""The bridge chapter's rules on both sides of every threshold: each says its positive word,
its negative word ("not supported": the claims are the book's own) on a broken input, and
"inconclusive" on one that cannot decide."""

import pytest

from moe_routing._internal.verdicts import bridge as r


def test_margin_rule_needs_separated_intervals():
    assert r.router_buys_margin(0.1, 0.02, 0.01, 0.04, 0.20, 0.15, 0.25).verdict == r.OURS
    # broken: the task router's boundary mass is the larger, intervals apart
    v = r.router_buys_margin(0.1, 0.30, 0.27, 0.33, 0.20, 0.15, 0.25)
    assert v.verdict == r.NOT and "larger" in v.reason
    # undecidable: smaller or larger, the intervals overlap
    for est in (0.16, 0.24):
        v = r.router_buys_margin(0.1, est, est - 0.03, est + 0.03, 0.20, 0.15, 0.25)
        assert v.verdict == r.UNSURE and "overlap" in v.reason
    with pytest.raises(ValueError, match="bm_router interval"):
        r.router_buys_margin(0.1, 0.05, 0.01, 0.04, 0.20, 0.15, 0.25)
    with pytest.raises(ValueError, match="bm_ce_hi"):
        r.router_buys_margin(0.1, 0.02, 0.01, 0.04, 0.20, 0.15, 1.5)


def test_rate_rule_compares_the_slope_with_alpha():
    # sound: the slope's interval meets α's
    v = r.soft_hard_rate(6.29, 5.96, 6.62, 6.12, 5.05, 7.64, 5, tau_span=10)
    assert v.verdict == r.OURS and "overlap" in v.reason
    # broken: the gap falls like τ^1.2 where BM has α = 6 (e.g. a τ grid in the bulk)
    v = r.soft_hard_rate(1.2, 1.1, 1.3, 6.1, 5.0, 7.6, 5, tau_span=10)
    assert v.verdict == r.NOT and "apart" in v.reason
    # undecidable: the gap is positive at two temperatures only -- values not read
    v = r.soft_hard_rate(0.0, 0.0, 0.0, 6.1, 5.0, 7.6, 2, tau_span=10)
    assert v.verdict == r.UNSURE and "untested" in v.reason
    # undecidable: a slope interval too wide to tell τ^α from τ^(α ± 1/2)
    v = r.soft_hard_rate(6.0, 4.5, 7.5, 6.1, 5.0, 7.6, 4, tau_span=10)
    assert v.verdict == r.UNSURE and "wider" in v.reason
    # undecidable: the default task router's grid spans a factor of 1.6 -- overlapping
    # intervals there cannot tell τ^α from e^(−Δ/τ)
    v = r.soft_hard_rate(6.29, 5.96, 6.62, 6.12, 5.05, 7.64, 5, tau_span=1.6)
    assert v.verdict == r.UNSURE and "spans a factor of 1.6" in v.reason
    with pytest.raises(ValueError, match="tau_span"):
        r.soft_hard_rate(6.29, 5.96, 6.62, 6.12, 5.05, 7.64, 5, tau_span=0.5)
    with pytest.raises(ValueError, match="alpha_lo"):
        r.soft_hard_rate(6.0, 5.9, 6.1, 6.1, 6.5, 7.6, 5, tau_span=10)
    with pytest.raises(ValueError, match="n_resolved"):
        r.soft_hard_rate(6.0, 5.9, 6.1, 6.1, 5.0, 7.6, -1, tau_span=10)


def test_bound_rule_holds_by_definition_and_decides_nothing_else():
    v = r.soft_hard_bound(True, 0.02, 5, 5)
    assert v.verdict == "holds by definition"
    # broken: a gap above a bound that is a theorem for the empirical law -- a bug
    v = r.soft_hard_bound(False, 1.7, 5, 5)
    assert v.verdict == r.NOT and "bug" in v.reason
    # undecidable: C_m = inf (a margin of 0) makes the bound infinite at every τ
    v = r.soft_hard_bound(True, 0.0, 0, 5)
    assert v.verdict == r.UNSURE and "vacuous" in v.reason
    with pytest.raises(ValueError, match="n_finite"):
        r.soft_hard_bound(True, 0.02, 6, 5)


def test_temperature_rule_follows_its_interval():
    # a 1/τ law measured with a tight interval
    assert r.temperature_amplifies(0.97, 0.88, 1.06, 12, 12).verdict == r.OURS
    # AdamW-like: the rate does not depend on τ (slope ≈ 0), 1 excluded
    v = r.temperature_amplifies(0.05, -0.10, 0.20, 12, 12)
    assert v.verdict == r.NOT and "no amplification" in v.reason
    # the chapter's default measurement: 1.69 [1.26, 2.12] excludes 1 -- rejected, not "partly"
    v = r.temperature_amplifies(1.69, 1.26, 2.12, 11, 12)
    assert v.verdict == r.NOT and "faster than 1/τ" in v.reason
    # grows with 1/τ but as τ^(-1/2): the interval excludes 1
    v = r.temperature_amplifies(0.5, 0.4, 0.6, 12, 12)
    assert v.verdict == r.NOT and "more slowly" in v.reason
    # 1 inside an interval too wide to tell 1/τ from τ^(-1/2): undecidable
    assert r.temperature_amplifies(0.9, 0.3, 1.5, 12, 12).verdict == r.UNSURE
    assert r.temperature_amplifies(0.9, -0.3, 1.5, 12, 12).verdict == r.UNSURE
    # a run that never grew log-linearly keeps it from "our extension"
    assert r.temperature_amplifies(0.97, 0.88, 1.06, 11, 12).verdict == "partly"
    # nothing fitted: inconclusive, whatever the (unread) slope
    v = r.temperature_amplifies(0.0, 0.0, 0.0, 1, 12)
    assert v.verdict == r.UNSURE and "not read" in v.reason
    # two runs give a slope but no interval (lo = hi): not read, not "1 outside"
    v = r.temperature_amplifies(1.02, 1.02, 1.02, 2, 2)
    assert v.verdict == r.UNSURE and "needs 3" in v.reason
    with pytest.raises(ValueError, match="slope_lo"):
        r.temperature_amplifies(1.0, 1.2, 1.3, 12, 12)
    with pytest.raises(ValueError, match="n_fitted"):
        r.temperature_amplifies(1.0, 0.9, 1.1, 13, 12)


def test_the_docstring_names_the_quantity_the_rule_judges():
    doc = r.temperature_amplifies.__doc__ or r.temperature_amplifies.__wrapped__.__doc__
    assert "router contrast |w|" in doc and "task-aligned component" not in doc


def test_separator_aligned_says_each_word_on_its_input():
    """Sound: fractions ten times a random router's; broken: a mode that ignores the tasks
    (the fraction at chance) or avoids them; undecidable: two runs, or runs that scatter
    across the bar."""
    sound = r.separator_aligned([0.5, 0.6, 0.4, 0.55], [0.05, 0.05, 0.06, 0.05])
    assert sound.verdict == r.OURS and "aligned with the task separator" in sound.reason
    at_chance = r.separator_aligned([0.05, 0.06, 0.04, 0.05], [0.05, 0.05, 0.05, 0.05])
    assert at_chance.verdict == r.NOT and "drawn at random" in at_chance.reason
    avoids = r.separator_aligned([0.002, 0.003, 0.001, 0.002], [0.05, 0.05, 0.06, 0.05])
    assert avoids.verdict == r.NOT and "avoids the task direction" in avoids.reason
    assert r.separator_aligned([0.5, 0.6], [0.05, 0.05]).verdict == r.UNSURE
    assert r.separator_aligned([0.2, 0.01, 0.3], [0.05, 0.05, 0.05]).verdict == r.UNSURE
    for bad in ([0.5, 1.5, 0.4], [0.5, -0.1, 0.4]):
        with pytest.raises(ValueError, match="fractions"):
            r.separator_aligned(bad, [0.05] * 3)
    with pytest.raises(ValueError, match="chances"):
        r.separator_aligned([0.5, 0.4, 0.3], [0.05, 0.05])
    with pytest.raises(ValueError, match="factor"):
        r.separator_aligned([0.5, 0.4, 0.3], [0.05] * 3, factor=0.5)


def test_the_separator_yardsticks_are_a_random_routers_and_the_best_separators():
    """On inputs whose first coordinate carries the task: a router along it reaches ``best``;
    random routers reach about ``chance`` on average (a ratio of expectations, so within a
    few points); a router orthogonal to it gets about nothing."""
    import numpy as np
    import torch

    from moe_routing.experiments.bridge.temperature import separator_fractions, task_fraction

    g = torch.Generator().manual_seed(0)
    task = torch.arange(60) % 3
    x = torch.randn(60, 5, 8, generator=g)                               # (n, t, d)
    x[..., 0] += 3 * task[:, None].float()
    det = torch.ones(60, 5, dtype=torch.bool)
    chance, best = separator_fractions(x, det, task)
    along = torch.zeros(4, 8)
    along[0, 0] = 1.0
    assert task_fraction(x @ along.T, det, task) == pytest.approx(best, abs=0.01)
    drawn = [task_fraction(x @ torch.randn(4, 8, generator=g).T, det, task) for _ in range(400)]
    assert abs(np.mean(drawn) - chance) < 0.07 and 0.2 < chance < best < 1
    across = torch.zeros(4, 8)
    across[0, 1] = 1.0
    assert task_fraction(x @ across.T, det, task) < chance / 5
