"""The parts of one layer of :class:`~moe_routing.model.MoETransformer` (paper A's layer):
causal multi-head attention with per-head weights, the router, the stacked experts, a further
layer's :class:`MoELayer`, and :func:`_layer_forward`, the one layer's forward pass

    A'  = MHA(LN(A)) + A,    A'' = MoE(LN(A')) + A'

with what it records (:class:`LayerOutput`; the whole model's :class:`ModelOutput`).

Apart from the model (:mod:`.transformer`) so that each part and the order of its operations
can be read on one page; the shape legend is :mod:`.transformer`'s (``b`` batch, ``t``
sequence, ``d`` d_model, ``h`` heads, ``c`` head width, ``e`` experts, ``f`` expert width, ``k``
experts per token).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._internal.validation import integer, require
from .config import MoEConfig
from .dispatch import dispatch


class LayerOutput(NamedTuple):
    """One layer's routing (and, with ``return_internals=True``, its internals).

    The fields mean for layer l what :class:`ModelOutput`'s fields of the same name mean for
    layer 1: ``resid_mid`` is A_l' = MHA_l(A_l) + A_l and ``moe_out`` is MoE_l(A_l'), so the
    layer's output is ``resid_mid + moe_out``.
    """

    router_logits: torch.Tensor     # (b, t, e)
    router_probs: torch.Tensor      # (b, t, e)
    expert_index: torch.Tensor      # (b, t, k)
    gate: torch.Tensor              # (b, t, k)
    attn_weights: torch.Tensor | None = None   # (b, h, t, t)
    head_outputs: torch.Tensor | None = None   # (b, h, t, d)
    resid_mid: torch.Tensor | None = None      # (b, t, d)
    moe_out: torch.Tensor | None = None        # (b, t, d)


def layer_index(layer, n_layers: int) -> int:
    """A 0-based layer index in ``0 .. n_layers − 1`` (ValueError naming the model's depth)."""
    layer = integer("layer", layer)
    require(0 <= layer < n_layers, "layer", layer,
            f"a layer index in 0..{n_layers - 1} (0-based: 0 is layer 1; the model has "
            f"n_layers={n_layers})")
    return layer


class ModelOutput(NamedTuple):
    """What one forward pass returns (internals only with ``return_internals=True``).

    Every field but ``layers`` is about layer 1 (the only layer of paper A's model), so a
    caller written for one layer reads the same values from a deeper model's first layer.
    ``layers`` holds one :class:`LayerOutput` per layer, layer 1 first, always -- a one-tuple
    for a one-layer model (its tensors are the very objects of the fields above), so that code
    reading ``out.layers[l]`` works at any depth.
    """

    logits: torch.Tensor            # (b, t, v); (m, v) under a logits mask; or FactoredLogits
    router_logits: torch.Tensor     # (b, t, e)  W_r x / τ (+ bias / τ); softmax gives router_probs
    router_probs: torch.Tensor      # (b, t, e)
    expert_index: torch.Tensor      # (b, t, k)  chosen experts, most probable first
    gate: torch.Tensor              # (b, t, k)  weights multiplying the chosen experts' outputs
    attn_weights: torch.Tensor | None = None   # (b, h, t, t) attention pattern per head
    head_outputs: torch.Tensor | None = None   # (b, h, t, d) each head's write to the residual
    resid_mid: torch.Tensor | None = None      # (b, t, d) A' = MHA(A) + A
    moe_out: torch.Tensor | None = None        # (b, t, d) MoE(A') (before the residual add)
    layers: tuple[LayerOutput, ...] | None = None   # one per layer (n_layers), layer 1 first


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with explicit per-head weights.

    ``w_q, w_k, w_v``: (h, d, c); ``w_o``: (h, c, d), head h writes ``softmax(q k^T / √c) v W_O[h]``
    into the residual stream.  Biases (``attn_bias``): ``b_q, b_k, b_v`` (h, c), ``b_o`` (d,).
    The 1/√c score scale is fixed: a hand-built model sets its attention sharpness β by
    writing ``β·√c·W_Q``.  No padding mask: sequences are right-padded, and causality already
    keeps padding out of every real position.
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        h, d, c = cfg.n_heads, cfg.d_model, cfg.head_dim
        self.n_heads, self.head_dim = h, c
        self.w_q = nn.Parameter(torch.empty(h, d, c))
        self.w_k = nn.Parameter(torch.empty(h, d, c))
        self.w_v = nn.Parameter(torch.empty(h, d, c))
        self.w_o = nn.Parameter(torch.empty(h, c, d))
        if cfg.attn_bias:
            self.b_q = nn.Parameter(torch.zeros(h, c))
            self.b_k = nn.Parameter(torch.zeros(h, c))
            self.b_v = nn.Parameter(torch.zeros(h, c))
            self.b_o = nn.Parameter(torch.zeros(d))
        else:
            self.b_q = self.b_k = self.b_v = self.b_o = None

    def forward(self, x: torch.Tensor, return_internals: bool = False):
        b, t, d = x.shape
        h, c = self.n_heads, self.head_dim
        # One fused matmul for q, k, v: (d, 3 h c).
        w = torch.cat([self.w_q, self.w_k, self.w_v], 0).permute(1, 0, 2).reshape(d, 3 * h * c)
        qkv = x @ w                                                       # (b, t, 3 h c)
        if self.b_q is not None:
            qkv = qkv + torch.cat([self.b_q, self.b_k, self.b_v], 0).reshape(3 * h * c)
        q, k, v = qkv.view(b, t, 3, h, c).permute(2, 0, 3, 1, 4)          # each (b, h, t, c)
        if not return_internals:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # (b, h, t, c)
            out = y.transpose(1, 2).reshape(b, t, h * c) @ self.w_o.reshape(h * c, d)
            if self.b_o is not None:
                out = out + self.b_o
            return out, None, None
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c)                  # (b, h, t, t)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = scores.masked_fill(~causal, float("-inf")).softmax(-1)       # (b, h, t, t)
        heads = torch.einsum("bhtc,hcd->bhtd", att @ v, self.w_o)          # (b, h, t, d)
        out = heads.sum(1)
        if self.b_o is not None:
            out = out + self.b_o
        return out, att, heads


class Router(nn.Module):
    """Linear router ``logits = (x (W ⊙ m)^T + b) / τ``; ``m`` (d,) is a fixed 0/1 input mask.

    ``weight``: (e, d); ``bias``: (e,) or None; buffer ``input_mask``: (d,), ones except outside
    ``router_block`` — the masked columns never influence routing and get zero gradient.
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.temperature = float(cfg.router_temperature)
        self.weight = nn.Parameter(torch.empty(cfg.n_experts, cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.n_experts)) if cfg.router_bias else None
        mask = torch.ones(cfg.d_model)
        if cfg.router_block is not None:
            mask.zero_()
            mask[cfg.router_block[0]:cfg.router_block[1]] = 1.0
        self.register_buffer("input_mask", mask)
        self.masked = cfg.router_block is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight * self.input_mask if self.masked else self.weight
        return F.linear(x, w, self.bias) / self.temperature               # (b, t, e)


class Experts(nn.Module):
    """E expert FFNs as stacked weights: ``w1`` (e, d, f), ``b1`` (e, f), ``w2`` (e, f, d),
    ``b2`` (e, d); buffer ``neuron_mask`` (e, f) keeps only the first ``expert_sizes[e]``
    neurons of expert e (masked neurons output exactly zero and get zero gradient)."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        e, d, f = cfg.n_experts, cfg.d_model, cfg.d_expert
        self.w1 = nn.Parameter(torch.empty(e, d, f))
        self.b1 = nn.Parameter(torch.zeros(e, f))
        self.w2 = nn.Parameter(torch.empty(e, f, d))
        self.b2 = nn.Parameter(torch.zeros(e, d))
        sizes = torch.tensor(cfg.neurons_per_expert)
        self.register_buffer("neuron_mask", (torch.arange(f)[None, :] < sizes[:, None]).float())
        self.masked = cfg.expert_sizes is not None and any(s < f for s in cfg.expert_sizes)
        self.activation = cfg.activation
        self.backend = cfg.backend

    def weights(self):
        """The effective (masked) ``w1, b1, w2, b2``."""
        if not self.masked:
            return self.w1, self.b1, self.w2, self.b2
        m = self.neuron_mask
        return self.w1 * m[:, None, :], self.b1 * m, self.w2 * m[:, :, None], self.b2

    def forward(self, x, expert_index, gate, backend: str | None = None):
        """x (n, d), expert_index (n, k), gate (n, k) → (n, d)."""
        w1, b1, w2, b2 = self.weights()
        return dispatch(backend or self.backend, x, expert_index, gate, w1, b1, w2, b2,
                        self.activation)


class MoELayer(nn.Module):
    """Layers 2..L of a deeper model: the parts of one layer, under the names layer 1 uses.

    ``ln_attn``, ``attn``, ``ln_moe``, ``router``, ``experts`` (as in :class:`MoETransformer`)
    and the knock-out state of the layer (buffer ``expert_alive`` (e,), ``knockout_mode``).
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.layernorm else nn.Identity
        self.ln_attn, self.ln_moe = norm(), norm()
        self.attn = CausalSelfAttention(cfg)
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.register_buffer("expert_alive", torch.ones(cfg.n_experts))
        self.knockout_mode = "zero"


def _layer_forward(layer, cfg: MoEConfig, a: torch.Tensor, return_internals: bool,
                   backend: str | None, route: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, LayerOutput]:
    """One layer on the residual stream a (b, t, d) → (A_{l+1} (b, t, d), its LayerOutput).

    ``layer`` is the model itself for layer 1 (its parts keep the top-level names the
    construction writes) or a :class:`MoELayer`: both carry ``ln_attn, attn, ln_moe, router,
    experts, expert_alive, knockout_mode``.  ``route`` (b,) long: an oracle's choice, every
    position of sequence i to expert ``route[i]`` with gate 1 (top-1; the router's logits and
    probabilities are still computed and returned, its choice is not used).
    """
    b, t, _ = a.shape
    attn_out, att, heads = layer.attn(layer.ln_attn(a), return_internals)
    a1 = a + attn_out                                                 # A'
    x = layer.ln_moe(a1)
    router_logits = layer.router(x)                                   # (b, t, e)
    if layer.knockout_mode == "reroute":    # no expert dead: masked_fill changes nothing
        router_logits = router_logits.masked_fill(layer.expert_alive == 0, float("-inf"))
    probs = router_logits.softmax(-1)                                 # (b, t, e)
    if route is None:
        top_p, top_i = probs.topk(cfg.top_k, dim=-1)                  # (b, t, k)
        gate = top_p if cfg.gate == "switch" else top_p / top_p.sum(-1, keepdim=True)
    else:                                                             # the oracle's map
        require(layer.knockout_mode != "reroute" or bool(layer.expert_alive[route].all()),
                "route", "an expert knocked out in 'reroute' mode",
                "experts alive (an oracle's route is not rerouted; knock out in 'zero' mode)")
        top_i = route[:, None, None].expand(b, t, 1)                  # (b, t, 1)
        gate = torch.ones(b, t, 1, dtype=probs.dtype, device=probs.device)
    if layer.knockout_mode == "zero":
        gate = gate * layer.expert_alive[top_i]
    moe = layer.experts(x.reshape(b * t, -1), top_i.reshape(b * t, -1),
                        gate.reshape(b * t, -1), backend).view(b, t, -1)
    a2 = a1 + moe                                                     # A''
    if cfg.router_loss_detached:     # the same values; the aux losses' gradient stops at x
        router_logits = layer.router(x.detach())
        if layer.knockout_mode == "reroute":
            router_logits = router_logits.masked_fill(layer.expert_alive == 0, float("-inf"))
    if not return_internals:
        return a2, LayerOutput(router_logits, probs, top_i, gate)
    return a2, LayerOutput(router_logits, probs, top_i, gate, att, heads, a1, moe)
