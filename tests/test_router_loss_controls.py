"""The task-router loss's controls (ours): its gradient stopped at the router's input, and the
loss only at the task-determined positions -- each changes exactly what it says."""

from __future__ import annotations

import pytest
import torch

from moe_routing.experiments import ExperimentConfig, run_grid
from moe_routing.experiments.data import determined_mask
from moe_routing.experiments.task_routing import experiment_dataset
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

    from moe_routing.experiments.claims import control_effect

    assert control_effect(D(low=0.05, high=0.15), D(low=-0.02, high=0.03)) == \
        "recovers the cost"
    assert control_effect(D(low=0.02, high=0.08), D(low=-0.12, high=-0.05)) == \
        "recovers part of it"
    assert control_effect(D(low=-0.08, high=-0.01), D(low=-0.2, high=-0.1)) == "costs more"
    assert control_effect(D(low=-0.02, high=0.03), D(low=-0.1, high=0.0)) == \
        "changes nothing resolvable"
    with pytest.raises(ValueError, match="vs_ce"):
        control_effect(D(low=0.0, high=0.1), (0.0, 0.1))
