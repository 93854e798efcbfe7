"""Training objectives of paper A's experiments, as pure functions.

Shape legend: ``b`` batch, ``t`` sequence, ``v`` vocabulary, ``e`` experts, ``k`` top-k,
``n`` tokens (any leading shape flattened).

* CE — next-token cross-entropy, padding ignored.
* LB — Switch Transformer load balancing (Fedus et al. 2022, eq. 4), normalised as
  ``α · E · Σ_i f_i P_i`` with ``f_i`` the fraction of routing *assignments* that go to expert i
  (for top-k each token makes k assignments, so ``f_i = count_i / (n k)`` and Σ f_i = 1) and
  ``P_i`` the mean router probability of expert i.  At uniform routing f_i = P_i = 1/E, so
  LB = α exactly; its minimum over routings with Σ f = Σ P = 1 is also reached there.
* z-loss — ST-MoE router z-loss (Zoph et al. 2022): ``β · mean(logsumexp(router_logits)^2)``.
* task-router loss — paper A's explicit routing supervision: ``−(1/|S|) Σ_{x∈S} log p(e_x | x)``,
  the cross-entropy of the router softmax against the expert designated for x's task, over a
  set S of supervised positions given as an explicit mask (our choice, the paper does not say
  which positions it supervises: by default every non-padding input position of a sentence).

Several layers (``MoEConfig.n_layers = L > 1``, ours).  :func:`objective_loss` takes the
router tensors of every layer and **averages** LB, z-loss and the task-router loss over the
layers (Switch Transformer's code and Mixtral's *sum* per-layer auxiliary losses instead).  Why
the mean: each part keeps its one-layer scale at any depth -- LB is α at uniform routing in
every layer and so is their mean, the task-router loss is a mean cross-entropy in nats -- so
the coefficients α, β and ``router_alpha`` tuned for paper A's one-layer model mean the same
for a deeper one, and a one-layer model's loss is exactly what it was.  The price: with a sum
each layer would get the same gradient weight as in a one-layer model; with the mean a layer's
weight is α / L (multiply the coefficient by L to recover the sum).  The task-router loss
supervises each layer with its own designated experts (per-layer task ids, e.g. the hop-1 task
for layer 1 and the hop-2 task for layer 2 of a two-hop sentence).

Arguments are checked at the call (the library's idiom, :mod:`moe_routing._internal.validation`):
coefficients must be finite and ≥ 0, tensors must have the right dtype and shape and hold at
least one token.  Those checks read metadata only, because these functions run in every
training step.  The *values* of the tensors are not scanned: NaN or Inf in logits or router
probabilities propagate to a NaN loss (the training loop stops on a non-finite loss; the data
it is given are checked once, in ``TrainData``).  A non-empty batch whose every position is
masked out (or ignored) is legal and gives a loss of 0.

Two paths, one function.  On the CPU the masked losses gather the kept positions (``x[mask]``)
and check values with ``bool(...)``: nothing waits there, and the results the book records are
these, bit for bit.  On a GPU both would stop the host until the device catches up (a gather
by a boolean mask has a data-dependent size; ``bool`` reads a value), once per training step.
There the same quantities are computed over the full tensors with the masked positions
weighted 0 (sums divided by the kept count, clamped to 1) and the value checks are
``torch._assert_async`` (a device-side assertion, reported at the next synchronisation; the
data of a training run are already checked once, in ``TrainData``).  The two paths agree to
rounding, not bit for bit (the summation order differs); ``tests/test_model_sync.py`` runs the
GPU path's functions (``_*_async``) on the CPU against the CPU path.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .._internal.validation import choice, fail, integer, number, require
from .checks import tensor
from .factored_logits import FactoredLogits, blocked_cross_entropy

IGNORE_INDEX = -100
OBJECTIVES = ("ce", "ce+lb", "ce+router")


class LossParts(NamedTuple):
    """The total loss and the parts it is made of (unused parts are 0-dim zeros)."""

    total: torch.Tensor
    ce: torch.Tensor
    lb: torch.Tensor
    z: torch.Tensor
    router: torch.Tensor

    def as_floats(self) -> dict[str, float]:
        return {name: float(v.detach()) for name, v in self._asdict().items()}


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision activations (autocast) are summed in float32; float64 stays float64."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _flat_mask(mask: torch.Tensor | None, tokens: tuple[int, ...], device, name: str = "mask"
               ) -> torch.Tensor | None:
    """The mask of the tokens of shape ``tokens`` (the leading dimensions of the tensor it
    masks), flattened.  Its *shape* must be ``tokens``, not only its number of entries: a
    transposed (t, b) mask for (b, t) tokens has the right number and masks the wrong ones."""
    if mask is None:
        return None
    tensor(name, mask, "bool")
    require(tuple(mask.shape) == tuple(tokens), f"{name}.shape", tuple(mask.shape),
            f"{tuple(tokens)}: one entry per token, in the tokens' own layout")
    return mask.reshape(-1).to(device=device)


def _check_expert_ids(name: str, ids: torch.Tensor, n_experts: int) -> None:
    """Expert ids must lie in ``0..n_experts-1``: on the CPU a ValueError naming the range
    found; on a GPU a device-side assertion (nothing waits for the device)."""
    if ids.numel() == 0:
        return
    if on_cpu(ids):
        lo, hi = int(ids.min()), int(ids.max())
        require(lo >= 0 and hi < n_experts, f"{name} range", f"{lo}..{hi}",
                f"expert ids in 0..{n_experts - 1}")
    else:
        torch._assert_async(((ids >= 0) & (ids < n_experts)).all(),
                            f"{name}: expert ids must lie in 0..{n_experts - 1}")


def _coefficient(name: str, value) -> float:
    return number(name, value, low=0)


def on_cpu(x: torch.Tensor) -> bool:
    """Whether ``x`` takes the CPU path (gathers by mask, ``bool`` checks) rather than the
    device path that never waits for the host (module docstring)."""
    return x.device.type == "cpu"


def selected_rows(mask: torch.Tensor, count: int) -> torch.Tensor:
    """Flat (row-major) positions (count,) of the True entries of ``mask``, given their number.

    The rows ``x.reshape(-1, ...)[selected_rows(mask, count)]`` are exactly ``x[mask]``, in the
    same order.  Why: ``x[mask]`` has a size that depends on the data, so on a GPU the host
    waits to learn it; when the caller knows ``count`` without reading the device (the shape of
    a tensor, a count taken on the CPU) a stable sort of ``~mask`` puts the True positions
    first, in order, and nothing waits.  ``count`` must equal ``mask.sum()``: asserted
    asynchronously (on a GPU a device-side assertion, reported at the next synchronisation).
    """
    flat = mask.reshape(-1)                                               # (n,)
    torch._assert_async(flat.sum() == count,
                        f"selected_rows: count={count} differs from the mask's True entries")
    return torch.argsort((~flat).to(torch.uint8), stable=True)[:count]   # (count,)


def _masked_mean(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` (n, ...) over the rows where ``keep`` (n,) is True, 0 when none, without
    a gather: masked rows are replaced by 0 (not multiplied by 0: a NaN there stays out)."""
    kept = keep.reshape(keep.shape + (1,) * (values.dim() - 1))
    total = torch.where(kept, values, 0.0).sum(0)
    return total / keep.sum().clamp_min(1).to(values.dtype)


class _CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over non-ignored rows, for the CPU: one softmax, kept as the gradient.

    Same value and gradient as ``F.cross_entropy(..., ignore_index=...)`` (tested).  Why: on a
    CPU the passes over the (tokens × vocabulary) logits, not the arithmetic, are what this
    loss costs.  Here the forward is one fused softmax kernel and the backward one scaled copy
    of it minus the one-hot — instead of log-softmax, a zero-filled NLL gradient and a separate
    log-softmax backward.  The loss is ``−log p(target)``; a row whose target probability
    underflows (p < 1e-30) gets the exact ``logsumexp − logit`` instead.
    """

    @staticmethod
    def forward(ctx, logits, targets, ignore_index):                   # (n, v), (n,)
        valid = targets != ignore_index
        safe = targets.clamp_min(0) * valid
        n_valid = valid.sum().clamp_min(1).to(logits.dtype)
        probs = torch.softmax(logits, -1)                                 # (n, v)
        p_t = probs.gather(1, safe[:, None])[:, 0]                        # (n,)
        nll = -torch.log(p_t)
        tiny = valid & (p_t < 1e-30)
        if bool(tiny.any()):
            rows = tiny.nonzero()[:, 0]
            nll[rows] = (torch.logsumexp(logits[rows], -1)
                         - logits[rows].gather(1, safe[rows, None])[:, 0])
        loss = torch.where(valid, nll, 0.0).sum() / n_valid
        ctx.save_for_backward(probs, safe, valid, n_valid)
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        probs, safe, valid, n_valid = ctx.saved_tensors
        scale = (grad_out / n_valid) * valid                              # (n,)
        grad = probs * scale[:, None]
        grad.scatter_add_(1, safe[:, None], -scale[:, None])
        return grad, None, None


def _factored_cross_entropy(logits: FactoredLogits, targets: torch.Tensor,
                            ignore_index: int) -> torch.Tensor:
    """:func:`next_token_cross_entropy` of factored logits (checked here: hidden (..., d),
    weight (v, d), bias (v,) or None, targets (...))."""
    tensor("logits.hidden", logits.hidden, "float", min_ndim=1)
    d = logits.hidden.shape[-1]
    tensor("logits.weight", logits.weight, "float", ndim=2)
    require(logits.weight.shape[1] == d, "logits.weight.shape", tuple(logits.weight.shape),
            f"(v, {d}): one row of the hidden size {d} per token of the vocabulary")
    v = logits.weight.shape[0]
    if logits.bias is not None:
        tensor("logits.bias", logits.bias, "float", shape=(v,))
    tensor("targets", targets, "int", shape=tuple(logits.hidden.shape[:-1]))
    hidden = _upcast(logits.hidden.reshape(-1, d))                        # (m, d)
    weight = logits.weight.to(hidden.dtype)
    bias = None if logits.bias is None else logits.bias.to(hidden.dtype)
    if not on_cpu(hidden):
        return _cross_entropy_async(F.linear(hidden, weight, bias), targets.reshape(-1),
                                    ignore_index)
    return blocked_cross_entropy(hidden, weight, bias, targets.reshape(-1), ignore_index)


def next_token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                             ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Mean CE over non-ignored targets (0 when every target is ignored).

    logits (..., v), targets (...) with ``ignore_index`` at padding / unsupervised positions
    (targets are already shifted: targets[:, s] is the token that follows input position s).
    ``logits`` may be :class:`FactoredLogits` (hidden (..., d) and the unembedding): the same
    loss, computed in blocks without the whole logits tensor on a CPU.
    """
    if isinstance(logits, FactoredLogits):
        return _factored_cross_entropy(logits, targets, integer("ignore_index", ignore_index))
    tensor("logits", logits, "float", min_ndim=1)
    tensor("targets", targets, "int", shape=tuple(logits.shape[:-1]))
    ignore_index = integer("ignore_index", ignore_index)
    flat = _upcast(logits.reshape(-1, logits.shape[-1]))                  # (n, v)
    if on_cpu(flat):
        return _CrossEntropy.apply(flat, targets.reshape(-1), ignore_index)
    return _cross_entropy_async(flat, targets.reshape(-1), ignore_index)


def _cross_entropy_async(logits: torch.Tensor, targets: torch.Tensor,
                         ignore_index: int) -> torch.Tensor:
    """GPU path of :func:`next_token_cross_entropy`: logits (n, v), targets (n,).  The sum over
    non-ignored rows divided by their count clamped to 1 -- the mean, and 0 when every target
    is ignored, without asking the device whether any is not."""
    n_valid = (targets != ignore_index).sum().clamp_min(1).to(logits.dtype)
    return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="sum") / n_valid


def load_balancing_loss(router_probs: torch.Tensor, expert_index: torch.Tensor,
                        alpha: float = 0.01, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Switch LB ``α · E · Σ_i f_i P_i`` (normalisation in the module docstring; = α at uniform).

    router_probs (..., e), expert_index (..., k), mask (...) bool of tokens that count.
    ``f`` is not differentiable (a count), so the gradient flows through ``P`` as in Switch.
    Counts and means are taken in float32 when the probabilities are float16 or bfloat16
    (float64 stays float64): a float16 count overflows to inf past 65,504 assignments to one
    expert, and a bfloat16 count keeps 8 significant bits.
    """
    alpha = _coefficient("alpha", alpha)
    tensor("router_probs", router_probs, "float", min_ndim=1)
    tensor("expert_index", expert_index, "int", min_ndim=1)
    require(expert_index.shape[:-1] == router_probs.shape[:-1], "expert_index.shape",
            tuple(expert_index.shape), f"{tuple(router_probs.shape[:-1])} + (top_k,): the "
            f"leading (token) dimensions of router_probs")
    n_exp = router_probs.shape[-1]
    probs = _upcast(router_probs.reshape(-1, n_exp))                      # (n, e)
    idx = expert_index.reshape(probs.shape[0], -1)                        # (n, k)
    _check_expert_ids("expert_index", idx, n_exp)
    m = _flat_mask(mask, tuple(router_probs.shape[:-1]), probs.device)
    if m is not None and not on_cpu(probs):
        return _load_balancing_async(probs, idx, m, alpha)
    if m is not None:
        probs, idx = probs[m], idx[m]
    if probs.shape[0] == 0:
        return probs.sum() * 0.0
    counts = torch.zeros(n_exp, device=probs.device, dtype=probs.dtype)
    counts = counts.scatter_add(0, idx.reshape(-1), torch.ones_like(idx.reshape(-1),
                                                                   dtype=probs.dtype))
    f = counts / idx.numel()                                              # (e,), Σ f = 1
    p = probs.mean(0)                                                     # (e,), Σ P = 1
    return alpha * n_exp * (f * p).sum()


def _load_balancing_async(probs: torch.Tensor, idx: torch.Tensor, keep: torch.Tensor,
                          alpha: float) -> torch.Tensor:
    """GPU path of :func:`load_balancing_loss`: probs (n, e), idx (n, k), keep (n,) bool.  The
    masked-out tokens count 0 in ``f`` and ``P`` instead of being gathered away."""
    n_exp, k = probs.shape[1], idx.shape[1]
    w = keep.to(probs.dtype)[:, None].expand(-1, k).reshape(-1)            # (n k,)
    counts = torch.zeros(n_exp, device=probs.device, dtype=probs.dtype)
    counts = counts.scatter_add(0, idx.reshape(-1), w)                    # (e,)
    f = counts / (keep.sum().clamp_min(1).to(probs.dtype) * k)            # (e,), Σ f = 1
    p = _masked_mean(probs, keep)                                         # (e,), Σ P = 1
    return alpha * n_exp * (f * p).sum()


def router_z_loss(router_logits: torch.Tensor, beta: float = 1e-3,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """ST-MoE z-loss ``β · mean_x logsumexp(logits_x)^2``; keeps router logits small.

    In the logsumexp's dtype (float32 for half-precision logits): ``β · mean(lse²)``, bit for
    bit, where that is its value; where the square overflows (logits 1e200, β = 1e-300) or β
    is outside the dtype's normal range, ``mean((√β·lse)²)`` in float64, rounded to the dtype."""
    beta = _coefficient("beta", beta)
    tensor("router_logits", router_logits, "float", min_ndim=1)
    z = torch.logsumexp(_upcast(router_logits), dim=-1).reshape(-1)        # (n,)
    beta_ok = beta == 0 or torch.finfo(z.dtype).tiny <= beta <= torch.finfo(z.dtype).max
    m = _flat_mask(mask, tuple(router_logits.shape[:-1]), z.device)
    if m is not None and not on_cpu(z):      # chosen on the device, without waiting for it
        stable = _masked_mean((z.double() * math.sqrt(beta)) ** 2, m).to(z.dtype)
        plain = beta * _masked_mean(z ** 2, m)
        return torch.where(torch.isfinite(plain), plain, stable) if beta_ok else stable
    if m is not None:
        z = z[m]
    if z.numel() == 0:
        return z.sum() * 0.0
    plain = beta * (z ** 2).mean()
    if beta_ok and bool(torch.isfinite(plain)):
        return plain
    return ((z.double() * math.sqrt(beta)) ** 2).mean().to(z.dtype)


def task_to_expert(task_ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Designated expert of each task: ``task_id mod E`` (our choice; the paper does not say).

    With K tasks and E experts this is a balanced fixed assignment: every expert receives
    ⌊K/E⌋ or ⌈K/E⌉ tasks, and for K ≤ E it is one-to-one (task k → expert k).
    """
    n_experts = integer("n_experts", n_experts, low=1)
    tensor("task_ids", task_ids, "int")
    if on_cpu(task_ids):
        require(not bool((task_ids < 0).any()), "task_ids.min()", int(task_ids.min()),
                "task ids ≥ 0")
    else:       # checked once in TrainData; here without waiting for the device
        torch._assert_async((task_ids >= 0).all(), "task_to_expert: task ids must be ≥ 0")
    return task_ids % n_experts


def task_router_loss(router_logits: torch.Tensor, expert_targets: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of the router softmax against designated experts.

    router_logits (..., e) — the logits whose softmax is the routing distribution (temperature
    already applied, as in ``ModelOutput.router_logits``); expert_targets (...) long; mask (...)
    bool: the supervised positions S (explicit: which positions to supervise is a modelling
    choice, see the module docstring).
    """
    tensor("router_logits", router_logits, "float", min_ndim=1)
    tensor("expert_targets", expert_targets, "int", shape=tuple(router_logits.shape[:-1]))
    n_exp = router_logits.shape[-1]
    logits = _upcast(router_logits.reshape(-1, n_exp))                     # (n, e)
    targets = expert_targets.reshape(-1)
    m = _flat_mask(mask, tuple(router_logits.shape[:-1]), logits.device)
    if not on_cpu(logits):
        return _task_router_async(logits, targets, m)
    if m is not None:
        logits, targets = logits[m], targets[m]
    if targets.numel() == 0:
        return logits.sum() * 0.0
    _check_expert_ids("expert_targets", targets, n_exp)
    return F.cross_entropy(logits, targets)


def _task_router_async(logits: torch.Tensor, targets: torch.Tensor,
                       keep: torch.Tensor | None) -> torch.Tensor:
    """GPU path of :func:`task_router_loss`: logits (n, e), targets (n,), keep (n,) bool or None.
    Unsupervised rows get the ignored target; the range check is a device-side assertion."""
    n_exp = logits.shape[1]
    ok = (targets >= 0) & (targets < n_exp)                               # (n,)
    if keep is not None:
        ok = ok | ~keep
        targets = torch.where(keep, targets, IGNORE_INDEX)
    torch._assert_async(ok.all(), f"task_router_loss: expert targets must lie in "
                                  f"0..{n_exp - 1} at the supervised positions")
    return _cross_entropy_async(logits, targets, IGNORE_INDEX)


def _per_layer(name: str, value) -> tuple[torch.Tensor, ...]:
    """One tensor (one layer) or a non-empty tuple/list of tensors (one per layer) → a tuple."""
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and len(value) > 0:
        return tuple(value)
    fail(name, type(value).__name__ if not isinstance(value, (tuple, list)) else value,
         "a tensor (one layer) or a non-empty tuple of tensors, one per layer "
         "(e.g. tuple(layer.router_logits for layer in model(idx).layers))")


def _layer_mean(values: list[torch.Tensor]) -> torch.Tensor:
    """Mean over layers; one layer's value itself (bit for bit the one-layer loss)."""
    return values[0] if len(values) == 1 else torch.stack(values).mean()


def objective_loss(objective: str, logits: torch.Tensor, targets: torch.Tensor,
                   router_logits, router_probs, expert_index,
                   task_ids: torch.Tensor | None = None,
                   router_mask: torch.Tensor | None = None, lb_alpha: float = 0.01,
                   router_alpha: float = 1.0, z_beta: float = 0.0,
                   ignore_index: int = IGNORE_INDEX) -> LossParts:
    """Combine the parts for one of paper A's objectives ``ce``, ``ce+lb``, ``ce+router``.

    logits (b, t, v), or (m, v) at the m positions where targets != ignore_index (as returned
    by ``model(idx, logits_mask=targets != ignore_index)``), either as a tensor or as
    :class:`FactoredLogits` (``model(..., factored_logits=True)``: the CE in cache-sized
    blocks on a CPU, what the training loop asks for there); targets (b, t) with ``ignore_index``
    padding; router_logits (b, t, e), router_probs (b, t, e), expert_index (b, t, k) -- one
    layer's tensors, or for L layers a tuple of L of each (``ModelOutput.layers``), layer 1
    first; task_ids — needed for ``ce+router``: (b,), one task per sequence, whose designated
    expert supervises every layer, or (b, L), the task whose expert supervises layer l in
    column l; router_mask (b, t) bool — supervised router positions (default: targets !=
    ignore_index), the same in every layer.  LB and z-loss count the non-padding tokens
    (targets != ignore_index).  ``z_beta`` > 0 adds the z-loss to any objective.  With L
    layers LB, z-loss and the task-router loss are the means over layers (module docstring).
    """
    router_logits = _per_layer("router_logits", router_logits)
    router_probs = _per_layer("router_probs", router_probs)
    expert_index = _per_layer("expert_index", expert_index)
    n_layers = len(router_logits)
    require(len(router_probs) == n_layers and len(expert_index) == n_layers,
            "len(router_probs), len(expert_index)", (len(router_probs), len(expert_index)),
            f"{n_layers} each: one tensor per layer, as router_logits")
    choice("objective", objective, OBJECTIVES)
    lb_alpha = _coefficient("lb_alpha", lb_alpha)
    router_alpha = _coefficient("router_alpha", router_alpha)
    z_beta = _coefficient("z_beta", z_beta)
    ignore_index = integer("ignore_index", ignore_index)
    rows = logits.hidden if isinstance(logits, FactoredLogits) else logits
    tensor("logits.hidden" if rows is not logits else "logits", rows, "float", min_ndim=2)
    tensor("targets", targets, "int", min_ndim=1)
    zero = _upcast(rows.new_zeros(()))
    real = targets != ignore_index                                        # (b, t)
    if logits.dim() == 2 and targets.dim() == 2:
        # logits computed only at the non-padding positions (``logits_mask=targets != ignore``);
        # on a GPU their number, logits.shape[0], gathers the targets without a wait
        picked = (targets[real] if on_cpu(targets)
                  else targets.reshape(-1)[selected_rows(real, logits.shape[0])])
        ce = next_token_cross_entropy(logits, picked, ignore_index)
    else:
        ce = next_token_cross_entropy(logits, targets, ignore_index)
    lb = (_layer_mean([load_balancing_loss(p, i, lb_alpha, real)
                       for p, i in zip(router_probs, expert_index)])
          if objective == "ce+lb" else zero)
    z = (_layer_mean([router_z_loss(r, z_beta, real) for r in router_logits])
         if z_beta > 0 else zero)
    rt = zero
    if objective == "ce+router":
        require(task_ids is not None, "task_ids", task_ids,
                "one task id per sequence: objective 'ce+router' needs them")
        b = targets.shape[0]
        tensor("task_ids", task_ids, "int")
        require(tuple(task_ids.shape) in ((b,), (b, n_layers)), "task_ids.shape",
                tuple(task_ids.shape), f"({b},): one task per sequence for every layer, or "
                f"({b}, {n_layers}): one task per sequence and layer ({n_layers} layer(s) of "
                "router tensors given)")
        mask = real if router_mask is None else tensor("router_mask", router_mask, "bool",
                                                        shape=tuple(targets.shape))
        parts = []
        for l, logits_l in enumerate(router_logits):
            ids = task_ids if task_ids.dim() == 1 else task_ids[:, l]
            experts = task_to_expert(ids, logits_l.shape[-1])             # (b,)
            targets_e = experts[:, None].expand(logits_l.shape[:-1])      # (b, t)
            parts.append(task_router_loss(logits_l, targets_e, mask))
        rt = router_alpha * _layer_mean(parts)
    lb = _upcast(lb)
    total = ce + lb + z + rt
    return LossParts(total, ce, lb, z, rt)
