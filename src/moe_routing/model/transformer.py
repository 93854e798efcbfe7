"""`MoETransformer`: the single-layer Mixture-of-Experts transformer of paper A.

    A'  = MHA(A) + A                  (causal multi-head attention, per-head output maps W_O)
    A'' = MoE(A') + A'                (router with temperature, top-k, stacked expert FFNs)
    logits = W_U A''

Shape legend: ``b`` batch, ``t`` sequence, ``d`` d_model, ``h`` heads, ``c`` head width,
``e`` experts, ``f`` expert width, ``k`` experts per token, ``v`` vocabulary.

Parameters are stored in the form a hand-built construction wants to write them (per-head
matrices, stacked expert weights, a router weight with a fixed input mask); see
:meth:`MoETransformer.set_weights`.  One model class serves training and the construction, so
both are evaluated by the same code.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterable, Mapping, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..validation import choice, fail, flag, integer, number, require
from .checks import finite_values, tensor
from .config import BACKENDS, MoEConfig
from .dispatch import dispatch
from .losses import on_cpu, selected_rows


class ModelOutput(NamedTuple):
    """What one forward pass returns (internals only with ``return_internals=True``)."""

    logits: torch.Tensor            # (b, t, v)
    router_logits: torch.Tensor     # (b, t, e)  W_r x / τ (+ bias / τ); softmax gives router_probs
    router_probs: torch.Tensor      # (b, t, e)
    expert_index: torch.Tensor      # (b, t, k)  chosen experts, most probable first
    gate: torch.Tensor              # (b, t, k)  weights multiplying the chosen experts' outputs
    attn_weights: torch.Tensor | None = None   # (b, h, t, t) attention pattern per head
    head_outputs: torch.Tensor | None = None   # (b, h, t, d) each head's write to the residual
    resid_mid: torch.Tensor | None = None      # (b, t, d) A' = MHA(A) + A
    moe_out: torch.Tensor | None = None        # (b, t, d) MoE(A') (before the residual add)


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


class MoETransformer(nn.Module):
    """One-layer MoE transformer; ``forward(idx) -> ModelOutput``.

    Parameter names and shapes (for :meth:`set_weights`)::

        tok_emb.weight (v, d)      pos_emb.weight (max_len, d)
        attn.w_q / w_k / w_v (h, d, c)   attn.w_o (h, c, d)   [attn.b_q/b_k/b_v (h, c), b_o (d)]
        router.weight (e, d)       [router.bias (e,)]          buffer router.input_mask (d,)
        experts.w1 (e, d, f)  experts.b1 (e, f)  experts.w2 (e, f, d)  experts.b2 (e, d)
        buffer experts.neuron_mask (e, f)
        unembed.weight (v, d)      [unembed.bias (v,)]
        [ln_attn / ln_moe / ln_out .weight, .bias (d,) when layernorm]
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        if not isinstance(cfg, MoEConfig):
            fail("cfg", type(cfg).__name__, "a MoEConfig")
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.layernorm else nn.Identity
        self.ln_attn, self.ln_moe, self.ln_out = norm(), norm(), norm()
        self.attn = CausalSelfAttention(cfg)
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias)
        self.register_buffer("expert_alive", torch.ones(cfg.n_experts))
        self.knockout_mode = "zero"
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) matrices, zero biases; output maps (W_O, W2) scaled by 1/√2 as in
        GPT-2 (two residual writes per layer)."""
        std = self.config.init_std
        for p in (self.tok_emb.weight, self.pos_emb.weight, self.attn.w_q, self.attn.w_k,
                  self.attn.w_v, self.router.weight, self.experts.w1, self.unembed.weight):
            p.normal_(0.0, std)
        for p in (self.attn.w_o, self.experts.w2):
            p.normal_(0.0, std / math.sqrt(2))
        for name, p in self.named_parameters():
            if name.endswith("bias") or name.split(".")[-1] in ("b_q", "b_k", "b_v", "b_o",
                                                                  "b1", "b2"):
                p.zero_()
            if name.startswith("ln_") and name.endswith("weight"):
                p.fill_(1.0)

    # ------------------------------------------------------------------ forward
    def forward(self, idx: torch.Tensor, return_internals: bool = False,
                backend: str | None = None,
                logits_mask: torch.Tensor | None = None,
                n_selected: int | None = None) -> ModelOutput:
        """idx (b, t) token ids, t ≤ max_len → :class:`ModelOutput`.

        ``logits_mask`` (b, t) bool: compute logits only there (training skips padding this way:
        the unembedding and the softmax over the vocabulary are most of a step's cost); then
        ``logits`` is (m, v) for the m selected positions in row-major order.  ``n_selected``:
        m, when the caller knows it without reading the device (the training data's CPU copy):
        then on a GPU the selection does not wait for the device (``losses.selected_rows``);
        without it, ``a2[logits_mask]`` has a data-dependent size and the host waits once per
        call.  On the CPU the result is the same either way (m is then checked).

        Checks read metadata only (this runs in every training step): the token *values* are
        checked where data enter (``TrainData``, the evaluation functions); an id outside the
        vocabulary is an ``IndexError`` of the embedding.
        """
        cfg = self.config
        tensor("idx", idx, "int", ndim=2)
        b, t = idx.shape
        require(t <= cfg.max_len, "idx.shape[1]", t, f"at most max_len={cfg.max_len}")
        return_internals = flag("return_internals", return_internals)
        if backend is not None:
            choice("backend", backend, BACKENDS)
        if logits_mask is not None:
            tensor("logits_mask", logits_mask, "bool", shape=(b, t), nonempty=False)
        if n_selected is not None:
            require(logits_mask is not None, "n_selected", n_selected,
                    "None unless logits_mask is given (it counts logits_mask's True entries)")
            n_selected = integer("n_selected", n_selected, low=0, high=b * t)
        pos = torch.arange(t, device=idx.device)
        a = self.tok_emb(idx) + self.pos_emb(pos)                         # (b, t, d)
        attn_out, att, heads = self.attn(self.ln_attn(a), return_internals)
        a1 = a + attn_out                                                 # A'
        x = self.ln_moe(a1)
        router_logits = self.router(x)                                    # (b, t, e)
        if self.knockout_mode == "reroute":     # no expert dead: masked_fill changes nothing
            router_logits = router_logits.masked_fill(self.expert_alive == 0, float("-inf"))
        probs = router_logits.softmax(-1)                                 # (b, t, e)
        top_p, top_i = probs.topk(cfg.top_k, dim=-1)                      # (b, t, k)
        gate = top_p if cfg.gate == "switch" else top_p / top_p.sum(-1, keepdim=True)
        if self.knockout_mode == "zero":
            gate = gate * self.expert_alive[top_i]
        moe = self.experts(x.reshape(b * t, -1), top_i.reshape(b * t, -1),
                           gate.reshape(b * t, -1), backend).view(b, t, -1)
        a2 = a1 + moe                                                     # A''
        if logits_mask is not None:
            if n_selected is None or on_cpu(a2):
                a2 = a2[logits_mask]                                      # (m, d)
                require(n_selected is None or a2.shape[0] == n_selected, "n_selected",
                        n_selected, f"the number of True entries of logits_mask ({a2.shape[0]})")
            else:
                a2 = a2.reshape(b * t, -1)[selected_rows(logits_mask, n_selected)]  # (m, d)
        logits = self.unembed(self.ln_out(a2))                            # (b, t, v) | (m, v)
        if not return_internals:
            return ModelOutput(logits, router_logits, probs, top_i, gate)
        return ModelOutput(logits, router_logits, probs, top_i, gate, att, heads, a1, moe)

    # ------------------------------------------------------------------ surgery
    def knock_out(self, experts: Iterable[int], mode: str = "zero") -> None:
        """Remove experts (circuit isolation).  ``"zero"``: routing unchanged, a knocked-out
        expert's output is replaced by 0 (the token keeps only its residual stream);
        ``"reroute"``: the router may not pick it (its probability is 0, the next best expert
        takes the token).  Undo with :meth:`restore_experts`."""
        choice("mode", mode, ("zero", "reroute"))
        n = self.config.n_experts
        experts = [integer(f"experts[{i}]", e, low=0, high=n - 1)
                   for i, e in enumerate(experts)]
        require(mode == "zero" or len(set(experts)) < n, "experts", experts,
                "at most n_experts − 1 distinct experts: reroute mode must leave one alive")
        self.expert_alive.fill_(1.0)
        self.expert_alive[experts] = 0.0
        self.knockout_mode = mode

    def restore_experts(self) -> None:
        self.expert_alive.fill_(1.0)
        self.knockout_mode = "zero"

    @contextmanager
    def knocked_out(self, experts: Iterable[int], mode: str = "zero"):
        """``with model.knocked_out([k]): ...`` — knock out, then restore on exit."""
        self.knock_out(experts, mode)
        try:
            yield self
        finally:
            self.restore_experts()

    @torch.no_grad()
    def set_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy hand-built tensors into named parameters/buffers, checking names and shapes.

        Names are those of ``state_dict()`` (see the class docstring); parameters not named keep
        their values.  Raises ValueError on an unknown name or a shape mismatch.
        """
        state = dict(self.named_parameters())
        state.update(dict(self.named_buffers()))
        if not hasattr(weights, "items"):
            fail("weights", type(weights).__name__, "a mapping name -> tensor")
        for name, value in weights.items():
            choice("weights name", name, sorted(state))
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError):
                fail(f"weights[{name!r}]", type(value).__name__, "a tensor or array")
            require(tuple(value.shape) == tuple(state[name].shape), f"weights[{name!r}].shape",
                    tuple(value.shape), f"{tuple(state[name].shape)}")
            if value.is_floating_point():
                finite_values(f"weights[{name!r}]", value)
            state[name].copy_(value)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups: decay matrices (dim ≥ 2), not biases/LayerNorm gains."""
        weight_decay = float(number("weight_decay", weight_decay, low=0))
        decay = [p for p in self.parameters() if p.requires_grad and p.dim() >= 2]
        rest = [p for p in self.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": rest, "weight_decay": 0.0}]
