"""MoETransformer: shapes, dispatch backends agree (outputs and gradients), routing controls."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_routing.model import MoEConfig, MoETransformer
from moe_routing.model.dispatch import dispatch, grouped_mm_available

pytestmark = pytest.mark.kernels




def make(seed=0, dtype=torch.float64, **kw):
    cfg = MoEConfig(**{"vocab_size": 23, "max_len": 9, "d_model": 16, "n_heads": 2,
                       "n_experts": 5, "d_expert": 12, **kw})
    torch.manual_seed(seed)
    m = MoETransformer(cfg).to(dtype)
    # Larger router weights than the init so that routing actually spreads over experts.
    with torch.no_grad():
        m.router.weight.normal_(0, 1.0)
    return m


def batch(seed=1, b=6, t=9, v=23):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def test_output_shapes():
    m = make(top_k=2)
    out = m(batch(), return_internals=True)
    assert out.logits.shape == (6, 9, 23)
    assert out.router_logits.shape == out.router_probs.shape == (6, 9, 5)
    assert out.expert_index.shape == out.gate.shape == (6, 9, 2)
    assert out.attn_weights.shape == (6, 2, 9, 9)
    assert out.head_outputs.shape == (6, 2, 9, 16)
    assert out.resid_mid.shape == out.moe_out.shape == (6, 9, 16)
    assert torch.allclose(out.router_probs.sum(-1), torch.ones(6, 9, dtype=torch.float64))


def test_internals_path_equals_fast_path():
    m = make()
    x = batch()
    assert torch.allclose(m(x).logits, m(x, return_internals=True).logits, atol=1e-12)


def test_attention_is_causal():
    m = make()
    x = batch()
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 1) % 23
    a, b = m(x, return_internals=True), m(y, return_internals=True)
    assert torch.allclose(a.logits[:, :5], b.logits[:, :5], atol=1e-12)
    assert not torch.allclose(a.logits[:, 5:], b.logits[:, 5:])
    assert torch.all(a.attn_weights.triu(1) == 0)


def test_head_outputs_sum_to_attention_output():
    m = make(attn_bias=False, layernorm=False)
    x = batch()
    out = m(x, return_internals=True)
    a = m.tok_emb(x) + m.pos_emb(torch.arange(9))
    assert torch.allclose(a + out.head_outputs.sum(1), out.resid_mid, atol=1e-12)


@pytest.mark.parametrize("top_k, gate", [(1, "switch"), (2, "switch"), (3, "renormalised")])
@pytest.mark.parametrize("sizes", [None, (12, 3, 0, 7, 12)])
def test_backends_agree_in_outputs_and_gradients(top_k, gate, sizes):
    results = {}
    for backend in ("loop", "sorted", "dense"):
        m = make(top_k=top_k, gate=gate, expert_sizes=sizes)
        out = m(batch(), backend=backend)
        loss = (out.logits ** 2).mean()
        loss.backward()
        results[backend] = (out.logits.detach(),
                            {n: p.grad.clone() for n, p in m.named_parameters()})
    ref_logits, ref_grads = results["loop"]
    for backend in ("sorted", "dense"):
        logits, grads = results[backend]
        assert (logits - ref_logits).abs().max() < 1e-6 * max(1.0, ref_logits.abs().max())
        for name, g in grads.items():
            assert torch.allclose(g, ref_grads[name], atol=1e-6, rtol=0), (backend, name)
    # The router does receive a gradient through the Switch gate.
    assert ref_grads["router.weight"].abs().max() > 0


@pytest.mark.skipif(not grouped_mm_available("cpu", torch.float32),
                    reason="this torch build has no CPU grouped_mm")
def test_grouped_backend_matches_loop_in_float32():
    torch.manual_seed(0)
    n, d, f, e = 40, 16, 12, 4
    x = torch.randn(n, d, requires_grad=True)
    w1, w2 = torch.randn(e, d, f, requires_grad=True), torch.randn(e, f, d, requires_grad=True)
    b1, b2 = torch.randn(e, f, requires_grad=True), torch.randn(e, d, requires_grad=True)
    idx = torch.randint(0, e, (n, 2))
    idx[:, 1] = (idx[:, 0] + 1) % e
    gate = torch.rand(n, 2)
    outs = {}
    for backend in ("loop", "grouped"):
        y = dispatch(backend, x, idx, gate, w1, b1, w2, b2)
        grads = torch.autograd.grad(y.sum(), (x, w1, b1, w2, b2))
        outs[backend] = (y, grads)
    assert torch.allclose(outs["loop"][0], outs["grouped"][0], atol=1e-4)
    for a, b in zip(outs["loop"][1], outs["grouped"][1]):
        assert torch.allclose(a, b, atol=1e-4)


def test_grouped_backend_rejects_float64():
    m = make(backend="grouped")
    with pytest.raises(ValueError, match="float32"):
        m(batch())


SIZES = (12, 3, 0, 7, 12)


def grad_routed_to(target):
    """w1's gradient (e, d, f) when the router sends every token to expert ``target``."""
    m = make(expert_sizes=SIZES, backend="dense", router_bias=True)
    with torch.no_grad():
        m.router.weight.zero_()
        m.router.bias.zero_()
        m.router.bias[target] = 10.0
    out = m(batch())
    assert torch.all(out.expert_index == target)
    out.logits.sum().backward()
    return m.experts.w1.grad


def live_neurons_get_gradient(g, target):
    """Every live neuron of ``target`` gets gradient; no other weight of w1 does."""
    live = SIZES[target]
    others = torch.ones(g.shape[0], g.shape[2], dtype=torch.bool)
    others[target, :live] = False
    return bool(torch.all(g[target, :, :live].abs().amax(0) > 0)
                and torch.all(g.transpose(1, 2)[others] == 0))


@pytest.mark.parametrize("target", [1, 3])
def test_routed_expert_live_neurons_get_gradient_dead_ones_none(target):
    g = grad_routed_to(target)
    assert live_neurons_get_gradient(g, target)
    # The check must fail when the gradient went to another expert (the old form,
    # `g[1, :, :3] > 0 or g[0] > 0`, passed in that case).
    wrong = grad_routed_to(0)
    assert not live_neurons_get_gradient(wrong, target)
    assert wrong[1, :, :3].abs().max() > 0 or wrong[0].abs().max() > 0


def test_masked_neurons_contribute_nothing_and_get_no_gradient():
    m = make(expert_sizes=SIZES, backend="dense")
    out = m(batch())
    out.logits.sum().backward()
    g = m.experts.w1.grad
    assert torch.all(g[1, :, 3:] == 0) and torch.all(g[2] == 0) and torch.all(g[3, :, 7:] == 0)
    for e in [e for e in map(int, out.expert_index.unique()) if SIZES[e]]:  # chosen, live
        assert g[e, :, :SIZES[e]].abs().max() > 0, e
    # Changing dead neurons' weights leaves the function unchanged.
    before = m(batch()).logits
    with torch.no_grad():
        m.experts.w1[1, :, 3:] += 5.0
        m.experts.w2[3, 7:] -= 5.0
        m.experts.b1[2] += 3.0
    # exact on any CPU: the same kernels run, and a dead ReLU unit contributes an exact 0·w
    assert torch.equal(before, m(batch()).logits)


def test_router_block_ignores_rest_of_residual_stream():
    m = make(router_block=(4, 10), layernorm=False)
    x = batch()
    out = m(x, return_internals=True)
    resid = out.resid_mid.clone()
    noise = torch.randn_like(resid)
    noise[..., 4:10] = 0.0
    assert torch.allclose(m.router(resid + 100 * noise), m.router(resid), atol=1e-12)
    inside = torch.zeros_like(resid)
    inside[..., 5] = 3.0
    assert not torch.allclose(m.router(resid + inside), m.router(resid))
    # ...and training cannot make it look outside: masked columns get zero gradient.
    m(x).router_probs[..., 0].sum().backward()
    g = m.router.weight.grad
    assert torch.all(g[:, :4] == 0) and torch.all(g[:, 10:] == 0) and g[:, 4:10].abs().max() > 0


def test_temperature_scales_router_logits():
    a, b = make(router_temperature=1.0), make(router_temperature=0.25)
    x = batch()
    assert torch.allclose(b(x).router_logits, 4 * a(x).router_logits, atol=1e-12)


def test_switch_gate_is_raw_probability_and_renormalised_top1_is_one():
    x = batch()
    out = make(gate="switch")(x)
    assert torch.allclose(out.gate[..., 0], out.router_probs.max(-1).values)
    out = make(gate="renormalised")(x)
    assert torch.all(out.gate == 1)


def test_dense_variant_is_an_ordinary_ffn():
    cfg = MoEConfig.dense(vocab_size=23, max_len=9, d_ff=20, d_model=16, n_heads=2,
                          layernorm=False)
    torch.manual_seed(0)
    m = MoETransformer(cfg).double()
    out = m(batch(), return_internals=True)
    assert torch.all(out.gate == 1) and torch.all(out.expert_index == 0)
    a1 = out.resid_mid
    ffn = torch.relu(a1 @ m.experts.w1[0] + m.experts.b1[0]) @ m.experts.w2[0] + m.experts.b2[0]
    assert torch.allclose(out.moe_out, ffn, atol=1e-12)


def test_knock_out_zero_and_reroute():
    m = make()
    x = batch(b=40)
    base = m(x, return_internals=True)
    used = base.expert_index[..., 0]
    k = int(used.flatten().mode().values)
    with m.knocked_out([k]):
        ko = m(x, return_internals=True)
        hit = used == k
        assert torch.all(ko.moe_out[hit] == 0)
        assert torch.allclose(ko.moe_out[~hit], base.moe_out[~hit])
        assert torch.equal(ko.expert_index, base.expert_index)
    m.knock_out([k], mode="reroute")
    rr = m(x)
    assert not (rr.expert_index == k).any() and torch.all(rr.router_probs[..., k] == 0)
    m.restore_experts()
    assert torch.equal(m(x, return_internals=True).logits, base.logits)
    with pytest.raises(ValueError, match=r"experts\[0\] = 7 .*≤ 4"):
        m.knock_out([7])


def test_set_weights_checks_names_and_shapes():
    m = make(layernorm=False)
    eye = torch.eye(8, 16, dtype=torch.float64)
    m.set_weights({"attn.w_o": torch.stack([eye, eye.roll(8, 1)])})
    assert torch.equal(m.attn.w_o[1, :, 8:], torch.eye(8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"weights\['attn.w_o'\].shape = \(2, 8, 15\)"):
        m.set_weights({"attn.w_o": torch.zeros(2, 8, 15)})
    with pytest.raises(ValueError, match="weights name = 'attn.W_O'"):
        m.set_weights({"attn.W_O": torch.zeros(2, 8, 16)})


def test_too_long_input_rejected():
    with pytest.raises(ValueError, match="max_len"):
        make()(torch.zeros(1, 10, dtype=torch.long))


def test_logits_mask_selects_positions():
    m = make()
    x = batch()
    mask = torch.rand(6, 9, generator=torch.Generator().manual_seed(2)) < 0.5
    assert torch.allclose(m(x, logits_mask=mask).logits, m(x).logits[mask], atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 25), e=st.integers(1, 6), k_frac=st.floats(0, 1), d=st.integers(1, 6),
       f=st.integers(1, 7), seed=st.integers(0, 2 ** 16))
def test_dispatch_backends_agree_on_random_shapes(n, e, k_frac, d, f, seed):
    """Including empty batches, experts nobody chose, and top_k = E."""
    k = 1 + int(k_frac * (e - 1))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64, requires_grad=True)
    ws = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
          for s in ((e, d, f), (e, f), (e, f, d), (e, d))]
    idx = torch.rand(n, e, generator=g).argsort(-1)[:, :k]               # k distinct experts
    gate = torch.rand(n, k, generator=g, dtype=torch.float64)
    res = {}
    for backend in ("loop", "sorted", "dense"):
        y = dispatch(backend, x, idx, gate, *ws)
        assert y.shape == (n, d)
        if n == 0:
            continue
        grads = torch.autograd.grad((y * y).sum(), (x, *ws), allow_unused=True)
        res[backend] = (y, grads)
    for backend in res.keys() - {"loop"}:
        assert torch.allclose(res[backend][0], res["loop"][0], atol=1e-9)
        for a, b in zip(res[backend][1], res["loop"][1]):
            a = torch.zeros(()) if a is None else a
            b = torch.zeros(()) if b is None else b
            assert torch.allclose(a.double(), b.double(), atol=1e-9)
