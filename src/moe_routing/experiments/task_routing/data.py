"""The data and the measurements of one training run: the run's sub-dataset of knowledge tasks
(nested across ``n_tasks``), the model configuration it builds for that data, and
:func:`evaluate_run`, every measurement listed in :mod:`.runs`'s docstring.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..._internal.validation import fail, integer, require
from .config import DataConfig, ExperimentConfig, _config

# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def _full_dataset(n_relations: int, n_pairs: int, n_templates: int, data_seed: int):
    from ...knowledge import build_dataset

    return build_dataset(n_relations=n_relations, n_pairs=n_pairs, n_templates=n_templates,
                         seed=data_seed)


def selected_tasks(data: DataConfig) -> list[int]:
    """Indices (into the full dataset's tasks) of a data part's tasks: the first ``n_tasks`` of
    a ``task_seed`` permutation (nested across ``n_tasks``).  Every experiment that draws flat
    tasks from the knowledge base draws them so (a run's, the temperature experiment's)."""
    if not isinstance(data, DataConfig):
        fail("data", type(data).__name__, "a DataConfig (a configuration's data part)")
    perm = np.random.default_rng(data.task_seed).permutation(data.n_relations)
    return sorted(int(i) for i in perm[:data.n_tasks])


def task_selection(cfg: ExperimentConfig) -> list[int]:
    """The run's tasks (:func:`selected_tasks` of its data part)."""
    return selected_tasks(_config(cfg).data)


@lru_cache(maxsize=8)
def _sub_dataset(n_relations, n_pairs, n_templates, data_seed, tasks: tuple[int, ...]):
    full = _full_dataset(n_relations, n_pairs, n_templates, data_seed)
    require(full.n_tasks >= n_relations, "DataConfig.n_relations", n_relations,
            f"at most {full.n_tasks}: the relations the knowledge base provides")
    return full.subset(list(tasks))


def knowledge_dataset(data: DataConfig):
    """The :class:`~moe_routing.knowledge.KnowledgeDataset` of a data part's ``n_tasks`` tasks
    (:func:`selected_tasks`), built once per process."""
    return _sub_dataset(data.n_relations, data.n_pairs, data.n_templates, data.data_seed,
                        tuple(selected_tasks(data)))


def experiment_dataset(cfg: ExperimentConfig):
    """The :class:`~moe_routing.knowledge.KnowledgeDataset` of the run's ``n_tasks`` tasks."""
    return knowledge_dataset(_config(cfg).data)


# ----------------------------------------------------------------------------- evaluation
def _object_targets(split):
    import torch

    return split.tokens[torch.arange(len(split)), split.object_pos]          # (M,)


def oracle_route(cfg: ExperimentConfig, split):
    """(M,) the designated expert of each sentence of ``split`` under the ``task_routed``
    control (the oracle routes by the task), else None (the router routes)."""
    from ...model import task_to_expert

    if cfg.control != "task_routed":
        return None
    return task_to_expert(split.task.long(), cfg.model.n_experts)


def evaluate_run(model, ds, n_experts: int, batch_size: int = 512,
                 cfg: ExperimentConfig | None = None) -> dict:
    """Every measurement of the module docstring, for a trained model on dataset ``ds``
    (``cfg``: the run's configuration, whose ``task_routed`` control routes by the task)."""
    import torch

    from ... import routing_metrics as rm
    from ...model import collect_routing, exact_match, parameter_count, valid_next_mass

    n_experts = integer("n_experts", n_experts, low=1)
    batch_size = integer("batch_size", batch_size, low=1)
    te, tr = ds.encode_split("test"), ds.encode_split("train")
    n_tr = min(len(tr), 2000)
    r_te, r_tr = (None, None) if cfg is None else (oracle_route(cfg, te), oracle_route(cfg, tr))
    acc = exact_match(model, te.tokens, te.object_pos, _object_targets(te), route=r_te)
    acc_tr = exact_match(model, tr.tokens[:n_tr], tr.object_pos[:n_tr],
                         _object_targets(tr)[:n_tr],
                         route=None if r_tr is None else r_tr[:n_tr])
    off = experts_off_accuracy(model, te, r_te)
    per_task = np.bincount(te.task.numpy(), weights=acc.correct.numpy().astype(float),
                           minlength=ds.n_tasks) / np.maximum(
        np.bincount(te.task.numpy(), minlength=ds.n_tasks), 1)

    # valid-next-token mass; the (M, n, V) masks would not fit for a large V: built per batch
    inputs, loss_mask = te.inputs, te.loss_mask                               # (M, n-1)
    obj_pred = torch.zeros_like(loss_mask)
    obj_pred[torch.arange(len(te)), te.object_pos - 1] = True                 # predicts object
    mass = valid_next_mass(model, inputs,
                           lambda rows: ds.valid_next_mask(te.prefix_node[rows, :-1]),
                           batch_size=batch_size, route=r_te).mass            # (M, n-1)

    # Positions whose prefix is continued by sentences of one task only: there the router's
    # input (a causal layer reads the prefix) can tell the task; at the others (BOS, template
    # words shared by several relations) no router can, whatever its training.
    nodes = te.prefix_node[:, :-1]                                            # (M, n-1)
    determined = determined_mask(ds, te)
    rec_all = collect_routing(model, inputs, te.task, loss_mask, route=r_te)
    rec_obj = collect_routing(model, inputs, te.task, obj_pred, route=r_te)
    rec_det = (collect_routing(model, inputs, te.task, determined, route=r_te)
               if determined.any() else None)
    summary = lambda rec: rm.routing_summary(rec.task, rec.expert[:, 0], ds.n_tasks,  # noqa: E731
                                             n_experts, rec.probs)
    routing_all, routing_obj = summary(rec_all), summary(rec_obj)
    routing_det = summary(rec_det) if rec_det is not None else None
    designated = te.task[:, None].expand_as(loss_mask)[loss_mask] % n_experts
    routing_all["achievable_diagonal"] = rm.achievable_diagonal(nodes[loss_mask], designated)
    routing_all["determined_fraction"] = float(determined.sum() / loss_mask.sum())
    pc = parameter_count(model.config, rec_all.expert)
    return dict(
        accuracy=acc.accuracy, train_accuracy=acc_tr.accuracy, accuracy_experts_off=off,
        accuracy_per_task=per_task.tolist(),
        valid_mass=float(mass[loss_mask].mean()), valid_mass_min=float(mass[loss_mask].min()),
        valid_mass_object=float(mass[obj_pred].mean()),
        routing_all=routing_all, routing_object=routing_obj, routing_determined=routing_det,
        params=dict(total=pc.total, active=pc.active, experts_total=pc.experts_total,
                    experts_active=pc.experts_active, active_fraction=pc.active_fraction),
        n_test=len(te), n_train=len(tr), n_routing_positions_all=int(rec_all.task.numel()),
        # per test sentence, for intervals clustered by fact and differences paired by seed
        # (moe_routing.experiments.accuracy): right (1) or wrong (0), and its fact (task, pair)
        test_correct=acc.correct.numpy().astype(int).tolist(),
        test_fact=(te.task.long() * 1_000_000 + te.pair.long()).tolist(),
    )


@contextmanager
def experts_knocked_out(model):
    """``with experts_knocked_out(model):`` every expert's output of every layer set to zero
    for the block (routing unchanged), the model's own knock-out state (a collapsed variant's)
    put back afterwards: what the model recalls without its experts is the witness of whether
    the experts hold the facts."""
    saved = [(layer, layer.expert_alive.clone(), layer.knockout_mode)
             for layer in model.layers()]
    model.knock_out(range(model.config.n_experts))
    try:
        yield model
    finally:
        for layer, alive, mode in saved:
            layer.expert_alive.copy_(alive)
            layer.knockout_mode = mode


def experts_off_accuracy(model, te, route=None) -> float:
    """Test exact match with every expert's output set to zero (:func:`experts_knocked_out`)."""
    from ...model import exact_match

    with experts_knocked_out(model):
        return exact_match(model, te.tokens, te.object_pos, _object_targets(te),
                           route=route).accuracy


def entity_code_start(ds) -> int:
    """The first id of the fixed entity codes for dataset ``ds``: its entities must be the
    vocabulary's last block (the codes replace those rows; a tokenizer that interleaves them
    is refused, not coded wrongly)."""
    tok = ds.tokenizer
    start = ds.vocab_size - tok.n_entity
    require(sorted(int(i) for i in tok.entity_ids) == list(range(start, ds.vocab_size)),
            "tokenizer.entity_ids", "not the vocabulary's last block",
            "entity ids code_start .. vocab_size-1 (fixed codes replace those rows)")
    return start


def determined_mask(ds, split):
    """(M, n−1) bool: the predicted positions of ``split`` whose prefix is continued by
    sentences of one task only -- where a router reading the prefix can know the task (at BOS
    and at template words several relations share, none can)."""
    import torch

    nodes = split.prefix_node[:, :-1]                                         # (M, n-1)
    shared = torch.from_numpy(ds.trie.ambiguous)[nodes.clamp_min(0)]
    return split.loss_mask & ~shared


def _model_config(cfg: ExperimentConfig, ds, train_split):
    coded = {}
    if cfg.control == "router_loss_detached":
        coded["router_loss_detached"] = True
    if cfg.model.entity_codes is not None:       # the entities are the vocabulary's last block
        coded["code_start"] = entity_code_start(ds)
    return cfg.model.config(vocab_size=ds.vocab_size, max_len=train_split.inputs.shape[1],
                            top_k=1, gate="switch", **coded)


def model_config(cfg: ExperimentConfig):
    """The :class:`~moe_routing.model.MoEConfig`
    :func:`~moe_routing.experiments.task_routing.runs.run_experiment` builds for ``cfg``."""
    ds = experiment_dataset(_config(cfg))
    return _model_config(cfg, ds, ds.encode_split("train"))


@dataclass(frozen=True)
class RunParts:
    """What a run trains on and with, built once from its configuration: the run's
    ``dataset``, its encoded ``train`` and ``test`` splits, the loop's ``data`` (router mask and
    the oracle's route as the run's control asks), the ``model`` configuration and the
    ``loop`` configuration.  :func:`~moe_routing.experiments.task_routing.runs.run_experiment`
    trains from these, and so does anything that times a run (``make gpu-check``): a knob of
    the configuration reaches both, never one copy of it."""

    dataset: Any
    train: Any
    test: Any
    data: Any
    model: Any
    loop: Any


def run_parts(cfg: ExperimentConfig, device: str, progress: bool = False) -> RunParts:
    """The :class:`RunParts` of ``cfg`` on the resolved ``device``."""
    from ...model import TrainData

    ds = experiment_dataset(_config(cfg))
    tr = ds.encode_split("train")
    data = TrainData.from_split(tr, router_mask=determined_mask(ds, tr)
                                if cfg.control == "router_loss_determined" else None,
                                route=oracle_route(cfg, tr))
    return RunParts(dataset=ds, train=tr, test=ds.encode_split("test"), data=data,
                    model=_model_config(cfg, ds, tr), loop=cfg.loop_config(device, progress))
