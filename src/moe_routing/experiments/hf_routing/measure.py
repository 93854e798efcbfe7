"""How one model's routing is measured for the training chapter's contrast (part of
:mod:`.runs`): the task-determined test positions (:func:`determined_positions`), a
run's per-layer :class:`~moe_routing.experiments.hf_routing.results.LayerRoutingSummary` with its
bootstrap NMI interval over test sentences, and :func:`measure_hf_model`, a transformers MoE model measured
at those positions.

Separate from the runs and their cache (:mod:`.runs`) because it trains nothing: it is
the same measurement for a Mixtral-style model and, at the same positions, for the library's
own (:func:`.runs.library_routing`).
"""

from __future__ import annotations

import numpy as np

from ... import routing_metrics as rm
from ..._internal.validation import number, require
from .results import LayerRoutingSummary

#: bootstrap resamples of the test sentences for one run's NMI interval
N_BOOT = 200


def _dataset(dataset):
    from ...knowledge import KnowledgeDataset

    require(isinstance(dataset, KnowledgeDataset), "dataset", type(dataset).__name__,
            "a moe_routing.knowledge.KnowledgeDataset (e.g. task_routing.experiment_dataset)")
    return dataset


def determined_positions(dataset, batch) -> np.ndarray:
    """(N,) bool over the non-padding tokens of ``batch`` (``hf.knowledge_batch`` of the test
    split of ``dataset``, the row order of ``hf.collect_router_logits``): the tokens that
    predict a next token and whose prefix is continued by sentences of one task only."""
    import torch

    from ..task_routing.data import determined_mask

    enc = dataset.encode_split("test")
    require(tuple(enc.tokens.shape) == tuple(batch.input_ids.shape), "batch",
            tuple(batch.input_ids.shape),
            f"the test split of this dataset {tuple(enc.tokens.shape)}")
    det = determined_mask(dataset, enc)                                      # (M, n-1)
    det = torch.cat([det, torch.zeros_like(det[:, :1])], 1)                  # (M, n)
    return det[batch.attention_mask.bool()].numpy() & batch.predicting.numpy()


def _nmi_interval(task, expert, sentence, n_tasks, n_experts, seed: int = 0,
                  n_boot: int = N_BOOT) -> tuple[float, float]:
    """95 % bootstrap interval of NMI(task; expert), resampling sentences (all positions of
    a sentence together): a (B, M) multinomial weighting of per-sentence count matrices."""
    rows, inv = np.unique(sentence, return_inverse=True)
    per = np.zeros((rows.size, n_tasks * n_experts))                          # (M, K·E)
    np.add.at(per, (inv, task * n_experts + expert), 1.0)
    rng = np.random.default_rng(seed)
    w = rng.multinomial(rows.size, np.full(rows.size, 1.0 / rows.size), size=n_boot)  # (B, M)
    boot = (w @ per).reshape(n_boot, n_tasks, n_experts)
    # NMI lies in [0, 1]; a perfect split can come out 1 + 2e-16 in floating point
    vals = np.clip([rm.normalized_mutual_info(c) for c in boot], 0.0, 1.0)
    lo, hi = np.quantile(vals, [0.025, 0.975])
    return float(lo), float(hi)


def _layer_summary(layer: int, top1, topk_nmi, task, sentence, margins, n_tasks, n_experts,
                   w_star, seed) -> LayerRoutingSummary:
    from ...boundary.mass import boundary_mass_from_margins

    summ = rm.routing_summary(task, top1, n_tasks, n_experts)
    lo, hi = _nmi_interval(task, top1, sentence, n_tasks, n_experts, seed)
    nmi = float(np.clip(summ["nmi"], 0.0, 1.0))
    bm = boundary_mass_from_margins(np.asarray(margins, dtype=np.float64), np.array([w_star]))
    return LayerRoutingSummary(
        layer=layer, n_positions=int(task.size), nmi=nmi, nmi_low=min(lo, nmi),
        nmi_high=max(hi, nmi), purity=float(summ["purity"]),
        load_entropy=float(summ["load_entropy_normalised"]),
        max_utilisation=float(max(summ["utilisation"])), nmi_topk=float(topk_nmi),
        counts=tuple(tuple(int(x) for x in row) for row in summ["counts"]),
        margin_median=float(np.median(margins)), bm=float(bm.estimate[0]),
        bm_low=float(bm.lower[0]), bm_high=float(bm.upper[0]))


def measure_hf_model(model, dataset, w_star: float = 0.1, seed: int = 0
                     ) -> tuple[LayerRoutingSummary, ...]:
    """Per-layer routing of a transformers MoE causal LM at the task-determined test positions
    of ``dataset`` (its token ids: the model's vocabulary must hold them), one
    :class:`LayerRoutingSummary` per layer (``seed``: of the NMI bootstrap).  A model without
    router logits (a dense model, a router that is not linear) is refused by
    :func:`moe_routing.hf.router_modules`, naming its class."""
    from ... import hf

    dataset = _dataset(dataset)
    w_star = number("w_star", w_star, low=0, low_open=True)
    hf.router_modules(model)                          # refuses models without router logits
    test = hf.knowledge_batch(dataset, model, "test")
    det = determined_positions(dataset, test)
    require(bool(det.any()), "dataset", "no task-determined test position",
            "a dataset whose templates determine the task somewhere in the prefix")
    logits = hf.collect_router_logits(model, test.input_ids, test.attention_mask)
    # each layer's own routing rule (top-k, renormalisation, correction bias): the margin is
    # taken at the k-th / (k+1)-th boundary of the scores that decide the choice
    per = hf.routing_measurements(logits, test.task_per_token, hf.routing_rules(model),
                                  positions=det,
                                  n_tasks=dataset.n_tasks, widths=[w_star])
    task = test.task_per_token.numpy()[det]
    sentence = np.repeat(np.arange(len(test)), test.lengths.numpy())[det]
    return tuple(
        _layer_summary(l + 1, r.experts[:, 0], r.assignments["nmi"], task, sentence, r.margins,
                       dataset.n_tasks, logits[l].shape[1], w_star, seed)
        for l, r in enumerate(per))
