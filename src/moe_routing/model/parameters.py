"""How many parameters a :class:`~moe_routing.model.MoETransformer` stores and a token uses.

One count for both kinds of model: the trained ones of the experiments (active parameters per
token, paper A) and the hand-built ones of Theorems 4.1/4.2 (``moe_routing.construction``
compares them with the bound L·|T(k)| + N).  It is computed from the :class:`MoEConfig` alone,
so it is a pure function of the architecture -- and tested against ``model.parameters()``.

Conventions (why the numbers are what they are):

* experts are counted over their *live* neurons (``expert_sizes``), not the padded storage:
  a masked neuron outputs exactly zero and gets zero gradient, it is not a parameter of the
  model; ``stored_experts`` gives the padded storage for comparison;
* a token uses one row of each embedding table (``2·d_model``), all of the attention, the
  router, the LayerNorms and the unembedding, and the ``top_k`` experts it is routed to;
* with ``n_layers = L`` every layer has its own attention, router, two LayerNorms and experts:
  those parts are L times one layer's (the final LayerNorm and the embeddings once), and a
  token uses ``top_k`` experts *in each layer*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal.validation import fail, require
from .config import MoEConfig


@dataclass(frozen=True)
class ParameterCount:
    """Stored (``total``) and per-token (``active``) parameters, and the parts they are made of.

    ``experts_active`` is the mean, over tokens, of the live parameters of the experts a token
    uses: over the given routing, or the ``top_k`` largest experts when none is given (an upper
    bound, ``active_max`` in the construction's words).  Over all layers: ``attention``,
    ``router``, ``layernorm``, ``experts_total``, ``experts_active`` and ``stored_experts`` sum
    the L layers; ``per_expert`` is one layer's experts (every layer has the same).
    """

    total: int
    active: float
    experts_total: int
    experts_active: float
    per_expert: tuple[int, ...]
    embeddings: int
    attention: int
    router: int
    layernorm: int
    unembedding: int
    stored_experts: int
    n_layers: int = 1

    @property
    def active_fraction(self) -> float:
        return self.active / self.total


def _expert_ids(expert_ids, cfg: MoEConfig) -> np.ndarray:
    """Flat int64 expert ids: integer dtype, non-empty, in range, a multiple of top_k."""
    raw = expert_ids.detach().cpu().numpy() if hasattr(expert_ids, "detach") else expert_ids
    try:
        e = np.asarray(raw)
    except (TypeError, ValueError):
        fail("expert_ids", type(expert_ids).__name__, "an integer array of expert ids")
    require(e.size > 0, "expert_ids.size", e.size, "a non-empty array")
    require(np.issubdtype(e.dtype, np.integer), "expert_ids.dtype", e.dtype,
            "an integer dtype")
    e = e.reshape(-1).astype(np.int64)
    require(e.size % cfg.top_k == 0, "expert_ids.size", e.size,
            f"a multiple of top_k={cfg.top_k} (top_k ids per token)")
    require(int(e.min()) >= 0 and int(e.max()) < cfg.n_experts, "expert_ids range",
            f"{int(e.min())}..{int(e.max())}", f"ids in 0..{cfg.n_experts - 1}")
    return e


def parameter_count(config: MoEConfig, expert_ids=None) -> ParameterCount:
    """Parameters of the model ``MoETransformer(config)``.

    expert_ids : optional routing, ``experts_active`` is then the mean per token of the live
        parameters of the experts it chose.  One layer: an integer array (..., top_k)
        (flattened to m·top_k ids) of the experts chosen for m tokens, e.g.
        ``collect_routing(...).expert``.  L layers: a list or tuple of L such arrays, layer 1
        first (e.g. ``[collect_routing(..., layer=l).expert for l in range(L)]``), each
        layer's mean added.  Without it: the ``top_k`` largest experts, in every layer.
    """
    if not isinstance(config, MoEConfig):
        fail("config", type(config).__name__, "a MoEConfig (e.g. model.config)")
    cfg = config
    L = cfg.n_layers
    d, v, h, c, e = cfg.d_model, cfg.vocab_size, cfg.n_heads, cfg.head_dim, cfg.n_experts
    per_expert = tuple(2 * n * d + n + d for n in cfg.neurons_per_expert)   # W1, b1, W2, b2
    # fixed entity codes are a buffer, not parameters: only the learned rows count
    embeddings = (v if cfg.entity_codes is None else cfg.code_start) * d + cfg.max_len * d
    attention = L * (4 * h * d * c + ((3 * h * c + d) if cfg.attn_bias else 0))
    router = L * (e * d + (e if cfg.router_bias else 0))
    layernorm = (2 * L + 1) * 2 * d if cfg.layernorm else 0   # two per layer, one final
    unembedding = v * d + (v if cfg.unembed_bias else 0)
    if expert_ids is None:
        experts_active = float(L * sum(sorted(per_expert, reverse=True)[:cfg.top_k]))
    else:
        if L == 1:
            per_layer = [expert_ids]
        else:
            require(isinstance(expert_ids, (list, tuple)) and len(expert_ids) == L,
                    "expert_ids", type(expert_ids).__name__ if not isinstance(
                        expert_ids, (list, tuple)) else f"a sequence of {len(expert_ids)}",
                    f"a list or tuple of n_layers={L} integer arrays (..., top_k), one per "
                    "layer")
            per_layer = expert_ids
        experts_active = 0.0
        for ids in per_layer:
            ids = _expert_ids(ids, cfg)
            experts_active += float(np.asarray(per_expert)[ids].sum() / (ids.size // cfg.top_k))
    shared = attention + router + layernorm + unembedding
    return ParameterCount(
        total=embeddings + shared + L * sum(per_expert),
        active=2 * d + shared + experts_active,
        experts_total=L * sum(per_expert), experts_active=experts_active,
        per_expert=per_expert, embeddings=embeddings, attention=attention, router=router,
        layernorm=layernorm, unembedding=unembedding,
        stored_experts=L * e * (2 * d * cfg.d_expert + cfg.d_expert + d), n_layers=L)
