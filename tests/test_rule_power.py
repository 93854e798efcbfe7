"""The training chapter's verdict rules have power: real broken models get the negative word,
undecidable ones (untrained, stopped early) read "inconclusive".

Real (short) training runs at a small size: the A-Fig. 2-style configuration (4 tasks, 3
experts) with the three objectives, its broken variants (``moe_routing.experiments.task_routing.power``) and
a dense model of the same total parameters.  Every (rule, variant) pair of ``MUST_FAIL`` must
read its negative word (or be refused), every pair of ``MUST_ABSTAIN`` *inconclusive*, while the
working model passes the routing rules and the convergence rule -- so no side of the table is
vacuous.
"""

from __future__ import annotations

import pytest
import torch

from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.runs import run_grid
from moe_routing.experiments.task_routing.power import (ABSTAIN, MUST_ABSTAIN, MUST_FAIL, NEGATIVE,
                                                        RULES, VARIANT_NAMES, broken_configs,
                                                        power_table)

pytestmark = pytest.mark.training

BASE = dict(n_tasks=4, n_experts=3, n_relations=8, n_pairs=20, d_model=32, d_expert=32,
            steps=300, batch_size=64, lr=0.01)


@pytest.fixture(scope="module")
def runs():
    torch.set_num_threads(1)
    fig2 = [ExperimentConfig.from_flat(objective=o, **BASE) for o in ("ce", "ce+lb", "ce+router")]
    broken = broken_configs(fig2)
    dense = fig2[0].replace(n_experts=1, d_expert=BASE["d_expert"] * BASE["n_experts"])
    one = fig2[0].replace(n_experts=1)
    res = run_grid(fig2 + list(broken.values()) + [dense, one], None, progress=False,
                   workers=1)
    real = dict(zip(("ce", "ce+lb", "ce+router"), res[:3]))
    return real, dict(zip(broken, res[3:3 + len(broken)])), res[-2:-1], res[-1:]


@pytest.fixture(scope="module")
def table(runs):
    real, broken, dense, one = runs
    return {(r.rule, r.variant): r for r in power_table(real, broken, dense, one)}


def test_every_rule_meets_every_variant(table):
    assert {(r, v) for r, v in table} == {(r, v) for r in RULES
                                          for v in ("working model", *VARIANT_NAMES)}


@pytest.mark.parametrize("pair", sorted(MUST_FAIL), ids=lambda p: f"{p[0]}-{p[1]}")
def test_broken_models_get_the_negative_word(table, pair):
    row = table[pair]
    assert row.verdict in NEGATIVE and row.ok, row.reason


@pytest.mark.parametrize("pair", sorted(MUST_ABSTAIN), ids=lambda p: f"{p[0]}-{p[1]}")
def test_undecidable_models_are_inconclusive(table, pair):
    """An untrained model, or a run stopped while still improving, cannot decide a claim
    either way: the rule must say so rather than refute (or confirm) it."""
    row = table[pair]
    assert row.verdict in ABSTAIN and row.ok, row.reason


def test_no_pair_must_both_fail_and_abstain():
    assert not MUST_FAIL & MUST_ABSTAIN


def test_the_working_model_passes_the_rules_it_should(table):
    assert table["routing_aligned", "working model"].verdict == "reproduced"
    assert table["runs_converged", "working model"].verdict == "our extension"
    assert table["routing_diffuse", "working model"].verdict in ("reproduced", "partly")


def test_an_nmi_only_rule_would_have_called_the_broken_routers_diffuse(runs):
    """The control for the load condition: constant logits and collapsed routing have NMI ≈ 0
    (the old rule's only test) and a load entropy ≈ 0 (what the new rule also asks)."""
    _, broken, _, _ = runs
    for name in ("constant router", "collapsed routing"):
        ra = broken[name]["routing_all"]
        assert ra["nmi"] < 0.01 and ra["load_entropy_normalised"] < 0.05, name


def test_the_untrained_model_is_refused_by_the_convergence_rule(table):
    row = table["runs_converged", "untrained"]
    assert row.verdict == "refused" and "nan" in row.reason
