"""The routers of a Hugging Face MoE model, their exact logits read by hooks, and the rule by
which each routes (part of :mod:`moe_routing.hf`): :func:`router_modules`,
:func:`collect_router_logits`, :func:`routing_rules`, :func:`recorded_router_output` and the
hooks themselves (``_RouterTap``, which the task-router loss of :mod:`.training` trains
through).

Separate because it is the one module that knows how transformers builds and records a
router; the measurements (:mod:`.measurements`) read plain arrays with a
:class:`~moe_routing.hf.RoutingRule` (:mod:`.routing_rule`), and the training
(:mod:`.training`) uses the hooks.

The model classes whose routing this module reads, and nothing else (transformers 5.2, each
rule read from the class's ``modeling_*.py``).  a = W x (+ c) are a router's logits, k its
experts per token, p the scores, b a correction bias; the rules' arithmetic, and on which
scores each margin is taken, are in :mod:`.routing_rule`:

+-------------------------+------------------------------------------------+---------------------------------+
| model class             | routing rule                                   | how it is read                  |
+=========================+================================================+=================================+
| MixtralForCausalLM,     | the k largest p = softmax(a); gate weights     | k = ``router.top_k``            |
| MiniMaxForCausalLM,     | renormalised to sum to 1 (= softmax over the k |                                 |
| Qwen3_5MoeForCausalLM   | chosen logits)                                 |                                 |
+-------------------------+------------------------------------------------+---------------------------------+
| GptOssForCausalLM       | a = W x + c; the k largest a; weights softmax  | k = ``router.top_k``,           |
|                         | over the k chosen logits (the same rule)       | c = ``router.bias``             |
+-------------------------+------------------------------------------------+---------------------------------+
| OlmoeForCausalLM,       | the k largest p = softmax(a); weights          | k = ``router.top_k``,           |
| FlexOlmoForCausalLM,    | renormalised only with ``norm_topk_prob``      | renormalised =                  |
| Qwen2MoeForCausalLM,    | (default False; Qwen3-Next's True), else the   | ``router.norm_topk_prob``       |
| Qwen3MoeForCausalLM,    | probabilities p of the chosen themselves       |                                 |
| Qwen3NextForCausalLM    |                                                |                                 |
+-------------------------+------------------------------------------------+---------------------------------+
| JambaForCausalLM        | the k largest p = softmax(a); weights p of the | k = ``top_k`` of the            |
|                         | chosen, never renormalised                     | router's MoE block              |
+-------------------------+------------------------------------------------+---------------------------------+
| PhimoeForCausalLM       | sparsemixer at inference: two experts whatever | k = 2 always;                   |
|                         | k says, the top logit and the top of the       | ε = the router's                |
|                         | others, each weighted by a softmax over the    | ``router_jitter_noise``         |
|                         | logits within relative 2ε of it                |                                 |
+-------------------------+------------------------------------------------+---------------------------------+
| Ernie4_5_MoeForCausalLM | the k largest p + b, p = softmax(a); weights   | k = ``router.top_k``,           |
|                         | p of the chosen / max(their sum,               | b = ``e_score_correction_bias`` |
|                         | ``moe_norm_min``) (the bias steers the choice  | of ``router.moe_statics``,      |
|                         | only)                                          | ``router.norm_min``             |
+-------------------------+------------------------------------------------+---------------------------------+
| MiniMaxM2ForCausalLM    | the k largest p + b, p = σ(a); weights p of    | k = ``router.top_k``,           |
|                         | the chosen, renormalised (the bias steers the  | b = the MoE block's             |
|                         | choice only)                                   | ``e_score_correction_bias``     |
+-------------------------+------------------------------------------------+---------------------------------+

Each row is held by ``tests/test_hf_routing_rules.py``: on a tiny model of the class built from
a config, :func:`routing_rules` applied to :func:`collect_router_logits` gives, token by token,
the experts and gate weights the model's own forward hands its experts.  Every other model is
refused by :func:`router_modules`, naming its class and why: a rule this module does not read
would give wrong experts, counts and margins without a sign (a correction bias ignored, weights
renormalised that the model does not renormalise, …).

What ``outputs.router_logits`` holds.  In transformers 5.2 the routers of the Mixtral family
(Mixtral, MiniMax, OLMoE, FlexOlmo, Qwen2-MoE, Qwen3-MoE, Qwen3-Next, …) overwrite their logits
with their softmax before returning them, so the tensors the model records under the name
``router_logits`` are *probabilities* (huggingface/transformers issue #45120, fixed after 5.2
by pull request #45131).  A top-two margin of probabilities is not the margin Δ of paper B
(its units are not the logits', and it is bounded by 1), and the model's own load-balancing loss
takes a second softmax of them.  This module therefore never trusts the name: it reads the
input of each router module (the class transformers itself records, from the model's
``_can_record_outputs``) and applies that module's linear map, ``a = W x (+ c)`` — the exact
pre-softmax logits — and checks, on the first batch, that what the model records is either
``a`` or ``softmax(a)`` (anything else is refused: this module does not know that router).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .._internal.validation import fail, integer, require
from .extra import require_transformers
from .routing_rule import RoutingRule


# --------------------------------------------------------------------- the rules, class by class
@dataclass(frozen=True)
class _Router:
    """One router as its rule's reader sees it: the module, its MoE block (the module that
    holds it) and its name in the model (for messages)."""

    module: torch.nn.Module
    block: torch.nn.Module
    source: str

    @property
    def n_experts(self) -> int:
        return int(self.module.weight.shape[0])


def _bias(tensor) -> np.ndarray:
    """A correction bias as the (E,) float64 array of :class:`RoutingRule` (a snapshot: the
    rule does not follow later changes of the model)."""
    return tensor.detach().float().cpu().reshape(-1).numpy()


def _renormalised(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, r.module.top_k, "softmax", True, source=r.source)


def _norm_topk_prob(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, r.module.top_k, "softmax", bool(r.module.norm_topk_prob),
                       source=r.source)


def _jamba(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, r.block.top_k, "softmax", False, source=r.source)


def _sparsemixer(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, 2, "sparsemixer", False,
                       jitter_eps=float(r.module.router_jitter_noise), source=r.source)


def _ernie(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, r.module.top_k, "softmax", True,
                       correction_bias=_bias(r.module.moe_statics.e_score_correction_bias),
                       norm_min=float(r.module.norm_min), source=r.source)


def _minimax_m2(r: _Router) -> RoutingRule:
    return RoutingRule(r.n_experts, r.module.top_k, "sigmoid", True,
                       correction_bias=_bias(r.block.e_score_correction_bias), source=r.source)


#: model class → (the class of its routers, the reader of one router's rule): the module
#: docstring's table; a model of any other class is refused
_RULES = {
    "MixtralForCausalLM": ("MixtralTopKRouter", _renormalised),
    "MiniMaxForCausalLM": ("MiniMaxTopKRouter", _renormalised),
    "Qwen3_5MoeForCausalLM": ("Qwen3_5MoeTopKRouter", _renormalised),
    "GptOssForCausalLM": ("GptOssTopKRouter", _renormalised),
    "OlmoeForCausalLM": ("OlmoeTopKRouter", _norm_topk_prob),
    "FlexOlmoForCausalLM": ("FlexOlmoTopKRouter", _norm_topk_prob),
    "Qwen2MoeForCausalLM": ("Qwen2MoeTopKRouter", _norm_topk_prob),
    "Qwen3MoeForCausalLM": ("Qwen3MoeTopKRouter", _norm_topk_prob),
    "Qwen3NextForCausalLM": ("Qwen3NextTopKRouter", _norm_topk_prob),
    "JambaForCausalLM": ("Linear", _jamba),
    "PhimoeForCausalLM": ("PhimoeTopKRouter", _sparsemixer),
    "Ernie4_5_MoeForCausalLM": ("Ernie4_5_MoeTopKRouter", _ernie),
    "MiniMaxM2ForCausalLM": ("MiniMaxM2TopKRouter", _minimax_m2),
}

#: the causal LMs of transformers 5.2 whose routing this package reads (the module docstring's
#: table, each row tested on a tiny model); every other model is refused by name
SUPPORTED_MOE_CAUSAL_LMS = tuple(_RULES)


# ------------------------------------------------------------------------------ the routers
def _accepted_models() -> str:
    return ("a transformers MoE causal LM whose routing rule this package reads (the table of "
            "moe_routing.hf.routers): " + ", ".join(SUPPORTED_MOE_CAUSAL_LMS))


def router_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """The router modules of ``model``, in forward (layer) order, as ``(name, module)``.

    They are the modules of the class transformers records as ``router_logits`` (the model's
    ``_can_record_outputs``), each a linear map with a 2-D ``weight`` (experts, hidden).  A
    model is refused, naming its class and the reason, when its forward does not take
    ``output_router_logits`` (a dense model), when it has no such routers, and when it is not
    a class of the module docstring's table (:data:`SUPPORTED_MOE_CAUSAL_LMS`): its routing
    rule is not one this package reads.
    """
    require_transformers()
    name = type(model).__name__
    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if callable(forward) else {}
    require(isinstance(model, torch.nn.Module) and "output_router_logits" in params, "model",
            f"a {name} (its forward takes no output_router_logits)", _accepted_models())
    spec = None
    for m in model.modules():
        recorded = getattr(type(m), "_can_record_outputs", None)
        if isinstance(recorded, dict) and "router_logits" in recorded:
            spec = recorded["router_logits"]
            break
    require(spec is not None, "model", f"a {name} (it records no router_logits)",
            _accepted_models())
    require(not isinstance(spec, (list, tuple)), "model",
            f"a {name} (it records router_logits from several kinds of module)",
            _accepted_models())
    target = getattr(spec, "target_class", spec)
    layer_name = getattr(spec, "layer_name", None)
    found = [(n, m) for n, m in model.named_modules()
             if isinstance(target, type) and isinstance(m, target)
             and (layer_name is None or layer_name in n)]
    require(len(found) > 0, "model", f"a {name} without {getattr(target, '__name__', target)} "
            "modules", _accepted_models())
    for n, m in found:
        w = getattr(m, "weight", None)
        require(isinstance(w, torch.Tensor) and w.dim() == 2, f"{name}: router {n}",
                type(m).__name__, "a linear router with a weight of shape (experts, hidden)")
    known = name in _RULES and type(model).__module__.startswith("transformers.models.")
    require(known, "model", f"a {name} (routed by {type(found[0][1]).__name__}, whose routing "
            "rule this package does not read: its experts, gate weights and margins would be "
            "computed by a rule the model may not follow)", _accepted_models())
    router_class = _RULES[name][0]
    for n, m in found:
        require(type(m).__name__ == router_class, f"{name}: router {n}", type(m).__name__,
                f"a {router_class} (the router whose rule this package reads for {name})")
    return found


def routing_rules(model) -> list[RoutingRule]:
    """The routing rule of each router of ``model`` (:func:`router_modules` order, the order of
    :func:`collect_router_logits`'s layers), read from the router as the module docstring's
    table says: top-k, normalisation, sparsemixer, correction bias.  A bias is copied as it is
    now: read the rules beside the logits they will route."""
    found = router_modules(model)
    modules = dict(model.named_modules())
    reader = _RULES[type(model).__name__][1]
    return [reader(_Router(m, modules[n.rpartition(".")[0]], f"{type(model).__name__} {n}"))
            for n, m in found]


def _router_logits_of(module, x: torch.Tensor) -> torch.Tensor:
    """``W x (+ b)`` of a linear router for its input ``x`` (..., hidden): (tokens, experts)."""
    w = module.weight
    b = getattr(module, "bias", None)
    return F.linear(x.reshape(-1, w.shape[1]).to(w.dtype), w,
                    b if isinstance(b, torch.Tensor) else None)


class _RouterTap:
    """Forward hooks on the routers that keep their exact logits, one tensor per call (kept in
    the autograd graph: the task-router loss trains through them)."""

    def __init__(self, routers):
        self.routers = [m for _, m in routers]
        self.logits: list[torch.Tensor] = []
        self._handles = []

    def __enter__(self) -> "_RouterTap":
        self.logits = []
        self._handles = [m.register_forward_hook(self._hook) for m in self.routers]
        return self

    def _hook(self, module, args, _output):
        self.logits.append(_router_logits_of(module, args[0]))

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []

    def take(self, model) -> list[torch.Tensor]:
        """The logits of one forward, one tensor per router (refused if a router ran more or
        fewer times than once, e.g. under gradient checkpointing)."""
        got, self.logits = self.logits, []
        require(len(got) == len(self.routers), f"{type(model).__name__}: router calls",
                len(got), f"{len(self.routers)}: one call per router and forward (gradient "
                "checkpointing re-runs them: turn it off)")
        return got


def _recorded_kind(model, recorded, exact: list[torch.Tensor]) -> str:
    """Whether the model's ``router_logits`` are the exact logits or their softmax."""
    name = type(model).__name__
    require(isinstance(recorded, (tuple, list)) and len(recorded) == len(exact),
            f"{name}: outputs.router_logits", type(recorded).__name__,
            f"a tuple of {len(exact)} tensors (one per router)")
    kinds = set()
    for l, (r, a) in enumerate(zip(recorded, exact)):
        # float32 and float64 routers agree to rounding; half-precision ones to their 8-11 bits
        wide = (r.dtype in (torch.float32, torch.float64)
                and a.dtype in (torch.float32, torch.float64))
        tol = dict(rtol=1e-3, atol=1e-5) if wide else dict(rtol=2e-2, atol=2e-3)
        r = r.detach().reshape(a.shape).float()
        a = a.detach().float()
        if torch.allclose(r, a, **tol):
            kinds.add("logits")
        elif torch.allclose(r, torch.softmax(a, -1), **tol):
            kinds.add("probabilities")
        else:
            fail(f"{name}: outputs.router_logits[{l}]",
                 "neither W·x nor softmax(W·x) of its router",
                 "a model whose recorded router outputs are its routers' logits or their softmax")
    require(len(kinds) == 1, f"{name}: outputs.router_logits", sorted(kinds),
            "the same kind in every layer")
    return kinds.pop()


def _batch_arguments(model, input_ids, attention_mask, batch_size):
    require(isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2
            and not input_ids.dtype.is_floating_point and input_ids.dtype != torch.bool
            and input_ids.numel() > 0, "input_ids",
            getattr(input_ids, "shape", type(input_ids).__name__),
            "a non-empty (batch, seq) integer tensor of token ids")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    require(isinstance(attention_mask, torch.Tensor)
            and tuple(attention_mask.shape) == tuple(input_ids.shape), "attention_mask.shape",
            tuple(getattr(attention_mask, "shape", ())), f"{tuple(input_ids.shape)} (one entry "
            "per token)")
    am = attention_mask.long()
    require(bool(((am == 0) | (am == 1)).all()), "attention_mask", "values other than 0/1",
            "1 at tokens, 0 at padding")
    require(bool(am.any()), "attention_mask", "all 0", "at least one token")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None:
        lo, hi = int(input_ids.min()), int(input_ids.max())
        require(lo >= 0 and hi < vocab, "input_ids range", f"{lo}..{hi}",
                f"token ids 0..{vocab - 1} (the model's vocab_size)")
    return am, integer("batch_size", batch_size, low=1)


def _forward_kwargs(model) -> dict:
    """Skip the unembedding where the model allows it (routing needs no vocabulary logits)."""
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def recorded_router_output(model, input_ids, attention_mask=None) -> str:
    """``"logits"`` or ``"probabilities"``: what ``model(..., output_router_logits=True)
    .router_logits`` holds for this model and transformers release (module docstring)."""
    routers = router_modules(model)
    am, _ = _batch_arguments(model, input_ids, attention_mask, 1)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), _RouterTap(routers) as tap:
            out = model(input_ids=input_ids.to(device), attention_mask=am.to(device),
                        output_router_logits=True, use_cache=False, **_forward_kwargs(model))
            return _recorded_kind(model, getattr(out, "router_logits", None), tap.take(model))
    finally:
        model.train(was)


@torch.no_grad()
def collect_router_logits(model, input_ids, attention_mask=None, batch_size: int = 256
                          ) -> list[torch.Tensor]:
    """The exact router logits of every MoE layer at the non-padding tokens.

    model: a transformers MoE causal LM of the module docstring's table
    (:func:`router_modules`); input_ids (b, t) integer; attention_mask (b, t) 1 at tokens, 0
    at padding (default: no padding); batch_size: sequences per forward.  Returns one float32
    CPU tensor (n_tokens, n_experts) per MoE layer, layer 1 first, its rows the tokens where
    ``attention_mask`` is 1 in row-major order (sequence by sequence, position by position).
    These are pre-softmax logits whatever the model records as ``router_logits`` (checked on
    the first batch: module docstring).  The model is run in eval mode (no router jitter) and
    left in the mode it was in.  What the router does with them is :func:`routing_rules`.
    """
    routers = router_modules(model)
    am, batch_size = _batch_arguments(model, input_ids, attention_mask, batch_size)
    device = next(model.parameters()).device
    kwargs = _forward_kwargs(model)
    was = model.training
    model.eval()
    per_layer: list[list[torch.Tensor]] = [[] for _ in routers]
    try:
        with _RouterTap(routers) as tap:
            for s in range(0, input_ids.shape[0], batch_size):
                ids, m = input_ids[s:s + batch_size].to(device), am[s:s + batch_size].to(device)
                out = model(input_ids=ids, attention_mask=m, output_router_logits=True,
                            use_cache=False, **kwargs)
                logits = tap.take(model)
                if s == 0:
                    _recorded_kind(model, getattr(out, "router_logits", None), logits)
                keep = m.reshape(-1).bool()
                for l, a in enumerate(logits):
                    require(a.shape[0] == keep.numel(), f"{type(model).__name__}: router "
                            f"{l} rows", a.shape[0], f"{keep.numel()} (one per token of the batch)")
                    per_layer[l].append(a[keep].float().cpu())
    finally:
        model.train(was)
    return [torch.cat(parts) for parts in per_layer]
