"""Loss functions: normalisations, masks and gradients checked against hand computations."""

import math

import pytest
import torch
import torch.nn.functional as F

import moe_routing.model.factored_logits as factored_logits
from moe_routing.model.losses import (IGNORE_INDEX, load_balancing_loss, next_token_cross_entropy,
                                      objective_loss, router_z_loss, task_router_loss,
                                      task_to_expert)
from moe_routing.model.factored_logits import FactoredLogits

pytestmark = pytest.mark.kernels




def test_cross_entropy_ignores_padding():
    logits = torch.tensor([[[0.0, 0.0], [5.0, -5.0], [1.0, 2.0]]])
    targets = torch.tensor([[0, IGNORE_INDEX, 1]])
    expect = (math.log(2) + (math.log(math.exp(1) + math.exp(2)) - 2)) / 2
    assert next_token_cross_entropy(logits, targets).item() == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("n_exp, k", [(1, 1), (4, 1), (7, 1), (8, 2), (5, 5)])
def test_load_balancing_equals_alpha_at_uniform_routing(n_exp, k):
    n = 4 * n_exp * 3
    probs = torch.full((n, n_exp), 1.0 / n_exp)
    # each expert chosen equally often, k distinct experts per token
    idx = (torch.arange(n)[:, None] + torch.arange(k)[None, :]) % n_exp
    for alpha in (0.01, 1.0):
        assert load_balancing_loss(probs, idx, alpha).item() == pytest.approx(alpha, rel=1e-6)


def test_load_balancing_collapsed_routing_is_e_times_larger():
    n_exp = 4
    probs = torch.zeros(10, n_exp)
    probs[:, 2] = 1.0
    idx = torch.full((10, 1), 2)
    # f = P = one-hot on expert 2: α E · 1
    assert load_balancing_loss(probs, idx, alpha=1.0).item() == pytest.approx(n_exp)


def test_load_balancing_hand_value_and_mask():
    probs = torch.tensor([[0.7, 0.3], [0.4, 0.6], [0.9, 0.1]])
    idx = torch.tensor([[0], [1], [0]])
    # all three: f = (2/3, 1/3), P = (2/3, 1/3) → 2 · (4/9 + 1/9) = 10/9
    assert load_balancing_loss(probs, idx, alpha=1.0).item() == pytest.approx(10 / 9)
    mask = torch.tensor([True, True, False])
    # first two: f = (1/2, 1/2), P = (0.55, 0.45) → 2 · 0.5 = 1
    assert load_balancing_loss(probs, idx, 1.0, mask).item() == pytest.approx(1.0)


def test_load_balancing_gradient_pushes_probability_off_the_busy_expert():
    logits = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.5, 0.0]], requires_grad=True)
    probs = logits.softmax(-1)
    loss = load_balancing_loss(probs, probs.argmax(-1, keepdim=True), alpha=1.0)
    loss.backward()
    assert torch.all(logits.grad[:, 0] > 0)           # descent lowers expert 0's logit


def test_z_loss_hand_value():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    expect = (math.log(2) ** 2 + math.log(4) ** 2) / 2
    assert router_z_loss(logits, beta=1.0).item() == pytest.approx(expect, rel=1e-6)
    mask = torch.tensor([True, False])
    assert router_z_loss(logits, 1.0, mask).item() == pytest.approx(math.log(2) ** 2, rel=1e-6)


def test_task_to_expert_balanced_assignment():
    e = task_to_expert(torch.arange(20), 7)
    counts = torch.bincount(e, minlength=7)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 20
    assert torch.equal(task_to_expert(torch.arange(5), 7), torch.arange(5))
    with pytest.raises(ValueError, match="n_experts"):
        task_to_expert(torch.arange(3), 0)


def test_task_router_loss_is_router_cross_entropy_on_mask():
    logits = torch.tensor([[[1.0, 0.0, -1.0], [0.0, 2.0, 0.0]]])
    targets = torch.tensor([[0, 2]])
    full = task_router_loss(logits, targets)
    expect = (F.cross_entropy(logits[0], targets[0], reduction="none")).mean()
    assert full.item() == pytest.approx(expect.item())
    only_first = task_router_loss(logits, targets, torch.tensor([[True, False]]))
    assert only_first.item() == pytest.approx(
        F.cross_entropy(logits[0, :1], targets[0, :1]).item())
    with pytest.raises(ValueError, match="0..2"):
        task_router_loss(logits, torch.tensor([[0, 3]]))


def test_objective_loss_parts():
    torch.manual_seed(0)
    b, t, v, e = 3, 4, 6, 2
    logits, rl = torch.randn(b, t, v), torch.randn(b, t, e)
    probs = rl.softmax(-1)
    idx = probs.argmax(-1, keepdim=True)
    targets = torch.randint(0, v, (b, t))
    targets[0, 3] = IGNORE_INDEX
    tasks = torch.tensor([0, 1, 3])
    ce = objective_loss("ce", logits, targets, rl, probs, idx)
    assert ce.lb == 0 and ce.router == 0 and ce.total == ce.ce
    lb = objective_loss("ce+lb", logits, targets, rl, probs, idx, lb_alpha=0.5)
    real = targets != IGNORE_INDEX
    assert lb.lb.item() == pytest.approx(load_balancing_loss(probs, idx, 0.5, real).item())
    rt = objective_loss("ce+router", logits, targets, rl, probs, idx, tasks, router_alpha=2.0)
    designated = (tasks % e)[:, None].expand(b, t)
    assert rt.router.item() == pytest.approx(
        2.0 * task_router_loss(rl, designated, real).item())
    assert rt.total.item() == pytest.approx(rt.ce.item() + rt.router.item())
    with pytest.raises(ValueError, match="task_ids"):
        objective_loss("ce+router", logits, targets, rl, probs, idx)
    with pytest.raises(ValueError, match="accepted"):
        objective_loss("lb", logits, targets, rl, probs, idx)


def test_fused_cross_entropy_matches_torch_value_and_gradient():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 11, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (5, 7))
    targets[1, 2:] = IGNORE_INDEX
    ours = next_token_cross_entropy(logits, targets)
    ref = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    g_ours, = torch.autograd.grad(3.0 * ours, logits)
    g_ref, = torch.autograd.grad(3.0 * ref, logits)
    assert abs(ours.item() - ref.item()) < 1e-12
    assert torch.allclose(g_ours, g_ref, atol=1e-14)
    assert torch.all(g_ours[1, 2:] == 0)
    assert torch.autograd.gradcheck(lambda z: next_token_cross_entropy(z, targets), (logits,))


def _factored_case(seed, m=300, d=8, v=50, bias=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(m, d, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(v, d, generator=g, dtype=dtype, requires_grad=True)
    b = torch.randn(v, generator=g, dtype=dtype, requires_grad=True) if bias else None
    targets = torch.randint(0, v, (m,), generator=g)
    targets[::7] = IGNORE_INDEX
    return hidden, weight, b, targets


@pytest.mark.parametrize("rows_per_block", [1, 37, 300, 1000])
@pytest.mark.parametrize("bias", [False, True])
def test_factored_cross_entropy_equals_torch_in_blocks(monkeypatch, rows_per_block, bias):
    """The block-by-block CE of FactoredLogits: value and all gradients equal torch's CE of the
    multiplied-out logits, with blocks of one row, a short last block (300 = 8·37 + 4), one
    block and a block larger than the batch; ignored rows get no gradient."""
    hidden, weight, b, targets = _factored_case(0, bias=bias)
    monkeypatch.setattr(factored_logits, "CE_BLOCK_ELEMENTS", rows_per_block * weight.shape[0])
    params = [hidden, weight] + ([b] if bias else [])
    ours = next_token_cross_entropy(FactoredLogits(hidden, weight, b), targets)
    ref = F.cross_entropy(F.linear(hidden, weight, b), targets, ignore_index=IGNORE_INDEX)
    g_ours = torch.autograd.grad(2.5 * ours, params)
    g_ref = torch.autograd.grad(2.5 * ref, params)
    assert abs(ours.item() - ref.item()) < 1e-12
    for a, r in zip(g_ours, g_ref):
        assert torch.allclose(a, r, atol=1e-13)
    assert torch.all(g_ours[0][targets == IGNORE_INDEX] == 0)


def test_factored_cross_entropy_would_be_wrong_without_one_block():
    """The control: dropping one block's gradient contribution moves the weight's gradient
    far beyond the tolerance above (the test above can fail)."""
    hidden, weight, b, targets = _factored_case(1)
    keep = torch.ones(hidden.shape[0], dtype=torch.bool)
    keep[37:74] = False
    full = F.cross_entropy(F.linear(hidden, weight, b), targets, ignore_index=IGNORE_INDEX,
                           reduction="sum")
    part = F.cross_entropy(F.linear(hidden[keep], weight, b), targets[keep],
                           ignore_index=IGNORE_INDEX, reduction="sum")
    g_full, = torch.autograd.grad(full, weight)
    g_part, = torch.autograd.grad(part, weight)
    assert (g_full - g_part).abs().max() > 1e-3


def test_factored_cross_entropy_in_objective_loss_and_float32():
    """objective_loss takes FactoredLogits at the real positions (the training loop on a CPU)
    and gives the loss of the logits tensor; in float32 both agree to float32 rounding."""
    torch.manual_seed(2)
    hidden = torch.randn(3, 4, 5, dtype=torch.float64)
    weight = torch.randn(6, 5, dtype=torch.float64)
    targets = torch.randint(0, 6, (3, 4))
    targets[1, 1:] = IGNORE_INDEX
    rl = torch.randn(3, 4, 2)
    probs = rl.softmax(-1)
    idx = probs.argmax(-1, keepdim=True)
    real = targets != IGNORE_INDEX
    full = objective_loss("ce+lb", F.linear(hidden, weight), targets, rl, probs, idx)
    fact = objective_loss("ce+lb", FactoredLogits(hidden[real], weight), targets, rl, probs,
                          idx)
    assert abs(full.total.item() - fact.total.item()) < 1e-12
    h32, w32, _, t32 = _factored_case(3, m=500, v=1443, bias=False, dtype=torch.float32)
    ours = next_token_cross_entropy(FactoredLogits(h32, w32), t32)
    assert ours.item() == pytest.approx(
        F.cross_entropy(h32 @ w32.T, t32, ignore_index=IGNORE_INDEX).item(), rel=1e-6)


def test_factored_cross_entropy_skips_gradients_not_asked_for_and_underflow():
    """Frozen weights get no gradient (none is computed); a row whose target probability
    underflows gets the exact logsumexp − logit, as the tensor path does."""
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    weight = torch.tensor([[0.0, 0.0], [200.0, 0.0], [0.0, 3.0]])
    targets = torch.tensor([0, 2])
    ours = next_token_cross_entropy(FactoredLogits(hidden, weight), targets)
    ref = F.cross_entropy(hidden.detach() @ weight.T, targets)
    assert torch.isfinite(ours) and ours.item() == pytest.approx(ref.item(), rel=1e-6)
    ours.backward()
    assert torch.isfinite(hidden.grad).all() and weight.grad is None


def test_objective_loss_accepts_logits_at_real_positions_only():
    torch.manual_seed(1)
    logits, rl = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 4, 2)
    targets = torch.randint(0, 6, (3, 4))
    targets[1, 1:] = IGNORE_INDEX
    probs = rl.softmax(-1)
    idx = probs.argmax(-1, keepdim=True)
    full = objective_loss("ce+lb", logits, targets, rl, probs, idx)
    sel = objective_loss("ce+lb", logits[targets != IGNORE_INDEX], targets, rl, probs, idx)
    assert abs(full.total.item() - sel.total.item()) < 1e-12


def test_cross_entropy_exact_when_target_probability_underflows():
    logits = torch.tensor([[0.0, 200.0, 0.0], [1.0, 2.0, 3.0]], requires_grad=True)
    targets = torch.tensor([0, 2])
    ours = next_token_cross_entropy(logits, targets)
    ref = F.cross_entropy(logits.detach(), targets)
    assert torch.isfinite(ours) and ours.item() == pytest.approx(ref.item(), rel=1e-6)
    ours.backward()
    assert torch.isfinite(logits.grad).all()
    assert next_token_cross_entropy(logits, torch.full((2,), IGNORE_INDEX)).item() == 0.0


# --- half precision, mask layout, expert ids (bad input found by a new user) --------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_load_balancing_counts_in_float32_for_half_precision(dtype):
    """70,000 assignments to one expert: a float16 count would be inf (max 65,504) and a
    bfloat16 count would round to 8 bits; the loss must equal the float32 value."""
    n, n_exp = 70_000, 4
    g = torch.Generator().manual_seed(0)
    probs32 = torch.rand(n, n_exp, generator=g).softmax(-1)
    idx = torch.zeros(n, 1, dtype=torch.long)
    idx[:1001] = 1                                    # 68,999 on expert 0, 1,001 on expert 1
    ref = load_balancing_loss(probs32, idx, alpha=1.0)
    half = load_balancing_loss(probs32.to(dtype), idx, alpha=1.0)
    assert torch.isfinite(half)
    assert half.dtype == torch.float32
    # the only error left is the rounding of the probabilities themselves to `dtype`
    assert half.item() == pytest.approx(ref.item(), rel=4e-3 if dtype == torch.bfloat16
                                        else 1e-3)


def test_load_balancing_half_precision_would_overflow_without_upcast():
    """The control: counting in float16 does overflow at this size (so the test above can fail)."""
    counts = torch.zeros(1, dtype=torch.float16).scatter_add(
        0, torch.zeros(70_000, dtype=torch.long), torch.ones(70_000, dtype=torch.float16))
    assert not torch.isfinite(counts).all()


@pytest.mark.parametrize("fn", ["lb", "z", "router"])
def test_masks_must_have_the_tokens_layout_not_only_their_number(fn):
    b, t, e = 3, 5, 4
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(b, t, e, generator=g)
    idx = logits.argmax(-1, keepdim=True)
    mask = torch.rand(b, t, generator=g) > 0.3
    call = {"lb": lambda m: load_balancing_loss(logits.softmax(-1), idx, 1.0, m),
            "z": lambda m: router_z_loss(logits, 1.0, m),
            "router": lambda m: task_router_loss(logits, idx[..., 0], m)}[fn]
    call(mask)                                        # the right layout is accepted
    with pytest.raises(ValueError, match=r"mask\.shape.*\(5, 3\).*\(3, 5\)"):
        call(mask.T.contiguous())                     # same 15 entries, wrong tokens
    with pytest.raises(ValueError, match=r"mask\.shape"):
        call(mask.reshape(-1))                        # flat: also refused


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_load_balancing_refuses_expert_index_out_of_range(bad):
    probs = torch.full((6, 4), 0.25)
    idx = torch.zeros(6, 1, dtype=torch.long)
    idx[3] = bad
    with pytest.raises(ValueError, match=rf"expert_index range.*{bad}.*0\.\.3"):
        load_balancing_loss(probs, idx)


def test_factored_cross_entropy_refuses_mismatched_parts():
    hidden, weight = torch.randn(4, 3), torch.randn(6, 3)
    targets = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"logits\.weight\.shape.*\(v, 3\)"):
        next_token_cross_entropy(FactoredLogits(hidden, torch.randn(6, 2)), targets)
    with pytest.raises(ValueError, match=r"logits\.bias"):
        next_token_cross_entropy(FactoredLogits(hidden, weight, torch.randn(5)), targets)
    with pytest.raises(ValueError, match="targets"):
        next_token_cross_entropy(FactoredLogits(hidden, weight), targets[:3])
