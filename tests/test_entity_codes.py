"""Fixed entity codes (``MoEConfig.entity_codes``): the training chapter's regime in which the
experts, not the embedding rows, must hold the facts."""

from __future__ import annotations

import pytest
import torch

from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.data import model_config
from moe_routing.model import MoEConfig, MoETransformer, parameter_count
from moe_routing.model.config import MoEShape

pytestmark = pytest.mark.kernels          # the codes come from torch's QR and normal draws


def _cfg(**kw) -> MoEConfig:
    base = dict(vocab_size=40, max_len=6, d_model=16, n_heads=2, n_experts=3, d_expert=4,
                entity_codes=3, code_start=12)
    return MoEConfig(**{**base, **kw})


def test_codes_span_a_subspace_of_the_stated_rank_at_the_learned_rows_scale():
    m = MoETransformer(_cfg())
    codes = m.entity_codes
    assert codes.shape == (40 - 12, 16) and not codes.requires_grad
    s = torch.linalg.svdvals(codes.double())
    assert s[2] > 0.1 * s[0] and s[3] < 1e-6 * s[0]          # rank exactly 3
    assert m.tok_emb.weight.shape == (12, 16)                 # learned rows: the others only
    # coordinates with the variance of a learned row at initialisation (init_std 0.02)
    assert 0.015 < float(codes.std()) < 0.025


def test_codes_do_not_depend_on_or_move_the_global_seed():
    from moe_routing.model.transformer import fixed_codes

    torch.manual_seed(0)
    a = MoETransformer(_cfg())
    torch.manual_seed(123)
    b = MoETransformer(_cfg())
    assert torch.equal(a.entity_codes, b.entity_codes)
    assert not torch.equal(a.tok_emb.weight, b.tok_emb.weight)   # the rest follows the seed
    state = torch.get_rng_state()
    codes = fixed_codes(_cfg())                 # drawing them consumes no global random number
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(codes, a.entity_codes)
    assert not torch.equal(fixed_codes(_cfg(entity_codes=2)), codes)


def test_entities_read_codes_template_words_read_learned_rows_and_codes_never_train():
    m = MoETransformer(_cfg())
    idx = torch.tensor([[0, 5, 11, 12, 39, 3]])
    e = m.embed_tokens(idx)                                   # (1, 6, 16)
    assert torch.equal(e[0, 1], m.tok_emb.weight[5])
    assert torch.equal(e[0, 2], m.tok_emb.weight[11])
    assert torch.equal(e[0, 3], m.entity_codes[0])
    assert torch.equal(e[0, 4], m.entity_codes[27])
    before = m.entity_codes.clone()
    opt = torch.optim.AdamW(m.param_groups(0.1), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        m(idx).logits.square().mean().backward()
        opt.step()
    assert torch.equal(m.entity_codes, before)                # a buffer: no gradient, no decay
    assert m.tok_emb.weight.grad is not None


def test_parameter_count_counts_the_learned_rows_only():
    cfg = _cfg()
    m = MoETransformer(cfg)
    assert parameter_count(cfg).total == sum(p.numel() for p in m.parameters())
    plain = _cfg(entity_codes=None, code_start=None)
    assert parameter_count(plain).total - parameter_count(cfg).total == (40 - 12) * 16


def test_the_state_holds_the_codes_and_round_trips():
    a, b = MoETransformer(_cfg()), MoETransformer(_cfg())
    state = a.state_dict()
    assert "entity_codes" in state and state["tok_emb.weight"].shape == (12, 16)
    b.load_state_dict(state)
    idx = torch.tensor([[1, 20, 13, 2]])
    assert torch.equal(a(idx).logits, b(idx).logits)


@pytest.mark.parametrize("kw, field", [
    (dict(code_start=None), "code_start"),                      # rank without a start
    (dict(entity_codes=None), "code_start"),                    # start without a rank
    (dict(entity_codes=17), "entity_codes"),                    # rank above d_model
    (dict(entity_codes=0), "entity_codes"),
    (dict(code_start=40), "code_start"),                        # no token left to code
])
def test_bad_codes_are_refused_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"MoEConfig\.{field} = "):
        _cfg(**kw)
    if field == "entity_codes":
        with pytest.raises(ValueError, match=r"MoEConfig\.entity_codes"):
            MoEShape(d_model=16, n_heads=2, entity_codes=kw["entity_codes"])


def test_an_experiment_codes_exactly_its_entities_and_keeps_old_keys():
    flat = dict(n_tasks=2, n_relations=4, n_pairs=6, n_templates=2, n_experts=2,
                objective="ce", d_model=16, n_heads=2, d_expert=4, steps=2)
    plain = ExperimentConfig.from_flat(**flat)
    coded = ExperimentConfig.from_flat(**flat, entity_codes=4)
    # a configuration without codes hashes the mapping it hashed before the field existed
    assert "entity_codes" not in plain.training_key()
    assert coded.training_key()["entity_codes"] == 4 and coded.key() != plain.key()
    from moe_routing.experiments.task_routing.data import experiment_dataset
    ds = experiment_dataset(coded)
    mc = model_config(coded)
    assert mc.code_start == ds.vocab_size - ds.tokenizer.n_entity
    assert sorted(int(i) for i in ds.tokenizer.entity_ids) == list(range(mc.code_start,
                                                                         mc.vocab_size))
