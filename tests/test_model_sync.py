"""The device path of the model and the losses: the CPU path's results, without host waits.

Off the CPU, the masked losses and the model's logits selection never read a value back to the
host: masked sums instead of boolean-mask gathers, a selection of known size by a stable sort
(``losses.selected_rows``), ``torch._assert_async`` instead of ``bool(...)`` checks.  On the CPU
the code is as it was (the book's results are that path's, bit for bit).  Here the device path
runs on the CPU by switching ``on_cpu`` off, and is compared with the CPU path.

Tolerances.  The two paths sum the same terms in another order (masked sums over all rows
instead of sums over the gathered rows; ``sum / count`` instead of a mean), so they differ by
rounding: at most about K·u of the sum of the terms' magnitudes for K terms.  K ≤ 200 here
(the tokens of a batch), so in float64 (u = 1.1e-16) 1e-12 of each tensor's largest entry
holds with a wide margin; a masked row counted, a wrong divisor or a dropped term is off by
far more (≥ 1e-3 relative in these cases); measured: ≤ 2e-15.  The selection of rows is
exact: compared with ``torch.equal``.

The ``cuda`` tests (skipped without a GPU; ``make gpu-check``) run one training step with
``torch.cuda.set_sync_debug_mode("error")``: the forward pass, the losses and the backward
pass must not synchronise, except where ``model/dispatch.py`` documents a wait.
"""

import pytest
import torch

from moe_routing.model import IGNORE_INDEX, MoETransformer, objective_loss
from moe_routing.model import dispatch as dispatch_mod
from moe_routing.model import losses, transformer
from moe_routing.model.losses import (load_balancing_loss, next_token_cross_entropy,
                                      router_z_loss, selected_rows, task_router_loss,
                                      task_to_expert)
from test_model_train import lookup_data, small_cfg, train_data

pytestmark = pytest.mark.kernels

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
OBJECTIVES = ("ce", "ce+lb", "ce+router")


def use_device_path(mp) -> None:
    """Make CPU tensors take the device path (the one CUDA tensors take)."""
    def never_cpu(_x):
        return False

    mp.setattr(losses, "on_cpu", never_cpu)
    mp.setattr(transformer, "on_cpu", never_cpu)


@pytest.fixture
def device_path(monkeypatch):
    use_device_path(monkeypatch)


def assert_close(got: torch.Tensor, ref: torch.Tensor, rel: float, what: str) -> None:
    """``max |got − ref| ≤ rel · max |ref|`` (errors against the tensor's scale)."""
    got, ref = got.detach(), ref.detach()
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert bool(torch.isfinite(got).all()), f"{what}: not finite"
    scale = float(ref.abs().max())
    err = float((got - ref).abs().max())
    assert err <= rel * scale + 1e-300, f"{what}: error {err:.3g} > {rel:g} × scale {scale:.3g}"


# ----------------------------------------------------------------------------- selection
MASKS = {
    "random": torch.rand(7, 9, generator=torch.Generator().manual_seed(0)) > 0.4,
    "none": torch.zeros(7, 9, dtype=torch.bool),
    "all": torch.ones(7, 9, dtype=torch.bool),
    "one": torch.zeros(7, 9, dtype=torch.bool).index_fill_(1, torch.tensor([4]), True)[:1],
}


@pytest.mark.parametrize("name", list(MASKS))
def test_selected_rows_are_the_rows_of_the_boolean_mask(name):
    mask = MASKS[name]
    x = torch.randn(*mask.shape, 5, generator=torch.Generator().manual_seed(1))
    sel = selected_rows(mask, int(mask.sum()))
    assert torch.equal(sel, mask.reshape(-1).nonzero()[:, 0])
    assert torch.equal(x.reshape(-1, 5)[sel], x[mask])


def test_selected_rows_refuses_a_wrong_count():
    mask = MASKS["random"]
    for count in (int(mask.sum()) - 1, int(mask.sum()) + 1):
        with pytest.raises(RuntimeError, match=f"count={count}"):
            selected_rows(mask, count)


# ----------------------------------------------------------------------------- losses
def loss_case(dtype=torch.float64, seed=0, b=6, t=9, v=11, e=4, k=2):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=dtype)
    targets = torch.randint(0, v, (b, t), generator=g)
    targets[:, 6:] = IGNORE_INDEX                                         # padding
    targets[0, 2] = IGNORE_INDEX
    router_logits = torch.randn(b, t, e, generator=g, dtype=dtype) * 2
    mask = torch.rand(b, t, generator=g) > 0.3
    experts = torch.randint(0, e, (b, t), generator=g)
    return logits, targets, router_logits, mask, experts, k


def value_and_grad(fn, x):
    x = x.detach().clone().requires_grad_()
    y = fn(x)
    y.backward()
    return y.detach(), x.grad


def each_loss(mask_kind):
    """(name, function of the differentiated input, that input) for every masked loss."""
    logits, targets, router_logits, mask, experts, k = loss_case()
    if mask_kind == "empty":
        mask = torch.zeros_like(mask)
        targets = torch.full_like(targets, IGNORE_INDEX)
    probs_idx = router_logits.softmax(-1).topk(k, -1).indices
    return [
        ("ce", lambda x: next_token_cross_entropy(x, targets), logits),
        ("lb", lambda x: load_balancing_loss(x.softmax(-1), probs_idx, 0.01, mask), router_logits),
        ("z", lambda x: router_z_loss(x, 1e-3, mask), router_logits),
        ("router", lambda x: task_router_loss(x, experts, mask), router_logits),
        ("router unmasked", lambda x: task_router_loss(x, experts), router_logits),
    ]


def run_each(mask_kind, monkeypatch, device: bool):
    with monkeypatch.context() as mp:
        if device:
            use_device_path(mp)
        return {name: value_and_grad(fn, x) for name, fn, x in each_loss(mask_kind)}


def test_device_path_losses_match_the_cpu_path(monkeypatch):
    cpu = run_each("some", monkeypatch, device=False)
    dev = run_each("some", monkeypatch, device=True)
    for name, (value, grad) in cpu.items():
        assert float(value) != 0.0 and float(grad.abs().max()) > 0, name    # non-trivial case
        assert_close(dev[name][0], value, 1e-12, f"{name} value")
        assert_close(dev[name][1], grad, 1e-12, f"{name} gradient")


def test_device_path_losses_are_zero_when_nothing_counts(monkeypatch):
    for device in (False, True):
        for name, (value, grad) in run_each("empty", monkeypatch, device).items():
            if name == "router unmasked":
                continue                          # no mask: every position counts
            assert float(value) == 0.0 and float(grad.abs().max()) == 0.0, (name, device)


def test_device_path_keeps_a_masked_out_nan_out(device_path):
    # the CPU path gathers the kept rows, so a NaN elsewhere never enters; the device path
    # must replace masked rows, not multiply them by 0 (NaN · 0 = NaN)
    _, _, router_logits, mask, experts, k = loss_case()
    router_logits[~mask] = float("nan")
    probs = router_logits.softmax(-1)
    idx = torch.zeros(*probs.shape[:-1], k, dtype=torch.long)
    for name, value in (("lb", load_balancing_loss(probs, idx, 0.01, mask)),
                        ("z", router_z_loss(router_logits, 1e-3, mask)),
                        ("router", task_router_loss(router_logits, experts, mask))):
        assert bool(torch.isfinite(value)), name


def test_device_path_checks_values_by_device_assertions(device_path):
    # the CPU path raises ValueError naming the value (test_losses); the device path cannot
    # read it without waiting: a device-side assertion (RuntimeError at once on the CPU)
    with pytest.raises(RuntimeError, match="task ids must be ≥ 0"):
        task_to_expert(torch.tensor([0, -1, 2]), 4)
    logits = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="expert targets must lie in 0..3"):
        task_router_loss(logits, torch.tensor([0, 4, 1]))
    # an out-of-range target at an unsupervised position is not looked at, as on the CPU path
    keep = torch.tensor([True, False, True])
    bad = torch.tensor([0, 4, 1])
    assert torch.equal(task_router_loss(logits, bad, keep),
                       task_router_loss(logits, torch.tensor([0, 0, 1]), keep))


def test_cpu_path_value_checks_stay_value_errors():
    with pytest.raises(ValueError, match="task ids"):
        task_to_expert(torch.tensor([0, -1, 2]), 4)
    with pytest.raises(ValueError, match="expert ids in 0..3"):
        task_router_loss(torch.randn(3, 4), torch.tensor([0, 4, 1]))


# ----------------------------------------------------------------------------- a training step
def step(model, idx, targets, tasks, objective, n_selected=None):
    model.zero_grad(set_to_none=True)
    real = targets != IGNORE_INDEX
    out = model(idx, logits_mask=real, n_selected=n_selected)
    parts = objective_loss(objective, out.logits, targets, out.router_logits, out.router_probs,
                           out.expert_index, tasks, lb_alpha=0.01, z_beta=1e-3)
    parts.total.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, parts, grads


def step_case():
    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    targets = data.targets.clone()
    targets[::3, 2:] = IGNORE_INDEX                                        # padding
    torch.manual_seed(0)
    model = MoETransformer(small_cfg(v, top_k=2)).double()
    return model, data.inputs, targets, tasks


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_device_path_training_step_matches_the_cpu_path(objective, monkeypatch):
    model, idx, targets, tasks = step_case()
    m = int((targets != IGNORE_INDEX).sum())
    out_c, parts_c, grads_c = step(model, idx, targets, tasks, objective)
    with monkeypatch.context() as mp:
        use_device_path(mp)
        out_d, parts_d, grads_d = step(model, idx, targets, tasks, objective, n_selected=m)
    assert out_c.logits.shape[0] == m
    assert torch.equal(out_d.logits, out_c.logits)                       # the same rows
    for name in parts_c._fields:
        assert_close(getattr(parts_d, name), getattr(parts_c, name), 1e-12, name)
    assert float((parts_c.router if objective == "ce+router" else parts_c.ce).detach()) > 0
    assert grads_d.keys() == grads_c.keys()
    for name, g in grads_c.items():
        assert_close(grads_d[name], g, 1e-12, f"grad {name}")


def test_n_selected_on_the_cpu_is_checked_and_changes_nothing():
    model, idx, targets, _ = step_case()
    real = targets != IGNORE_INDEX
    m = int(real.sum())
    with torch.no_grad():
        assert torch.equal(model(idx, logits_mask=real, n_selected=m).logits,
                           model(idx, logits_mask=real).logits)
        with pytest.raises(ValueError, match="n_selected"):
            model(idx, logits_mask=real, n_selected=m - 1)
        with pytest.raises(ValueError, match="n_selected"):
            model(idx, n_selected=m)
        with pytest.raises(ValueError, match="n_selected"):
            model(idx, logits_mask=real, n_selected=real.numel() + 1)


def test_n_selected_on_the_device_path_is_asserted(device_path):
    model, idx, targets, _ = step_case()
    real = targets != IGNORE_INDEX
    with torch.no_grad(), pytest.raises(RuntimeError, match="count="):
        model(idx, logits_mask=real, n_selected=int(real.sum()) - 1)


def test_nothing_changes_on_the_cpu_for_dispatch():
    # the CUDA choices of the dispatch (autocast's matmul dtype, the grouped kernel's wait)
    # do not apply to CPU tensors, autocast on the CPU included
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert dispatch_mod._matmul_dtype(x) == torch.float32
    assert dispatch_mod.grouped_mm_waits("cpu", torch.float32) is False


# ----------------------------------------------------------------------------- on a GPU
class sync_debug:
    """``with sync_debug("error"):`` -- CUDA's sync debug mode for the block, then off."""

    def __init__(self, mode):
        self.mode = mode

    def __enter__(self):
        torch.cuda.set_sync_debug_mode(self.mode)

    def __exit__(self, *exc):
        torch.cuda.set_sync_debug_mode(0)


def cuda_step(backend, amp, objective, with_count=True):
    """One training step (as ``train`` runs it) on the GPU, after one warm-up step."""
    seq, tasks, v = lookup_data()
    data = train_data(seq, tasks)
    torch.manual_seed(0)
    model = MoETransformer(small_cfg(v, backend=backend)).cuda()
    inputs, targets, task_ids = (t.cuda() for t in (data.inputs, data.targets, data.task_ids))
    idx = torch.arange(16, device="cuda")
    m = int((data.targets[:16] != IGNORE_INDEX).sum())        # counted on the CPU copy

    def run():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            tgt = targets[idx]
            real = tgt != IGNORE_INDEX
            out = model(inputs[idx], logits_mask=real, n_selected=m if with_count else None)
            parts = objective_loss(objective, out.logits, tgt, out.router_logits,
                                   out.router_probs, out.expert_index, task_ids[idx],
                                   z_beta=1e-3)
        model.zero_grad(set_to_none=True)
        parts.total.backward()
        return parts

    run()                                                     # warm-up: lazy initialisations
    torch.cuda.synchronize()
    return run


def device_waits(backend, amp):
    """Whether the dispatch backend waits by design (model/dispatch.py's docstring)."""
    from moe_routing.model.dispatch import grouped_mm_available, grouped_mm_waits

    dtype = torch.bfloat16 if amp else torch.float32
    if backend == "dense":
        return False
    if backend == "grouped":
        return grouped_mm_waits("cuda", dtype)
    return not grouped_mm_available("cuda", dtype) or grouped_mm_waits("cuda", dtype)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("amp", [True, False])
@pytest.mark.parametrize("backend", ["sorted", "grouped", "dense"])
def test_a_training_step_does_not_wait_for_the_gpu(backend, amp, objective):
    if device_waits(backend, amp):
        pytest.skip(f"{backend} with amp={amp} waits by design on this GPU/torch "
                    "(model/dispatch.py); test_documented_waits_are_there checks it")
    run = cuda_step(backend, amp, objective)
    with sync_debug("error"):
        parts = run()
    assert torch.isfinite(parts.total).item()


@pytest.mark.cuda
@needs_cuda
def test_documented_waits_are_there():
    # the probe is live (a step that must wait does raise) and the documented waits are real:
    # without n_selected the logits selection waits; the segment loop waits for its sizes
    run = cuda_step("dense", True, "ce+lb", with_count=False)
    with pytest.raises(RuntimeError, match="synchroniz"), sync_debug("error"):
        run()
    torch.cuda.synchronize()
    seq, tasks, v = lookup_data()
    x = torch.randn(10, 32, device="cuda")
    ei = torch.randint(0, 4, (10, 1), device="cuda")
    gate = torch.rand(10, 1, device="cuda")
    w1, w2 = torch.randn(4, 32, 32, device="cuda"), torch.randn(4, 32, 32, device="cuda")
    b1, b2 = torch.zeros(4, 32, device="cuda"), torch.zeros(4, 32, device="cuda")
    dispatch_mod.dispatch_sorted(x, ei, gate, w1, b1, w2, b2, grouped=False)   # warm-up
    with pytest.raises(RuntimeError, match="synchroniz"), sync_debug("error"):
        dispatch_mod.dispatch_sorted(x, ei, gate, w1, b1, w2, b2, grouped=False)
