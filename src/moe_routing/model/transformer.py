"""`MoETransformer`: the Mixture-of-Experts transformer of paper A (one layer), or L layers.

    A'  = MHA(A) + A                  (causal multi-head attention, per-head output maps W_O)
    A'' = MoE(A') + A'                (router with temperature, top-k, stacked expert FFNs)
    logits = W_U A''

With ``MoEConfig.n_layers = L > 1`` (ours, beyond paper A) the pair (MHA, MoE) is repeated L
times, each layer with its own weights, and ``W_U`` reads the last layer's output.

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
from typing import Iterable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._internal.validation import choice, fail, flag, integer, number, require
from .checks import finite_values, tensor
from .config import BACKENDS, MoEConfig
from .factored_logits import FactoredLogits
from .losses import on_cpu, selected_rows
from .layers import (CausalSelfAttention, Experts, ModelOutput, MoELayer, Router, _layer_forward,
                     layer_index)


#: seed of the fixed entity codes: the codes are drawn from their own generator, so a coded
#: model's codes do not depend on (or change) the global seed that initialises the rest
CODE_SEED = 20_260_601


def fixed_codes(cfg: MoEConfig) -> torch.Tensor:
    """(vocab_size - code_start, d_model): the fixed entity codes of ``cfg``.

    Each code is a standard normal vector in a random k-dimensional subspace (k =
    ``entity_codes``, an orthonormal basis Q from the QR of a Gaussian d×k matrix), scaled by
    ``init_std · √(d/k)`` so that its coordinates have the variance of a learned row at
    initialisation whatever k is.  Drawn in float64 on the CPU from :data:`CODE_SEED` and the
    config's sizes: the same codes on every machine and in every run of one configuration.
    """
    d, k = cfg.d_model, cfg.entity_codes
    n = cfg.vocab_size - cfg.code_start
    g = torch.Generator().manual_seed(CODE_SEED + 1009 * k + d)
    q, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))  # (d, k)
    z = torch.randn(n, k, generator=g, dtype=torch.float64)                      # (n, k)
    return (z @ q.T * (cfg.init_std * math.sqrt(d / k))).to(torch.float32)       # (n, d)


class MoETransformer(nn.Module):
    """MoE transformer of ``config.n_layers`` layers (paper A: one); ``forward(idx) ->
    ModelOutput``.

    Parameter names and shapes (for :meth:`set_weights`)::

        tok_emb.weight (v, d)      pos_emb.weight (max_len, d)
        [with entity_codes: tok_emb.weight (code_start, d), buffer entity_codes (v-code_start, d)]
        attn.w_q / w_k / w_v (h, d, c)   attn.w_o (h, c, d)   [attn.b_q/b_k/b_v (h, c), b_o (d)]
        router.weight (e, d)       [router.bias (e,)]          buffer router.input_mask (d,)
        experts.w1 (e, d, f)  experts.b1 (e, f)  experts.w2 (e, f, d)  experts.b2 (e, d)
        buffer experts.neuron_mask (e, f)
        unembed.weight (v, d)      [unembed.bias (v,)]
        [ln_attn / ln_moe / ln_out .weight, .bias (d,) when layernorm]
        buffer expert_alive (e,)   (knock-out state of layer 1)
        extra_layers.{j}.…         layer j + 2 (j = 0 .. n_layers − 2): the names of layer 1
                                   under the prefix: ln_attn, attn, ln_moe, router, experts,
                                   buffer expert_alive (e.g. extra_layers.0.attn.w_q)

    Why layer 1 stays at the top level and the others sit in a list: a one-layer model --
    paper A's, and the hand-built one of ``moe_routing.construction``, which writes these
    names -- has exactly the state, parameter order and initialisation it had before deeper
    models existed, so its seeded weights, outputs and training runs are unchanged.
    """

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        if not isinstance(cfg, MoEConfig):
            fail("cfg", type(cfg).__name__, "a MoEConfig")
        self.config = cfg
        coded = cfg.entity_codes is not None
        self.tok_emb = nn.Embedding(cfg.code_start if coded else cfg.vocab_size, cfg.d_model)
        if coded:
            self.register_buffer("entity_codes", fixed_codes(cfg))
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.layernorm else nn.Identity
        self.ln_attn, self.ln_moe, self.ln_out = norm(), norm(), norm()
        self.attn = CausalSelfAttention(cfg)
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.unembed_bias)
        self.register_buffer("expert_alive", torch.ones(cfg.n_experts))
        self.knockout_mode = "zero"
        # empty for one layer: no state, no parameters, no random draws
        self.extra_layers = nn.ModuleList(MoELayer(cfg) for _ in range(cfg.n_layers - 1))
        self.reset_parameters()

    def layers(self) -> list:
        """The L layers in order: the model itself for layer 1 (its parts are top-level), then
        ``extra_layers``.  Each has ``ln_attn, attn, ln_moe, router, experts, expert_alive,
        knockout_mode``."""
        return [self, *self.extra_layers]

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) matrices, zero biases; output maps (W_O, W2) scaled by 1/√(2L) as
        in GPT-2 (two residual writes per layer, L layers: 1/√2 for one layer).

        Draw order: embeddings, layer 1 and the unembedding exactly as for a one-layer model,
        then layers 2..L (W_Q, W_K, W_V, router, W1, then W_O, W2 each), so a seeded one-layer
        model has the weights it always had."""
        std = self.config.init_std
        out_std = std / math.sqrt(2 * self.config.n_layers)
        for p in (self.tok_emb.weight, self.pos_emb.weight, self.attn.w_q, self.attn.w_k,
                  self.attn.w_v, self.router.weight, self.experts.w1, self.unembed.weight):
            p.normal_(0.0, std)
        for p in (self.attn.w_o, self.experts.w2):
            p.normal_(0.0, out_std)
        for layer in self.extra_layers:
            for p in (layer.attn.w_q, layer.attn.w_k, layer.attn.w_v, layer.router.weight,
                      layer.experts.w1):
                p.normal_(0.0, std)
            for p in (layer.attn.w_o, layer.experts.w2):
                p.normal_(0.0, out_std)
        for name, p in self.named_parameters():
            parts = name.split(".")
            if name.endswith("bias") or parts[-1] in ("b_q", "b_k", "b_v", "b_o", "b1", "b2"):
                p.zero_()
            if parts[-2].startswith("ln_") and name.endswith("weight"):
                p.fill_(1.0)

    # ------------------------------------------------------------------ forward
    def forward(self, idx: torch.Tensor, return_internals: bool = False,
                backend: str | None = None,
                logits_mask: torch.Tensor | None = None,
                n_selected: int | None = None,
                factored_logits: bool = False,
                route: torch.Tensor | None = None) -> ModelOutput:
        """idx (b, t) token ids, t ≤ max_len → :class:`ModelOutput`.

        ``logits_mask`` (b, t) bool: compute logits only there (training skips padding this way:
        the unembedding and the softmax over the vocabulary are most of a step's cost); then
        ``logits`` is (m, v) for the m selected positions in row-major order.  ``n_selected``:
        m, when the caller knows it without reading the device (the training data's CPU copy):
        then on a GPU the selection does not wait for the device (``losses.selected_rows``);
        without it, ``a2[logits_mask]`` has a data-dependent size and the host waits once per
        call.  On the CPU the result is the same either way (m is then checked).
        ``factored_logits``: ``logits`` is a :class:`~.losses.FactoredLogits` (the final hidden
        states and the unembedding) instead of the product, for a loss that multiplies it out
        block by block (the training loop on a CPU, :func:`~.losses.next_token_cross_entropy`).
        ``route`` (b,) long: an oracle routes instead of the router -- every position of
        sequence i, in every layer, goes to expert ``route[i]`` with gate 1 (a top-1 model;
        the task-routed control of paper A's experiments routes each sentence to its task's
        designated expert this way).  The router's logits and probabilities are still returned.

        Checks read metadata only (this runs in every training step): the token *values* are
        checked where data enter (``TrainData``, the evaluation functions); an id outside the
        vocabulary is an ``IndexError`` of the embedding.
        """
        cfg = self.config
        tensor("idx", idx, "int", ndim=2)
        b, t = idx.shape
        require(t <= cfg.max_len, "idx.shape[1]", t, f"at most max_len={cfg.max_len}")
        return_internals = flag("return_internals", return_internals)
        factored_logits = flag("factored_logits", factored_logits)
        if backend is not None:
            choice("backend", backend, BACKENDS)
        if logits_mask is not None:
            tensor("logits_mask", logits_mask, "bool", shape=(b, t), nonempty=False)
        if n_selected is not None:
            require(logits_mask is not None, "n_selected", n_selected,
                    "None unless logits_mask is given (it counts logits_mask's True entries)")
            n_selected = integer("n_selected", n_selected, low=0, high=b * t)
        if route is not None:
            tensor("route", route, "int", shape=(b,))
            require(cfg.top_k == 1, "route", "given", f"None for a top-{cfg.top_k} model (an "
                    "oracle's route is one expert per sequence: top-1 models only)")
            if on_cpu(route):
                require(bool(((route >= 0) & (route < cfg.n_experts)).all()), "route",
                        route.tolist()[:8], f"expert ids in 0..{cfg.n_experts - 1}")
        pos = torch.arange(t, device=idx.device)
        a2 = self.embed_tokens(idx) + self.pos_emb(pos)                   # (b, t, d)
        layers = []
        for layer in self.layers():
            a2, rec = _layer_forward(layer, cfg, a2, return_internals, backend,  # A_{l+1}
                                     route)
            layers.append(rec)
        first = layers[0]
        if logits_mask is not None:
            if n_selected is None or on_cpu(a2):
                a2 = a2[logits_mask]                                      # (m, d)
                require(n_selected is None or a2.shape[0] == n_selected, "n_selected",
                        n_selected, f"the number of True entries of logits_mask ({a2.shape[0]})")
            else:
                a2 = a2.reshape(b * t, -1)[selected_rows(logits_mask, n_selected)]  # (m, d)
        hidden = self.ln_out(a2)                                          # (b, t, d) | (m, d)
        logits = (FactoredLogits(hidden, self.unembed.weight, self.unembed.bias)
                  if factored_logits else self.unembed(hidden))           # (b, t, v) | (m, v)
        return ModelOutput(logits, *first, layers=tuple(layers))

    def embed_tokens(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (b, t) → (b, t, d): the learned rows, and the fixed codes of the tokens from
        ``code_start`` on when the config has ``entity_codes``."""
        if self.config.entity_codes is None:
            return self.tok_emb(idx)
        table = torch.cat([self.tok_emb.weight, self.entity_codes])       # (v, d)
        return F.embedding(idx, table)

    # ------------------------------------------------------------------ surgery
    def _layer(self, layer) -> object:
        """The layer numbered ``layer`` (0-based: 0 is layer 1), checked."""
        return self.layers()[layer_index(layer, self.config.n_layers)]

    def knock_out(self, experts: Iterable[int], mode: str = "zero", layer: int = 0) -> None:
        """Remove experts of one layer (circuit isolation).  ``"zero"``: routing unchanged, a
        knocked-out expert's output is replaced by 0 (the token keeps only its residual
        stream); ``"reroute"``: the router may not pick it (its probability is 0, the next best
        expert takes the token).  ``layer`` (0-based, default 0: layer 1) -- each layer keeps
        its own knock-out, and this call replaces only that layer's.  Undo with
        :meth:`restore_experts`."""
        choice("mode", mode, ("zero", "reroute"))
        target = self._layer(layer)
        n = self.config.n_experts
        experts = [integer(f"experts[{i}]", e, low=0, high=n - 1)
                   for i, e in enumerate(experts)]
        require(mode == "zero" or len(set(experts)) < n, "experts", experts,
                "at most n_experts − 1 distinct experts: reroute mode must leave one alive")
        target.expert_alive.fill_(1.0)
        target.expert_alive[experts] = 0.0
        target.knockout_mode = mode

    def restore_experts(self, layer: int | None = None) -> None:
        """Undo knock-outs: of every layer (``None``, default) or of one (0-based)."""
        for target in self.layers() if layer is None else [self._layer(layer)]:
            target.expert_alive.fill_(1.0)
            target.knockout_mode = "zero"

    @contextmanager
    def knocked_out(self, experts: Iterable[int], mode: str = "zero", layer: int = 0):
        """``with model.knocked_out([k]): ...`` — knock out (in ``layer``, default 0), then
        restore that layer on exit."""
        self.knock_out(experts, mode, layer)
        try:
            yield self
        finally:
            self.restore_experts(layer)

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
