"""The configuration of one two-hop run (ours, beyond paper A): :class:`TwoHopConfig`, in
parts -- :class:`TwoHopData` (the chains and the mixed dataset), the model's
:class:`~moe_routing.model.MoEShape` and the :class:`~moe_routing.model.TrainSchedule` --
plus the run's own objective, seed, device and amp, and its cache key.

The model and schedule parts are the library's own, as in paper A's
:class:`~moe_routing.experiments.task_routing.ExperimentConfig` (both are a
:class:`~moe_routing.experiments.task_routing.config.NestedConfig`): a knob of the model or of training is
declared, defaulted and validated once, and a run's ``MoEConfig`` and ``TrainConfig`` are built
from the parts (:meth:`MoEShape.config`, :meth:`NestedConfig.loop_config`), never copied field
by field.  How a run uses it: :mod:`.runs`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import ClassVar, Iterable

from ...model.config import MoEShape
from ...model.losses import OBJECTIVES
from ...model.train import TrainSchedule
from ..._internal.validation import fail, integer, probability, require, sequence
from ..task_routing.config import NestedConfig, code_fingerprint

#: version of the result format and of the measurement code; part of every cache key
#: (2: the configuration nests the library's MoEShape and TrainSchedule; the objective, seed,
#: device and amp are the run's own fields; 3: copyable compositions are never held out, the
#: baseline that copies the first hop's object, per-sentence correctness and intervals
#: clustered by fact; 4: that baseline's keys are renamed after the middle entity m of
#: s → m → o, copy_middle_baseline and copy_middle_correct -- bumped so that a version-3 file,
#: which lacks the new keys, is ignored as another version, not refused as unreadable; 5: fixed
#: entity codes allowed, and the experts-off witness recorded)
RESULT_VERSION = 5

#: depths a run may have: one layer (paper A's model) or one layer per hop
LAYERS = (1, 2)

#: the code of a two-hop run besides the task-routing training code (its cache key holds it)
TWO_HOP_CODE = ("experiments/two_hop", "knowledge/two_hop.py", "knowledge/two_hop_dataset.py")


def _put(obj, name, value):
    object.__setattr__(obj, name, value)


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


#: the control of the template-word confound (ours): two-hop templates of the same chains
#: whose words before the object slot (what the object-predicting position reads) occur in no
#: template of their hops (checked by :func:`~.measure.shared_hop_words`).  With
#: :data:`DEFAULT_TEMPLATES` a router keying on "capital" or "written in the" sends a two-hop
#: query to its hop's expert without knowing the hop; with these, no word can.
WORD_DISJOINT_TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("P17", "P36"): ("⋆1 sits inside a nation whose government meets at ⋆2.",
                     "Ministers serving ⋆1 gather at ⋆2.",
                     "National power over ⋆1 resides at ⋆2."),
    ("P37", "P282"): ("Government papers from ⋆1 use ⋆2 characters.",
                      "Signs across ⋆1 show ⋆2 glyphs."),
}


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
        from ...knowledge.two_hop import embedded_chains

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


def _part(kind, value):
    """A part from a result's JSON (a dict of its fields, sequences as lists) or as given."""
    if not isinstance(value, dict):
        return value
    return kind(**{k: (tuple(tuple(x) if isinstance(x, list) else x for x in v)
                       if isinstance(v, list) else v) for k, v in value.items()})


@dataclass(frozen=True)
class TwoHopConfig(NestedConfig):
    """One two-hop run, in parts: ``data`` (:class:`TwoHopData`), ``model``
    (:class:`~moe_routing.model.MoEShape`: ``n_layers`` 1 or 2 (:data:`LAYERS`), ``n_experts``
    per layer, ``d_model``, ``d_expert``, ``n_heads``; top-1 Switch gate), ``train``
    (:class:`~moe_routing.model.TrainSchedule`: ``steps`` optimiser steps of ``batch_size``
    sentences, AdamW at ``lr``, warm-up then cosine, the loss weights), and the run's own
    ``objective`` (one of ``OBJECTIVES``), ``seed`` (initialisation and data order),
    ``device`` and ``amp``.  Sizes are ours.

    Why not :class:`~moe_routing.experiments.task_routing.ExperimentConfig`: its data part (``n_tasks``,
    ``n_relations``, ``task_seed``) draws flat tasks from the whole base, which has no meaning
    here (the tasks are the chains' hops and their compositions), and its key is the single-hop
    runs' format.  The model and training parts are the same classes, so the knobs have the
    same names, defaults' style and errors.  :meth:`from_flat` builds a configuration from
    flat knobs of any part (``TwoHopConfig.from_flat(n_layers=1, objective="ce+lb")``) and
    :meth:`replace` changes them; every field is checked on construction, so a grid fails
    before anything trains.
    """

    # factories: a default instance at import would read the knowledge base (chain checks)
    data: TwoHopData = field(default_factory=TwoHopData)
    model: MoEShape = field(
        default_factory=lambda: MoEShape(**TwoHopConfig._DEFAULTS["model"]))
    train: TrainSchedule = field(
        default_factory=lambda: TrainSchedule(**TwoHopConfig._DEFAULTS["train"]))
    objective: str = "ce"
    seed: int = 0
    device: str = "cpu"
    amp: bool = True

    _PARTS: ClassVar[dict[str, type]] = {"data": TwoHopData, "model": MoEShape,
                                         "train": TrainSchedule}
    _DEFAULTS: ClassVar[dict[str, dict]] = {
        "model": dict(n_layers=2, n_experts=4, d_model=64, d_expert=64, n_heads=4),
        "train": dict(steps=800, batch_size=128, lr=3e-3, warmup_steps=20, lb_alpha=0.01,
                      router_alpha=1.0)}

    def __post_init__(self):
        for part, kind in self._PARTS.items():       # from JSON (a result's ``config``)
            _put(self, part, _part(kind, getattr(self, part)))
        self._check_parts()
        self._check_run()
        require(self.model.n_layers in LAYERS, "TwoHopConfig.model.n_layers",
                self.model.n_layers, "1 or 2 (one layer, or one layer per hop)")

    def as_dict(self) -> dict:
        """The parts as dicts and the run's own fields: what a result's ``config`` holds."""
        return asdict(self)

    def training_key(self) -> dict:
        """What determines the trained model: the config, with the objective ``ce`` when there
        is one expert (the router's softmax is 1: the three objectives train alike)."""
        d = self.as_dict()
        d["data"]["templates"] = [list(t) for t in self.data.chain_templates]
        if self.model.n_experts == 1:
            d["objective"] = "ce"
        return d

    def key(self) -> str:
        """Cache key: hash of :meth:`training_key`, :data:`RESULT_VERSION`, the training code
        fingerprint and the source of the two-hop modules (:data:`TWO_HOP_CODE`: none is part
        of the task-routing fingerprint), so a result computed by other code is never
        reused."""
        blob = json.dumps({"v": RESULT_VERSION, "kind": "two_hop", "code": code_fingerprint(),
                           "two_hop_code": _two_hop_fingerprint(), **self.training_key()},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        """How progress lines and errors name a run: ``L=2, E=4, ce+router, seed 0``."""
        return (f"L={self.model.n_layers}, E={self.model.n_experts}, {self.objective}, "
                f"seed {self.seed}")


@lru_cache(maxsize=1)
def _two_hop_fingerprint() -> str:
    from ..._internal.fingerprint import source_fingerprint

    return source_fingerprint(TWO_HOP_CODE)[:16]


def _config(cfg) -> TwoHopConfig:
    if not isinstance(cfg, TwoHopConfig):
        fail("cfg", type(cfg).__name__, "a TwoHopConfig")
    return cfg


def two_hop_grid(n_layers: Iterable[int] = LAYERS, objectives: Iterable[str] = OBJECTIVES,
                 seeds: Iterable[int] = (0, 1), base: TwoHopConfig | None = None,
                 cells: Iterable | None = None, **changes) -> list[TwoHopConfig]:
    """Every combination of depth × objective × seed on ``base`` (default: the defaults) with
    ``changes`` (fields of any part), validated up front.  The values of each axis must be
    distinct (``seeds=[0, 0]`` would give two configurations of one run, one cache key, and
    an interval over seeds would count that run twice): a repeated value is refused, named.
    ``cells``: the (n_layers, objective) pairs to train, × seeds (None: every depth × every
    objective) -- a profile spends its seeds on the cells its verdicts read."""
    if cells is not None:
        cells = sequence("cells", cells, "a sequence of [n_layers, objective] pairs")
        for i, c in enumerate(cells):
            require(isinstance(c, (list, tuple)) and len(c) == 2, f"cells[{i}]", c,
                    "an [n_layers, objective] pair")
        keys = [(int(n), str(o)) for n, o in cells]
        require(len(set(keys)) == len(keys), "cells", cells, "distinct pairs")
        return [cfg for n, o in keys for cfg in two_hop_grid(
            [n], [o], seeds, base, **changes)]
    base = TwoHopConfig() if base is None else _config(base)
    axes = {name: sequence(name, values, "a sequence of values (a list, even of one)")
            for name, values in (("n_layers", n_layers), ("objectives", objectives),
                                 ("seeds", seeds))}
    base = base.replace(**changes)
    for name, field_name in (("n_layers", "n_layers"), ("objectives", "objective"),
                             ("seeds", "seed")):
        # each value as the configuration holds it (checked; 1.0 and 1 are one depth)
        held = [getattr(base.replace(**{field_name: v}), field_name) for v in axes[name]]
        first: dict = {}
        for i, v in enumerate(held):
            if v in first:
                fail(name, axes[name], f"distinct values ({v!r} is both {name}[{first[v]}] "
                                       f"and {name}[{i}]: one run, listed twice)")
            first[v] = i
    return [base.replace(n_layers=n, objective=o, seed=s) for n in axes["n_layers"]
            for o in axes["objectives"] for s in axes["seeds"]]


__all__ = ["DEFAULT_TEMPLATES", "LAYERS", "RESULT_VERSION", "TWO_HOP_CODE", "TwoHopConfig",
           "TwoHopData", "WORD_DISJOINT_TEMPLATES", "two_hop_grid"]
