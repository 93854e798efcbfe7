"""Two-hop knowledge (ours, beyond paper A): do the experts of single-hop facts compose?

One *run* = one :class:`TwoHopConfig`: build the mixed dataset of
:func:`moe_routing.knowledge.two_hop.build_mixed_dataset` (the single-hop tasks of some chains
of the embedded knowledge base and their two-hop tasks Δ₂ ∘ Δ₁), train an MoE transformer of
one or two layers with objective ``ce``, ``ce+lb`` or ``ce+router`` through the package's
training loop, measure it, and write one JSON file.

Supervision of the router (``ce+router``).  A two-hop query asks for two lookups, so a
two-layer model is supervised with one expert per hop: layer 1 towards the designated expert of
the *first* hop's task, layer 2 towards the second hop's (``TrainData.layer_tasks`` = (hop-1
task, hop-2 task) for a two-hop sentence, (task, task) for a single-hop one).  A one-layer model
has one decision to make; it is supervised towards the first hop (layer l ↔ hop l for every
layer the model has).  The designated expert of task k is ``k mod E``
(:func:`moe_routing.model.task_to_expert`); the two-hop tasks' own indices are never targets.

What is measured (exact match of the greedy next token at the object, as in
:mod:`~moe_routing.experiments.task_routing`; every entity is one token):

* ``single_hop`` — the single-hop test sentences (facts mostly seen in training in another
  template: the split is by sentence);
* ``two_hop_seen`` — two-hop compositions seen in training, asked in a template *not* trained
  on: of every composition the dataset puts in training, the sentence of one template (template
  ``p mod T`` for the composition's index p, so every template is asked) is kept out of
  training here.  It separates "the model memorised this composition" from "it memorised the
  sentence";
* ``held_out`` — the held-out compositions of the dataset: (s, o) in no training sentence, both
  hops (s, m) and (m, o) in training in every template.  This is the test of composition.
  Each carries ``interval`` (:func:`~moe_routing.experiments.accuracy.accuracy_interval`, one
  run: the binomial error of its test sentences);
* the base rates a held-out score must be read against: ``majority_baseline`` (the accuracy of
  answering, for every query of a two-hop task, the object most frequent among that task's
  training sentences: city → country → capital is dominated by a few countries) and
  ``accuracy_non_majority`` (exact match on the held-out queries whose object is *not* that
  one); ``identity_fraction`` (held-out queries whose object is their subject: copyable);
  ``composition_accuracy`` (held-out compositions answered in every template);
* ``routing`` — one entry per layer, at the position that predicts the object: for the two-hop
  queries labelled by their hop-h task (h = 1, 2), ``designated_fraction`` (routed to the hop's
  designated expert ``task mod E``, what ``ce+router`` asks for), ``reuse_fraction`` (routed to
  the expert the hop's *single-hop* queries use most at the same layer: expert reuse, which
  needs no designated expert and so reads the same for every objective), the same two on the
  held-out queries only, and :func:`~moe_routing.routing_metrics.routing_summary` (purity, NMI
  against the hop labels).  NMI and purity only see the partition of the queries: when every
  chain has its own first and its own second hop (the default), the hop-1 and hop-2 labellings
  are the same partition and get the same NMI, so which hop a layer serves is read from the
  two fractions; with a single chain the labels are one task and NMI is 0 by definition.
  ``matched_hop`` is the hop of the layer (layer l ↔ hop l); the single-hop
  queries' summary and, per two-hop task, the single-hop and two-hop majority experts;
* ``history`` — losses every 10 steps and, at each quarter of training, the three accuracies.

The routing is counted on every sentence of a kind (training and test): it is a property of the
computation on a query, and the held-out queries alone are few (their own fractions are kept).

Caching: a run's JSON is named by a hash of its configuration, :data:`RESULT_VERSION` and the
training code fingerprint of :mod:`~moe_routing.experiments.task_routing` (every module that
trains and measures, the torch and Python versions); it is written atomically, read back by
:func:`run_two_hop` and :func:`run_two_hop_grid` when present, and a cached file that is
corrupt, truncated or the result of another configuration is never read: one warning line
names it and the run is redone.
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
from typing import Iterable, Sequence

import numpy as np

from ..atomic import _jsonable, atomic_write_json
from ..model.losses import OBJECTIVES
from ..runtime import DEVICES, PROFILES
from ..validation import (choice, fail, flag, integer, number, positive, probability, require,
                          sequence, sequence_of)
from .cache import read_cached
from .config import code_fingerprint

log = logging.getLogger(__name__)

#: version of the result format and of the measurement code; part of every cache key
RESULT_VERSION = 1

#: the accuracies of the history are evaluated after each quarter of training
EVAL_QUARTERS = 4

#: depths a run may have: one layer (paper A's model) or one layer per hop
LAYERS = (1, 2)

#: two-hop templates of some real chains of the embedded base (:func:`embedded_chains`):
#: ⋆1 the subject of the first hop, ⋆2 the object of the second.  Ours.
DEFAULT_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("P17", "P36"): ("The capital of the country where ⋆1 lies is ⋆2.",
                     "⋆1 lies in a country governed from ⋆2.",
                     "From ⋆1, the national capital is ⋆2."),
    ("P37", "P282"): ("Official texts of ⋆1 are written in the ⋆2 script.",
                      "Official documents of ⋆1 are printed in ⋆2 letters."),
    ("P17", "P38"): ("People in ⋆1 pay with their country's currency, the ⋆2.",
                     "Shops in ⋆1 take the national currency, the ⋆2."),
}


# ----------------------------------------------------------------------------- configuration
def _put(obj, name, value):
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class TwoHopData:
    """The mixed dataset: ``chains`` (first, second) relation pairs of the embedded base, each
    with its two-hop ``templates`` (None: :data:`DEFAULT_TEMPLATES`, see
    :attr:`chain_templates`; the cache key holds the text either way); ``n_pairs`` and
    ``n_templates`` of every single-hop task, ``test_fraction`` (of each two-hop task's
    compositions held out, and of each single-hop task's sentences), ``data_seed`` (the
    samples and the split)."""

    chains: tuple[tuple[str, str], ...] = (("P17", "P36"), ("P37", "P282"))
    templates: tuple[tuple[str, ...], ...] | None = None
    n_pairs: int = 60
    n_templates: int = 3
    test_fraction: float = 0.2
    data_seed: int = 0

    def __post_init__(self):
        from ..knowledge.two_hop import embedded_chains

        name = "TwoHopData.chains"
        accepted = ("a non-empty sequence of distinct (first, second) relation-id pairs, each a "
                    "chain of the embedded base (knowledge.two_hop.embedded_chains())")
        chains = sequence(name, self.chains, accepted)
        known = {(c.first, c.second) for c in embedded_chains()}
        out = []
        for i, c in enumerate(chains):
            require(isinstance(c, (tuple, list)) and len(c) == 2
                    and all(isinstance(r, str) for r in c), f"{name}[{i}]", c, accepted)
            c = (c[0], c[1])
            require(c in known, f"{name}[{i}]", c, accepted)
            out.append(c)
        require(len(set(out)) == len(out), name, self.chains, accepted)
        _put(self, "chains", tuple(out))
        if self.templates is None:
            missing = [c for c in out if c not in DEFAULT_TEMPLATES]
            require(not missing, "TwoHopData.templates", None,
                    f"explicit templates for the chains without defaults {missing} (defaults "
                    f"exist for {sorted(DEFAULT_TEMPLATES)})")
            tpls = self.chain_templates
        else:
            tpls = sequence("TwoHopData.templates", self.templates,
                            f"one sequence of template strings per chain ({len(out)})")
            require(len(tpls) == len(out), "TwoHopData.templates", self.templates,
                    f"one sequence of template strings per chain ({len(out)})")
            tpls = tuple(tuple(sequence(f"TwoHopData.templates[{i}]", t,
                                        "a sequence of template strings with ⋆1 and ⋆2"))
                         for i, t in enumerate(tpls))
        for i, t in enumerate(tpls):
            # ≥ 2: one template of each seen composition is asked, the others trained on
            require(len(t) >= 2 and all(isinstance(s, str) and "⋆1" in s and "⋆2" in s
                                        for s in t), f"TwoHopData.templates[{i}]", t,
                    "at least two template strings, each with ⋆1 and ⋆2 (a seen composition is "
                    "asked in a template it was not trained in)")
        if self.templates is not None:     # None stays None: replace(chains=…) takes defaults
            _put(self, "templates", tpls)
        _put(self, "n_pairs", integer("TwoHopData.n_pairs", self.n_pairs, low=2))
        _put(self, "n_templates", integer("TwoHopData.n_templates", self.n_templates, low=1,
                                          high=5))
        _put(self, "test_fraction", probability("TwoHopData.test_fraction", self.test_fraction))
        _put(self, "data_seed", integer("TwoHopData.data_seed", self.data_seed, low=0))

    @property
    def chain_templates(self) -> tuple[tuple[str, ...], ...]:
        """The templates of each chain: ``templates``, or the defaults when it is None."""
        if self.templates is not None:
            return self.templates
        return tuple(DEFAULT_TEMPLATES[c] for c in self.chains)


@dataclass(frozen=True)
class TwoHopModel:
    """The MoE transformer: ``n_layers`` (1 or 2, :data:`LAYERS`), ``n_experts`` per layer
    (top-1 Switch gate), ``d_model``, ``d_expert``, ``n_heads``.  Sizes are ours."""

    n_layers: int = 2
    n_experts: int = 4
    d_model: int = 64
    d_expert: int = 64
    n_heads: int = 4

    def __post_init__(self):
        n = integer("TwoHopModel.n_layers", self.n_layers)
        require(n in LAYERS, "TwoHopModel.n_layers", self.n_layers,
                "1 or 2 (one layer, or one layer per hop)")
        _put(self, "n_layers", n)
        for name in ("n_experts", "d_expert", "n_heads", "d_model"):
            _put(self, name, integer(f"TwoHopModel.{name}", getattr(self, name), low=1))
        require(self.d_model % self.n_heads == 0, "TwoHopModel.d_model", self.d_model,
                f"an integer ≥ 1 divisible by n_heads={self.n_heads}")


@dataclass(frozen=True)
class TwoHopTrain:
    """The training run: ``objective`` (one of ``OBJECTIVES``), ``steps`` optimiser steps of
    ``batch_size`` sentences, AdamW at ``lr`` (warm-up then cosine, the package's loop),
    ``seed`` (initialisation and data order), loss weights, ``device`` and ``amp``."""

    objective: str = "ce"
    steps: int = 800
    batch_size: int = 128
    lr: float = 3e-3
    seed: int = 0
    warmup_steps: int = 20
    lb_alpha: float = 0.01
    router_alpha: float = 1.0
    device: str = "cpu"
    amp: bool = True

    def __post_init__(self):
        choice("TwoHopTrain.objective", self.objective, OBJECTIVES)
        for name in ("steps", "batch_size"):
            _put(self, name, integer(f"TwoHopTrain.{name}", getattr(self, name), low=1))
        for name in ("seed", "warmup_steps"):
            _put(self, name, integer(f"TwoHopTrain.{name}", getattr(self, name), low=0))
        _put(self, "lr", positive("TwoHopTrain.lr", self.lr))
        for name in ("lb_alpha", "router_alpha"):
            _put(self, name, number(f"TwoHopTrain.{name}", getattr(self, name), low=0))
        choice("TwoHopTrain.device", self.device, DEVICES)
        _put(self, "amp", flag("TwoHopTrain.amp", self.amp))


_PARTS = {"data": TwoHopData, "model": TwoHopModel, "train": TwoHopTrain}
#: field name -> the part that holds it (the names are distinct across the parts)
_FIELD_PART = {f.name: part for part, cls in _PARTS.items() for f in fields(cls)}


@dataclass(frozen=True)
class TwoHopConfig:
    """One two-hop run, in three parts: ``data`` (:class:`TwoHopData`), ``model``
    (:class:`TwoHopModel`), ``train`` (:class:`TwoHopTrain`).

    Why not :class:`~moe_routing.experiments.ExperimentConfig`: its data fields
    (``n_tasks``, ``n_relations``, ``task_seed``) draw flat tasks from the whole base, which has
    no meaning here (the tasks are the chains' hops and their compositions), and its key is the
    single-hop runs' format.  The parts keep ExperimentConfig's names and defaults' style where
    they mean the same thing (``d_model``, ``steps``, ``lb_alpha``, …), and every field is
    checked on construction, so a grid fails before anything trains.  :meth:`replace` takes
    field names of any part (``cfg.replace(n_layers=1, objective="ce+lb", seed=1)``).
    """

    # factories: a default instance at import would read the knowledge base (chain checks)
    data: TwoHopData = field(default_factory=TwoHopData)
    model: TwoHopModel = field(default_factory=TwoHopModel)
    train: TwoHopTrain = field(default_factory=TwoHopTrain)

    def __post_init__(self):
        for part, cls in _PARTS.items():
            value = getattr(self, part)
            if isinstance(value, dict):            # from JSON (a result's ``config``)
                value = cls(**{k: (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                                   if isinstance(v, list) else v) for k, v in value.items()})
                _put(self, part, value)
            require(isinstance(value, cls), f"TwoHopConfig.{part}", type(value).__name__,
                    f"a {cls.__name__} (or a dict of its fields)")

    @classmethod
    def make(cls, **changes) -> "TwoHopConfig":
        """``TwoHopConfig.make(n_layers=1, objective="ce+router")``: the defaults with some
        fields of any part changed (:meth:`replace`)."""
        return cls().replace(**changes)

    def replace(self, **changes) -> "TwoHopConfig":
        """A copy with parts (``data=…``) or fields of any part (``n_layers=…``) changed."""
        parts = {p: changes.pop(p) for p in list(changes) if p in _PARTS}
        unknown = sorted(k for k in changes if k not in _FIELD_PART)
        require(not unknown, "TwoHopConfig.replace", unknown,
                "fields of TwoHopData, TwoHopModel or TwoHopTrain: " + ", ".join(_FIELD_PART))
        for part in _PARTS:
            mine = {k: v for k, v in changes.items() if _FIELD_PART[k] == part}
            if mine:
                parts[part] = replace(parts.get(part, getattr(self, part)), **mine)
        return replace(self, **parts)

    def as_dict(self) -> dict:
        return asdict(self)

    def training_key(self) -> dict:
        """What determines the trained model: the config, with the objective ``ce`` when there
        is one expert (the router's softmax is 1: the three objectives train alike)."""
        d = self.as_dict()
        d["data"]["templates"] = [list(t) for t in self.data.chain_templates]
        if self.model.n_experts == 1:
            d["train"]["objective"] = "ce"
        return d

    def key(self) -> str:
        """Cache key: hash of :meth:`training_key`, :data:`RESULT_VERSION`, the training code
        fingerprint and the source of this module and of the two-hop data
        (:data:`TWO_HOP_CODE`: neither is part of the task-routing fingerprint), so a result
        computed by other code is never reused."""
        blob = json.dumps({"v": RESULT_VERSION, "kind": "two_hop", "code": code_fingerprint(),
                           "two_hop_code": _two_hop_fingerprint(), **self.training_key()},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """How progress lines and errors name a run: ``L=2, E=4, ce+router, seed 0``."""
        return (f"L={self.model.n_layers}, E={self.model.n_experts}, {self.train.objective}, "
                f"seed {self.train.seed}")


#: the code of a two-hop run besides the task-routing training code
TWO_HOP_CODE = ("experiments/two_hop.py", "knowledge/two_hop.py")


@lru_cache(maxsize=1)
def _two_hop_fingerprint() -> str:
    from ..fingerprint import source_fingerprint

    return source_fingerprint(TWO_HOP_CODE)[:16]


def _config(cfg) -> TwoHopConfig:
    if not isinstance(cfg, TwoHopConfig):
        fail("cfg", type(cfg).__name__, "a TwoHopConfig")
    return cfg


def two_hop_grid(n_layers: Iterable[int] = LAYERS, objectives: Iterable[str] = OBJECTIVES,
                 seeds: Iterable[int] = (0, 1), base: TwoHopConfig | None = None,
                 **changes) -> list[TwoHopConfig]:
    """Every combination of depth × objective × seed on ``base`` (default: the defaults) with
    ``changes`` (fields of any part), validated up front."""
    base = TwoHopConfig() if base is None else _config(base)
    axes = {name: sequence(name, values, "a sequence of values (a list, even of one)")
            for name, values in (("n_layers", n_layers), ("objectives", objectives),
                                 ("seeds", seeds))}
    base = base.replace(**changes)
    return [base.replace(n_layers=n, objective=o, seed=s) for n in axes["n_layers"]
            for o in axes["objectives"] for s in axes["seeds"]]


# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def _dataset(data: TwoHopData):
    from ..knowledge.two_hop import build_mixed_dataset

    return build_mixed_dataset(dict(zip(data.chains, (list(t) for t in data.chain_templates))),
                               n_pairs=data.n_pairs, n_templates=data.n_templates,
                               seed=data.data_seed, test_fraction=data.test_fraction)


def two_hop_dataset(cfg: TwoHopConfig):
    """The run's :class:`~moe_routing.knowledge.two_hop.MixedKnowledgeDataset`."""
    return _dataset(_config(cfg).data)


def hop_tasks(ds) -> np.ndarray:
    """(K, 2) int: the (hop-1, hop-2) task of every task of ``ds`` — the indices of a two-hop
    task's first and second single-hop tasks, (k, k) for a single-hop task k."""
    from ..knowledge.two_hop import TwoHopTask

    names = {t.name: k for k, t in enumerate(ds.tasks)}
    return np.array([(names[t.first.name], names[t.second.name]) if isinstance(t, TwoHopTask)
                     else (k, k) for k, t in enumerate(ds.tasks)], dtype=np.int64)


@dataclass(frozen=True)
class TwoHopSplit:
    """Sentence indices (into the dataset) of each part of a run (module docstring).

    train : what the model is trained on (the dataset's training split, less ``seen``)
    single_test : single-hop test sentences;  seen : the asked template of every composition
    in training;  held_out : the sentences of the held-out compositions (the two-hop test
    split);  single_all, two_hop_all : every sentence of each kind (routing)
    """

    train: np.ndarray
    single_test: np.ndarray
    seen: np.ndarray
    held_out: np.ndarray
    single_all: np.ndarray
    two_hop_all: np.ndarray


def two_hop_split(ds) -> TwoHopSplit:
    """The run's parts of ``ds``: the dataset's split, with the sentence of template
    ``p mod T_k`` of every training composition p of two-hop task k moved to ``seen``."""
    two = hop_tasks(ds)
    is_two = two[ds.task, 0] != ds.task                                   # (M,)
    local = ds.template_local[ds.template]                                # (M,) template in task
    n_tpl = np.array([t.n_templates for t in ds.tasks])[ds.task]
    seen = is_two & ~ds.is_test & (local == ds.pair % n_tpl)
    return TwoHopSplit(train=np.nonzero(~ds.is_test & ~seen)[0],
                       single_test=np.nonzero(ds.is_test & ~is_two)[0],
                       seen=np.nonzero(seen)[0], held_out=np.nonzero(ds.is_test & is_two)[0],
                       single_all=np.nonzero(~is_two)[0], two_hop_all=np.nonzero(is_two)[0])


def _take(enc, idx: np.ndarray):
    """The rows ``idx`` of an ``EncodedSplit`` of the whole dataset (``encode_split("all")``,
    whose row i is sentence i)."""
    import dataclasses

    import torch

    rows = torch.from_numpy(np.asarray(idx, dtype=np.int64))
    return dataclasses.replace(enc, **{f.name: getattr(enc, f.name)[rows]
                                       for f in dataclasses.fields(enc)})


def layer_targets(split, hops: np.ndarray, n_layers: int):
    """(M, n_layers) long: the task whose designated expert supervises each layer of each
    sentence of ``split`` — layer l ↔ hop l (:func:`hop_tasks`), so (hop 1, hop 2) for a
    two-hop sentence and (k, k) for a single-hop one; one layer: hop 1."""
    import torch

    n_layers = integer("n_layers", n_layers, low=1, high=2)
    return torch.from_numpy(hops[split.task.numpy(), :n_layers].copy())


# ----------------------------------------------------------------------------- measurements
def _objects(split):
    import torch

    return split.tokens[torch.arange(len(split)), split.object_pos]        # (M,)


def _correct(model, split) -> np.ndarray:
    from ..model import exact_match

    return exact_match(model, split.tokens, split.object_pos, _objects(split)).correct.numpy()


def _scored(correct: np.ndarray) -> dict:
    from .accuracy import accuracy_interval

    n = int(correct.size)
    acc = float(correct.mean()) if n else float("nan")
    return dict(accuracy=acc, n=n,
                interval=accuracy_interval([acc], n).as_dict() if n else None)


def _position_mask(split):
    """(M, n−1) bool: the input position that predicts the object, one per sentence."""
    import torch

    mask = torch.zeros(split.inputs.shape, dtype=torch.bool)
    mask[torch.arange(len(split)), split.object_pos - 1] = True
    return mask


def _majority(values: np.ndarray, n: int) -> int:
    """The most frequent value of ``values`` (−1 when empty; ties: the smallest)."""
    return int(np.bincount(values, minlength=n).argmax()) if values.size else -1


def evaluate_two_hop(model, ds, parts: TwoHopSplit, n_experts: int) -> dict:
    """Every measurement of the module docstring, for a trained model."""
    import torch

    from .. import routing_metrics as rm
    from ..model import collect_routing

    n_experts = integer("n_experts", n_experts, low=1)
    enc = ds.encode_split("all")
    hops = hop_tasks(ds)
    single, seen, held = (_take(enc, parts.single_test), _take(enc, parts.seen),
                          _take(enc, parts.held_out))
    tr = _take(enc, parts.train)
    n_tr = min(len(tr), 2000)
    tr_correct = _correct(model, _take(enc, parts.train[:n_tr]))
    tr_two = hops[tr.task[:n_tr].numpy(), 0] != tr.task[:n_tr].numpy()
    out = dict(single_hop=_scored(_correct(model, single)),
               two_hop_seen=_scored(_correct(model, seen)))
    held_ok = _correct(model, held)
    out["held_out"] = _scored(held_ok)
    out["train_single_hop"] = float(tr_correct[~tr_two].mean()) if (~tr_two).any() else None
    out["train_two_hop"] = float(tr_correct[tr_two].mean()) if tr_two.any() else None

    # base rates of the held-out score
    obj_tr, obj_held = _objects(tr).numpy(), _objects(held).numpy()
    task_tr, task_held = tr.task.numpy(), held.task.numpy()
    majority = {k: _majority(obj_tr[task_tr == k], ds.vocab_size) for k in np.unique(task_held)}
    is_major = np.array([obj_held[i] == majority[task_held[i]] for i in range(len(held))],
                        dtype=bool)
    subj_held = held.tokens[torch.arange(len(held)), held.subject_pos].numpy()
    pair_key = task_held * (ds.max_dictionary_size + 1) + held.pair.numpy()
    comps = np.unique(pair_key)
    out.update(
        majority_baseline=float(is_major.mean()) if len(held) else float("nan"),
        accuracy_non_majority=_scored(held_ok[~is_major]),
        identity_fraction=float((subj_held == obj_held).mean()) if len(held) else float("nan"),
        composition_accuracy=float(np.mean([held_ok[pair_key == c].all() for c in comps]))
        if comps.size else float("nan"),
        n_held_out_compositions=int(comps.size),
        held_out_per_task={ds.tasks[k].name: float(held_ok[task_held == k].mean())
                           for k in np.unique(task_held)})

    # routing at the object-predicting position
    s_all, t_all = _take(enc, parts.single_all), _take(enc, parts.two_hop_all)
    held_rows = np.isin(parts.two_hop_all, parts.held_out)                 # (M2,)
    two_tasks = [k for k in range(ds.n_tasks) if hops[k, 0] != k]
    layers = []
    for layer in range(model.config.n_layers):
        rs = collect_routing(model, s_all.inputs, s_all.task, _position_mask(s_all), layer=layer)
        e_single = rs.expert[:, 0].numpy()
        dominant = {k: _majority(e_single[rs.task.numpy() == k], n_experts)
                    for k in range(ds.n_tasks) if hops[k, 0] == k}
        entry = dict(layer=layer + 1, matched_hop=layer + 1,
                     single_hop=rm.routing_summary(rs.task, rs.expert[:, 0], ds.n_tasks,
                                                   n_experts, rs.probs),
                     dominant_expert={ds.tasks[k].name: e for k, e in dominant.items()})
        for h in (0, 1):
            labels = torch.from_numpy(hops[t_all.task.numpy(), h].copy())
            rt = collect_routing(model, t_all.inputs, labels, _position_mask(t_all), layer=layer)
            e = rt.expert[:, 0].numpy()                                    # (M2,) sentence order
            lab = rt.task.numpy()
            designated = e == lab % n_experts
            reuse = e == np.array([dominant[k] for k in lab])
            entry[f"hop{h + 1}"] = dict(
                designated_fraction=float(designated.mean()),
                reuse_fraction=float(reuse.mean()),
                held_out_designated_fraction=float(designated[held_rows].mean())
                if held_rows.any() else None,
                held_out_reuse_fraction=float(reuse[held_rows].mean())
                if held_rows.any() else None,
                summary=rm.routing_summary(rt.task, rt.expert[:, 0], ds.n_tasks, n_experts,
                                           rt.probs))
            if h == 0:
                e_two = e
        entry["reuse"] = [
            dict(task=ds.tasks[k].name, hop1=ds.tasks[int(hops[k, 0])].name,
                 hop2=ds.tasks[int(hops[k, 1])].name,
                 two_hop_expert=_majority(e_two[t_all.task.numpy() == k], n_experts),
                 hop1_single_expert=dominant[int(hops[k, 0])],
                 hop2_single_expert=dominant[int(hops[k, 1])])
            for k in two_tasks]
        layers.append(entry)
    out["routing"] = layers
    return out


# ----------------------------------------------------------------------------- one run
def result_path(cfg: TwoHopConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's JSON lives: ``<artifacts_dir>/two_hop/<key>.json``."""
    _config(cfg)
    if not (isinstance(artifacts_dir, (str, os.PathLike)) and os.fspath(artifacts_dir)):
        fail("artifacts_dir", artifacts_dir, "a folder path")
    return Path(artifacts_dir) / "two_hop" / f"{cfg.key()}.json"


#: what a cached result must hold to be used (a file lacking any of them is re-run)
RESULT_KEYS = ("version", "key", "config", "training_key", "single_hop", "two_hop_seen",
               "held_out", "majority_baseline", "routing", "history", "steps", "wall_s")


def _read_cached(cfg: TwoHopConfig, folder) -> tuple[dict | None, str | None]:
    """:func:`.cache.read_cached` for the file of ``cfg`` in ``folder``."""
    return read_cached(result_path(cfg, folder), version=RESULT_VERSION, required=RESULT_KEYS,
                       key=cfg.key(), training_key=cfg.training_key())


def load_two_hop(cfg: TwoHopConfig, artifacts_dir) -> dict | None:
    """The cached result of ``cfg``, or None (absent, another format, or unusable: then one
    warning line names the file)."""
    _config(cfg)
    if artifacts_dir is None:
        return None
    res, problem = _read_cached(cfg, artifacts_dir)
    if problem:
        log.warning("two_hop: ignoring cached run %s", problem)
    return res


def run_two_hop(cfg: TwoHopConfig, artifacts_dir: str | Path | None = None,
                profile: str = "smoke", progress: bool = False) -> dict:
    """Train and measure one configuration (module docstring); with ``artifacts_dir``, return
    its cached result when there is a usable one, else write the new one atomically.

    Returns a JSON-ready dict: ``config``, ``key``, ``dataset`` (tasks, hops, sizes), the
    measurements of :func:`evaluate_two_hop`, ``history``, ``steps``, ``train_s``, ``wall_s``,
    ``provenance``; ``cached`` says whether it was read from the cache.
    """
    import torch

    from ..model import MoEConfig, TrainConfig, TrainData, build_and_train
    from ..runtime import provenance, resolve_device

    _config(cfg)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    device = resolve_device(cfg.train.device)
    if artifacts_dir is not None:
        hit = load_two_hop(cfg, artifacts_dir)
        if hit is not None:
            return dict(hit, cached=True)
    t0 = time.perf_counter()
    ds = two_hop_dataset(cfg)
    parts = two_hop_split(ds)
    hops = hop_tasks(ds)
    enc = ds.encode_split("all")
    tr = _take(enc, parts.train)
    m, tc = cfg.model, cfg.train
    data = TrainData.from_split(tr, layer_tasks=layer_targets(tr, hops, m.n_layers))
    mcfg = MoEConfig(vocab_size=ds.vocab_size, max_len=enc.inputs.shape[1], d_model=m.d_model,
                     n_heads=m.n_heads, n_experts=m.n_experts, d_expert=m.d_expert, top_k=1,
                     gate="switch", n_layers=m.n_layers)
    tcfg = TrainConfig(objective="ce" if m.n_experts == 1 else tc.objective, lr=tc.lr,
                       steps=tc.steps, batch_size=tc.batch_size, warmup_steps=tc.warmup_steps,
                       lb_alpha=tc.lb_alpha, router_alpha=tc.router_alpha, seed=tc.seed,
                       device=device, amp=tc.amp, progress=progress, log_every=10)
    groups = {name: _take(enc, getattr(parts, name))
              for name in ("single_test", "seen", "held_out")}

    def accuracies(model) -> dict:                # read-only: training is not changed by it
        return {name: float(_correct(model, g).mean()) if len(g) else float("nan")
                for name, g in groups.items()}

    model, hist = build_and_train(mcfg, data, tcfg, eval_fn=accuracies,
                                  eval_every=max(1, tc.steps // EVAL_QUARTERS))
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        metrics = evaluate_two_hop(model, ds, parts, m.n_experts)
    res = dict(
        version=RESULT_VERSION, key=cfg.key(), config=cfg.as_dict(),
        training_key=cfg.training_key(), model_config=mcfg.as_dict(),
        train_config=tcfg.as_dict(),
        dataset=dict(tasks=[t.name for t in ds.tasks],
                     hops=[[ds.tasks[int(a)].name, ds.tasks[int(b)].name] for a, b in hops],
                     two_hop_tasks=[t.name for t in ds.two_hop_tasks],
                     vocab_size=ds.vocab_size, seq_len=ds.seq_len,
                     split=ds.split_stats(), n_train=len(parts.train),
                     n_single_test=len(parts.single_test), n_seen=len(parts.seen),
                     n_held_out=len(parts.held_out)),
        history=dict(step=hist.step, total=hist.total, ce=hist.ce, lb=hist.lb,
                     router=hist.router, evals=hist.evals),
        steps=tcfg.total_steps(len(data)), train_s=train_s, wall_s=time.perf_counter() - t0,
        provenance=provenance(profile, device).as_dict(), **metrics)
    if artifacts_dir is not None:
        atomic_write_json(result_path(cfg, artifacts_dir), res)
    # the very values a cached copy gives back (tuples as lists, NumPy scalars as numbers)
    return dict(json.loads(json.dumps(res, default=_jsonable)), cached=False)


# ----------------------------------------------------------------------------- grids
def run_two_hop_grid(configs: Sequence[TwoHopConfig], artifacts_dir: str | Path | None,
                     profile: str = "smoke", progress: bool = True,
                     workers: int | str | None = None, executor: str | None = None
                     ) -> list[dict]:
    """Run every configuration through :mod:`moe_routing.experiments.executor`, reusing cached results.

    As :func:`~moe_routing.experiments.task_routing.run_grid`: the configurations' keys are
    looked up in ``artifacts_dir`` first (an unusable file is redone, with one warning line);
    the missing runs go to ``executor`` (``local``, ``ray``, ``slurm``; ``workers`` of them at
    once), each result written atomically as it arrives, so an interrupted grid resumes; a
    failed run does not stop the others and :class:`~moe_routing.experiments.executor.GridError` lists it
    at the end.  Returns one result per configuration, in order, each with ``cached``.
    """
    from .executor import GridError, Task, plan, run_tasks

    configs = sequence_of("configs", configs, TwoHopConfig)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    how = plan(executor, workers, devices=sorted({c.train.device for c in configs}))
    done: dict[str, tuple[dict, bool]] = {}
    pending: dict[str, TwoHopConfig] = {}
    for cfg in configs:
        key = cfg.key()
        if key in done or key in pending:
            continue
        res = load_two_hop(cfg, artifacts_dir)
        if res is None:
            pending[key] = cfg
        else:
            done[key] = (res, True)
    writes_here = how.executor != "local"
    where = None if writes_here else artifacts_dir

    def keep(task: Task, res: dict) -> None:
        if res.get("key") != task.key:
            raise RuntimeError(f"the result has key {res.get('key')!r}, not {task.key!r}: it was "
                               "computed by other code (moe_routing, torch or Python differ "
                               "where it ran)")
        res = {k: v for k, v in res.items() if k != "cached"}
        if writes_here and artifacts_dir is not None:
            atomic_write_json(result_path(pending[task.key], artifacts_dir), res)
        done[task.key] = (res, False)

    n_runs = len(done) + len(pending)
    log.info("two-hop grid: %d distinct run%s, %d read from a cache", n_runs,
             "s" if n_runs != 1 else "", len(done))
    tasks = [Task(key, cfg.label(), (cfg, where, profile)) for key, cfg in pending.items()]
    failures = run_tasks(run_two_hop, tasks, how, on_result=keep, progress=progress)
    out, first = [], set()
    for cfg in configs:
        key = cfg.key()
        if key not in done:
            continue
        res, cached = done[key]
        row = dict(res)
        row["config"] = cfg.as_dict()             # the requested objective (one expert: shared)
        row["cached"] = cached or key in first
        first.add(key)
        out.append(row)
    if failures:
        raise GridError(failures, n_runs, out)
    return out


def _routing_at(r: dict, layer: int, hop: int) -> dict:
    routing = r["routing"]
    if layer > len(routing):
        return {}
    return routing[layer - 1][f"hop{hop}"]


def two_hop_frame(results: Sequence[dict]):
    """One row per run: configuration, the three accuracies with their interval ends, the base
    rates, and the routing scalars (``l1_hop1_*``: layer 1 against hop 1; ``l2_hop2_*``:
    layer 2 against hop 2, NaN for one layer; ``l1_hop2_*``: a one-layer model's layer against
    the second hop)."""
    import pandas as pd

    if isinstance(results, dict):
        fail("results", type(results).__name__, "a sequence of result dicts (from "
                                                "run_two_hop_grid)")
    results = sequence("results", results, "a sequence of result dicts (from run_two_hop_grid)")
    rows = []
    nan = float("nan")
    for i, r in enumerate(results):
        require(isinstance(r, dict) and all(k in r for k in RESULT_KEYS), f"results[{i}]",
                type(r).__name__ if not isinstance(r, dict) else sorted(r),
                "a result dict of run_two_hop (with " + ", ".join(RESULT_KEYS) + ")")
        c = r["config"]
        row = dict(n_layers=c["model"]["n_layers"], n_experts=c["model"]["n_experts"],
                   objective=c["train"]["objective"], seed=c["train"]["seed"])
        for name in ("single_hop", "two_hop_seen", "held_out"):
            s = r[name]
            row[name] = s["accuracy"]
            row[f"{name}_low"] = s["interval"]["low"] if s["interval"] else nan
            row[f"{name}_high"] = s["interval"]["high"] if s["interval"] else nan
        row.update(n_held_out=r["held_out"]["n"], majority_baseline=r["majority_baseline"],
                   held_out_non_majority=r["accuracy_non_majority"]["accuracy"],
                   composition_accuracy=r["composition_accuracy"],
                   train_two_hop=r["train_two_hop"], train_single_hop=r["train_single_hop"])
        for layer, hop in ((1, 1), (2, 2), (1, 2)):
            x = _routing_at(r, layer, hop)
            p = f"l{layer}_hop{hop}"
            row[f"{p}_designated"] = x.get("designated_fraction", nan)
            row[f"{p}_reuse"] = x.get("reuse_fraction", nan)
            row[f"{p}_nmi"] = x["summary"]["nmi"] if x else nan
        for layer in (1, 2):
            routing = r["routing"]
            row[f"l{layer}_single_nmi"] = (routing[layer - 1]["single_hop"]["nmi"]
                                           if layer <= len(routing) else nan)
        row.update(steps=r["steps"], wall_s=r["wall_s"], cached=r.get("cached", False))
        rows.append(row)
    return pd.DataFrame(rows)


def two_hop_cells(results: Sequence[dict]):
    """One row per (n_layers, objective): the mean over seeds of each accuracy with its
    :func:`~moe_routing.experiments.accuracy.accuracy_interval` (the larger of the seed spread
    and the binomial error) and the mean majority baseline — the table the 1-vs-2-layer
    comparison is read from."""
    import pandas as pd

    from .accuracy import accuracy_interval

    frame = two_hop_frame(results)
    rows = []
    for (n_layers, objective), g in frame.groupby(["n_layers", "objective"], sort=True):
        row = dict(n_layers=int(n_layers), objective=objective, n_seeds=len(g))
        for name in ("single_hop", "two_hop_seen", "held_out"):
            ns = [r[name]["n"] for r in results
                  if r["config"]["model"]["n_layers"] == n_layers
                  and r["config"]["train"]["objective"] == objective]
            iv = accuracy_interval(g[name].to_numpy(), ns)
            row[name], row[f"{name}_half_width"] = iv.mean, iv.half_width
        row["majority_baseline"] = float(g["majority_baseline"].mean())
        row["held_out_non_majority"] = float(g["held_out_non_majority"].mean())
        for col in ("l1_hop1_reuse", "l2_hop2_reuse", "l1_hop1_designated",
                    "l2_hop2_designated"):
            row[col] = float(g[col].mean())
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["DEFAULT_TEMPLATES", "LAYERS", "RESULT_VERSION", "TwoHopConfig", "TwoHopData",
           "TwoHopModel", "TwoHopSplit", "TwoHopTrain", "evaluate_two_hop", "hop_tasks",
           "layer_targets", "load_two_hop", "result_path", "run_two_hop", "run_two_hop_grid",
           "two_hop_cells", "two_hop_dataset", "two_hop_frame", "two_hop_grid", "two_hop_split"]
