"""Broken variants, routing at task-determined positions, the chapter's plan, load entropy and
the reachable diagonal: the measurements the training rules' power rests on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_routing import routing_metrics as rm
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.plan import training_plan
from moe_routing.experiments.task_routing.power import VARIANT_NAMES
from moe_routing.experiments.task_routing.config import VARIANTS

# the experts-off measurement runs a model: a number the CPU's kernels compute
pytestmark = pytest.mark.kernels

ROOT = Path(__file__).resolve().parents[1]
BASE = dict(n_tasks=4, n_experts=3, objective="ce", n_relations=8, n_pairs=20)


# ---- variants: refused where they mean nothing; keys of ordinary runs unchanged ------------
def test_ordinary_runs_keep_their_keys_without_a_variant_field():
    cfg = ExperimentConfig.from_flat(**BASE)
    assert "variant" not in cfg.training_key()
    assert cfg.replace(variant="untrained").key() != cfg.key()


@pytest.mark.parametrize("changes, match", [
    (dict(variant="bogus"), "variant"),
    (dict(variant="shuffled_tasks"), "shuffled task labels change only"),
    (dict(variant="constant_router", n_experts=1), "no routing to break"),
    (dict(variant="collapsed", n_experts=1), "no routing to break"),
])
def test_variants_are_refused_where_they_mean_nothing(changes, match):
    with pytest.raises(ValueError, match=match):
        ExperimentConfig.from_flat(**{**BASE, **changes})


def test_every_variant_is_accepted_where_it_means_something():
    for v in VARIANTS:
        obj = "ce+router" if v == "shuffled_tasks" else "ce"
        assert ExperimentConfig.from_flat(**{**BASE, "objective": obj, "variant": v}).variant == v


# ---- the chapter's plan --------------------------------------------------------------------
PARAMS = dict(seeds=[0, 1], n_relations=8, n_pairs=20, n_templates=5, fig2_tasks=4,
              fig2_experts=3, grid_tasks=[2, 4], grid_experts=[1, 3], d_model=16, n_heads=2,
              d_expert=8, steps=40, batch_size=16, lr=0.01)


def test_plan_counts_shared_one_expert_runs_once_and_adds_the_broken_variants():
    plan = training_plan(**PARAMS)
    # grid: 2 tasks × (1 shared one-expert run + 3 objectives at E=3) × 2 seeds; A-Fig. 2 is
    # a grid cell; one dense run per seed; six broken variants
    assert len(plan.distinct()) == 2 * (1 + 3) * 2 + 2 + len(VARIANT_NAMES)
    assert set(plan.broken) == set(VARIANT_NAMES)
    assert all(c.d_expert == 8 * 3 and c.n_tasks == 4 for c in plan.dense)
    assert len(training_plan(**PARAMS, rule_power=False).distinct()) == 2 * 4 * 2 + 2


def test_plan_decides_the_papers_claims_on_learned_rows_and_runs_the_variant_beside():
    """The grid, the dense runs and A-Fig. 2 are the paper's setting (learned entity rows);
    the fixed-code variant is A-Fig. 2's cell × objectives × seeds, and only it has codes."""
    plan = training_plan(**PARAMS, codes_variant=dict(entity_codes=4))
    assert all(c.model.entity_codes is None for c in (*plan.grid, *plan.dense, *plan.fig2))
    assert len(plan.variant) == 3 * len(PARAMS["seeds"])
    assert {(c.n_tasks, c.n_experts, c.model.entity_codes) for c in plan.variant} == {(4, 3, 4)}
    assert len(plan.distinct()) == len(training_plan(**PARAMS).distinct()) + 3 * 2
    with pytest.raises(ValueError, match="distinct seeds"):
        training_plan(**{**PARAMS, "seeds": [0, 0]})


def test_the_variant_changes_the_fields_it_names_and_only_those():
    """``codes_variant`` is A-Fig. 2's cell with its fields changed: fewer pairs and more steps
    reach the variant's runs and its controls, never the paper's setting; a field that places a
    run in the plan, a mapping without the codes' rank, or an unknown field is refused."""
    plan = training_plan(**PARAMS, controls=True,
                         codes_variant=dict(entity_codes=4, n_pairs=10, steps=90))
    assert {(c.data.n_pairs, c.train.steps) for c in (*plan.variant, *plan.controls)} == {
        (10, 90)}
    assert {(c.data.n_pairs, c.train.steps) for c in (*plan.grid, *plan.fig2, *plan.dense)} == {
        (PARAMS["n_pairs"], PARAMS["steps"])}
    for bad, word in [(dict(n_pairs=10), "entity_codes"), (4, "entity_codes"),
                      (dict(entity_codes=0), "entity_codes"),
                      (dict(entity_codes=4, n_experts=2), "n_experts"),
                      (dict(entity_codes=4, seed=3), "seed"),
                      (dict(entity_codes=4, n_pair=10), "n_pair")]:
        with pytest.raises(ValueError, match=word):
            training_plan(**PARAMS, codes_variant=bad)


def test_plan_controls_are_the_variants_task_router_runs_changed_four_ways():
    plan = training_plan(**PARAMS, codes_variant=dict(entity_codes=4), controls=True)
    seeds = len(PARAMS["seeds"])
    assert len(plan.controls) == 4 * seeds
    assert {c.control for c in plan.controls} == {"router_loss_detached",
                                                  "router_loss_determined", "task_routed",
                                                  "none"}
    assert all(c.objective == "ce+router" and c.model.entity_codes == 4 for c in plan.controls)
    weights = [c for c in plan.controls if c.control == "none"]
    assert len(weights) == seeds and all(c.train.router_alpha == 0.1 for c in weights)
    assert training_plan(**PARAMS, controls=True).controls == ()        # no variant, no controls


def test_plan_refuses_a_grid_without_experts_to_route():
    with pytest.raises(ValueError, match="grid_experts"):
        training_plan(**{**PARAMS, "grid_experts": [1]})


# ---- a run knob's path: the parameters cell, then the profile files -------------------------
def _cell_namespace(chapter: str, extra: str = "") -> dict:
    """The namespace a chapter's parameters cell (with ``extra`` lines appended) leaves, as
    the chapter's plan cell reads it (``plan_knobs(globals())``)."""
    from moe_book.project import parameters_cell_names

    _, source = parameters_cell_names(ROOT / "notebooks" / f"{chapter}.md")
    namespace: dict = {}
    exec(source + "\n" + extra, namespace)                     # noqa: S102 -- our own cell
    return namespace


def test_a_new_run_knob_reaches_every_run_from_the_parameters_cell():
    """A field of the run no chapter sets (``warmup_steps``, the schedule's), written as one
    line of the training chapter's parameters cell, reaches every run of the plan -- the paper's
    grid, the dense runs, A-Fig. 2, the variant, its controls and the broken variants -- with no
    list of names to edit in between.  The two profile files are the other two edits, and the
    pipeline refuses a profile file that leaves a knob of the cell out (test_pipeline)."""
    from moe_routing.experiments.task_routing import plan_knobs

    ns = _cell_namespace("training", "warmup_steps = 7\ncontrols = True")
    plan = training_plan(**plan_knobs(ns), device="cpu")
    assert plan.variant and plan.controls and plan.broken
    assert {c.train.warmup_steps for c in plan.configs()} == {7}
    before = training_plan(**plan_knobs(_cell_namespace("training")), device="cpu")
    assert {c.train.warmup_steps for c in before.configs()} == {
        ExperimentConfig.from_flat(n_tasks=2, n_experts=2, objective="ce").train.warmup_steps}


def test_the_cells_knobs_build_the_runs_the_named_list_built():
    """``plan_knobs`` over the cell builds the very runs (cache keys) the chapter's list of
    the fifteen names built before it, in both chapters that build A-Fig. 2's runs."""
    from moe_routing.experiments.task_routing import plan_knobs

    names = ("seeds", "n_relations", "n_pairs", "n_templates", "fig2_tasks", "fig2_experts",
             "grid_tasks", "grid_experts", "d_model", "n_heads", "d_expert", "steps",
             "batch_size", "lr", "codes_variant", "rule_power", "controls")
    ns = _cell_namespace("training")
    keys = [c.key() for c in training_plan(**plan_knobs(ns), device="cpu").distinct()]
    assert keys == [c.key() for c in training_plan(**{k: ns[k] for k in names},
                                                   device="cpu").distinct()]
    bridge = _cell_namespace("bridge")
    fig2 = training_plan(**plan_knobs(bridge), grid_tasks=[bridge["fig2_tasks"]],
                         grid_experts=[bridge["fig2_experts"]], rule_power=False).fig2
    assert [c.key() for c in fig2] == [c.key() for c in training_plan(
        **{**{k: ns[k] for k in names}, "codes_variant": None}).fig2]


def test_a_run_knob_the_plan_cannot_take_is_refused_by_name():
    """A misspelt field, a field that places a run in the plan and the variant's codes rank
    given as a shared field are refused with the accepted names; ``plan_knobs`` takes only the
    plan's names from a namespace (the chapter's other globals stay out)."""
    from moe_routing.experiments.task_routing import plan_knobs, run_fields

    for bad in (dict(warmup_step=7), dict(n_tasks=3), dict(objective="ce"),
                dict(entity_codes=4)):
        with pytest.raises(ValueError, match=next(iter(bad))) as err:
            training_plan(**PARAMS, **bad)
        assert "warmup_steps" in str(err.value)
    assert {"warmup_steps", "lr", "n_pairs"} <= set(run_fields())
    assert not {"n_tasks", "n_experts", "objective", "seed", "device", "entity_codes"} & set(
        run_fields())
    assert plan_knobs({**PARAMS, "threads": 1, "device": "cuda", "np": np}) == PARAMS


# ---- load entropy ---------------------------------------------------------------------------
@given(st.lists(st.integers(0, 1000), min_size=2, max_size=9).filter(lambda x: sum(x) > 0))
@settings(max_examples=200, deadline=None)
def test_load_entropy_lies_in_the_unit_interval_and_is_scale_free(loads):
    h = rm.load_entropy(loads)
    assert -1e-12 <= h <= 1 + 1e-12
    assert rm.load_entropy(np.array(loads) * 7) == pytest.approx(h, abs=1e-12)


def test_load_entropy_ends():
    assert rm.load_entropy([5, 5, 5, 5]) == pytest.approx(1.0)
    assert rm.load_entropy([0, 9, 0]) == pytest.approx(0.0)
    assert rm.load_entropy([3]) == 1.0
    with pytest.raises(ValueError, match="loads"):
        rm.load_entropy([0, 0])


# ---- reachable diagonal -----------------------------------------------------------------------
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=60))
@settings(max_examples=200, deadline=None)
def test_no_router_reading_the_groups_beats_the_reachable_diagonal(pairs):
    """Brute force: every map group -> expert scores at most the reachable diagonal, and the
    best map reaches it."""
    g = np.array([p[0] for p in pairs])
    d = np.array([p[1] for p in pairs])
    best = rm.achievable_diagonal(g, d)
    groups = np.unique(g)
    rng = np.random.default_rng(0)
    for _ in range(20):
        choice = dict(zip(groups, rng.integers(0, 4, groups.size)))
        assert np.mean([choice[a] == b for a, b in zip(g, d)]) <= best + 1e-12
    argmax = {a: np.bincount(d[g == a]).argmax() for a in groups}
    assert np.mean([argmax[a] == b for a, b in zip(g, d)]) == pytest.approx(best)


def test_reachable_diagonal_is_one_when_groups_determine_the_expert():
    assert rm.achievable_diagonal([0, 0, 1, 2], [1, 1, 0, 2]) == 1.0
    # one shared group (BOS) holding two tasks with different experts: at most half of it
    assert rm.achievable_diagonal([0, 0, 1, 2], [0, 1, 0, 1]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="designated.size"):
        rm.achievable_diagonal([0, 1], [0])


def test_experts_off_accuracy_switches_every_expert_off_and_puts_the_state_back():
    """The witness that the experts hold facts: exact match with every expert zeroed; a
    collapsed variant's reroute state survives the measurement."""
    from moe_routing.experiments.task_routing.data import experts_off_accuracy
    from moe_routing.experiments.task_routing.data import _object_targets, experiment_dataset
    from moe_routing.model import MoETransformer, exact_match
    from moe_routing.experiments.task_routing.data import model_config

    cfg = ExperimentConfig.from_flat(**{**BASE, "objective": "ce"})
    te = experiment_dataset(cfg).encode_split("test")
    torch.manual_seed(0)
    model = MoETransformer(model_config(cfg))
    model.knock_out([1, 2], "reroute")
    before = model.expert_alive.clone()
    off = experts_off_accuracy(model, te)
    assert torch.equal(model.expert_alive, before) and model.knockout_mode == "reroute"
    with model.knocked_out(range(cfg.n_experts)):
        want = exact_match(model, te.tokens, te.object_pos, _object_targets(te)).accuracy
    assert off == want
