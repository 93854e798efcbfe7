"""moe_routing.hf: the book's routing measurements on Hugging Face MoE models.

Tiny randomly initialised models only (nothing is downloaded).  Skipped when transformers (the
``hf`` extra) is missing, except the check that its absence is reported by name.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from moe_routing import hf
from moe_routing.hf import routers as routers_module
from moe_routing.boundary.margin import top_two_margin
from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask
from moe_routing.model.losses import load_balancing_loss

pytestmark = pytest.mark.kernels

try:
    HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
except ValueError:              # sys.modules["transformers"] is None: its import is blocked
    HAS_TRANSFORMERS = False
needs_hf = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed "
                              "(the library's 'hf' extra: pip install -e '.[hf]')")

TINY = dict(hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
            max_position_embeddings=16, router_aux_loss_coef=0.02)


def synthetic_dataset(n_tasks: int = 4, n_pairs: int = 12) -> KnowledgeDataset:
    """An easy dataset: each task's templates start with its own word (the router can tell the
    task from the first word on), objects repeat within a task."""
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    tasks = []
    for k in range(n_tasks):
        pairs = {f"s{k}_{i}": f"o{k}_{i % 5}" for i in range(n_pairs)}
        tasks.append(KnowledgeTask(f"t{k}", [f"{words[k]} ⋆1 is ⋆2.",
                                             f"the {words[k]} of ⋆1 : ⋆2."], pairs))
    return KnowledgeDataset(tasks, seed=0)


@pytest.fixture(scope="module")
def ds():
    return synthetic_dataset()


@pytest.fixture(scope="module")
def model(ds):
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    return MixtralForCausalLM(MixtralConfig(vocab_size=ds.vocab_size, **TINY)).eval()


# ------------------------------------------------------------------------- the optional extra
def test_a_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)       # import raises ImportError
    with pytest.raises(ImportError, match=r"'hf' extra: pip install 'moe_routing\[hf\]'"):
        hf.require_transformers()
    with pytest.raises(ImportError, match="'hf' extra"):
        hf.collect_router_logits(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))


# ---------------------------------------------------------------------- collect_router_logits
@needs_hf
def test_one_tensor_per_layer_at_the_tokens_only(model):
    torch.manual_seed(1)
    lengths = [4, 6, 2]         # a padded sequence before a full one within a batch
    ids = torch.randint(3, model.config.vocab_size, (3, 6))
    am = (torch.arange(6)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(am == 0, 0)
    got = hf.collect_router_logits(model, ids, am, batch_size=2)
    assert len(got) == model.config.num_hidden_layers
    assert all(g.shape == (sum(lengths), model.config.num_local_experts) for g in got)
    # the padding is removed, not merely zeroed: each sequence alone, unpadded, gives its rows
    # (right padding under causal attention changes nothing before it), in row-major order
    alone = [hf.collect_router_logits(model, ids[i:i + 1, :n]) for i, n in enumerate(lengths)]
    for l in range(len(got)):
        torch.testing.assert_close(got[l], torch.cat([a[l] for a in alone]), rtol=1e-5, atol=1e-6)
    # batch size does not change the result
    one = hf.collect_router_logits(model, ids, am, batch_size=1)
    for a, b in zip(got, one):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@needs_hf
def test_the_logits_are_the_routers_pre_softmax_values(model):
    """What the model records as router_logits is softmax(W x) in transformers 5.2 (issue
    #45120); the collected values must be W x itself: softmax of them is what is recorded when
    it records probabilities, and they scale with the router weight (probabilities do not)."""
    torch.manual_seed(2)
    ids = torch.randint(3, model.config.vocab_size, (2, 5))
    kind = hf.recorded_router_output(model, ids)
    assert kind in ("logits", "probabilities")
    with torch.no_grad():
        out = model(ids, output_router_logits=True)
    got = hf.collect_router_logits(model, ids)
    for rec, a in zip(out.router_logits, got):
        want = torch.softmax(a, -1) if kind == "probabilities" else a
        torch.testing.assert_close(rec.float(), want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got[0].sum(-1), torch.ones(got[0].shape[0]))   # not probabilities
    gate = hf.router_modules(model)[0][1]
    w = gate.weight.detach().clone()
    try:
        with torch.no_grad():
            gate.weight.mul_(10.0)
        scaled = hf.collect_router_logits(model, ids)[0]
    finally:
        with torch.no_grad():
            gate.weight.copy_(w)
    torch.testing.assert_close(scaled, 10.0 * got[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(top_two_margin(scaled.numpy()), 10.0 * top_two_margin(got[0].numpy()),
                               rtol=1e-4, atol=1e-6)


@needs_hf
def test_a_model_without_router_logits_is_refused_by_name():
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2, max_position_embeddings=8))
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"LlamaForCausalLM.*output_router_logits.*"
                                         r"accepted:.*MixtralForCausalLM"):
        hf.collect_router_logits(llama, ids)
    with pytest.raises(ValueError, match="a Linear"):
        hf.collect_router_logits(torch.nn.Linear(2, 2), ids)


OTHER_MOE = {   # class: (its config, its MoE arguments) -- tiny, random, nothing downloaded
    "OlmoeForCausalLM": ("OlmoeConfig", dict(num_experts=4, num_experts_per_tok=2)),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", dict(num_experts=4, num_experts_per_tok=2,
                                                   moe_intermediate_size=16,
                                                   shared_expert_intermediate_size=16)),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", dict(num_experts=4, num_experts_per_tok=2,
                                                   moe_intermediate_size=16, head_dim=16)),
    "PhimoeForCausalLM": ("PhimoeConfig", dict(num_local_experts=4, num_experts_per_tok=2)),
    "GptOssForCausalLM": ("GptOssConfig", dict(num_local_experts=4, num_experts_per_tok=2,
                                               head_dim=16)),
}


def tiny_model(cls_name: str, config_name: str, extra: dict):
    import transformers

    cfg = getattr(transformers, config_name)(
        vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16, **extra)
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(cfg).eval()


@needs_hf
@pytest.mark.parametrize("cls_name", sorted(OTHER_MOE))
def test_other_moe_families_give_their_exact_router_logits(cls_name):
    model = tiny_model(cls_name, *OTHER_MOE[cls_name])
    assert cls_name in hf.SUPPORTED_MOE_CAUSAL_LMS
    ids = torch.randint(0, 50, (2, 5))
    got = hf.collect_router_logits(model, ids)
    assert len(got) == 2 and all(g.shape == (10, 4) for g in got)
    with torch.no_grad():
        rec = model(ids, output_router_logits=True).router_logits
    kind = hf.recorded_router_output(model, ids)
    for r, a in zip(rec, got):
        torch.testing.assert_close(r.float().reshape(a.shape),
                                   torch.softmax(a, -1) if kind == "probabilities" else a,
                                   rtol=1e-5, atol=1e-6)


@needs_hf
@pytest.mark.parametrize("cls_name, config_name, extra", [
    ("GraniteMoeForCausalLM", "GraniteMoeConfig", dict(num_local_experts=4, num_experts_per_tok=2)),
    ("JetMoeForCausalLM", "JetMoeConfig", dict(num_local_experts=4, num_experts_per_tok=2,
                                               kv_channels=16)),
])
def test_moe_models_without_one_linear_router_class_are_refused(cls_name, config_name, extra):
    model = tiny_model(cls_name, config_name, extra)
    with pytest.raises(ValueError, match=f"{cls_name}.*accepted:.*whose routing rule this "
                                         "package reads"):
        hf.collect_router_logits(model, torch.zeros(1, 3, dtype=torch.long))


@needs_hf
def test_bad_batches_are_refused_naming_the_value(model):
    ids = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"attention_mask.shape = \(3, 2\)"):
        hf.collect_router_logits(model, ids, torch.ones(3, 2))
    with pytest.raises(ValueError, match=r"input_ids range = '0\.\.10000'"):
        hf.collect_router_logits(model, ids.index_fill(1, torch.tensor([1]), 10000))
    with pytest.raises(ValueError, match="input_ids"):
        hf.collect_router_logits(model, ids.float())


# ---------------------------------------------------------------------- routing_measurements
@needs_hf
def test_the_top_k_choice_is_the_models_own(model):
    """Experts and gate weights equal what Mixtral's router returns for the same inputs (top-k
    of the softmax, most probable first, renormalised): e.g. weights not renormalised, or the
    experts in another order, fail here."""
    gate = hf.router_modules(model)[0][1]
    torch.manual_seed(3)
    x = 3.0 * torch.randn(200, model.config.hidden_size)
    with torch.no_grad():
        _, scores, index = gate(x)
        logits = F.linear(x, gate.weight)
    (layer,) = hf.routing_measurements([logits], torch.zeros(200, dtype=torch.long), routing=2)
    np.testing.assert_array_equal(layer.experts, index.numpy())
    np.testing.assert_allclose(layer.weights, scores.numpy(), rtol=1e-5, atol=1e-6)


def test_hand_made_logits_give_known_counts_nmi_margins_and_boundary_mass():
    # task 0: 6 tokens, all at expert 0; task 1: 6 tokens, 3 at expert 1 and 3 at expert 0.
    # Each token's logits are log p with p = (0.6, 0.3, 0.1) permuted so that the top expert is
    # the one above and the second the next index (mod 3): top-2 margin (2nd − 3rd) log 3,
    # top-1 margin log 2, entropy H(p)
    p = np.array([0.6, 0.3, 0.1])
    top = [0] * 6 + [1, 1, 1, 0, 0, 0]
    tasks = np.array([0] * 6 + [1] * 6)
    rows = []
    for e in top:
        r = np.empty(3)
        r[e], r[(e + 1) % 3], r[(e + 2) % 3] = np.log(p)
        rows.append(r + 5.0)          # a per-token constant: logits, not log-probabilities
    (layer,) = hf.routing_measurements([np.array(rows)], tasks, routing=2, widths=[0.5, 1.0, 1.2])
    s = layer.summary
    assert s["counts"] == [[6, 0, 0], [3, 3, 0]]
    # NMI by hand: joint (1/2, 0; 1/4, 1/4), H(T) = log 2, H(E) = H(3/4, 1/4)
    h_t, h_e = math.log(2), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    mi = 0.5 * math.log(0.5 / (0.5 * 0.75)) + 0.25 * math.log(0.25 / (0.5 * 0.75)) \
        + 0.25 * math.log(0.25 / (0.5 * 0.25))
    assert s["nmi"] == pytest.approx(mi / ((h_t + h_e) / 2), rel=1e-12)
    assert s["purity"] == pytest.approx(9 / 12)
    assert s["diagonal_accuracy"] == pytest.approx(9 / 12)          # designated expert = task
    assert s["router_entropy"] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)
    # top-2 assignments: the second expert is top + 1
    assert layer.assignments["counts"] == [[6, 6, 0], [3, 6, 3]]
    np.testing.assert_allclose(layer.margins, math.log(3), rtol=1e-12)
    np.testing.assert_array_equal(layer.boundary_mass.estimate, [0.0, 0.0, 1.0])   # log 3 ≈ 1.10
    (top1,) = hf.routing_measurements([np.array(rows)], tasks, 1, widths=[0.5, 0.7, 1.0])
    np.testing.assert_allclose(top1.margins, math.log(2), rtol=1e-12)
    np.testing.assert_array_equal(top1.boundary_mass.estimate, [0.0, 1.0, 1.0])    # log 2 ≈ 0.69
    # positions: the last six tokens only (task 1)
    (sub,) = hf.routing_measurements([np.array(rows)], tasks, 2, positions=np.arange(6, 12),
                                     n_tasks=2)
    assert sub.summary["counts"] == [[0, 0, 0], [3, 3, 0]]
    mask = np.zeros(12, bool)
    mask[6:] = True
    (sub2,) = hf.routing_measurements([np.array(rows)], tasks, 2, positions=mask, n_tasks=2)
    assert sub2.summary["counts"] == sub.summary["counts"]


def test_the_boundary_mass_fit_recovers_a_linear_law():
    """Margins of uniform logits gaps: BM(w) ∝ w near 0, so the fitted slope is ≈ 1."""
    rng = np.random.default_rng(0)
    n = 20000
    gap = rng.uniform(0, 4, n)
    logits = np.stack([gap, np.zeros(n), np.full(n, -10.0)], 1)
    (layer,) = hf.routing_measurements([logits], np.zeros(n, dtype=np.int64), routing=1)
    assert layer.bm_fit is not None
    lo, hi = layer.bm_fit.slope_ci
    assert lo <= 1.0 <= hi and abs(layer.bm_fit.slope - 1) < 0.1
    assert layer.as_dict()["bm_fit"]["slope"] == layer.bm_fit.slope


def test_measurements_refuse_bad_input_naming_it():
    logits = np.zeros((4, 3))
    with pytest.raises(ValueError, match="a list even of one"):
        hf.routing_measurements(logits, np.zeros(4, dtype=np.int64), 1)
    with pytest.raises(ValueError, match=r"router_logits_per_layer\[0\].shape = \(4, 3\)"):
        hf.routing_measurements([logits], np.zeros(5, dtype=np.int64), 1)
    with pytest.raises(ValueError, match="routing = 4"):
        hf.routing_measurements([logits], np.zeros(4, dtype=np.int64), 4)
    with pytest.raises(ValueError, match=r"positions range = '0\.\.7'"):
        hf.routing_measurements([logits], np.zeros(4, dtype=np.int64), 1, positions=[0, 7])


# ----------------------------------------------------------------------------- knowledge_batch
def test_knowledge_batch_round_trips_the_librarys_tokens(ds):
    for split in ("train", "test"):
        b = hf.knowledge_batch(ds, ds.vocab_size, split)
        idx = ds.split_indices(split)
        np.testing.assert_array_equal(b.input_ids.numpy(), ds.seqs[idx])
        texts = [ds.tokenizer.decode(row[:n].numpy()) for row, n in zip(b.input_ids, b.lengths)]
        assert texts == ds.sentences(split)
        keep = b.attention_mask.bool()
        assert int(keep.sum()) == int(ds.lengths[idx].sum())
        assert (b.labels[~keep] == -100).all() and (b.labels[keep] == b.input_ids[keep]).all()
        flat = b.input_ids[keep]
        # the object query predicts the object: the next flat token is the object itself
        np.testing.assert_array_equal(flat[b.object_query + 1].numpy(),
                                      ds.seqs[idx, ds.object_pos[idx]])
        np.testing.assert_array_equal(b.task_per_token.numpy(), np.repeat(ds.task[idx],
                                                                          ds.lengths[idx]))
        # predicting = the library's loss mask (every token but EOS)
        enc = ds.encode_split(split)
        assert int(b.predicting.sum()) == int(enc.loss_mask.sum())
        assert not b.predicting[torch.cumsum(b.lengths, 0) - 1].any()


def test_knowledge_batch_refuses_a_too_small_vocabulary(ds):
    with pytest.raises(ValueError, match=f"tokenizer_vocab = {ds.vocab_size - 1}.*≥ {ds.vocab_size}"):
        hf.knowledge_batch(ds, ds.vocab_size - 1)
    with pytest.raises(ValueError, match="KnowledgeDataset"):
        hf.knowledge_batch([1, 2], 100)


@needs_hf
def test_object_exact_match_is_greedy_completion_of_the_prefix(model, ds):
    b = hf.knowledge_batch(ds, model, "test")
    hits = 0
    with torch.no_grad():
        for row, q in zip(b.input_ids, b.object_pos):
            logits = model(row[None, :q]).logits[0, -1]
            hits += int(logits.argmax() == row[q])
    assert hf.object_exact_match(model, b, batch_size=3) == hits / len(b)


# --------------------------------------------------------------------------- load balancing
@needs_hf
def test_the_load_balancing_normalisations_compared(model, ds):
    """transformers' LB = k × the library's LB (α = 1) on the tokens of all layers pooled; the
    5.2 model's own aux_loss is that function of what it records (softmax twice when it records
    probabilities)."""
    lb_fn = hf.own_load_balancing_loss(model)
    b = hf.knowledge_batch(ds, model, "train").rows(torch.arange(8))
    routers = hf.router_modules(model)
    with torch.no_grad(), routers_module._RouterTap(routers) as tap:
        out = model(b.input_ids, attention_mask=b.attention_mask, output_router_logits=True)
        exact = tap.take(model)
    e, k = model.config.num_local_experts, model.config.num_experts_per_tok
    theirs = lb_fn(tuple(exact), e, k, b.attention_mask)
    keep = b.attention_mask.reshape(-1).bool()
    pooled = torch.cat([a[keep] for a in exact])                          # (L · N, E)
    probs = torch.softmax(pooled, -1)
    ours = load_balancing_loss(probs, probs.topk(k, -1).indices, alpha=1.0)
    torch.testing.assert_close(theirs, k * ours, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.aux_loss, lb_fn(out.router_logits, e, k, b.attention_mask))


# ---------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def runs(ds):
    # a module fixture is set up before conftest's one-thread fixture: set it here
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = dict(vocab_size=ds.vocab_size, **TINY)
        return {obj: hf.train_hf_moe(cfg, ds, obj, steps=40, seed=0, batch_size=32, lr=1e-2)
                for obj in ("ce", "ce+lb", "ce+router")}
    finally:
        torch.set_num_threads(old)


@needs_hf
@pytest.mark.training
def test_each_objective_trains_and_logs_its_parts(runs):
    for obj, r in runs.items():
        first, last = r.history[0], r.history[-1]
        assert last["step"] == 40 and all(math.isfinite(h["total"]) for h in r.history)
        assert last["ce"] < first["ce"], obj
        assert (last["lb"] > 0) == (obj == "ce+lb") and (last["router"] > 0) == (obj == "ce+router")
        assert 0 <= r.exact_match <= 1 and len(r.routing) == 2
        assert r.seconds_per_step > 0
    assert runs["ce+lb"].lb_coef == 0.02 and runs["ce"].lb_coef == 0.0
    assert runs["ce"].model.config.router_aux_loss_coef == 0.0


@needs_hf
@pytest.mark.training
def test_the_task_router_loss_routes_tokens_to_their_designated_expert(runs):
    ce = [layer.summary["diagonal_accuracy"] for layer in runs["ce"].routing]
    router = [layer.summary["diagonal_accuracy"] for layer in runs["ce+router"].routing]
    assert all(r > c + 0.3 for r, c in zip(router, ce)), (router, ce)
    assert all(layer.summary["nmi"] > 0.5 for layer in runs["ce+router"].routing)


@needs_hf
def test_train_refuses_bad_arguments(ds):
    cfg = dict(vocab_size=ds.vocab_size, **TINY)
    with pytest.raises(ValueError, match="objective = 'lb'"):
        hf.train_hf_moe(cfg, ds, "lb", steps=1)
    with pytest.raises(ValueError, match="lb_coef = 0.0"):
        hf.train_hf_moe({**cfg, "router_aux_loss_coef": 0.0}, ds, "ce+lb", steps=1)
    with pytest.raises(ValueError, match="tokenizer_vocab"):
        hf.train_hf_moe({**cfg, "vocab_size": 10}, ds, "ce", steps=1)
    with pytest.raises(ValueError, match="max_position_embeddings = 4"):
        hf.train_hf_moe({**cfg, "max_position_embeddings": 4}, ds, "ce", steps=1)


@needs_hf
def test_the_extras_install_size_counts_what_the_base_lacks():
    size = hf.extra_install_size()
    names = [p[0] for p in size.packages]
    assert "transformers" in names and "torch" not in names and "numpy" not in names
    assert size.total_bytes == sum(p[2] for p in size.packages) > 10 * 2 ** 20
    assert [p[2] for p in size.packages] == sorted((p[2] for p in size.packages), reverse=True)
    assert size.base_packages >= 6
    with pytest.raises(ValueError, match="extra = 'nope'"):
        hf.extra_install_size("nope")


@needs_hf
def test_training_can_leave_the_routing_to_the_caller(ds):
    cfg = dict(vocab_size=ds.vocab_size, **TINY)
    r = hf.train_hf_moe(cfg, ds, "ce", steps=2, batch_size=16, measure_routing=False)
    assert r.routing == [] and 0 <= r.exact_match <= 1
    with pytest.raises(ValueError, match="measure_routing = 'no'"):
        hf.train_hf_moe(cfg, ds, "ce", steps=1, measure_routing="no")
