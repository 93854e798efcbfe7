"""Evaluation shared by trained and hand-built models.

* Exact match (paper A §4; the reading "truncate the test sentence before the object, decode
  greedily, compare with the object" is ours): :func:`exact_match`.
* Valid-next-token mass (Theorem 4.2's guarantee ``Σ_{x∈V(w)} P(x|w) > 1 − ε``):
  :func:`valid_next_token_mass` on logits and :func:`model_valid_mass` on a model.  Both also
  return the *invalid* mass computed in log space, so that ε down to 1e-8 (and below in
  float64) is measured rather than lost to rounding in ``1 − mass``.

Prefixes are right-padded ``(b, p)`` tensors with their lengths ``(b,)``: attention is causal,
so whatever follows a prefix (padding, or the rest of the sentence: passing a knowledge
split's ``tokens`` with ``lengths = object_pos`` is fine) never influences the prediction at its
last token, and a generated token is simply written over it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .losses import IGNORE_INDEX
from .transformer import MoETransformer


class ExactMatch(NamedTuple):
    accuracy: float              # fraction of examples whose whole target was produced
    correct: torch.Tensor        # (b,) bool
    predictions: torch.Tensor    # (b, l) long, greedy tokens (IGNORE_INDEX past each target)


def _check_prefixes(prefixes: torch.Tensor, lengths: torch.Tensor, n_new: int, max_len: int):
    if prefixes.dim() != 2:
        raise ValueError(f"prefixes must be (batch, length), got shape {tuple(prefixes.shape)}")
    if lengths.shape != (prefixes.shape[0],):
        raise ValueError(f"lengths has shape {tuple(lengths.shape)}; expected "
                         f"({prefixes.shape[0]},)")
    if prefixes.shape[0] == 0:
        return
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo < 1 or hi > prefixes.shape[1]:
        raise ValueError(f"prefix lengths span {lo}..{hi}; accepted: 1..{prefixes.shape[1]}")
    if hi + n_new - 1 > max_len:
        raise ValueError(f"longest prefix ({hi}) + {n_new} generated tokens needs a context "
                         f"of {hi + n_new - 1}; the model's max_len={max_len}")


@torch.no_grad()
def greedy_complete(model: MoETransformer, prefixes: torch.Tensor, lengths: torch.Tensor,
                    n_new: int = 1, batch_size: int = 2048) -> torch.Tensor:
    """Greedy continuation: prefixes (b, p) right-padded, lengths (b,) → (b, n_new) tokens."""
    if n_new < 1:
        raise ValueError(f"n_new = {n_new}; accepted: an integer ≥ 1")
    _check_prefixes(prefixes, lengths, n_new, model.config.max_len)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    outs = []
    for s in range(0, prefixes.shape[0], batch_size):
        pre = prefixes[s:s + batch_size].to(device)
        ln = lengths[s:s + batch_size].to(device)
        width = int(ln.max()) + n_new - 1
        buf = torch.zeros(pre.shape[0], width, dtype=torch.long, device=device)
        buf[:, :pre.shape[1]] = pre[:, :width]
        rows = torch.arange(pre.shape[0], device=device)
        new = []
        for j in range(n_new):
            cur = int(ln.max()) + j                                       # columns needed
            logits = model(buf[:, :cur]).logits                           # (b, cur, v)
            nxt = logits[rows, ln + j - 1].argmax(-1)                      # (b,)
            new.append(nxt)
            if j + 1 < n_new:
                buf[rows, ln + j] = nxt
        outs.append(torch.stack(new, 1))
    model.train(was)
    return torch.cat(outs).cpu() if outs else torch.zeros(0, n_new, dtype=torch.long)


@torch.no_grad()
def exact_match(model: MoETransformer, prefixes: torch.Tensor, lengths: torch.Tensor,
                targets: torch.Tensor, batch_size: int = 2048) -> ExactMatch:
    """Exact-match accuracy of greedy completion.

    prefixes (b, p) right-padded, lengths (b,), targets (b, l) — the object's token ids
    (an atomic entity is one token, l = 1), right-padded with ``IGNORE_INDEX``.  An example is
    correct when every non-padding target token is produced in order.
    """
    if targets.dim() == 1:
        targets = targets[:, None]
    if targets.shape[0] != prefixes.shape[0]:
        raise ValueError(f"{targets.shape[0]} targets for {prefixes.shape[0]} prefixes")
    valid = targets != IGNORE_INDEX
    if not bool(valid[:, 0].all()):
        raise ValueError("every target needs at least one token (targets[:, 0] is padding)")
    pred = greedy_complete(model, prefixes, lengths, targets.shape[1], batch_size)
    ok = ((pred == targets.cpu()) | ~valid.cpu()).all(1)
    pred = pred.masked_fill(~valid.cpu(), IGNORE_INDEX)
    acc = float(ok.float().mean()) if ok.numel() else float("nan")
    return ExactMatch(acc, ok, pred)


def valid_next_token_mass(logits: torch.Tensor, valid: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``Σ_{x∈V} P(x)`` and ``Σ_{x∉V} P(x)`` per position, from log-space sums.

    logits (..., v), valid (..., v) bool → (mass (...), invalid_mass (...)).  A position with
    an empty valid set has mass 0 and invalid mass 1.
    """
    if logits.shape != valid.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and valid {tuple(valid.shape)} differ")
    lz = torch.logsumexp(logits, -1)
    neg = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    lv = torch.logsumexp(torch.where(valid, logits, neg), -1)
    li = torch.logsumexp(torch.where(valid, neg, logits), -1)
    return (lv - lz).exp(), (li - lz).exp()


@torch.no_grad()
def model_valid_mass(model: MoETransformer, tokens: torch.Tensor, valid: torch.Tensor,
                     batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Valid-next-token mass of ``model`` at every position of ``tokens``.

    tokens (b, t); valid (b, t, v) bool, ``valid[i, s]`` = V(w) for the prefix w = tokens[i, :s+1]
    → (mass (b, t), invalid_mass (b, t)) on the CPU.  Positions beyond a sequence's end carry
    whatever ``valid`` says there; mask them out afterwards.
    """
    if valid.shape[:2] != tokens.shape or valid.shape[2] != model.config.vocab_size:
        raise ValueError(f"valid has shape {tuple(valid.shape)}; expected "
                         f"{tuple(tokens.shape) + (model.config.vocab_size,)}")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    ms, inv = [], []
    for s in range(0, tokens.shape[0], batch_size):
        logits = model(tokens[s:s + batch_size].to(device)).logits
        m, i = valid_next_token_mass(logits, valid[s:s + batch_size].to(device))
        ms.append(m.cpu())
        inv.append(i.cpu())
    model.train(was)
    return torch.cat(ms), torch.cat(inv)


class RoutingRecord(NamedTuple):
    """Routing decisions at the selected positions, flattened (m positions)."""

    task: torch.Tensor           # (m,) task of the sentence each position belongs to
    expert: torch.Tensor         # (m, k) chosen experts, most probable first
    probs: torch.Tensor          # (m, e) router distribution
    position: torch.Tensor       # (m,) position in the sequence


@torch.no_grad()
def collect_routing(model: MoETransformer, inputs: torch.Tensor, task_ids: torch.Tensor,
                    mask: torch.Tensor | None = None, batch_size: int = 1024) -> RoutingRecord:
    """Run the model and keep the router's decisions where ``mask`` (b, t) is True (default:
    everywhere), ready for ``moe_routing.routing_metrics`` (e.g. ``routing_summary(rec.task,
    rec.expert[:, 0], K, E, rec.probs)``)."""
    if mask is None:
        mask = torch.ones(inputs.shape, dtype=torch.bool)
    if mask.shape != inputs.shape or task_ids.shape != (inputs.shape[0],):
        raise ValueError(f"inputs {tuple(inputs.shape)}, mask {tuple(mask.shape)} and task_ids "
                         f"{tuple(task_ids.shape)} disagree")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    tasks, experts, probs, pos = [], [], [], []
    for s in range(0, inputs.shape[0], batch_size):
        out = model(inputs[s:s + batch_size].to(device))
        m = mask[s:s + batch_size].to(device)                             # (b, t)
        experts.append(out.expert_index[m].cpu())
        probs.append(out.router_probs[m].float().cpu())
        tasks.append(task_ids[s:s + batch_size].to(device)[:, None].expand_as(m)[m].cpu())
        pos.append(torch.arange(m.shape[1], device=device).expand_as(m)[m].cpu())
    model.train(was)
    return RoutingRecord(torch.cat(tasks), torch.cat(experts), torch.cat(probs), torch.cat(pos))
