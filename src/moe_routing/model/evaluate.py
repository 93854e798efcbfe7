"""Evaluation shared by trained and hand-built models.

* Exact match (paper A; the reading "truncate the test sentence before the object, decode
  greedily, compare with the object" is ours): :func:`exact_match`.
* Valid-next-token mass (Theorem 4.2's guarantee ``Σ_{x∈V(w)} P(x|w) > 1 − ε``):
  :func:`valid_next_mass`, the package's one implementation, batched over a model.  It also
  returns the *invalid* mass computed in log space, so that ε down to 1e-8 (and below in
  float64) is measured rather than lost to rounding in ``1 − mass``.

Every function runs batch by batch on the model's device (``batch_size`` rows at a time, each
batch moved there once), never row by row; greedy decoding computes the logits only at the
position it reads.

Prefixes are right-padded ``(b, p)`` tensors with their lengths ``(b,)``: attention is causal,
so whatever follows a prefix (padding, or the rest of the sentence: passing a knowledge
split's ``tokens`` with ``lengths = object_pos`` is fine) never influences the prediction at its
last token, and a generated token is simply written over it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import torch

from .._internal.validation import fail, integer, require
from .checks import ids_in_range, tensor
from .losses import IGNORE_INDEX
from .transformer import MoETransformer
from .layers import layer_index


def _model(model) -> MoETransformer:
    if not isinstance(model, MoETransformer):
        fail("model", type(model).__name__, "a MoETransformer")
    return model


def _tokens(name: str, value, model: MoETransformer, ndim: int = 2) -> torch.Tensor:
    """Token ids for ``model``: an integer tensor of rank ``ndim``, non-empty, in vocabulary."""
    tensor(name, value, "int", ndim=ndim)
    return ids_in_range(name, value, 0, model.config.vocab_size)


class ExactMatch(NamedTuple):
    accuracy: float              # fraction of examples whose whole target was produced
    correct: torch.Tensor        # (b,) bool
    predictions: torch.Tensor    # (b, l) long, greedy tokens (IGNORE_INDEX past each target)


def _check_prefixes(model: MoETransformer, prefixes, lengths, n_new: int) -> None:
    _tokens("prefixes", prefixes, model)
    tensor("lengths", lengths, "int", shape=(prefixes.shape[0],))
    lo, hi = int(lengths.min()), int(lengths.max())
    require(lo >= 1 and hi <= prefixes.shape[1], "lengths range", f"{lo}..{hi}",
            f"prefix lengths in 1..{prefixes.shape[1]} (the width of prefixes)")
    max_len = model.config.max_len
    require(hi + n_new - 1 <= max_len, "n_new", n_new,
            f"at most {max_len - hi + 1}: the longest prefix ({hi}) + n_new − 1 generated "
            f"tokens must fit the model's max_len={max_len}")


def _check_route(route, n: int) -> None:
    if route is not None:
        tensor("route", route, "int", shape=(n,))


def _rows(route, start: int, size: int, device):
    """The oracle's route of one batch of rows (None: the router routes)."""
    return None if route is None else route[start:start + size].to(device)


@torch.no_grad()
def greedy_complete(model: MoETransformer, prefixes: torch.Tensor, lengths: torch.Tensor,
                    n_new: int = 1, batch_size: int = 2048,
                    route: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy continuation: prefixes (b, p) right-padded, lengths (b,) → (b, n_new) tokens.
    ``route`` (b,): an oracle's expert per sequence (``MoETransformer.forward``'s)."""
    _model(model)
    n_new = integer("n_new", n_new, low=1)
    batch_size = integer("batch_size", batch_size, low=1)
    _check_prefixes(model, prefixes, lengths, n_new)
    _check_route(route, prefixes.shape[0])
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
            # logits only where the next token is read (one position per row, in row order):
            # the unembedding of all cur positions would be cur times the work and memory
            last = torch.zeros(pre.shape[0], cur, dtype=torch.bool, device=device)
            last[rows, ln + j - 1] = True                                 # (b, cur)
            nxt = model(buf[:, :cur], logits_mask=last,                   # (b,)
                        route=_rows(route, s, batch_size, device)).logits.argmax(-1)
            new.append(nxt)
            if j + 1 < n_new:
                buf[rows, ln + j] = nxt
        outs.append(torch.stack(new, 1))
    model.train(was)
    return torch.cat(outs).cpu()


@torch.no_grad()
def exact_match(model: MoETransformer, prefixes: torch.Tensor, lengths: torch.Tensor,
                targets: torch.Tensor, batch_size: int = 2048,
                route: torch.Tensor | None = None) -> ExactMatch:
    """Exact-match accuracy of greedy completion.

    prefixes (b, p) right-padded, lengths (b,), targets (b, l) — the object's token ids
    (an atomic entity is one token, l = 1), right-padded with ``IGNORE_INDEX``.  An example is
    correct when every non-padding target token is produced in order.  ``route`` (b,): an
    oracle's expert per sequence (``MoETransformer.forward``'s), None: the router routes.
    """
    _model(model)
    tensor("targets", targets, "int", min_ndim=1)
    if targets.dim() == 1:
        targets = targets[:, None]
    tensor("targets", targets, "int", shape=(getattr(prefixes, "shape", (None,))[0], None))
    valid = targets != IGNORE_INDEX
    first_pad = torch.nonzero(~valid[:, 0])
    if first_pad.numel():
        fail(f"targets[{int(first_pad[0, 0])}, 0]", IGNORE_INDEX,
             "a token id: every target needs at least one token")
    ids_in_range("targets", targets[valid], 0, model.config.vocab_size)
    pred = greedy_complete(model, prefixes, lengths, targets.shape[1], batch_size, route)
    ok = ((pred == targets.cpu()) | ~valid.cpu()).all(1)
    pred = pred.masked_fill(~valid.cpu(), IGNORE_INDEX)
    return ExactMatch(float(ok.float().mean()), ok, pred)


class ValidMass(NamedTuple):
    """Σ_{x∈V(w)} P(x|w) and Σ_{x∉V(w)} P(x|w) at every position, both from log-space sums."""

    mass: torch.Tensor           # (b, t)
    invalid: torch.Tensor        # (b, t)


#: the valid sets: a bool tensor (b, t, v), or rows -> the bool tensor (len(rows), t, v)
ValidSets = Union[torch.Tensor, Callable[[slice], torch.Tensor]]


@torch.no_grad()
def valid_next_mass(model: MoETransformer, tokens: torch.Tensor, valid: ValidSets,
                    batch_size: int = 512, route: torch.Tensor | None = None) -> ValidMass:
    """Valid-next-token mass of ``model`` at every position of ``tokens``, batch by batch.

    tokens (b, t) token ids.  ``valid`` says which next tokens are valid after the prefix
    ``tokens[i, :s+1]``: either a bool tensor (b, t, v), or -- when (b, t, v) would not fit in
    memory, as for a whole split of a large vocabulary -- a function that builds the masks of
    one batch of rows, ``valid(rows: slice) -> BoolTensor (len(rows), t, v)`` (e.g.
    ``lambda rows: dataset.valid_next_mask(split.prefix_node[rows, :-1])``).

    Returns :class:`ValidMass` of (b, t) tensors on the CPU, in float32 at least (half-precision
    logits are upcast before the softmax).  Both masses come from log-space sums, so an invalid
    mass of 1e-18 is measured, not lost in ``1 − mass``.  A position with an empty valid set
    has mass 0 and invalid mass 1.  Positions beyond a sequence's end carry whatever ``valid``
    says there: mask them out afterwards.  ``route`` (b,): an oracle's expert per sequence.
    """
    _model(model)
    _tokens("tokens", tokens, model)
    batch_size = integer("batch_size", batch_size, low=1)
    _check_route(route, tokens.shape[0])
    v = model.config.vocab_size
    whole = isinstance(valid, torch.Tensor)
    if whole:
        tensor("valid", valid, "bool", shape=(*tokens.shape, v))
    elif not callable(valid):
        fail("valid", type(valid).__name__,
             "a bool tensor (b, t, v) or a function rows -> bool tensor (len(rows), t, v)")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    ms, inv = [], []
    for s in range(0, tokens.shape[0], batch_size):
        rows = slice(s, min(s + batch_size, tokens.shape[0]))
        batch = tokens[rows]
        mask = valid[rows] if whole else tensor("valid(rows)", valid(rows), "bool",
                                                shape=(*batch.shape, v))
        logits = model(batch.to(device),                                  # (b', t, v)
                       route=_rows(route, s, batch_size, device)).logits
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        mask = mask.to(device)
        lz = torch.logsumexp(logits, -1)                                  # (b', t)
        neg = torch.tensor(float("-inf"), dtype=logits.dtype, device=device)
        lv = torch.logsumexp(torch.where(mask, logits, neg), -1)          # (b', t)
        li = torch.logsumexp(torch.where(mask, neg, logits), -1)          # (b', t)
        ms.append((lv - lz).exp().cpu())
        inv.append((li - lz).exp().cpu())
    model.train(was)
    return ValidMass(torch.cat(ms), torch.cat(inv))


class RoutingRecord(NamedTuple):
    """Routing decisions at the selected positions, flattened (m positions)."""

    task: torch.Tensor           # (m,) task of the sentence each position belongs to
    expert: torch.Tensor         # (m, k) chosen experts, most probable first
    probs: torch.Tensor          # (m, e) router distribution
    position: torch.Tensor       # (m,) position in the sequence


@torch.no_grad()
def collect_routing(model: MoETransformer, inputs: torch.Tensor, task_ids: torch.Tensor,
                    mask: torch.Tensor | None = None, batch_size: int = 1024,
                    layer: int = 0, route: torch.Tensor | None = None) -> RoutingRecord:
    """Run the model and keep the router's decisions where ``mask`` (b, t) is True (default:
    everywhere), ready for ``moe_routing.routing_metrics`` (e.g. ``routing_summary(rec.task,
    rec.expert[:, 0], K, E, rec.probs)``).

    inputs (b, t) token ids, task_ids (b,) integer (for a deeper model, whichever task the
    caller measures this layer's routing against, e.g. the hop-2 task for layer 2), mask (b, t)
    bool; layer: which layer's router, 0-based (default 0: layer 1, the only one of paper A);
    ``route`` (b,): an oracle's expert per sequence (the record then holds the oracle's choice
    beside the router's distribution)."""
    _model(model)
    _tokens("inputs", inputs, model)
    tensor("task_ids", task_ids, "int", shape=(inputs.shape[0],))
    _check_route(route, inputs.shape[0])
    batch_size = integer("batch_size", batch_size, low=1)
    layer = layer_index(layer, model.config.n_layers)
    if mask is None:
        mask = torch.ones(inputs.shape, dtype=torch.bool)
    tensor("mask", mask, "bool", shape=tuple(inputs.shape))
    require(bool(mask.any()), "mask", "all False", "at least one selected position")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    tasks, experts, probs, pos = [], [], [], []
    for s in range(0, inputs.shape[0], batch_size):
        batch = inputs[s:s + batch_size].to(device)                       # (b, t)
        # routing only: an all-False logits mask skips the unembedding (b, t, v)
        out = model(batch, logits_mask=torch.zeros(batch.shape, dtype=torch.bool,
                                                   device=device),
                    route=_rows(route, s, batch_size, device))
        m = mask[s:s + batch_size].to(device)                             # (b, t)
        rec = out.layers[layer]
        experts.append(rec.expert_index[m].cpu())
        probs.append(rec.router_probs[m].float().cpu())
        tasks.append(task_ids[s:s + batch_size].to(device)[:, None].expand_as(m)[m].cpu())
        pos.append(torch.arange(m.shape[1], device=device).expand_as(m)[m].cpu())
    model.train(was)
    return RoutingRecord(torch.cat(tasks), torch.cat(experts), torch.cat(probs), torch.cat(pos))
