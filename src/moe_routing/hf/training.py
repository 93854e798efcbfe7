"""A small ``MixtralForCausalLM`` trained from random initialisation on a knowledge dataset
under paper A's three objectives (part of :mod:`moe_routing.hf`): :func:`train_hf_moe`, its
:class:`HFTrainResult`, and the model's own load-balancing function
(:func:`own_load_balancing_loss`).

Separate because it is the one part of the package that trains: it uses the routers' hooks
(:mod:`.routers`), the batches (:mod:`.batches`) and the measurements (:mod:`.measurements`),
none of which needs it.

Load-balancing losses compared (conventions differ by top-k; E experts, n tokens, top-k):

* the library's LB (:func:`moe_routing.model.losses.load_balancing_loss`):
  ``α · E · Σ_i f_i P_i`` with ``f_i = count_i / (n k)`` (Σ f = 1), per layer, **averaged**
  over layers — α at uniform routing;
* transformers' ``load_balancing_loss_func`` (Mixtral's, the one ``ce+lb`` uses here):
  ``E · Σ_i F_i P_i`` with ``F_i = count_i / n`` (Σ F = k), counts and mean probabilities
  **pooled** over the tokens of all layers — k at uniform routing, so it is k times the
  library's normalisation (with α = 1) on the pooled tokens; the model adds it times
  ``config.router_aux_loss_coef``.  Here it is fed the exact logits (one softmax, as its
  docstring intends), not 5.2's recorded probabilities.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..model.losses import OBJECTIVES, task_router_loss, task_to_expert
from .._internal.validation import choice, flag, integer, number, require
from .batches import knowledge_batch, object_exact_match
from .extra import require_transformers
from .measurements import LayerRouting, routing_measurements
from .routers import _RouterTap, collect_router_logits, router_modules, routing_rules

# --------------------------------------------------------------------------------- training
@dataclass
class HFTrainResult:
    """A trained model and what its run measured.

    history: one dict per logged step (step, total, ce, lb, router — lb the unscaled
    transformers load-balancing value, router the mean over layers of the task-router
    cross-entropy, both 0 where the objective does not use them); exact_match / train_exact_match:
    :func:`object_exact_match` on the test / training split; routing: per layer
    :class:`LayerRouting` of the test split at the predicting tokens; lb_coef, router_alpha: the
    coefficients the objective used; seconds_per_step: mean wall time of an optimiser step.
    """

    model: torch.nn.Module
    objective: str
    history: list[dict]
    exact_match: float
    train_exact_match: float
    routing: list[LayerRouting]
    lb_coef: float
    router_alpha: float
    seconds_per_step: float


def _mixtral_config(config):
    tr = require_transformers()
    if isinstance(config, dict):
        return tr.MixtralConfig(**config)
    require(isinstance(config, tr.MixtralConfig), "config", type(config).__name__,
            "a transformers.MixtralConfig or a dict of its arguments")
    return tr.MixtralConfig.from_dict(config.to_dict())                   # a copy


def own_load_balancing_loss(model):
    """The load-balancing function of ``model``'s own modelling module (transformers'
    ``load_balancing_loss_func``: normalisation in the module docstring)."""
    fn = getattr(sys.modules.get(type(model).__module__), "load_balancing_loss_func", None)
    require(callable(fn), "model", type(model).__name__,
            "a model whose modelling module defines load_balancing_loss_func")
    return fn


def train_hf_moe(config, dataset, objective: str, steps: int, seed: int = 0, *,
                 batch_size: int = 128, lr: float = 3e-3, weight_decay: float = 0.0,
                 lb_coef: float | None = None, router_alpha: float = 1.0,
                 log_every: int = 10, measure_routing: bool = True) -> HFTrainResult:
    """Train a ``MixtralForCausalLM`` from random initialisation on the training sentences.

    config: a ``MixtralConfig`` (or a dict of its arguments; copied, never modified) with
    ``vocab_size`` ≥ the dataset's and ``max_position_embeddings`` ≥ its sentence length;
    objective (paper A's three):

    * ``"ce"`` — next-token cross-entropy only (the copy's ``router_aux_loss_coef`` set to 0);
    * ``"ce+lb"`` — CE + ``lb_coef`` × transformers' own ``load_balancing_loss_func`` fed the
      exact router logits with the batch's attention mask (``lb_coef`` defaults to the config's
      ``router_aux_loss_coef``, which must then be > 0);
    * ``"ce+router"`` — CE + ``router_alpha`` × paper A's task-router loss
      (:func:`moe_routing.model.losses.task_router_loss`, each layer's router logits against
      the designated expert ``task mod E`` of the sentence, at the predicting tokens), averaged
      over layers as the library's ``objective_loss`` does.

    The CE is the model's own (``labels`` with −100 on padding: the mean over predicted
    tokens, EOS included, as the library's).  AdamW with ``lr`` and ``weight_decay``, batches of
    ``batch_size`` sentences drawn without replacement epoch by epoch; ``seed`` drives the
    initialisation and the batches.  Returns :class:`HFTrainResult`; with
    ``measure_routing=False`` its ``routing`` is empty (a caller that measures the routing at
    positions of its own skips a forward over the test split and the fits).
    """
    tr = require_transformers()
    from ..knowledge import KnowledgeDataset

    cfg = _mixtral_config(config)
    objective = choice("objective", objective, OBJECTIVES)
    require(isinstance(dataset, KnowledgeDataset), "dataset", type(dataset).__name__,
            "a moe_routing.knowledge.KnowledgeDataset")
    steps = integer("steps", steps, low=1)
    seed = integer("seed", seed, low=0)
    batch_size = integer("batch_size", batch_size, low=1)
    lr = number("lr", lr, low=0, low_open=True)
    weight_decay = number("weight_decay", weight_decay, low=0)
    router_alpha = number("router_alpha", router_alpha, low=0)
    log_every = integer("log_every", log_every, low=1)
    measure_routing = flag("measure_routing", measure_routing)
    require(cfg.max_position_embeddings >= dataset.seq_len, "config.max_position_embeddings",
            cfg.max_position_embeddings, f"≥ {dataset.seq_len}, the dataset's sentence length")
    if objective == "ce+lb":
        coef = cfg.router_aux_loss_coef if lb_coef is None else lb_coef
        lb_coef = number("lb_coef", coef, low=0, low_open=True)
    else:
        require(lb_coef is None, "lb_coef", lb_coef, f"None (objective {objective!r} has no LB)")
        lb_coef = 0.0
    cfg.router_aux_loss_coef = lb_coef
    cfg.output_router_logits = False      # the exact logits come from the routers (docstring)
    train = knowledge_batch(dataset, cfg.vocab_size, "train")
    test = knowledge_batch(dataset, cfg.vocab_size, "test")

    torch.manual_seed(seed)
    model = tr.MixtralForCausalLM(cfg)
    routers = router_modules(model)
    lb_fn = own_load_balancing_loss(model)
    n_exp, k = cfg.num_local_experts, cfg.num_experts_per_tok
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(len(train), generator=gen), 0
    zero = torch.zeros(())
    history, elapsed = [], 0.0
    model.train()
    with _RouterTap(routers) as tap:
        for step in range(1, steps + 1):
            if cursor + batch_size > len(train) and cursor > 0:
                order, cursor = torch.randperm(len(train), generator=gen), 0
            rows = order[cursor:cursor + batch_size]
            cursor += batch_size
            b = train.rows(rows)
            t0 = time.perf_counter()
            out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, labels=b.labels,
                        use_cache=False)
            logits = tap.take(model)
            ce, lb, rt = out.loss, zero, zero
            if objective == "ce+lb":
                lb = lb_fn(tuple(logits), n_exp, k, b.attention_mask)
            elif objective == "ce+router":
                shape = tuple(b.input_ids.shape)
                target = task_to_expert(b.task, n_exp)[:, None].expand(shape)
                mask = b.predicting_mask
                rt = torch.stack([task_router_loss(a.reshape(*shape, n_exp), target, mask)
                                  for a in logits]).mean()
            total = ce + lb_coef * lb + router_alpha * rt
            value = float(total.detach())
            require(bool(np.isfinite(value)), f"loss at step {step}", value,
                    "a finite loss (a lower lr)")
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            elapsed += time.perf_counter() - t0
            if step % log_every == 0 or step == steps:
                history.append(dict(step=step, total=value, ce=float(ce.detach()),
                                    lb=float(lb.detach()), router=float(rt.detach())))
    routing = routing_measurements(
        collect_router_logits(model, test.input_ids, test.attention_mask),
        test.task_per_token, routing_rules(model), positions=test.predicting,
        n_tasks=dataset.n_tasks) if measure_routing else []
    return HFTrainResult(model=model, objective=objective, history=history,
                         exact_match=object_exact_match(model, test),
                         train_exact_match=object_exact_match(model, train), routing=routing,
                         lb_coef=lb_coef, router_alpha=router_alpha,
                         seconds_per_step=elapsed / steps)
