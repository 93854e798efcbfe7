"""The one parameter count of a MoETransformer, against hand values and ``model.parameters()``."""

import itertools

import numpy as np
import pytest
import torch

from moe_routing.construction.sizes import parameter_counts
from moe_routing.model import MoEConfig, MoETransformer, parameter_count


def test_hand_values_and_routed_mean():
    cfg = MoEConfig(vocab_size=10, max_len=5, d_model=4, n_heads=2, n_experts=3, d_expert=6,
                    layernorm=False, expert_sizes=(6, 2, 4))
    pc = parameter_count(cfg)
    per = [2 * n * 4 + n + 4 for n in (6, 2, 4)]
    assert pc.per_expert == tuple(per) and pc.experts_total == sum(per)
    attn = 4 * 2 * 4 * 2                              # q, k, v, o: each (2 heads × 4 × 2)
    router, unembed = 3 * 4, 10 * 4
    emb = 10 * 4 + 5 * 4
    assert pc.total == emb + attn + router + unembed + sum(per)
    assert pc.active == 2 * 4 + attn + router + unembed + per[0]
    routed = parameter_count(cfg, expert_ids=[1, 1, 2, 0])
    assert routed.experts_active == pytest.approx((2 * per[1] + per[2] + per[0]) / 4, rel=1e-15)
    assert routed.total == pc.total and routed.active < pc.active


@pytest.mark.parametrize("flags", list(itertools.product([False, True], repeat=4)))
def test_total_is_the_stored_parameters_minus_dead_neurons(flags):
    attn_bias, router_bias, layernorm, unembed_bias = flags
    cfg = MoEConfig(vocab_size=11, max_len=7, d_model=6, n_heads=3, d_head=5, n_experts=4,
                    d_expert=8, expert_sizes=(8, 0, 3, 5), top_k=2, attn_bias=attn_bias,
                    router_bias=router_bias, layernorm=layernorm, unembed_bias=unembed_bias)
    model = MoETransformer(cfg)
    pc = parameter_count(cfg)
    stored = sum(p.numel() for p in model.parameters())
    dead = sum(8 - n for n in cfg.expert_sizes) * (2 * cfg.d_model + 1)   # w1 col, w2 row, b1
    assert pc.total == stored - dead
    assert pc.stored_experts == sum(p.numel() for n, p in model.named_parameters()
                                    if n.startswith("experts."))
    # a token: one embedding row each, everything shared, its top_k = 2 (largest) experts
    shared = stored - sum(p.numel() for n, p in model.named_parameters()
                          if n.startswith(("experts.", "tok_emb.", "pos_emb.")))
    assert pc.active == 2 * cfg.d_model + shared + sum(sorted(pc.per_expert)[-2:])


def test_construction_counts_call_the_same_count():
    cfg = MoEConfig(vocab_size=10, max_len=5, d_model=4, n_heads=2, n_experts=3, d_expert=6,
                    layernorm=False, expert_sizes=(6, 2, 4), top_k=1)
    pc, sizes = parameter_count(cfg), parameter_counts(MoETransformer(cfg))
    assert (sizes["total"], sizes["active_max"], sizes["experts_total"]) == \
        (pc.total, pc.active, pc.experts_total)
    assert sizes["expert_largest"] == max(pc.per_expert)


def test_expert_ids_accepts_tensors_and_refuses_bad_routing():
    cfg = MoEConfig(vocab_size=10, max_len=5, d_model=4, n_heads=2, n_experts=3, d_expert=6,
                    top_k=2)
    ids = torch.tensor([[0, 1], [2, 1]])
    assert parameter_count(cfg, ids) == parameter_count(cfg, ids.numpy().astype(np.int32))
    for bad, words in (([0, 1, 2], "multiple of top_k=2"), ([0, 3], "0..2"),
                       ([], "non-empty"), ([0.0, 1.0], "integer dtype")):
        with pytest.raises(ValueError, match=words):
            parameter_count(cfg, bad)
    with pytest.raises(ValueError, match="config = 'MoETransformer'"):
        parameter_count(MoETransformer(cfg))
