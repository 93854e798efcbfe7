"""Logits left as the product of the final hidden states and the unembedding, and the
cross-entropy computed from them block of rows by block of rows, for the CPU.

Why: the (tokens × vocabulary) logits of a training batch of the training chapter's model --
1,290 rows × 1,443 tokens, 7.4 MB in float32 -- do not fit in a core's cache, and each pass over
them (the product, the softmax, the gradient, the gradient's two products) goes to memory.  Made
block by block, each block's logits (``CE_BLOCK_ELEMENTS``) stay in cache from the product to
the gradients.  The loss and the gradients are those of the tensor path to rounding (the sums
run in another order), tested against torch's ``cross_entropy`` with one-row blocks, a short last
block and one block.  Measured (``benchmarks/bench_linear_cross_entropy.py``): a step of a
20-task run about a quarter faster with two runs at once on 2 cores.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F


class FactoredLogits(NamedTuple):
    """Logits ``hidden @ weight.T (+ bias)`` left unmultiplied: hidden (m, d), weight (v, d),
    bias (v,) or None -- what the model's unembedding would turn into (m, v) logits.

    :func:`~.losses.next_token_cross_entropy` given factored logits computes the loss and its
    gradients block of rows by block of rows (:class:`_LinearCrossEntropy`; module docstring).
    """

    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None = None

    def materialize(self) -> torch.Tensor:
        """The logits (m, v)."""
        return F.linear(self.hidden, self.weight, self.bias)

    def dim(self) -> int:
        return self.hidden.dim()

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.hidden.shape[:-1], self.weight.shape[0])


#: elements of one block of logits in :class:`_LinearCrossEntropy` (float32: 512 KiB, within a
#: core's L2 cache)
CE_BLOCK_ELEMENTS = 2 ** 17


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T (+ bias)`` over non-ignored rows, for the CPU,
    block of ``block`` rows by block: the logits of a block are made, turned into the loss and
    into the gradients (``softmax − one-hot`` against ``weight`` and ``hidden``) and dropped.

    The gradients are computed in the forward pass, once (the cross-entropy's gradient with
    respect to the logits does not depend on anything downstream), and the backward pass
    scales them by ``grad_out / n_valid``; those not needed (``ctx.needs_input_grad``) are not
    computed.  The loss per row is ``−log p(target)``, or the exact ``logsumexp − logit`` where
    p underflows (< 1e-30), as in :class:`_CrossEntropy`.  Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, ignore_index, block):   # (m, d), (v, d)
        valid = targets != ignore_index                                   # (m,)
        safe = targets.clamp_min(0) * valid
        n_valid = valid.sum().clamp_min(1).to(hidden.dtype)
        want_h, want_w, want_b = ctx.needs_input_grad[:3]
        want = want_h or want_w or want_b
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros_like(weight) if want_w else None
        grad_b = torch.zeros_like(bias) if want_b else None
        minus_one = hidden.new_full((block, 1), -1.0)
        all_valid = bool(valid.all())
        nll = hidden.new_empty(hidden.shape[0])                           # (m,)
        wt = weight.t()                                                   # (d, v)
        for s in range(0, hidden.shape[0], block):
            x = hidden[s:s + block]                                       # (c, d)
            c = x.shape[0]
            logits = x @ wt if bias is None else torch.addmm(bias, x, wt)  # (c, v)
            probs = torch.softmax(logits, -1)                             # (c, v)
            t = safe[s:s + c, None]                                       # (c, 1)
            p_t = probs.gather(1, t)[:, 0]                                # (c,)
            nll_b = nll[s:s + c]
            torch.log(p_t, out=nll_b).neg_()
            tiny = p_t < 1e-30
            if bool(tiny.any()):
                rows = tiny.nonzero()[:, 0]
                nll_b[rows] = (torch.logsumexp(logits[rows], -1)
                               - logits[rows].gather(1, t[rows])[:, 0])
            if not want:
                continue
            g = probs.scatter_add_(1, t, minus_one[:c])                   # (c, v) softmax − 1_t
            if not all_valid:
                g.mul_(valid[s:s + c, None])
            if want_h:
                torch.mm(g, weight, out=grad_h[s:s + c])                  # (c, d)
            if want_w:
                grad_w.addmm_(g.t(), x)                                   # (v, d)
            if want_b:
                grad_b.add_(g.sum(0))
        ctx.save_for_backward(grad_h, grad_w, grad_b, n_valid)
        return torch.where(valid, nll, 0.0).sum() / n_valid

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w, grad_b, n_valid = ctx.saved_tensors
        scale = grad_out / n_valid
        return tuple(None if g is None else g * scale
                     for g in (grad_h, grad_w, grad_b)) + (None, None, None)


def blocked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                          bias: torch.Tensor | None, targets: torch.Tensor,
                          ignore_index: int) -> torch.Tensor:
    """Mean CE over non-ignored rows of ``hidden @ weight.T (+ bias)``: hidden (m, d), weight
    (v, d), bias (v,) or None, targets (m,) -- already checked, one dtype, on the CPU (the
    callers: :func:`~.losses.next_token_cross_entropy`)."""
    block = max(1, CE_BLOCK_ELEMENTS // max(1, weight.shape[0]))
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, ignore_index, block)


__all__ = ["CE_BLOCK_ELEMENTS", "FactoredLogits", "blocked_cross_entropy"]
