"""The training chapter's routing contrast on a Mixtral-style model (ours; the ``hf`` extra).

Paper A's Figure 2 contrast, as the training chapter measures it on the library's own
transformer: a router trained with the task-router loss (``ce+router``) splits the tokens by
task at the positions where the prefix determines the task (high NMI and purity there), one
trained with cross-entropy alone (``ce``) or with load balancing (``ce+lb``) does not.  Is that
a property of the objective, or of the library's model?  This module trains the model class
people use, ``MixtralForCausalLM`` of Hugging Face transformers (two layers, top-2 routing,
from random initialisation: configurations only, nothing downloaded), on *the same dataset*
under the same three objectives (:func:`moe_routing.hf.train_hf_moe`: ``ce+lb`` is
transformers' own load-balancing loss, ``ce+router`` the library's task-router loss on each
layer's exact router logits), and measures both models the same way:

* **Positions.**  The *task-determined* positions of the test split: those that predict a next
  token and whose prefix is continued by sentences of one task only (the dataset's prefix trie:
  ``routing_determined`` of :func:`moe_routing.experiments.task_routing.data.evaluate_run`, the
  ``determined`` positions of
  :mod:`~moe_routing.experiments.bridge.margins`).  Only there can a router reading the prefix know the task.
* **Routing.**  Per layer, :func:`moe_routing.routing_metrics.routing_summary` of the *top-1*
  expert against the task (the library's model routes top-1; for Mixtral the top-1 expert is
  its most weighted one), so the NMI, purity, load entropy and utilisation of both models are
  the same functions of the same kind of choice; the top-2 NMI of Mixtral's assignments is kept
  beside it (``nmi_topk``).  Each run's NMI carries a bootstrap interval over the test
  *sentences* (positions of one sentence are resampled together).
* **Margins.**  The top-two margin Δ of the exact pre-softmax logits (:mod:`moe_routing.hf`
  reads them by hooks) and BM(w*) = P(Δ ≤ w*) with its Wilson interval.
* **Over seeds.**  :class:`Interval`: the mean over seeds, and from the lowest lower end to the
  highest upper end of the seeds' own intervals — the larger of the seed spread and the sampling
  error of one test set, as :func:`moe_routing.experiments.accuracy.accuracy_interval` does for accuracies.

A run is a :class:`MixtralRun`, built on the parts every trained experiment shares (the data
part that draws the dataset, the model's shape, the training schedule), and the runs go through
the grid runner the training and two-hop grids use (:func:`run_hf_grid`; in a chapter, through
its :class:`~moe_routing.experiments.grid.GridSession`): as many at once as the cores allow,
one JSON per run under ``<artifacts_dir>/hf_routing/``, named by a hash of the configuration
together with the code that trains and measures (:data:`HF_ROUTING_CODE`, the task-routing
training code fingerprint, which covers the knowledge base, and the transformers version),
written atomically and read back by key from the artifacts and the session's earlier folders,
so a re-executed chapter retrains nothing and a result of other code or data is never reused.

The parts: :mod:`.results` (what a run and a comparison hold) and
:mod:`.measure` (the positions and one model's per-layer measurement); this module
holds the run's configuration, the cached runs and their summary over seeds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import numpy as np

from ... import routing_metrics as rm
from ..._internal.atomic import atomic_write_json
from ..._internal.runtime import PROFILES
from ..._internal.validation import (choice, flag, integer, number, require, sequence,
                                     sequence_of)
from ...model.config import MoEShape
from ...model.losses import OBJECTIVES
from ...model.train import TrainSchedule
from ..grid.cache import read_cached
from ..task_routing import DataConfig
from ..task_routing.config import NestedConfig
from .measure import _dataset, _layer_summary, measure_hf_model
from .results import Interval, LayerRoutingSummary, ObjectiveLayer, RoutingComparison, RoutingRun

log = logging.getLogger(__name__)

#: version of the cached measurement format; part of every cache key (2: the training key is
#: the run's configuration in parts, its data part in place of a dataset fingerprint)
RESULT_VERSION = 2
#: the code of a run besides the task-routing training code (paths in the package)
HF_ROUTING_CODE = ("hf", "experiments/hf_routing", "routing_metrics.py", "boundary")
#: the two contrasts of the training chapter: the task-router objective against each other
CONTRAST_PAIRS = (("ce+router", "ce"), ("ce+router", "ce+lb"))


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class MixtralRun(NestedConfig):
    """One Mixtral-style run, in the parts every trained experiment shares (sizes ours):

    ``data`` (:class:`~moe_routing.experiments.task_routing.DataConfig`): the tasks of the
    knowledge base it trains on, drawn as a training run draws them (the training chapter's
    A-Fig. 2 data part: the same sentences, the same split); ``model``
    (:class:`~moe_routing.model.MoEShape`): ``n_experts`` per layer (task k's designated expert
    is ``k mod n_experts``, as in the library's model), ``d_model`` (Mixtral's hidden size),
    ``d_expert`` (each expert's intermediate size), ``n_layers`` MoE layers, ``n_heads`` (as
    many key/value heads); ``train`` (:class:`~moe_routing.model.TrainSchedule`): ``steps``
    AdamW steps of ``batch_size`` sentences at ``lr`` with ``weight_decay``, ``lb_alpha`` the
    weight of transformers' load-balancing loss in ``ce+lb`` (Mixtral's
    ``router_aux_loss_coef``), ``router_alpha`` that of the task-router loss -- at a constant
    rate, without warm-up, clipping or z-loss, as :func:`moe_routing.hf.train_hf_moe` trains
    (other values are refused, not ignored); and the run's own ``objective``, ``seed``,
    ``top_k`` experts per token and ``w_star``, the width at which BM is measured.

    ``cfg.d_model`` reads a part's field; :meth:`from_flat` and :meth:`replace` take any
    part's field by name, so a knob has one name in every trained experiment.
    """

    data: DataConfig = field(
        default_factory=lambda: DataConfig(**MixtralRun._DEFAULTS["data"]))
    model: MoEShape = field(
        default_factory=lambda: MoEShape(**MixtralRun._DEFAULTS["model"]))
    train: TrainSchedule = field(
        default_factory=lambda: TrainSchedule(**MixtralRun._DEFAULTS["train"]))
    objective: str = "ce"
    seed: int = 0
    top_k: int = 2
    w_star: float = 0.1

    _PARTS: ClassVar[dict[str, type]] = {"data": DataConfig, "model": MoEShape,
                                         "train": TrainSchedule}
    _DEFAULTS: ClassVar[dict[str, dict]] = {
        "data": dict(n_tasks=4, n_relations=8, n_pairs=20, n_templates=5),
        "model": dict(n_experts=3, d_model=32, d_expert=32, n_layers=2, n_heads=2),
        "train": dict(steps=200, batch_size=64, lr=0.01, weight_decay=0.0, warmup_steps=0,
                      schedule="constant", grad_clip=0.0, lb_alpha=0.02, router_alpha=1.0)}
    #: what train_hf_moe does: the schedule fields it cannot honour must say so
    _TRAINS_AS: ClassVar[dict] = dict(warmup_steps=0, schedule="constant", grad_clip=0.0,
                                      z_beta=0.0, epochs=None)

    def __post_init__(self):
        name = type(self).__name__
        self._check_parts()
        choice(f"{name}.objective", self.objective, OBJECTIVES)
        object.__setattr__(self, "seed", integer(f"{name}.seed", self.seed, low=0))
        require(self.model.n_experts >= 2, f"{name}.n_experts", self.model.n_experts,
                "at least 2 (a router between experts)")
        require(self.model.entity_codes is None, f"{name}.entity_codes",
                self.model.entity_codes, "None (Mixtral's entities have learned rows)")
        object.__setattr__(self, "top_k", integer(f"{name}.top_k", self.top_k, low=1,
                                                  high=self.model.n_experts))
        object.__setattr__(self, "w_star", number(f"{name}.w_star", self.w_star, low=0,
                                                  low_open=True))
        for k, v in self._TRAINS_AS.items():
            require(getattr(self.train, k) == v, f"{name}.{k}", getattr(self.train, k),
                    f"{v!r}: train_hf_moe trains at a constant rate, without warm-up, "
                    "clipping or z-loss, for a number of steps")

    def as_dict(self) -> dict:
        return asdict(self)

    def training_key(self) -> dict:
        """What determines the trained and measured model: the whole configuration."""
        return self.as_dict()

    def key(self) -> str:
        """Cache key: a hash of :meth:`training_key`, :data:`RESULT_VERSION` and the code
        (:func:`code_fingerprint`: the knowledge base that builds the data part's dataset
        included), so a result of other code, data or sizes is never reused."""
        blob = json.dumps({"v": RESULT_VERSION, "code": code_fingerprint(),
                           **self.training_key()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        return f"Mixtral-style, {self.objective}, seed {self.seed}"

    def mixtral_config(self, vocab_size: int, max_len: int) -> dict:
        """The arguments of ``transformers.MixtralConfig`` for a dataset's vocabulary and
        sentence length."""
        m = self.model
        return dict(vocab_size=int(vocab_size), hidden_size=m.d_model,
                    intermediate_size=m.d_expert, num_hidden_layers=m.n_layers,
                    num_attention_heads=m.n_heads, num_key_value_heads=m.n_heads,
                    num_local_experts=m.n_experts, num_experts_per_tok=self.top_k,
                    max_position_embeddings=int(max_len),
                    router_aux_loss_coef=self.train.lb_alpha)


def mixtral_runs(data: DataConfig, n_experts: int, seeds: Iterable[int] = (0, 1),
                 objectives=OBJECTIVES, **knobs) -> list[MixtralRun]:
    """Every objective × seed of one experiment on ``data`` with ``n_experts`` experts per
    layer; ``knobs``: any field of a part or of the run by name (``d_model=32, steps=1000``)."""
    require(isinstance(data, DataConfig), "data", type(data).__name__,
            "a DataConfig (e.g. the training chapter's configuration's .data)")
    objectives, seeds = _objectives(objectives), _seeds(seeds)
    n_experts = integer("n_experts", n_experts, low=2)
    base = MixtralRun.from_flat(**knobs).replace(data=data, n_experts=n_experts)
    return [base.replace(objective=o, seed=s) for o in objectives for s in seeds]


# ----------------------------------------------------------------------------- arguments
def _objectives(objectives) -> tuple[str, ...]:
    objs = sequence("objectives", objectives, "a sequence of objectives (a list, even of one)")
    out = tuple(choice(f"objectives[{i}]", o, OBJECTIVES) for i, o in enumerate(objs))
    require(len(set(out)) == len(out), "objectives", list(out), "distinct objectives")
    return out


def _seeds(seeds) -> tuple[int, ...]:
    s = sequence("seeds", seeds, "a sequence of seeds (a list, even of one)")
    out = tuple(integer(f"seeds[{i}]", v, low=0) for i, v in enumerate(s))
    require(len(set(out)) == len(out), "seeds", list(out), "distinct seeds")
    return out


# ----------------------------------------------------------------------------- the cache
@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The code a run depends on: :data:`HF_ROUTING_CODE`, the task-routing training code
    fingerprint (model, knowledge datasets, losses, torch and Python versions) and the
    transformers version."""
    from ..._internal.fingerprint import source_fingerprint
    from ...hf import require_transformers
    from ..task_routing.config import code_fingerprint as training_code

    tr = require_transformers()
    return hashlib.sha256("\0".join([source_fingerprint(HF_ROUTING_CODE), training_code(),
                                     tr.__version__]).encode()).hexdigest()[:16]


RESULT_KEYS = ("version", "key", "training_key", "exact_match", "train_exact_match", "layers",
               "train_s", "cpu_s")


def result_path(cfg: MixtralRun, folder) -> Path:
    return Path(folder) / "hf_routing" / f"{cfg.key()}.json"


def _read_cached(cfg: MixtralRun, folder) -> tuple[dict | None, str | None]:
    return read_cached(result_path(cfg, folder), version=RESULT_VERSION, required=RESULT_KEYS,
                       key=cfg.key(), training_key=cfg.training_key())


def routing_run(res: dict, cached: bool | None = None) -> RoutingRun:
    """The :class:`RoutingRun` of a result (``cached``: as the result's row says, if None)."""
    layers = tuple(LayerRoutingSummary(**{**d, "counts": tuple(tuple(r) for r in d["counts"])})
                   for d in res["layers"])
    tk = res["training_key"]
    return RoutingRun(objective=tk["objective"], seed=tk["seed"],
                      exact_match=res["exact_match"], train_exact_match=res["train_exact_match"],
                      layers=layers, train_s=res["train_s"], cpu_s=res["cpu_s"],
                      cached=bool(res.get("cached", False)) if cached is None else cached)


def run_mixtral(cfg: MixtralRun, artifacts_dir=None, profile: str = "smoke") -> dict:
    """Train (:func:`moe_routing.hf.train_hf_moe`) and measure (:func:`measure_hf_model`)
    one run on its data part's dataset; with ``artifacts_dir``, write the result atomically
    (:func:`result_path`).  ``profile`` is the grid runner's argument (a run is the same in
    every profile).  A module-level function: the grid's worker processes import it."""
    from ... import hf
    from ..task_routing import knowledge_dataset

    require(isinstance(cfg, MixtralRun), "cfg", type(cfg).__name__, "a MixtralRun")
    choice("profile", profile, PROFILES)
    dataset = knowledge_dataset(cfg.data)
    t0, c0 = time.perf_counter(), time.process_time()
    t = cfg.train
    r = hf.train_hf_moe(cfg.mixtral_config(dataset.vocab_size, dataset.seq_len), dataset,
                        cfg.objective, steps=t.steps, seed=cfg.seed, batch_size=t.batch_size,
                        lr=t.lr, weight_decay=t.weight_decay,
                        lb_coef=t.lb_alpha if cfg.objective == "ce+lb" else None,
                        router_alpha=t.router_alpha, log_every=t.steps, measure_routing=False)
    layers = measure_hf_model(r.model, dataset, cfg.w_star, cfg.seed)
    res = dict(version=RESULT_VERSION, key=cfg.key(), training_key=cfg.training_key(),
               exact_match=r.exact_match, train_exact_match=r.train_exact_match,
               layers=[asdict(x) for x in layers], train_s=time.perf_counter() - t0,
               cpu_s=time.process_time() - c0, history=r.history)
    if artifacts_dir is not None:
        atomic_write_json(result_path(cfg, artifacts_dir), res)
    return json.loads(json.dumps(res))


def run_cost(cfg: MixtralRun) -> float:
    """A run's relative cost, for the longest-first order of the grid."""
    return float(cfg.train.steps * cfg.train.batch_size * cfg.model.n_layers)


def run_hf_grid(configs: Sequence[MixtralRun], artifacts_dir, profile: str = "smoke",
                progress: bool = True, workers: int | str | None = None,
                executor: str | None = None, threads: int | None = None,
                reuse_from: Sequence = ()) -> list[dict]:
    """Every run through :mod:`moe_routing.experiments.grid.executor`, reusing cached results:
    the grid runner every trained experiment shares
    (:func:`~moe_routing.experiments.grid.runner.run_cached_grid`; the arguments are those of
    :func:`~moe_routing.experiments.task_routing.runs.run_grid`, so a chapter hands it to
    :meth:`~moe_routing.experiments.grid.GridSession.run_with`).  One result per
    configuration, in order, each with ``cached``."""
    from ..grid.executor import plan
    from ..grid.runner import CachedRuns, run_cached_grid

    configs = sequence_of("configs", configs, MixtralRun)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    how = plan(executor, workers, threads=threads, devices=["cpu"])
    runs = CachedRuns(run=run_mixtral, read=_read_cached, path=result_path,
                      label=MixtralRun.label, name="Mixtral-style grid", log=log,
                      cost=run_cost)
    return run_cached_grid(runs, configs, artifacts_dir, how, reuse_from=reuse_from,
                           profile=profile, progress=progress)


# ----------------------------------------------------------------------------- over seeds
def _interval(values, lows, highs) -> Interval:
    return Interval(float(np.mean(values)), float(min(lows)), float(max(highs)), len(values))


def _wilson(p: float, n: int) -> tuple[float, float]:
    from ...boundary.mass import wilson_interval

    lo, hi = wilson_interval(np.array([round(p * n)]), n)
    return float(np.asarray(lo).reshape(-1)[0]), float(np.asarray(hi).reshape(-1)[0])


def summarise(model: str, runs: Sequence[RoutingRun], w_star: float, n_test: int
              ) -> RoutingComparison:
    """:class:`RoutingComparison` of ``runs`` (every objective × seed, each with the same
    layers); ``n_test`` the test sentences (for the exact match's binomial interval)."""
    runs = tuple(runs)
    require(len(runs) > 0, "runs", "none", "at least one run")
    objectives = tuple(dict.fromkeys(r.objective for r in runs))
    seeds = tuple(dict.fromkeys(r.seed for r in runs))
    n_layers = len(runs[0].layers)
    for r in runs:
        require(len(r.layers) == n_layers, f"runs ({r.objective}, seed {r.seed}).layers",
                len(r.layers), f"{n_layers} (every run of one model has the same layers)")
    by = {(r.objective, r.seed): r for r in runs}
    require(len(by) == len(objectives) * len(seeds), "runs",
            sorted(by), "one run per objective and seed, every combination")
    ordered = tuple(by[o, s] for o in objectives for s in seeds)
    cells, acc = [], []
    for o in objectives:
        rs = [by[o, s] for s in seeds]
        for l in range(n_layers):
            ls = [r.layers[l] for r in rs]

            def pt(name, ls=ls):
                v = [getattr(x, name) for x in ls]
                return _interval(v, v, v)

            counts = np.sum([np.asarray(x.counts) for x in ls], axis=0)
            cells.append(ObjectiveLayer(
                objective=o, layer=l + 1,
                nmi=_interval([x.nmi for x in ls], [x.nmi_low for x in ls],
                              [x.nmi_high for x in ls]),
                purity=pt("purity"), load_entropy=pt("load_entropy"),
                max_utilisation=pt("max_utilisation"),
                bm=_interval([x.bm for x in ls], [x.bm_low for x in ls], [x.bm_high for x in ls]),
                margin_median=pt("margin_median"),
                counts=tuple(tuple(int(c) for c in row) for row in counts)))
        ems = [r.exact_match for r in rs]
        wil = [_wilson(p, n_test) for p in ems]
        acc.append(_interval(ems, [min(w[0], p) for w, p in zip(wil, ems)],
                             [max(w[1], p) for w, p in zip(wil, ems)]))
    return RoutingComparison(model=model, objectives=objectives, seeds=seeds, n_layers=n_layers,
                             w_star=w_star, runs=ordered, cells=tuple(cells),
                             exact_match=tuple(acc))


def hf_routing_experiment(configs: Sequence[MixtralRun], artifacts_dir=None, *,
                          session=None, profile: str = "smoke") -> RoutingComparison:
    """Train (or read back) and measure every run of ``configs`` (:func:`mixtral_runs`: every
    objective × seed on one data part) and summarise them over seeds.  ``session``: a
    :class:`~moe_routing.experiments.grid.GridSession` whose backend and cached-run folders
    the grid uses (None: :func:`run_hf_grid`'s defaults); cached under ``artifacts_dir``."""
    from ..task_routing import knowledge_dataset

    configs = sequence_of("configs", configs, MixtralRun)
    require(len({c.data for c in configs}) == 1 and len({c.w_star for c in configs}) == 1,
            "configs", sorted({(c.data.n_tasks, c.w_star) for c in configs}),
            "runs on one data part at one w_star (one comparison)")
    rows = (run_hf_grid(configs, artifacts_dir, profile=profile) if session is None
            else session.run_with(run_hf_grid, configs, artifacts_dir, profile=profile))
    n_test = len(knowledge_dataset(configs[0].data).encode_split("test"))
    return summarise("Mixtral-style", [routing_run(r) for r in rows], configs[0].w_star,
                     n_test)


def library_routing(models: Mapping[tuple[str, int], object], dataset,
                    exact_match: Mapping[tuple[str, int], float],
                    w_star: float = 0.1) -> RoutingComparison:
    """The same measurements on the library's trained models (``{(objective, seed):
    MoETransformer}``, one layer, top-1; e.g.
    :func:`moe_routing.experiments.task_routing.runs.load_model` of the training chapter's runs) at
    the same positions; ``exact_match`` their test exact match, same keys (the runs' ``accuracy``)."""
    from ..bridge.margins import router_margins

    dataset = _dataset(dataset)
    require(isinstance(models, Mapping) and len(models) > 0, "models", type(models).__name__,
            "a non-empty mapping {(objective, seed): trained MoETransformer}")
    require(isinstance(exact_match, Mapping) and set(exact_match) == set(models),
            "exact_match keys", sorted(exact_match) if isinstance(exact_match, Mapping)
            else type(exact_match).__name__, f"the keys of models {sorted(models)}")
    runs = []
    for (o, s), m in models.items():
        choice("objective", o, OBJECTIVES)
        mg = router_margins(m, dataset, positions="determined")
        top1 = np.argmax(mg.logits, axis=1)
        n_exp = mg.logits.shape[1]
        lay = _layer_summary(1, top1, rm.normalized_mutual_info(rm.task_expert_counts(
            mg.task, top1, dataset.n_tasks, n_exp)), mg.task, mg.sentence, mg.margins,
            dataset.n_tasks, n_exp, w_star, s)
        em = number(f"exact_match[{o!r}, {s}]", exact_match[o, s], low=0, high=1)
        runs.append(RoutingRun(o, int(s), em, float("nan"), (lay,), 0.0, 0.0, False))
    return summarise("library", runs, w_star, len(dataset.encode_split("test")))


__all__ = ["CONTRAST_PAIRS", "HF_ROUTING_CODE", "MixtralRun", "code_fingerprint",
           "hf_routing_experiment", "library_routing", "mixtral_runs", "result_path",
           "routing_run", "run_cost", "run_hf_grid", "run_mixtral", "summarise"]
