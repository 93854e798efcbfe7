"""The book's routing measurements on Hugging Face MoE language models (ours; the ``hf`` extra).

Paper A measures how a router splits tokens by task (task × expert counts, NMI, purity,
utilisation: :mod:`moe_routing.routing_metrics`); paper B measures how close tokens sit to a
routing boundary (top-two margin Δ, boundary mass BM(w) = P(Δ ≤ w) and its power-law fit:
:mod:`moe_routing.boundary`).  This package applies *the same functions* to the MoE models
people train with ``transformers`` (Mixtral, OLMoE, Qwen-MoE, PhiMoE, gpt-oss, Ernie 4.5,
MiniMax-M2, …: the table of :mod:`.routers`), so that a number measured here and one measured
on the library's own transformer mean the same thing:

* :func:`collect_router_logits` — the router logits of every MoE layer at the non-padding
  tokens of a batch;
* :func:`routing_rules` — what each router does with its logits (:class:`RoutingRule`: top-k,
  renormalised gate weights or not, a correction bias, PhiMoE's sparsemixer), read from the
  model; a model whose rule this package does not read is refused by name;
* :func:`routing_measurements` — per layer: the top-k choice as the model routes, the routing
  summary against per-token task ids, the margins Δ_k at the k-th/(k+1)-th boundary and BM(w)
  on a grid with its fit;
* :func:`knowledge_batch` — a :class:`~moe_routing.knowledge.KnowledgeDataset` split as
  ``input_ids`` / ``attention_mask`` / ``labels`` in the library's own token ids, with the task
  of each token and the positions that predict the object;
* :func:`train_hf_moe` — a small ``MixtralForCausalLM`` trained from random initialisation on
  the dataset under paper A's three objectives ``ce``, ``ce+lb``, ``ce+router``.

This package never trusts the name ``router_logits``: in transformers 5.2 the routers of the
Mixtral family record their softmax under it, so the exact pre-softmax logits are read by hooks
on the routers themselves (:mod:`.routers` tells why and how).

Modules, named after what they hold (every name is imported here: ``from moe_routing.hf import
...`` is the one import path):

* :mod:`.extra` — the ``hf`` extra: the transformers releases it installs,
  :func:`require_transformers`, and what it adds to an install (:func:`extra_install_size`);
* :mod:`.routers` — the routers of a model, their exact logits by hooks and the rule each
  routes by, with the table of the model classes it reads (:func:`router_modules`,
  :func:`collect_router_logits`, :func:`routing_rules`, :func:`recorded_router_output`,
  :data:`~moe_routing.hf.routers.SUPPORTED_MOE_CAUSAL_LMS`);
* :mod:`.routing_rule` — a router's rule as arithmetic on its logits: experts, gate weights,
  the margin Δ_k and the scores it is taken on (:class:`RoutingRule`);
* :mod:`.measurements` — each layer's routing, margins and BM(w) from the logits and the
  rules (:func:`routing_measurements`, :class:`LayerRouting`);
* :mod:`.batches` — a knowledge dataset as HF input (:class:`KnowledgeBatch`) and the exact
  match at the object (:func:`object_exact_match`);
* :mod:`.training` — the Mixtral-style model trained under the three objectives
  (:func:`train_hf_moe`; the load-balancing conventions of the library and of transformers are
  compared there).

Everything here imports ``transformers`` only when called, and says which extra to install
when it is missing (:func:`routing_measurements` and :func:`knowledge_batch` need no
transformers at all).  Batches are moved to the device of the model's parameters and the
collected logits come back to the CPU as float32; the tests run on the CPU.
"""

from .batches import IGNORE_INDEX, KnowledgeBatch, knowledge_batch, object_exact_match
from .extra import (EXTRA, TRANSFORMERS_RANGE, InstallSize, extra_install_size,
                    require_transformers)
from .measurements import (DEFAULT_WIDTHS, PROBABILITY_ROW_TOLERANCE, LayerRouting,
                           routing_measurements)
from .routers import (SUPPORTED_MOE_CAUSAL_LMS, collect_router_logits, recorded_router_output,
                      router_modules, routing_rules)
from .routing_rule import SELECTIONS, RoutingRule
from .training import HFTrainResult, own_load_balancing_loss, train_hf_moe

__all__ = [
    "DEFAULT_WIDTHS", "EXTRA", "HFTrainResult", "IGNORE_INDEX", "InstallSize", "KnowledgeBatch",
    "LayerRouting", "PROBABILITY_ROW_TOLERANCE", "RoutingRule", "SELECTIONS",
    "SUPPORTED_MOE_CAUSAL_LMS", "TRANSFORMERS_RANGE", "collect_router_logits",
    "extra_install_size", "knowledge_batch", "object_exact_match", "own_load_balancing_loss",
    "recorded_router_output", "require_transformers", "router_modules", "routing_measurements",
    "routing_rules", "train_hf_moe",
]
