"""Training loop and evaluation: reproducibility, learning, exact match, valid-next-token mass."""

import math

import pytest
import torch

from moe_routing import routing_metrics as rm
from moe_routing.model import (IGNORE_INDEX, MoEConfig, MoETransformer, TrainConfig, TrainData,
                               build_and_train, exact_match, greedy_complete, valid_next_mass)

pytestmark = pytest.mark.kernels


def lookup_data(n_tasks=4, n_keys=12, seed=0):
    """A miniature knowledge dataset: sentence = [template_k, key, rel_k, value_k(key), end].

    Task k has its own template token and relation token and a random key → value table over
    shared value tokens; the object (position 3) is only predictable from task and key.
    Token ids: 0..n_keys-1 keys, then values, then 2 syntax tokens per task, then end.
    """
    g = torch.Generator().manual_seed(seed)
    n_vals = 6
    vals0, syn0 = n_keys, n_keys + n_vals
    end = syn0 + 2 * n_tasks
    rows, tasks = [], []
    for k in range(n_tasks):
        table = torch.randint(0, n_vals, (n_keys,), generator=g)
        for key in range(n_keys):
            rows.append([syn0 + 2 * k, key, syn0 + 2 * k + 1, vals0 + int(table[key]), end])
            tasks.append(k)
    seq = torch.tensor(rows)
    return seq, torch.tensor(tasks), end + 1


def train_data(seq, tasks):
    return TrainData(inputs=seq[:, :-1], targets=seq[:, 1:].clone(), task_ids=tasks)


def small_cfg(vocab, **kw):
    return MoEConfig(**{"vocab_size": vocab, "max_len": 6, "d_model": 32, "n_heads": 2,
                        "n_experts": 4, "d_expert": 32, **kw})


def test_cpu_reruns_are_bit_identical():
    # same code path rerun in one process (same kernels, same thread count): exactness is the
    # property under test; across CPUs with other kernels it is not promised
    seq, tasks, v = lookup_data()
    cfg = TrainConfig(objective="ce+lb", steps=12, batch_size=16, progress=False, log_every=1,
                      device="cpu", seed=3)
    m1, h1 = build_and_train(small_cfg(v), train_data(seq, tasks), cfg)
    m2, h2 = build_and_train(small_cfg(v), train_data(seq, tasks), cfg)
    assert h1.total == h2.total and len(h1.total) == 12
    for (n, a), (_, b) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), n
    m3, h3 = build_and_train(small_cfg(v), train_data(seq, tasks),
                             TrainConfig(**{**cfg.as_dict(), "seed": 4}))
    assert h3.total != h1.total


def test_task_router_objective_learns_lookup_and_task_routing():
    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    cfg = TrainConfig(objective="ce+router", steps=250, batch_size=48, lr=1e-2,
                      progress=False, device="cpu", warmup_steps=10)
    model, hist = build_and_train(small_cfg(v), data, cfg)
    assert hist.ce[-1] < 0.25 * hist.ce[0]
    res = exact_match(model, seq[:, :3], torch.full((len(seq),), 3), seq[:, 3])
    assert res.accuracy > 0.95
    out = model(seq[:, :-1])
    counts = rm.task_expert_counts(tasks[:, None].expand(-1, 4), out.expert_index[..., 0],
                                   4, 4)
    assert rm.diagonal_accuracy(counts) > 0.95


def test_router_objective_rejects_missing_tasks_and_bad_vocab():
    seq, tasks, v = lookup_data()
    cfg = TrainConfig(objective="ce+router", steps=1, progress=False, device="cpu")
    with pytest.raises(ValueError, match="task_ids"):
        build_and_train(small_cfg(v), TrainData(seq[:, :-1], seq[:, 1:]), cfg)
    with pytest.raises(ValueError, match="vocab_size"):
        build_and_train(small_cfg(v - 1), train_data(seq, tasks), cfg)


def test_padding_is_ignored_in_training():
    seq, tasks, v = lookup_data()
    targets = seq[:, 1:].clone()
    targets[:, -1] = IGNORE_INDEX
    cfg = TrainConfig(steps=2, batch_size=8, progress=False, device="cpu")
    _, h = build_and_train(small_cfg(v), TrainData(seq[:, :-1], targets, tasks), cfg)
    assert all(math.isfinite(x) for x in h.total)


def test_greedy_completion_matches_step_by_step_argmax():
    torch.manual_seed(0)
    m = MoETransformer(MoEConfig(vocab_size=11, max_len=8, d_model=16, n_heads=2,
                                 n_experts=3, d_expert=8)).double()
    with torch.no_grad():
        m.unembed.weight.normal_(0, 3.0)
    prefixes = torch.randint(0, 11, (5, 5))
    lengths = torch.tensor([1, 5, 3, 2, 4])
    got = greedy_complete(m, prefixes, lengths, n_new=3)
    for i in range(5):
        seq = prefixes[i, :lengths[i]].tolist()
        for j in range(3):
            nxt = int(m(torch.tensor([seq])).logits[0, -1].argmax())
            assert got[i, j] == nxt
            seq.append(nxt)
    targets = got.clone()
    targets[1, 2] = IGNORE_INDEX                       # shorter target: 2 tokens
    targets[2, 0] = (targets[2, 0] + 1) % 11           # wrong first token
    res = exact_match(m, prefixes, lengths, targets)
    assert res.correct.tolist() == [True, True, False, True, True]
    assert res.accuracy == pytest.approx(0.8)
    with pytest.raises(ValueError, match="max_len"):
        greedy_complete(m, prefixes, lengths, n_new=5)
    with pytest.raises(ValueError, match="lengths"):
        greedy_complete(m, prefixes, torch.tensor([0, 1, 1, 1, 1]))


def constant_logits_model(logits):
    """A model whose logits are ``logits`` (v,) at every position: zero unembedding, bias set."""
    m = MoETransformer(MoEConfig(vocab_size=len(logits), max_len=4, d_model=4, n_heads=2,
                                 n_experts=2, d_expert=4, unembed_bias=True)).double()
    with torch.no_grad():
        m.unembed.weight.zero_()
        m.unembed.bias.copy_(torch.tensor(logits, dtype=torch.float64))
    return m


def test_valid_mass_exact_and_tiny_invalid_mass():
    tokens = torch.zeros(1, 1, dtype=torch.long)
    half = valid_next_mass(constant_logits_model([0.0, 0.0, 0.0, 0.0]), tokens,
                           torch.tensor([[[True, False, True, False]]]))
    assert half.mass.item() == pytest.approx(0.5) and half.invalid.item() == pytest.approx(0.5)
    # invalid mass 2 e^{-40} / (2 + 2 e^{-40}) ≈ 4.25e-18: lost in 1 - mass, kept here
    sure = valid_next_mass(constant_logits_model([40.0, 40.0, 0.0, 0.0]), tokens,
                           torch.tensor([[[True, True, False, False]]]))
    assert sure.invalid.item() == pytest.approx(math.exp(-40), rel=1e-9)
    assert sure.mass.item() == 1.0


def test_valid_next_mass_matches_softmax_whole_or_batched():
    torch.manual_seed(0)
    m = MoETransformer(MoEConfig(vocab_size=9, max_len=6, d_model=8, n_heads=2, n_experts=2,
                                 d_expert=8)).double()
    tokens = torch.randint(0, 9, (7, 6))
    valid = torch.rand(7, 6, 9) < 0.4
    mass, inv = valid_next_mass(m, tokens, valid, batch_size=3)
    p = m(tokens).logits.softmax(-1)
    # float64: the sums agree to a few ulps of 1 (9 terms)
    assert torch.allclose(mass, (p * valid).sum(-1), rtol=0, atol=64 * 9 * 2.2e-16)
    assert torch.allclose(mass + inv, torch.ones_like(mass), rtol=0, atol=64 * 9 * 2.2e-16)
    # masks built one batch of rows at a time: the same computation, the same numbers
    lazy = valid_next_mass(m, tokens, lambda rows: valid[rows], batch_size=3)
    assert torch.equal(lazy.mass, mass) and torch.equal(lazy.invalid, inv)
    with pytest.raises(ValueError, match=r"valid.shape = \(7, 6, 8\)"):
        valid_next_mass(m, tokens, valid[..., :8])
    with pytest.raises(ValueError, match=r"valid\(rows\).shape"):
        valid_next_mass(m, tokens, lambda rows: valid[rows, :, :8])


def test_prefix_continuation_beyond_length_is_ignored():
    # Passing whole sentences with lengths = object position equals passing cut prefixes.
    seq, tasks, v = lookup_data()
    torch.manual_seed(0)
    m = MoETransformer(small_cfg(v)).double()
    lengths = torch.full((len(seq),), 3)
    cut = seq[:, :3]
    a = exact_match(m, seq, lengths, seq[:, 3])
    b = exact_match(m, cut, lengths, seq[:, 3])
    assert torch.equal(a.predictions, b.predictions)


def test_train_data_from_a_split_like_object():
    class Split:                                    # the fields TrainData.from_split reads
        def __init__(self, tokens, task):
            self.tokens, self.task = tokens, task
            self.inputs, self.targets = tokens[:, :-1], tokens[:, 1:]

        def targets_masked(self, ignore_index):
            return self.targets.masked_fill(self.targets == 0, ignore_index)

    tokens = torch.tensor([[5, 6, 7, 0], [5, 7, 0, 0]])
    data = TrainData.from_split(Split(tokens, torch.tensor([0, 1])))
    assert data.targets.tolist() == [[6, 7, IGNORE_INDEX], [7, IGNORE_INDEX, IGNORE_INDEX]]
    assert data.task_ids.tolist() == [0, 1] and data.inputs.shape == (2, 3)


def test_collect_routing_matches_forward():
    from moe_routing.model import collect_routing
    seq, tasks, v = lookup_data()
    torch.manual_seed(0)
    m = MoETransformer(small_cfg(v, top_k=2))
    inputs = seq[:, :-1]
    mask = torch.zeros(inputs.shape, dtype=torch.bool)
    mask[:, 1] = True
    mask[:5, 3] = True
    rec = collect_routing(m, inputs, tasks, mask, batch_size=7)
    out = m(inputs)
    assert torch.equal(rec.expert, out.expert_index[mask])
    assert torch.equal(rec.task, tasks[:, None].expand_as(mask)[mask])
    assert torch.equal(rec.position, torch.arange(4).expand_as(mask)[mask])
    assert rec.probs.shape == (len(seq) + 5, 4)
