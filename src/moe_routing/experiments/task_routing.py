"""Paper A's experiments: train one-layer MoE transformers with three objectives, measure routing.

One *run* = one :class:`ExperimentConfig`: build the sub-dataset of ``n_tasks`` knowledge tasks,
train a :class:`~moe_routing.model.MoETransformer` with objective ``ce``, ``ce+lb`` or
``ce+router`` through the package's training loop, evaluate it, and write one JSON file.

What is measured (all on the **test** split unless named otherwise):

* ``accuracy`` — exact match of greedy completion from the test sentence truncated *before the
  object*: the prefix ``tokens[:, :object_pos]`` is fed to the model and its argmax next token
  is compared with the object.  Every entity is one atomic token (the tokenizer of
  ``moe_routing.knowledge`` keeps entity names whole, as the paper's does), so one greedy step
  completes the object.  ``train_accuracy`` is the same on (at most 2000) training sentences: the
  gap between the two separates "not memorised" from "memorised but not transferred to another
  template".
* ``valid_mass`` — mean over every predicted position of every test sentence of
  ``Σ_{x∈V(w)} P(x|w)`` (Theorem 4.2's quantity, V over the whole dataset language), and its
  minimum; ``valid_mass_object`` the same at the object-prediction position only.
* routing, counted at two sets of token positions of the test sentences:
  ``routing_all`` — every input position at which a next token is predicted (BOS, the template
  words, the subject; i.e. the positions the CE loss and the task-router loss are taken on);
  ``routing_object`` — only the position that predicts the object (the last token before ⋆2);
  ``routing_determined`` — the positions whose prefix is continued by sentences of one task
  only (there a router *can* know the task; None when there is none).  ``routing_all`` also
  holds ``achievable_diagonal`` (:func:`moe_routing.routing_metrics.achievable_diagonal`: the
  best diagonal mass a router reading the prefix can reach over all positions) and
  ``determined_fraction``.
  Each is :func:`moe_routing.routing_metrics.routing_summary`: P(E|T), purity, NMI, diagonal
  (designated expert ``task mod E``) and Hungarian-matched accuracy, router entropy, expert
  utilisation.
* ``params`` — total parameters and active parameters per token (embedding rows, attention,
  router, the expert actually used, unembedding).
* ``history`` — the training losses every 10 steps and ``evals``: test exact match at each
  quarter of training (:data:`EVAL_QUARTERS`), so that :func:`convergence` can say whether the
  run had stopped improving (the evaluations read the model only: training is unchanged).

The training budget is a number of optimiser **steps** (``steps``), the same for every grid
cell: a run with more tasks sees each sentence fewer times, but no run gets more updates
because it has more tasks (a budget in epochs would grow with the number of tasks and confound
the task axis of the grid with the training length).

The objectives and their coefficients are the package's (``moe_routing.model.losses``): Switch
load balancing ``α·E·Σ_i f_i P_i`` with α = 0.01, the task-router loss weighted by
``router_alpha`` = 1 on every supervised position, designated expert ``task mod E``.  Model and
optimiser sizes are **ours**: the paper reports none of them.

Task selection (ours): the ``n_tasks`` tasks are the first ``n_tasks`` of a permutation of the
dataset's relations drawn with ``task_seed``, so a run with 20 tasks contains the 10 of a run
with 10 tasks (a nested grid) and a different ``task_seed`` draws other relations.

Caching: a run's JSON file is named by a hash of its configuration *and of the code that trains
and measures it* (:data:`TRAINING_CODE`: the model, the knowledge datasets, the routing
measurements, the runtime and this module; the torch and Python versions and the platform);
:func:`run_grid` skips a configuration whose file exists, so rerunning a chapter whose text
changed does not retrain, while a change to that code invalidates every cached run.  With one expert the
three objectives are the same training problem (the router's softmax is identically 1: the LB
term is the constant α and the task-router loss is 0, both with zero gradient), so they share
one run, recorded as such in each result (``shared_with``).  Results are written atomically
(:mod:`moe_routing.atomic`); a cached file that is corrupt, truncated or not a result of its
configuration is never read: the run is redone (or a good copy from ``reuse_from`` is taken)
and one warning line of this module's logger names the file and what was wrong with it.

Weights: beside the measurements, :func:`run_experiment` keeps the trained model's
``state_dict`` (``torch.save``, atomically) in ``<artifacts_dir>/task_routing_weights/<key>.pt``
(:func:`weights_path`; a folder of its own, so that ``task_routing/`` holds results only), with
the key, the training key and the :class:`~moe_routing.model.MoEConfig` it was built from;
:func:`load_model` rebuilds the model from it, after checking that the stored configuration is
the one this code builds for the run (a model of another shape or run is never returned).  The
JSON result is the same with or without weights, and the grid's cache reads the JSON only: a
grid never retrains because weights are absent (results written by an older version, or
trained by the Ray / SLURM executors, which return results and not models).  Instead
:func:`load_model` *recomputes* missing weights: it retrains the run in this process (every
run seeds itself) and keeps the model only if its measurements are the cached ones exactly,
so a recomputed model is the model the JSON describes, or an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Iterable, Sequence

import numpy as np

from ..atomic import _jsonable, atomic_write_json
from ..validation import (choice, fail, flag, integer, number, require, sequence,
                          sequence_of)
from ..model.config import MoEShape
from ..model.losses import OBJECTIVES
from ..model.train import TrainSchedule
from ..runtime import DEVICES, PROFILES

log = logging.getLogger(__name__)

#: version of the result format and of the measurement code; part of every cache key
#: (2: the budget is ``steps``, not epochs; test accuracy is evaluated at each quarter;
#: 3: routing at the task-determined positions, the achievable diagonal, broken variants)
RESULT_VERSION = 3

#: test exact match is evaluated after each quarter of training (for :func:`convergence`)
EVAL_QUARTERS = 4

#: Deliberately broken variants of a run, for the power of the chapter's verdict rules (a rule
#: that cannot tell them from a working model carries no information):
#: ``constant_router`` — trained with the router's weights held at 0 (constant logits: every
#: token goes to expert 0, as under a router bug); ``collapsed`` — trained normally, measured
#: with the routing collapsed onto its most used expert (the others rerouted away);
#: ``shuffled_tasks`` — ``ce+router`` trained with the sentences' task labels permuted (the
#: router is supervised towards a random expert per sentence); ``untrained`` — the initial
#: model, measured without any training step.  ``none``: the run itself.
VARIANTS = ("none", "constant_router", "collapsed", "shuffled_tasks", "untrained")


class NestedConfig:
    """What :class:`ExperimentConfig` and the two-hop experiment's configuration share: parts
    (``_PARTS``: name -> class) plus the run's own fields, read and changed by field name.

    ``cfg.n_experts`` reads ``cfg.model.n_experts`` (a part's field read through: the chapters
    and the measurement code name a run's knobs, not where they live); :meth:`replace` and
    :meth:`from_flat` take parts or any part's field by name (the names are distinct across
    the parts).  ``_DEFAULTS``: the experiment's own values of some part fields (its sizes,
    its budget), where they differ from the part's class defaults.
    """

    _PARTS: ClassVar[dict[str, type]] = {}
    _DEFAULTS: ClassVar[dict[str, dict]] = {}

    @classmethod
    def _owners(cls) -> dict[str, str]:
        """field name -> the part that holds it"""
        return {f.name: part for part, kind in cls._PARTS.items() for f in fields(kind)}

    @classmethod
    def _own(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in cls._PARTS)

    @classmethod
    def _part(cls, part: str, **values):
        """A part with the experiment's defaults and ``values`` (fields of that part)."""
        return cls._PARTS[part](**{**cls._DEFAULTS.get(part, {}), **values})

    @classmethod
    def from_flat(cls, **knobs):
        """The configuration of flat knobs: each part from the experiment's defaults and the
        knobs that are its fields, the rest the run's own fields."""
        owners, own = cls._owners(), cls._own()
        unknown = sorted(k for k in knobs if k not in owners and k not in own)
        require(not unknown, f"{cls.__name__}.from_flat", unknown,
                "fields of " + ", ".join(k.__name__ for k in cls._PARTS.values())
                + f" or {cls.__name__}: " + ", ".join([*own, *owners]))
        parts = {part: cls._part(part, **{k: v for k, v in knobs.items() if owners.get(k) == part})
                 for part in cls._PARTS}
        return cls(**parts, **{k: v for k, v in knobs.items() if k in own})

    def replace(self, **changes):
        """A copy with parts (``model=…``), fields of any part (``n_experts=…``) or the run's
        own fields changed."""
        owners, own = type(self)._owners(), type(self)._own()
        unknown = sorted(k for k in changes
                         if k not in owners and k not in own and k not in self._PARTS)
        require(not unknown, f"{type(self).__name__}.replace", unknown,
                "parts, or fields of " + ", ".join(k.__name__ for k in self._PARTS.values())
                + f" or {type(self).__name__}")
        parts = {p: changes.pop(p) for p in list(changes) if p in self._PARTS}
        for part in self._PARTS:
            mine = {k: changes.pop(k) for k in list(changes) if owners.get(k) == part}
            if mine:
                parts[part] = replace(parts.get(part, getattr(self, part)), **mine)
        return replace(self, **parts, **changes)

    def __getattr__(self, name):
        # only reached when ordinary lookup fails (never for the fields themselves); a name of
        # no part is an AttributeError as usual (pickle and copy probe for such names)
        part = type(self)._owners().get(name)
        if part is None or part not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.__dict__[part], name)

    def _check_parts(self) -> None:
        for part, kind in self._PARTS.items():
            value = getattr(self, part)
            require(isinstance(value, kind), f"{type(self).__name__}.{part}",
                    type(value).__name__, f"a {kind.__name__}")

    def _check_run(self) -> None:
        """The run's own fields (objective, seed, device, amp), stored as Python values."""
        name = type(self).__name__
        choice(f"{name}.objective", self.objective, OBJECTIVES)
        object.__setattr__(self, "seed", integer(f"{name}.seed", self.seed, low=0))
        choice(f"{name}.device", self.device, DEVICES)
        object.__setattr__(self, "amp", flag(f"{name}.amp", self.amp))
        require(self.train.epochs is None, f"{name}.train.epochs", self.train.epochs,
                "None: the budget is a number of steps (the same for every run of a grid)")

    def _values(self) -> dict:
        """Every field by its name: the parts' fields and the run's own."""
        out = {}
        for part in self._PARTS:
            out.update(asdict(getattr(self, part)))
        out.update({k: getattr(self, k) for k in self._own()})
        return out

    def _later(self, listed) -> dict:
        """The fields not in ``listed`` (the mapping the cache keys were first computed from)
        whose value is not their part's default: a field that joined a part later enters a
        key only when it is set, so every earlier run keeps its key."""
        defaults = {f.name: f.default for kind in self._PARTS.values() for f in fields(kind)}
        return {k: v for k, v in self._values().items()
                if k not in listed and k in defaults and v != defaults[k]}

    def loop_config(self, device: str, progress: bool = False):
        """The training loop's :class:`~moe_routing.model.TrainConfig` of the run on the
        resolved ``device`` (``ce`` with one expert: the three objectives coincide)."""
        from ..model import TrainConfig

        return TrainConfig(**asdict(self.train),
                           objective="ce" if self.model.n_experts == 1 else self.objective,
                           seed=self.seed, device=device, amp=self.amp, progress=progress,
                           log_every=10)



@dataclass(frozen=True)
class DataConfig:
    """The data of a run: ``n_relations`` relations of the knowledge base (the pool the tasks
    are drawn from), ``n_pairs`` (subject, object) pairs and ``n_templates`` templates per
    relation, split seed ``data_seed``; ``n_tasks`` of them chosen with ``task_seed``."""

    n_tasks: int
    n_relations: int = 50
    n_pairs: int = 200
    n_templates: int = 5
    data_seed: int = 0
    task_seed: int = 0

    def __post_init__(self) -> None:
        def put(name, value):
            object.__setattr__(self, name, value)

        put("n_relations", integer("DataConfig.n_relations", self.n_relations, low=1))
        put("n_tasks", integer("DataConfig.n_tasks", self.n_tasks))
        require(1 <= self.n_tasks <= self.n_relations, "DataConfig.n_tasks", self.n_tasks,
                f"an integer in [1, n_relations={self.n_relations}]")
        put("n_pairs", integer("DataConfig.n_pairs", self.n_pairs, low=2))
        put("n_templates", integer("DataConfig.n_templates", self.n_templates, low=1, high=5))
        for name in ("data_seed", "task_seed"):
            put(name, integer(f"DataConfig.{name}", getattr(self, name), low=0))


#: the flat mapping the cache keys of result version 3 were computed from, in its order: a
#: configuration that sets nothing else keeps the key it had before the configuration nested
KEY_FIELDS = ("n_tasks", "n_experts", "objective", "seed", "n_relations", "n_pairs",
              "n_templates", "data_seed", "task_seed", "d_model", "n_heads", "d_expert",
              "steps", "batch_size", "lr", "warmup_steps", "lb_alpha", "router_alpha",
              "device", "amp", "variant")


@dataclass(frozen=True)
class ExperimentConfig(NestedConfig):
    """One training run of paper A's experiments, in parts.  Sizes are ours (the paper gives
    none).

    ``data`` (:class:`DataConfig`): the knowledge base's relations and the run's tasks.
    ``model`` (:class:`~moe_routing.model.MoEShape`): ``n_experts``, ``d_model``, ``n_heads``,
    ``d_expert`` (one layer, top-1 Switch gate: the MoEConfig of the run is this shape with
    the dataset's vocabulary and length).  ``train``
    (:class:`~moe_routing.model.TrainSchedule`): ``steps`` optimiser steps of ``batch_size``
    sentences (the same budget whatever ``n_tasks`` is), AdamW at ``lr`` (cosine schedule),
    the loss weights ``lb_alpha`` and ``router_alpha``.  The run's own fields: ``objective``,
    ``seed`` (initialisation and data order), ``device`` and ``amp`` (bfloat16 autocast on
    CUDA) -- they are the run's, not the loop's, because the one-expert runs share one
    objective and the device is resolved where the run trains (:meth:`loop_config`) --
    and ``variant``: one of :data:`VARIANTS` (``none`` for every run of the grid; the others
    break the run on purpose).  Each field is validated once, by the part that owns it, and
    the errors name that part (``DataConfig.n_tasks``, ``MoEConfig.n_experts``,
    ``TrainSchedule.lr``, ``ExperimentConfig.objective``).

    Built from flat knobs with :meth:`from_flat` (``ExperimentConfig.from_flat(n_tasks=10,
    n_experts=7, objective="ce")``): the chapters' parameters and profiles are flat, one knob
    a line, and a grid varies knobs of several parts at once, so one classmethod maps them
    onto the parts, starting from the experiment's sizes (:attr:`_DEFAULTS`); a part passed
    whole to the constructor is taken as it is.  ``cfg.n_experts`` reads
    ``cfg.model.n_experts`` and :meth:`replace` takes any part's field by name.
    :meth:`as_dict` is the flat mapping: what a result's ``config`` holds and what the cache
    key hashes, the same as before the configuration had parts.
    """

    data: DataConfig
    model: MoEShape
    objective: str
    train: TrainSchedule = field(
        default_factory=lambda: TrainSchedule(**ExperimentConfig._DEFAULTS["train"]))
    seed: int = 0
    device: str = "cpu"
    amp: bool = True
    variant: str = "none"

    _PARTS: ClassVar[dict[str, type]] = {"data": DataConfig, "model": MoEShape,
                                         "train": TrainSchedule}
    _DEFAULTS: ClassVar[dict[str, dict]] = {
        "model": dict(d_model=128, n_heads=4, d_expert=128),
        "train": dict(steps=4000, batch_size=256, lr=3e-3, warmup_steps=20, lb_alpha=0.01,
                      router_alpha=1.0)}

    def __post_init__(self) -> None:
        # every field is checked (here and in the parts), so a grid fails before anything is
        # trained; NumPy scalars are stored as Python values (the config is hashed and written)
        self._check_parts()
        self._check_run()
        require(self.model.n_layers == 1, "ExperimentConfig.model.n_layers",
                self.model.n_layers, "1 (paper A's model; two layers: experiments.two_hop)")
        choice("ExperimentConfig.variant", self.variant, VARIANTS)
        require(self.variant != "shuffled_tasks" or self.objective == "ce+router",
                "ExperimentConfig.variant", self.variant,
                f"a variant other than 'shuffled_tasks' for objective {self.objective!r} "
                "(shuffled task labels change only the task-router loss)")
        require(self.variant not in ("constant_router", "collapsed")
                or self.model.n_experts > 1, "ExperimentConfig.variant", self.variant,
                "'none' or 'untrained' with one expert (there is no routing to break)")

    def as_dict(self) -> dict:
        """The flat mapping: :data:`KEY_FIELDS` in their order, then any later field of a
        part that is set (not its part's default)."""
        values = self._values()
        return {**{k: values[k] for k in KEY_FIELDS}, **self._later(KEY_FIELDS)}

    def training_key(self) -> dict:
        """What determines the trained model: the config, with the objective replaced by
        ``ce`` when there is one expert (the three objectives coincide there)."""
        d = self.as_dict()
        if self.model.n_experts == 1 and self.variant != "shuffled_tasks":
            d["objective"] = "ce"
        if self.variant == "none":       # keys of ordinary runs do not know about variants
            del d["variant"]
        return d

    def key(self) -> str:
        """Cache key: hash of :meth:`training_key`, the result format version and the code
        fingerprint (a result computed by other code is never reused)."""
        blob = json.dumps({"v": RESULT_VERSION, "code": code_fingerprint(),
                           **self.training_key()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _config(cfg) -> ExperimentConfig:
    if not isinstance(cfg, ExperimentConfig):
        fail("cfg", type(cfg).__name__, "an ExperimentConfig")
    return cfg


# The code a training run's result depends on: the model, its training and evaluation, the
# knowledge datasets, the measurements and this module -- not the book tooling, the boundary-
# mass or landscape modules, the claims' wording, nor the modules that only *read* trained
# runs or train other experiments (experiments/bridge.py, experiments/two_hop.py, whose own
# cache keys add their source, and knowledge/two_hop.py): editing those retrains nothing here.
TRAINING_CODE = ("model", "knowledge/__init__.py", "knowledge/dataset.py", "knowledge/task.py",
                 "knowledge/templates.py", "knowledge/tokenizer.py", "knowledge/trie",
                 "knowledge/sources", "experiments/task_routing.py", "routing_metrics.py",
                 "runtime.py")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the code that trains and measures, the torch version and the platform."""
    import platform

    import torch

    from ..fingerprint import source_fingerprint

    blob = "\0".join([source_fingerprint(TRAINING_CODE), torch.__version__,
                       platform.python_version(), platform.machine()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def _full_dataset(n_relations: int, n_pairs: int, n_templates: int, data_seed: int):
    from ..knowledge import build_dataset

    return build_dataset(n_relations=n_relations, n_pairs=n_pairs, n_templates=n_templates,
                         seed=data_seed)


def task_selection(cfg: ExperimentConfig) -> list[int]:
    """Indices (into the full dataset's tasks) of the run's tasks: the first ``n_tasks`` of a
    ``task_seed`` permutation (nested across ``n_tasks``)."""
    d = _config(cfg).data
    perm = np.random.default_rng(d.task_seed).permutation(d.n_relations)
    return sorted(int(i) for i in perm[:d.n_tasks])


@lru_cache(maxsize=8)
def _sub_dataset(n_relations, n_pairs, n_templates, data_seed, tasks: tuple[int, ...]):
    full = _full_dataset(n_relations, n_pairs, n_templates, data_seed)
    require(full.n_tasks >= n_relations, "DataConfig.n_relations", n_relations,
            f"at most {full.n_tasks}: the relations the knowledge base provides")
    return full.subset(list(tasks))


def experiment_dataset(cfg: ExperimentConfig):
    """The :class:`~moe_routing.knowledge.KnowledgeDataset` of the run's ``n_tasks`` tasks."""
    d = _config(cfg).data
    return _sub_dataset(d.n_relations, d.n_pairs, d.n_templates, d.data_seed,
                        tuple(task_selection(cfg)))


# ----------------------------------------------------------------------------- evaluation
def _object_targets(split):
    import torch

    return split.tokens[torch.arange(len(split)), split.object_pos]          # (M,)


def evaluate_run(model, ds, n_experts: int, batch_size: int = 512) -> dict:
    """Every measurement of the module docstring, for a trained model on dataset ``ds``."""
    import torch

    from .. import routing_metrics as rm
    from ..model import collect_routing, exact_match, parameter_count, valid_next_mass

    n_experts = integer("n_experts", n_experts, low=1)
    batch_size = integer("batch_size", batch_size, low=1)
    te, tr = ds.encode_split("test"), ds.encode_split("train")
    acc = exact_match(model, te.tokens, te.object_pos, _object_targets(te))
    n_tr = min(len(tr), 2000)
    acc_tr = exact_match(model, tr.tokens[:n_tr], tr.object_pos[:n_tr],
                         _object_targets(tr)[:n_tr])
    per_task = np.bincount(te.task.numpy(), weights=acc.correct.numpy().astype(float),
                           minlength=ds.n_tasks) / np.maximum(
        np.bincount(te.task.numpy(), minlength=ds.n_tasks), 1)

    # valid-next-token mass; the (M, n, V) masks would not fit for a large V: built per batch
    inputs, loss_mask = te.inputs, te.loss_mask                               # (M, n-1)
    obj_pred = torch.zeros_like(loss_mask)
    obj_pred[torch.arange(len(te)), te.object_pos - 1] = True                 # predicts object
    mass = valid_next_mass(model, inputs,
                           lambda rows: ds.valid_next_mask(te.prefix_node[rows, :-1]),
                           batch_size=batch_size).mass                        # (M, n-1)

    # Positions whose prefix is continued by sentences of one task only: there the router's
    # input (a causal layer reads the prefix) can tell the task; at the others (BOS, template
    # words shared by several relations) no router can, whatever its training.
    nodes = te.prefix_node[:, :-1]                                            # (M, n-1)
    shared = torch.from_numpy(ds.trie.ambiguous)[nodes.clamp_min(0)]
    determined = loss_mask & ~shared
    rec_all = collect_routing(model, inputs, te.task, loss_mask)
    rec_obj = collect_routing(model, inputs, te.task, obj_pred)
    rec_det = collect_routing(model, inputs, te.task, determined) if determined.any() else None
    summary = lambda rec: rm.routing_summary(rec.task, rec.expert[:, 0], ds.n_tasks,  # noqa: E731
                                             n_experts, rec.probs)
    routing_all, routing_obj = summary(rec_all), summary(rec_obj)
    routing_det = summary(rec_det) if rec_det is not None else None
    designated = te.task[:, None].expand_as(loss_mask)[loss_mask] % n_experts
    routing_all["achievable_diagonal"] = rm.achievable_diagonal(nodes[loss_mask], designated)
    routing_all["determined_fraction"] = float(determined.sum() / loss_mask.sum())
    pc = parameter_count(model.config, rec_all.expert)
    return dict(
        accuracy=acc.accuracy, train_accuracy=acc_tr.accuracy,
        accuracy_per_task=per_task.tolist(),
        valid_mass=float(mass[loss_mask].mean()), valid_mass_min=float(mass[loss_mask].min()),
        valid_mass_object=float(mass[obj_pred].mean()),
        routing_all=routing_all, routing_object=routing_obj, routing_determined=routing_det,
        params=dict(total=pc.total, active=pc.active, experts_total=pc.experts_total,
                    experts_active=pc.experts_active, active_fraction=pc.active_fraction),
        n_test=len(te), n_train=len(tr), n_routing_positions_all=int(rec_all.task.numel()),
    )


# ----------------------------------------------------------------------------- one run
def result_path(cfg: ExperimentConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's JSON lives: ``<artifacts_dir>/task_routing/<key>.json``."""
    _config(cfg)
    if not (isinstance(artifacts_dir, (str, os.PathLike)) and os.fspath(artifacts_dir)):
        fail("artifacts_dir", artifacts_dir, "a folder path")
    return Path(artifacts_dir) / "task_routing" / f"{cfg.key()}.json"


#: version of the weights file's layout (a file of another version is refused, not guessed at)
WEIGHTS_FORMAT = 1


def weights_path(cfg: ExperimentConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's trained weights live: ``<artifacts_dir>/task_routing_weights/<key>.pt``
    (the key of :func:`result_path`'s JSON)."""
    path = result_path(cfg, artifacts_dir)
    return path.parent.parent / "task_routing_weights" / f"{path.stem}.pt"


def _model_config(cfg: ExperimentConfig, ds, train_split):
    coded = {}
    if cfg.model.entity_codes is not None:       # the entities are the vocabulary's last block
        tok = ds.tokenizer
        start = ds.vocab_size - tok.n_entity
        require(sorted(int(i) for i in tok.entity_ids) == list(range(start, ds.vocab_size)),
                "tokenizer.entity_ids", "not the vocabulary's last block",
                "entity ids code_start .. vocab_size-1 (fixed codes replace those rows)")
        coded = dict(code_start=start)
    return cfg.model.config(vocab_size=ds.vocab_size, max_len=train_split.inputs.shape[1],
                            top_k=1, gate="switch", **coded)


def model_config(cfg: ExperimentConfig):
    """The :class:`~moe_routing.model.MoEConfig` :func:`run_experiment` builds for ``cfg``."""
    ds = experiment_dataset(_config(cfg))
    return _model_config(cfg, ds, ds.encode_split("train"))


def _save_weights(cfg: ExperimentConfig, model, artifacts_dir: str | Path) -> Path:
    """torch.save of the model's state (on the CPU), through a temporary file renamed over the
    target (:func:`moe_routing.atomic.atomic_write_bytes`).  The knock-out modes are Python
    attributes, not state: they are stored too, so that the ``collapsed`` variant's model (its
    routing collapsed after training) reloads as the model that was measured."""
    import io

    import torch

    from ..atomic import atomic_write_bytes

    payload = dict(format=WEIGHTS_FORMAT, key=cfg.key(), training_key=cfg.training_key(),
                   model_config=model.config.as_dict(),
                   knockout_modes=[layer.knockout_mode for layer in model.layers()],
                   state_dict={k: v.detach().cpu() for k, v in model.state_dict().items()})
    buf = io.BytesIO()
    torch.save(payload, buf)
    path = weights_path(cfg, artifacts_dir)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _read_weights(cfg: ExperimentConfig, path: Path):
    """The model stored at ``path`` for ``cfg``; ValueError naming the file when it is
    unreadable, of another format, of another run or of another shape."""
    import io

    import torch

    from ..model import MoEConfig, MoETransformer

    def refuse(why: str):
        raise ValueError(f"weights file {path} {why}; delete it to have load_model recompute "
                         "the weights, or re-run the experiment")

    try:
        payload = torch.load(io.BytesIO(path.read_bytes()), map_location="cpu",
                             weights_only=True)
    except Exception as e:                       # torch raises many types for a bad file
        refuse(f"is unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if not isinstance(payload, dict) or payload.get("format") != WEIGHTS_FORMAT:
        refuse(f"is not a weights file of format {WEIGHTS_FORMAT}")
    if payload.get("key") != cfg.key() or payload.get("training_key") != cfg.training_key():
        refuse(f"holds the weights of run {payload.get('key')!r}, not of {cfg.key()!r}")
    expected = model_config(cfg)
    try:
        stored = MoEConfig(**payload["model_config"])
    except (KeyError, TypeError, ValueError) as e:
        refuse(f"holds no valid model configuration ({type(e).__name__}: {e})")
    if stored != expected:
        diff = {k: (v, getattr(expected, k)) for k, v in stored.as_dict().items()
                if v != getattr(expected, k)}
        refuse(f"was built with another model configuration (stored, expected: {diff})")
    model = MoETransformer(expected)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except (KeyError, TypeError, RuntimeError) as e:
        refuse(f"does not fit the model ({type(e).__name__}: {str(e).splitlines()[0]})")
    modes = payload.get("knockout_modes")
    if not (isinstance(modes, list) and len(modes) == len(model.layers())
            and all(m in ("zero", "reroute") for m in modes)):
        refuse("holds no valid knock-out modes")
    for layer, mode in zip(model.layers(), modes):
        layer.knockout_mode = mode
    return model.eval()


#: the fields of a result that a recomputed model must reproduce (all but timings and
#: provenance, which differ between two runs of the same code): counts, sizes and names
#: exactly, real numbers to a relative :data:`REPRODUCED_RTOL` -- the rounding of the same
#: model's measurements under another torch thread count, far below what another model changes
REPRODUCED_RTOL = 1e-9
REPRODUCED_KEYS = ("key", "training_key", "model_config", "accuracy", "train_accuracy",
                   "accuracy_per_task", "valid_mass", "valid_mass_min", "valid_mass_object",
                   "routing_all", "routing_object", "routing_determined", "params", "steps")


def _same(a, b) -> bool:
    """Equal JSON values, real numbers to a relative :data:`REPRODUCED_RTOL`."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
            return a == b
        return bool(np.isclose(a, b, rtol=REPRODUCED_RTOL, atol=0.0, equal_nan=True))
    return a == b


def load_model(cfg: ExperimentConfig, artifacts_dir: str | Path, recompute: bool = True,
               profile: str = "smoke"):
    """The trained :class:`~moe_routing.model.MoETransformer` of run ``cfg`` (on the CPU, in
    eval mode), rebuilt from the weights :func:`run_experiment` stored in ``artifacts_dir``.

    The stored key, training key and model configuration must be the run's (the configuration
    this code builds for ``cfg``): anything else is a ValueError naming the file, as is a
    corrupt or truncated file -- never a silently different model.  When the run's JSON is
    cached but its weights are not (see the module docstring) and ``recompute`` is True, the
    run is retrained here and its weights are written, provided that every measurement of
    :data:`REPRODUCED_KEYS` is the cached one (RuntimeError otherwise: the cached result
    was computed by a model this machine does not reproduce).  FileNotFoundError when neither
    is there, or the weights are missing and ``recompute`` is False.
    """
    _config(cfg)
    recompute = flag("recompute", recompute)
    choice("profile", profile, PROFILES)
    path = weights_path(cfg, artifacts_dir)
    if path.exists():
        return _read_weights(cfg, path)
    res, problem = _read_cached(cfg, artifacts_dir)
    if res is None:
        raise FileNotFoundError(
            f"no cached run {cfg.key()} ({run_label(cfg)}) in {artifacts_dir}: neither "
            f"{path} nor {result_path(cfg, artifacts_dir)} is usable"
            + (f" ({problem})" if problem else "")
            + "; run run_experiment(cfg, artifacts_dir) or run_grid first")
    if not recompute:
        raise FileNotFoundError(f"no weights file {path} for the cached run {cfg.key()} "
                                f"({run_label(cfg)}); load_model(..., recompute=True) "
                                "retrains it")
    log.info("task_routing: recomputing the weights of cached run %s (%s)", cfg.key(),
             run_label(cfg))
    fresh, model = _train_and_measure(cfg, profile, False)
    fresh = json.loads(json.dumps(fresh, default=_jsonable))
    differ = [k for k in REPRODUCED_KEYS if not _same(fresh.get(k), res.get(k))]
    if differ:
        raise RuntimeError(
            f"the recomputed run {cfg.key()} does not reproduce the cached result "
            f"{result_path(cfg, artifacts_dir)} ({', '.join(differ)} differ, e.g. "
            f"{differ[0]}: {res.get(differ[0])!r} cached, {fresh.get(differ[0])!r} now; "
            "training under another torch thread count or on another device changes a "
            "model's last bits): recompute with the thread count and device the run was "
            "trained with, or delete the JSON to retrain the run here")
    _save_weights(cfg, model, artifacts_dir)
    return model.cpu().eval()


#: what a cached result must hold to be used (a file lacking any of them is re-run)
RESULT_KEYS = ("version", "key", "config", "training_key", "accuracy", "train_accuracy",
               "valid_mass", "valid_mass_object", "routing_all", "routing_object",
               "routing_determined", "params",
               "steps", "wall_s")


def _read_cached(cfg: ExperimentConfig, folder: str | Path) -> tuple[dict | None, str | None]:
    """(result, None) when ``folder`` holds a usable result of ``cfg``; (None, None) when it
    holds none (absent, or of another format version); (None, why) when the file is there but
    corrupt, truncated or not a result of ``cfg`` -- such a file is never read as a result
    (:func:`.cache.read_cached`)."""
    from .cache import read_cached

    return read_cached(result_path(cfg, folder), version=RESULT_VERSION, required=RESULT_KEYS,
                       key=cfg.key(), training_key=cfg.training_key())


def load_result(cfg: ExperimentConfig, artifacts_dir: str | Path | None) -> dict | None:
    """The cached result of ``cfg`` (None when absent or written by another format version).

    A corrupt or truncated file is never read: it gives None, and one warning line names it."""
    _config(cfg)
    if artifacts_dir is None:
        return None
    res, problem = _read_cached(cfg, artifacts_dir)
    if problem:
        log.warning("task_routing: ignoring cached run %s", problem)
    return res


def run_experiment(cfg: ExperimentConfig, artifacts_dir: str | Path | None = None,
                   profile: str = "smoke", progress: bool = False) -> dict:
    """Train and evaluate one configuration; write its JSON and its trained weights
    (:func:`weights_path`, read back by :func:`load_model`) when ``artifacts_dir`` is given.

    Returns the result dict: ``config``, ``training_key``, ``dataset`` (task names, sizes),
    ``history`` (losses), the measurements of :func:`evaluate_run`, ``wall_s`` and
    ``provenance``.
    """
    _config(cfg)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    res, model = _train_and_measure(cfg, profile, progress)
    if artifacts_dir is not None:
        # weights first: a JSON on disk then (nearly always) has its weights beside it, and
        # an interruption in between leaves a JSON that load_model can recompute
        _save_weights(cfg, model, artifacts_dir)
        atomic_write_json(result_path(cfg, artifacts_dir), res)
    return res


def _train_and_measure(cfg: ExperimentConfig, profile: str, progress: bool):
    """(the result dict of :func:`run_experiment`, the trained model as measured)."""
    import torch

    from ..model import TrainData, exact_match
    from ..runtime import provenance, resolve_device

    device = resolve_device(cfg.device)          # ValueError before any work
    t0 = time.perf_counter()
    ds = experiment_dataset(cfg)
    tr = ds.encode_split("train")
    data = TrainData.from_split(tr)
    mcfg = _model_config(cfg, ds, tr)
    tcfg = cfg.loop_config(device, progress)
    te = ds.encode_split("test")

    def test_accuracy(m) -> dict:                 # read-only: training is not changed by it
        return {"accuracy": exact_match(m, te.tokens, te.object_pos,
                                        _object_targets(te)).accuracy}

    model, hist = _train_variant(cfg, mcfg, data, tcfg, test_accuracy)
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        if cfg.variant == "collapsed":
            _collapse_routing(model, te)
        metrics = evaluate_run(model, ds, cfg.model.n_experts)
    res = dict(
        version=RESULT_VERSION, key=cfg.key(), config=cfg.as_dict(),
        training_key=cfg.training_key(), model_config=mcfg.as_dict(),
        train_config=tcfg.as_dict(),
        dataset=dict(tasks=[t.name for t in ds.tasks], labels=[t.label for t in ds.tasks],
                     vocab_size=ds.vocab_size, seq_len=ds.seq_len, **ds.split_stats()),
        history=dict(step=hist.step, total=hist.total, ce=hist.ce, lb=hist.lb,
                     router=hist.router, tokens_per_s=hist.tokens_per_s, evals=hist.evals),
        steps=tcfg.total_steps(len(data)), train_s=train_s,
        wall_s=time.perf_counter() - t0, provenance=provenance(profile, device).as_dict(),
        **metrics)
    return res, model


def _train_variant(cfg: ExperimentConfig, mcfg, data, tcfg, eval_fn):
    """``build_and_train`` for ordinary runs (bit for bit); the broken variants build the same
    seeded model and change one thing (:data:`VARIANTS`)."""
    import torch

    from ..model import MoETransformer, TrainData, build_and_train, train
    from ..model.train import History
    from ..runtime import seed_everything

    eval_every = max(1, cfg.train.steps // EVAL_QUARTERS)
    if cfg.variant in ("none", "collapsed"):
        return build_and_train(mcfg, data, tcfg, eval_fn=eval_fn, eval_every=eval_every)
    seed_everything(tcfg.seed)
    model = MoETransformer(mcfg)
    if cfg.variant == "untrained":
        return model, History()
    if cfg.variant == "constant_router":
        with torch.no_grad():
            model.router.weight.zero_()
        model.router.weight.requires_grad_(False)
    if cfg.variant == "shuffled_tasks":
        g = torch.Generator().manual_seed(10_000 + cfg.seed)
        labels = data.task_ids[torch.randperm(len(data), generator=g)]
        data = TrainData(data.inputs, data.targets, labels, data.router_mask)
    return model, train(model, data, tcfg, eval_fn=eval_fn, eval_every=eval_every)


def _collapse_routing(model, te) -> None:
    """Send every token to the expert the trained router uses most on the test inputs."""
    from ..model import collect_routing

    rec = collect_routing(model, te.inputs, te.task, te.loss_mask)
    busiest = int(np.bincount(rec.expert[:, 0].numpy(),
                              minlength=model.config.n_experts).argmax())
    model.knock_out([e for e in range(model.config.n_experts) if e != busiest], "reroute")


def _copy_weights(cfg: ExperimentConfig, source: str | Path, target: str | Path) -> None:
    """Copy the run's weights file along with its JSON, when the source folder has one (the
    bytes as they are: :func:`load_model` checks them where they are read)."""
    from ..atomic import atomic_write_bytes

    src = weights_path(cfg, source)
    if src.exists():
        atomic_write_bytes(weights_path(cfg, target), src.read_bytes())


# ----------------------------------------------------------------------------- grids
def grid_configs(n_tasks: Iterable[int], n_experts: Iterable[int],
                 objectives: Iterable[str] = OBJECTIVES, seeds: Iterable[int] = (0,),
                 **common) -> list[ExperimentConfig]:
    """Every combination, validated up front (a bad value fails before any training)."""
    axes = {name: sequence(name, values, "a sequence of values (a list, even of one)")
            for name, values in (("n_tasks", n_tasks), ("n_experts", n_experts),
                                 ("objectives", objectives), ("seeds", seeds))}
    return [ExperimentConfig.from_flat(n_tasks=k, n_experts=e, objective=o, seed=s, **common)
            for k in axes["n_tasks"] for e in axes["n_experts"] for o in axes["objectives"]
            for s in axes["seeds"]]


def run_label(cfg: ExperimentConfig) -> str:
    """How progress lines and errors name a run: ``E=7, ce+lb, k=10, seed 0``."""
    return f"E={cfg.model.n_experts}, {cfg.objective}, k={cfg.data.n_tasks}, seed {cfg.seed}"


def run_grid(configs: Sequence[ExperimentConfig], artifacts_dir: str | Path | None,
             profile: str = "smoke", progress: bool = True,
             reuse_from: Sequence[str | Path] = (), workers: int | str | None = None,
             executor: str | None = None) -> list[dict]:
    """Run every configuration, reusing cached results.

    A result is looked up in ``artifacts_dir``, then in each folder of ``reuse_from`` (e.g. the
    artifacts of the chapter's previous execution: the pipeline gives every execution a fresh
    folder); one found there is copied into ``artifacts_dir``.  Each returned result has
    ``cached`` (True when not trained in this call) and, for one-expert runs that reuse the
    ``ce`` run, ``shared_with`` naming that key.  Configurations with the same training key are
    trained once per call even without an artifacts folder.

    The missing runs are trained by :mod:`moe_routing.executor`: ``executor``
    ``'local'`` (processes on this machine, each with the caller's torch thread count;
    ``workers`` of them, ``None``/``'auto'``: as many as make workers × threads = cores,
    1: in this process) or ``'ray'`` (Ray tasks on the cluster at ``RAY_ADDRESS``, or on a Ray
    instance started here for the grid).  Left ``None`` they come from ``MOE_GRID_EXECUTOR`` and
    ``MOE_GRID_WORKERS``, else ``local`` and auto.  Every run seeds itself and does not depend
    on the others, so the results (and the cache keys) are those of a serial call whatever the
    executor.  Each result is written (atomically) as soon as its run finishes, so an
    interrupted grid resumes where it stopped.  ``progress`` adds a tqdm bar to the log lines.

    A run that raises does not stop the others: every other run finishes and is written, then
    :class:`~moe_routing.executor.GridError` lists the failed runs (key,
    configuration, one-line reason); its ``results`` holds the rows of the others.
    """
    from ..executor import GridError, Task, plan, run_tasks

    configs = sequence_of("configs", configs, ExperimentConfig)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    if isinstance(reuse_from, os.PathLike):
        fail("reuse_from", reuse_from, "a sequence of folders (a list, even of one)")
    folders = ([] if artifacts_dir is None else [artifacts_dir]) + sequence(
        "reuse_from", reuse_from, "a sequence of folders (a list, even of one)", nonempty=False)
    how = plan(executor, workers, devices=sorted({c.device for c in configs}))
    done: dict[str, tuple[dict, bool]] = {}      # key -> (result, read from a cache)
    pending: dict[str, ExperimentConfig] = {}    # key -> configuration to train
    for cfg in configs:
        key = cfg.key()
        if key in done or key in pending:
            continue
        res, found_in, problems = None, None, []
        for folder in folders:
            res, problem = _read_cached(cfg, folder)
            problems += [problem] if problem else []
            if res is not None:
                found_in = folder
                break
        if found_in is not None and artifacts_dir is not None \
                and found_in is not artifacts_dir:
            atomic_write_json(result_path(cfg, artifacts_dir), res)
            _copy_weights(cfg, found_in, artifacts_dir)
        if problems:
            log.warning("task_routing: %s run %s: %s", "reusing another cached copy of"
                        if res is not None else "re-running", key, "; ".join(problems))
        if res is None:
            pending[key] = cfg
        else:
            done[key] = (res, True)

    # Local workers share this file system and write their own results (as run_experiment
    # does); Ray's results come back as values and are written here, as each arrives.
    writes_here = how.executor != "local"
    where = None if writes_here else artifacts_dir

    def keep(task: Task, res: dict) -> None:
        if res.get("key") != task.key:
            raise RuntimeError(f"the result has key {res.get('key')!r}, not {task.key!r}: it was "
                               "computed by other code (moe_routing, torch or Python differ "
                               "where it ran)")
        if writes_here and artifacts_dir is not None:
            atomic_write_json(result_path(pending[task.key], artifacts_dir), res)
        done[task.key] = (res, False)

    n_runs = len(done) + len(pending)
    log.info("grid: %d distinct run%s, %d read from a cache", n_runs, "s" if n_runs != 1 else "",
             len(done))
    tasks = [Task(key, run_label(cfg), (cfg, where, profile)) for key, cfg in pending.items()]
    failures = run_tasks(run_experiment, tasks, how, on_result=keep, progress=progress)
    out, first = [], set()
    for cfg in configs:
        key = cfg.key()
        if key not in done:
            continue
        res, cached = done[key]
        row = dict(res)
        row["config"] = cfg.as_dict()             # the requested objective, not the shared one
        row["cached"] = cached or key in first    # a repeat in this call is a shared copy
        first.add(key)
        if cfg.model.n_experts == 1 and cfg.objective != "ce":
            row["shared_with"] = key
        out.append(row)
    if failures:
        raise GridError(failures, n_runs, out)
    return out


def convergence(result: dict, tail: float = 0.2) -> dict:
    """Has a run stopped improving?  Two measurements from its ``history``.

    ``ce_drop`` — the relative decrease of the logged training cross-entropy from the window
    of steps ``[(1 − 2·tail)·S, (1 − tail)·S)`` to the last window ``[(1 − tail)·S, S]``: each
    logged value is the loss of one batch, so a window mean averages the batch noise out; a
    value near 0 means the loss had flattened.  ``acc_change`` — test exact match at the end
    minus test exact match after three quarters of training (the ``evals`` of the history):
    whether the quantity the chapter compares was still moving.  The cosine schedule lowers the
    learning rate towards the end, so a flat tail can also mean a slow optimiser; the two
    numbers are what the chapter's convergence rule judges, the reader sees both.  A run too
    short to have a logged loss in both windows (or without evaluations) gets NaN for what
    cannot be measured; the chapter's rule refuses NaN, so such a run cannot pass as converged.
    """
    tail = number("tail", tail, low=0.01, high=0.5)
    if not isinstance(result, dict) or "history" not in result:
        fail("result", type(result).__name__, "a result dict (from run_experiment / run_grid)")
    h = result["history"]
    steps = np.asarray(h["step"], dtype=float)                       # (n_logged,)
    ce = np.asarray(h["ce"], dtype=float)
    total = float(result["steps"])
    last = steps >= (1 - tail) * total
    prev = (steps >= (1 - 2 * tail) * total) & ~last
    if last.any() and prev.any():
        ce_prev, ce_last = float(ce[prev].mean()), float(ce[last].mean())
    else:
        ce_prev = ce_last = float("nan")
    evals = h.get("evals") or []
    acc = {int(e["step"]): float(e["accuracy"]) for e in evals}
    q3 = [s for s in acc if s < total and s >= 0.7 * total]
    acc_change = (acc[max(acc)] - acc[max(q3)]) if q3 and acc else float("nan")
    return dict(ce_prev=ce_prev, ce_last=ce_last, ce_drop=(ce_prev - ce_last) / ce_prev,
                acc_change=acc_change)


def results_frame(results: Sequence[dict]):
    """One row per run: configuration, accuracies, valid mass, routing scalars, parameters,
    and the :func:`convergence` measurements (``ce_last``, ``ce_drop``, ``acc_change``)."""
    import pandas as pd

    if isinstance(results, dict):
        fail("results", type(results).__name__, "a sequence of result dicts (from run_grid)")
    results = sequence("results", results, "a sequence of result dicts (from run_grid)")
    rows = []
    for r in results:
        c = r["config"]
        ra, ro = r["routing_all"], r["routing_object"]
        conv = convergence(r)
        rows.append(dict(
            n_tasks=c["n_tasks"], n_experts=c["n_experts"], objective=c["objective"],
            seed=c["seed"], accuracy=r["accuracy"], train_accuracy=r["train_accuracy"],
            valid_mass=r["valid_mass"], valid_mass_object=r["valid_mass_object"],
            purity=ra["purity"], nmi=ra["nmi"], diagonal=ra["diagonal_accuracy"],
            matched=ra["matched_accuracy"], many_to_one=ra["many_to_one_accuracy"],
            entropy=ra.get("router_entropy_normalised", float("nan")),
            purity_object=ro["purity"], nmi_object=ro["nmi"],
            diagonal_object=ro["diagonal_accuracy"],
            active_params=r["params"]["active"], total_params=r["params"]["total"],
            steps=r["steps"], wall_s=r["wall_s"], cached=r.get("cached", False),
            **{k: v for k, v in conv.items() if k in ("ce_last", "ce_drop", "acc_change")}))
    return pd.DataFrame(rows)
