"""The task-router loss's controls (ours): its gradient stopped at the router's input, and the
loss only at the task-determined positions -- each changes exactly what it says."""

from __future__ import annotations

import pytest
import torch

from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.runs import run_grid
from moe_routing.experiments.task_routing.data import determined_mask
from moe_routing.experiments.task_routing.data import experiment_dataset
from moe_routing.model import MoEConfig, MoETransformer
from moe_routing.model.losses import task_router_loss

pytestmark = [pytest.mark.training, pytest.mark.kernels]

TINY = dict(n_tasks=3, n_experts=3, n_relations=4, n_pairs=12, n_templates=3, d_model=16,
            n_heads=2, d_expert=16, batch_size=32, warmup_steps=2, steps=24, lr=1e-2)


def _grads(detached: bool) -> dict[str, float]:
    torch.manual_seed(0)
    cfg = MoEConfig(vocab_size=20, max_len=6, d_model=16, n_heads=2, n_experts=3, d_expert=8,
                    router_loss_detached=detached)
    model = MoETransformer(cfg)
    idx = torch.randint(0, 20, (4, 6))
    out = model(idx)
    targets = torch.randint(0, 3, (4, 6))
    task_router_loss(out.layers[0].router_logits, targets).backward()
    return {n: float(p.grad.abs().sum()) if p.grad is not None else 0.0
            for n, p in model.named_parameters()}


def test_a_detached_router_loss_trains_the_router_only():
    free, stopped = _grads(False), _grads(True)
    router = [n for n in free if n.startswith("router.")]
    shared = [n for n in free if n.startswith(("attn.", "tok_emb", "ln_"))]
    assert router and shared
    assert all(stopped[n] > 0 for n in router)            # the router still learns
    assert all(stopped[n] == 0 for n in shared)           # nothing reaches the shared layers
    assert any(free[n] > 0 for n in shared)               # the control: without it, it does


def test_a_detached_router_loss_changes_no_forward_value():
    torch.manual_seed(0)
    a = MoETransformer(MoEConfig(vocab_size=20, max_len=6, d_model=16, n_heads=2, n_experts=3,
                                 d_expert=8))
    b = MoETransformer(MoEConfig(vocab_size=20, max_len=6, d_model=16, n_heads=2, n_experts=3,
                                 d_expert=8, router_loss_detached=True))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 20, (3, 6))
    oa, ob = a(idx), b(idx)
    assert torch.equal(oa.logits, ob.logits)
    assert torch.equal(oa.layers[0].router_logits, ob.layers[0].router_logits)


def test_the_determined_positions_are_a_strict_part_of_the_predicted_ones():
    cfg = ExperimentConfig.from_flat(objective="ce+router", **TINY)
    ds = experiment_dataset(cfg)
    tr = ds.encode_split("train")
    det = determined_mask(ds, tr)
    assert det.shape == tr.loss_mask.shape and bool((det <= tr.loss_mask).all())
    assert 0 < int(det.sum()) < int(tr.loss_mask.sum())
    assert not bool(det[:, 0].any())                      # BOS never tells the task


def test_controls_train_other_models_and_keep_the_ordinary_key(tmp_path):
    base = ExperimentConfig.from_flat(objective="ce+router", **TINY)
    assert "control" not in base.as_dict()
    runs = run_grid([base, base.replace(control="router_loss_detached"),
                     base.replace(control="router_loss_determined")], tmp_path,
                    progress=False, workers=1)
    keys = {r["key"] for r in runs}
    assert len(keys) == 3
    assert runs[1]["config"]["control"] == "router_loss_detached"
    assert runs[1]["model_config"]["router_loss_detached"] is True
    # the losses differ: the determined control supervises fewer positions
    assert runs[0]["history"]["router"] != runs[2]["history"]["router"]


@pytest.mark.parametrize("changes", [dict(objective="ce"), dict(n_experts=1),
                                     dict(control="bogus")])
def test_a_control_is_refused_where_it_changes_nothing(changes):
    with pytest.raises(ValueError, match="control"):
        ExperimentConfig.from_flat(**{**TINY, "objective": "ce+router",
                                      "control": "router_loss_detached", **changes})


def test_control_effect_reads_the_two_differences():
    from types import SimpleNamespace as D

    from moe_routing.experiments.task_routing.claims import control_effect

    assert control_effect(D(low=0.05, high=0.15), D(low=-0.02, high=0.03)) == \
        "recovers the cost"
    assert control_effect(D(low=0.02, high=0.08), D(low=-0.12, high=-0.05)) == \
        "recovers part of it"
    assert control_effect(D(low=-0.08, high=-0.01), D(low=-0.2, high=-0.1)) == "costs more"
    assert control_effect(D(low=-0.02, high=0.03), D(low=-0.1, high=0.0)) == \
        "changes nothing resolvable"
    with pytest.raises(ValueError, match="vs_ce"):
        control_effect(D(low=0.0, high=0.1), (0.0, 0.1))


def test_the_detached_control_survives_the_entity_codes():
    """The variant's controls run with fixed entity codes: the model's configuration must keep
    both (an earlier ``_model_config`` replaced the detached flag by the codes' start)."""
    from moe_routing.experiments.task_routing.data import model_config

    cfg = ExperimentConfig.from_flat(objective="ce+router", entity_codes=4,
                                     control="router_loss_detached", **TINY)
    mcfg = model_config(cfg)
    assert mcfg.router_loss_detached is True and mcfg.code_start is not None
    assert model_config(cfg.replace(control="none")).router_loss_detached is False


def _oracle_model(top_k: int = 1) -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(MoEConfig(vocab_size=20, max_len=6, d_model=16, n_heads=2,
                                    n_experts=3, d_expert=8, top_k=top_k))


def test_an_oracle_route_sends_every_position_of_a_sequence_to_its_expert():
    model = _oracle_model()
    idx = torch.randint(0, 20, (4, 6))
    route = torch.tensor([2, 0, 1, 2])
    out = model(idx, route=route)
    assert torch.equal(out.expert_index[..., 0], route[:, None].expand(4, 6))
    # the same expert with gate 1 = the router's choice forced: the logits change with it
    free = model(idx)
    assert not torch.equal(out.logits, free.logits)
    assert torch.equal(out.layers[0].router_logits, free.layers[0].router_logits)
    # the route of a sequence does not depend on its batch: one row alone gives its logits
    alone = model(idx[1:2], route=route[1:2])
    assert torch.allclose(alone.logits, out.logits[1:2], atol=1e-6)


@pytest.mark.parametrize("bad, match", [(torch.tensor([0, 3]), "expert ids"),
                                        (torch.tensor([0]), "route"),
                                        (torch.tensor([0.0, 1.0]), "route")])
def test_a_bad_route_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        _oracle_model()(torch.zeros(2, 4, dtype=torch.long), route=bad)


def test_a_route_is_refused_for_a_top_two_model_and_a_rerouted_expert():
    with pytest.raises(ValueError, match="top-2"):
        _oracle_model(2)(torch.zeros(2, 4, dtype=torch.long), route=torch.tensor([0, 1]))
    model = _oracle_model()
    model.knock_out([1], "reroute")
    with pytest.raises(ValueError, match="reroute"):
        model(torch.zeros(2, 4, dtype=torch.long), route=torch.tensor([0, 1]))


def test_the_task_routed_control_trains_by_the_task_with_no_router_loss(tmp_path):
    base = ExperimentConfig.from_flat(objective="ce+router", **TINY)
    oracle = base.replace(control="task_routed")
    assert oracle.loop_config("cpu").objective == "ce"
    rt, orc = run_grid([base, oracle], tmp_path, progress=False, workers=1)
    assert orc["config"]["control"] == "task_routed" and orc["key"] != rt["key"]
    assert all(v == 0 for v in orc["history"]["router"])         # no router loss
    assert any(v > 0 for v in rt["history"]["router"])
    # measured as it was trained: every position at its task's designated expert
    assert orc["routing_all"]["diagonal_accuracy"] == pytest.approx(1.0)
    assert rt["routing_all"]["diagonal_accuracy"] < 1.0
