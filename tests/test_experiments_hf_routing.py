"""moe_routing.experiments.hf_routing.runs: the Mixtral-style runs beside the library's model.

A tiny real run (seconds): its dataclasses against a direct computation from the router
logits, the cache hit on a second call (and a miss when the configuration changes), the
library's model measured at the same positions, and bad input refused by name.  Skipped
without transformers (the ``hf`` extra).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from moe_routing import hf
from moe_routing import routing_metrics as rm
from moe_routing.experiments.hf_routing import runs as hr
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.data import experiment_dataset
from moe_routing.experiments.hf_routing import measure
from moe_routing.experiments.grid import GridSession

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the 'hf' extra)")

TINY = dict(d_model=16, d_expert=16, n_layers=2, n_heads=2, top_k=2, steps=12, batch_size=32,
            lr=0.01)
CFG = ExperimentConfig.from_flat(n_tasks=3, n_experts=3, objective="ce", n_relations=6, n_pairs=8,
                       n_templates=3, d_model=16, n_heads=2, d_expert=16, steps=20,
                       batch_size=32, lr=0.01, device="cpu")
RUNS = hr.mixtral_runs(CFG.data, CFG.n_experts, [0, 1], **TINY)


def experiment_in_process(runs, folder):
    """The experiment with its grid in this process (one worker), where a test's stub of the
    training function is seen."""
    with GridSession(None, 1) as session:
        return hr.hf_routing_experiment(runs, folder, session=session)


@pytest.fixture(scope="module")
def ds():
    return experiment_dataset(CFG)


@pytest.fixture(scope="module")
def experiment(ds, tmp_path_factory):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folder = tmp_path_factory.mktemp("hf_routing")
        first = experiment_in_process(RUNS, folder)
        return folder, first
    finally:
        torch.set_num_threads(old)


@pytest.mark.training
def test_the_shapes_are_objective_by_layer_by_seed(experiment, ds):
    _, res = experiment
    assert res.objectives == ("ce", "ce+lb", "ce+router") and res.seeds == (0, 1)
    assert res.n_layers == 2 and len(res.runs) == 6 and len(res.cells) == 6
    assert not any(r.cached for r in res.runs)
    for c in res.cells:
        assert np.asarray(c.counts).shape == (ds.n_tasks, CFG.n_experts)
        for iv in (c.nmi, c.purity, c.bm, c.load_entropy):
            assert iv.low <= iv.mean <= iv.high and iv.n_seeds == 2
        runs = [r for r in res.runs if r.objective == c.objective]
        assert c.nmi.mean == pytest.approx(np.mean([r.layers[c.layer - 1].nmi for r in runs]))
        assert c.nmi.low == min(r.layers[c.layer - 1].nmi_low for r in runs)
        assert np.array_equal(np.asarray(c.counts),
                              sum(np.asarray(r.layers[c.layer - 1].counts) for r in runs))
    for o in res.objectives:
        acc = res.accuracy(o)
        assert 0 <= acc.low <= acc.mean <= acc.high <= 1
    assert set(res.nmi_by_layer()) == set(res.objectives)
    assert all(len(v) == 2 for v in res.nmi_by_layer().values())


@pytest.mark.training
def test_a_run_agrees_with_a_direct_computation(ds):
    torch.set_num_threads(1)
    run = RUNS[0].replace(objective="ce+router")
    r = hf.train_hf_moe(run.mixtral_config(ds.vocab_size, ds.seq_len), ds, "ce+router",
                        steps=run.train.steps, seed=0, batch_size=run.train.batch_size,
                        lr=run.train.lr)
    layers = hr.measure_hf_model(r.model, ds, w_star=0.1)
    test = hf.knowledge_batch(ds, r.model, "test")
    logits = hf.collect_router_logits(r.model, test.input_ids, test.attention_mask)
    # the determined positions straight from the trie, position by position
    enc = ds.encode_split("test")
    flat = []
    for i in range(len(enc)):
        for p in range(int(enc.lengths[i])):
            node = int(enc.prefix_node[i, p]) if p < enc.prefix_node.shape[1] - 1 else -1
            flat.append(p < int(enc.lengths[i]) - 1 and not bool(ds.trie.ambiguous[max(node, 0)]))
    det = np.array(flat)
    assert np.array_equal(det, measure.determined_positions(ds, test))
    task = test.task_per_token.numpy()[det]
    for l, lay in enumerate(layers):
        a = logits[l].numpy()[det].astype(np.float64)
        top1 = a.argmax(1)
        c = rm.task_expert_counts(task, top1, ds.n_tasks, CFG.n_experts)
        assert np.array_equal(np.asarray(lay.counts), c)
        assert lay.nmi == pytest.approx(rm.normalized_mutual_info(c))
        assert lay.nmi_low <= lay.nmi <= lay.nmi_high
        s = np.sort(a, 1)
        assert lay.margin_median == pytest.approx(np.median(s[:, -2] - s[:, -3]))
        assert lay.bm == pytest.approx(np.mean(s[:, -2] - s[:, -3] <= 0.1))
        assert lay.n_positions == int(det.sum())


@pytest.mark.training
def test_a_second_call_reads_the_cache_and_another_config_does_not(experiment, ds, monkeypatch):
    folder, first = experiment
    files = sorted((folder / "hf_routing").glob("*.json"))
    assert len(files) == 6

    def no_training(*a, **k):
        raise AssertionError("trained again")

    monkeypatch.setattr(hf, "train_hf_moe", no_training)
    again = experiment_in_process(RUNS, folder)
    assert all(r.cached for r in again.runs)
    assert again.cells == first.cells and again.exact_match == first.exact_match
    with pytest.raises(Exception, match="trained again"):           # another configuration
        experiment_in_process([r.replace(steps=13) for r in RUNS], folder)
    with pytest.raises(Exception, match="trained again"):           # other data
        experiment_in_process([r.replace(n_pairs=7) for r in RUNS], folder)
    # a corrupt file is not read as a result: its run is trained again (here: the stub)
    assert json.loads(files[0].read_text())["key"] == files[0].stem
    files[0].write_text("{not json")
    with pytest.raises(Exception, match="trained again"):
        experiment_in_process(RUNS, folder)


def test_bad_input_is_refused_by_name(ds):
    with pytest.raises(ValueError, match="objectives\\[0\\] = 'lb'"):
        hr.mixtral_runs(CFG.data, 3, objectives=["lb"], **TINY)
    with pytest.raises(ValueError, match=r"objective = 'ce\+dense'"):
        RUNS[0].replace(objective="ce+dense")
    with pytest.raises(ValueError, match="seeds"):
        hr.mixtral_runs(CFG.data, 3, seeds=[0, 0], **TINY)
    with pytest.raises(ValueError, match="data"):
        hr.mixtral_runs([1, 2], 3, **TINY)
    with pytest.raises(ValueError, match="configs"):
        hr.hf_routing_experiment([1, 2])
    with pytest.raises(ValueError, match="one data part"):
        hr.hf_routing_experiment([RUNS[0], RUNS[1].replace(n_pairs=7)])
    with pytest.raises(ValueError, match="top_k = 4"):
        RUNS[0].replace(top_k=4)
    with pytest.raises(ValueError, match="d_model"):
        RUNS[0].replace(d_model=15)
    with pytest.raises(ValueError, match="steps = 0"):
        RUNS[0].replace(steps=0)
    with pytest.raises(ValueError, match="hidden_size"):
        hr.mixtral_runs(CFG.data, 3, hidden_size=16)        # Mixtral's name: the knob is d_model
    for knob, value in (("warmup_steps", 20), ("schedule", "cosine"), ("grad_clip", 1.0)):
        with pytest.raises(ValueError, match=f"{knob} = .*constant rate"):
            RUNS[0].replace(**{knob: value})                  # refused, not ignored


def test_a_knob_has_the_experiments_name_and_reaches_mixtral():
    """d_model / d_expert / n_layers / n_heads / n_experts / lb_alpha are the library's names
    (the shared parts); they become MixtralConfig's arguments."""
    cfg = RUNS[0].replace(d_model=24, d_expert=12, n_heads=3, lb_alpha=0.05)
    m = cfg.mixtral_config(vocab_size=50, max_len=9)
    assert (m["hidden_size"], m["intermediate_size"], m["num_attention_heads"],
            m["num_key_value_heads"], m["num_local_experts"], m["num_hidden_layers"],
            m["router_aux_loss_coef"]) == (24, 12, 3, 3, CFG.n_experts, 2, 0.05)
    assert cfg.key() != RUNS[0].key() and RUNS[0].key() == hr.mixtral_runs(
        CFG.data, CFG.n_experts, [0, 1], **TINY)[0].key()


def test_a_model_without_router_logits_is_refused_by_name(ds):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=ds.vocab_size, hidden_size=16,
                                         intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=ds.seq_len))
    with pytest.raises(ValueError, match="LlamaForCausalLM.*output_router_logits"):
        hr.measure_hf_model(llama, ds)
