"""The configuration of one training run of paper A's experiments (:class:`ExperimentConfig`, in
parts: :class:`DataConfig`, :class:`~moe_routing.model.MoEShape`,
:class:`~moe_routing.model.TrainSchedule`), and its cache key: the configuration, the result
format's version and the fingerprint of the code that trains and measures
(:data:`TRAINING_CODE`).  How a run uses it: :mod:`.runs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from typing import ClassVar

from ..._internal.validation import choice, fail, flag, integer, require
from ...model.config import MoEShape
from ...model.losses import OBJECTIVES
from ...model.train import TrainSchedule
from ..._internal.runtime import DEVICES

#: version of the result format and of the measurement code; part of every cache key
#: (2: the budget is ``steps``, not epochs; test accuracy is evaluated at each quarter;
#: 3: routing at the task-determined positions, the achievable diagonal, broken variants;
#: 4: the accuracy with every expert switched off, the witness that the experts hold facts)
RESULT_VERSION = 4

#: Deliberately broken variants of a run, for the power of the chapter's verdict rules (a rule
#: that cannot tell them from a working model carries no information):
#: ``constant_router`` — trained with the router's weights held at 0 (constant logits: every
#: token goes to expert 0, as under a router bug); ``collapsed`` — trained normally, measured
#: with the routing collapsed onto its most used expert (the others rerouted away);
#: ``shuffled_tasks`` — ``ce+router`` trained with the sentences' task labels permuted (the
#: router is supervised towards a random expert per sentence); ``untrained`` — the initial
#: model, measured without any training step.  ``none``: the run itself.
VARIANTS = ("none", "constant_router", "collapsed", "shuffled_tasks", "untrained")

#: Controls of the task-router loss (ours): what in the loss costs accuracy where it does?
#: ``router_loss_detached`` — the loss trains the router's weights only, its gradient stopped
#: at the router's input (:attr:`~moe_routing.model.MoEConfig.router_loss_detached`): does it
#: hurt through the shared layers?  ``router_loss_determined`` — the loss only at the
#: task-determined positions (those whose prefix only one task continues, where a router
#: reading the prefix can know the task), not at every position from BOS: does supervising
#: positions where the task cannot be known cost accuracy?  ``task_routed`` — no router loss
#: and no router: every position of a sentence goes to its task's designated expert
#: (:func:`~moe_routing.model.task_to_expert`, the map the loss supervises towards), in training
#: and at test time (an oracle: the task is given): the pure capacity cost of confining each
#: task to one expert.  ``none``: the loss as the chapter defines it.  (Its weight
#: ``router_alpha`` is the fourth control.)
CONTROLS = ("none", "router_loss_detached", "router_loss_determined", "task_routed")


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

    def loop_objective(self) -> str:
        """The objective the loop trains: ``ce`` with one expert (the three coincide)."""
        return "ce" if self.model.n_experts == 1 else self.objective

    def loop_config(self, device: str, progress: bool = False):
        """The training loop's :class:`~moe_routing.model.TrainConfig` of the run on the
        resolved ``device``, with the objective of :meth:`loop_objective`."""
        from ...model import TrainConfig

        return TrainConfig(**asdict(self.train), objective=self.loop_objective(),
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
    key hashes, the same as before the configuration had parts.  ``control`` (one of
    :data:`CONTROLS`) changes the task-router loss of a ``ce+router`` run; it enters the
    mapping only when set.
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
    control: str = "none"

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
        choice("ExperimentConfig.control", self.control, CONTROLS)
        require(self.control == "none" or (self.objective == "ce+router"
                                           and self.model.n_experts > 1
                                           and self.variant == "none"),
                "ExperimentConfig.control", self.control,
                "'none' unless the objective is 'ce+router' with several experts and no "
                "broken variant (a control changes the task-router loss)")

    def loop_objective(self) -> str:
        """``ce`` also under the ``task_routed`` control: the oracle routes, no router is
        trained."""
        return "ce" if self.control == "task_routed" else super().loop_objective()

    def as_dict(self) -> dict:
        """The flat mapping: :data:`KEY_FIELDS` in their order, then any later field of a
        part that is set (not its part's default)."""
        values = self._values()
        control = {} if self.control == "none" else {"control": self.control}
        return {**{k: values[k] for k in KEY_FIELDS}, **self._later(KEY_FIELDS), **control}

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
# knowledge datasets, the measurements and the four modules of a run (this configuration, its
# data and measurements, its store, its training: runs.py) -- not the book tooling, the
# boundary-mass or landscape modules, the claims' wording, the modules that only *read* trained
# runs (the chapter's plan, claims and power table beside these) or train other experiments
# (experiments/bridge/, experiments/two_hop/, whose own cache keys add their source, and
# knowledge/two_hop.py): editing those retrains nothing here.
TRAINING_CODE = ("model", "knowledge/__init__.py", "knowledge/dataset.py", "knowledge/task.py",
                 "knowledge/templates.py", "knowledge/tokenizer.py", "knowledge/trie",
                 "knowledge/sources", "experiments/task_routing/config.py",
                 "experiments/task_routing/data.py", "experiments/task_routing/store.py",
                 "experiments/task_routing/runs.py", "routing_metrics.py",
                 "_internal/runtime.py")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the code that trains and measures, the torch version and the platform."""
    import platform

    import torch

    from ..._internal.fingerprint import source_fingerprint

    blob = "\0".join([source_fingerprint(TRAINING_CODE), torch.__version__,
                       platform.python_version(), platform.machine()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
