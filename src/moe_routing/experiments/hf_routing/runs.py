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

Caching: one JSON per (configuration, objective, seed) under ``<artifacts_dir>/hf_routing/``,
named by a hash of the training key (sizes, objective, seed, w*, a fingerprint of the dataset's
encoded sentences and split) together with the code that trains and measures
(:data:`HF_ROUTING_CODE`, the task-routing training code fingerprint) and the transformers
version; written atomically and read back through
:func:`moe_routing.experiments.grid.cache.read_cached`, so a re-executed chapter retrains nothing
and a result of other code or data is never reused.

The parts: :mod:`.results` (what a run and a comparison hold) and
:mod:`.measure` (the positions and one model's per-layer measurement); this module
holds the model's size, the cached runs and their summary over seeds, and imports the names of
both (``from moe_routing.experiments.hf_routing.runs import ...`` is the one import path).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

import numpy as np

from ... import routing_metrics as rm
from ..._internal.atomic import atomic_write_json
from ...model.losses import OBJECTIVES
from ..._internal.validation import choice, integer, number, require, sequence
from ..grid.cache import load_cached
from .measure import _dataset, _layer_summary, measure_hf_model
from .results import Interval, LayerRoutingSummary, ObjectiveLayer, RoutingComparison, RoutingRun

log = logging.getLogger(__name__)

#: version of the cached measurement format; part of every cache key
RESULT_VERSION = 1
#: the code of a run besides the task-routing training code (paths in the package)
HF_ROUTING_CODE = ("hf", "experiments/hf_routing", "routing_metrics.py", "boundary")
#: the two contrasts of the training chapter: the task-router objective against each other
CONTRAST_PAIRS = (("ce+router", "ce"), ("ce+router", "ce+lb"))


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class MixtralSize:
    """The Mixtral-style model and its training (sizes ours): ``hidden_size`` (= d_model),
    ``intermediate_size`` (each expert's width), ``n_layers`` MoE layers, ``n_heads`` (as many
    key/value heads), ``top_k`` experts per token; ``steps`` AdamW steps of ``batch_size``
    sentences at ``lr``; ``lb_coef`` the weight of transformers' load-balancing loss in
    ``ce+lb`` (Mixtral's ``router_aux_loss_coef``), ``router_alpha`` of the task-router loss."""

    hidden_size: int = 32
    intermediate_size: int = 32
    n_layers: int = 2
    n_heads: int = 2
    top_k: int = 2
    steps: int = 200
    batch_size: int = 64
    lr: float = 0.01
    lb_coef: float = 0.02
    router_alpha: float = 1.0

    def __post_init__(self):
        for f in fields(self):
            v, name = getattr(self, f.name), f"{type(self).__name__}.{f.name}"
            if f.type in ("int", int):
                object.__setattr__(self, f.name, integer(name, v, low=1))
            else:
                object.__setattr__(self, f.name, number(name, v, low=0, low_open=True))
        require(self.hidden_size % self.n_heads == 0, "hidden_size", self.hidden_size,
                f"a multiple of n_heads = {self.n_heads}")

    def mixtral_config(self, vocab_size: int, max_len: int, n_experts: int) -> dict:
        """The arguments of ``transformers.MixtralConfig`` for a dataset's vocabulary and
        sentence length and ``n_experts`` experts per layer."""
        n_experts = integer("n_experts", n_experts, low=2)
        require(self.top_k <= n_experts, "top_k", self.top_k, f"≤ n_experts = {n_experts}")
        return dict(vocab_size=int(vocab_size), hidden_size=self.hidden_size,
                    intermediate_size=self.intermediate_size,
                    num_hidden_layers=self.n_layers, num_attention_heads=self.n_heads,
                    num_key_value_heads=self.n_heads, num_local_experts=n_experts,
                    num_experts_per_tok=self.top_k, max_position_embeddings=int(max_len),
                    router_aux_loss_coef=self.lb_coef)


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
def dataset_fingerprint(dataset) -> str:
    """SHA-256 (16 hex) of the dataset's encoded sentences, tasks and train/test split: two
    datasets with the same fingerprint give every run the same input."""
    h = hashlib.sha256()
    for split in ("train", "test"):
        enc = dataset.encode_split(split)
        for t in (enc.tokens, enc.task, enc.object_pos, enc.index):
            h.update(np.ascontiguousarray(t.numpy()).tobytes())
        h.update(split.encode())
    h.update(f"{dataset.n_tasks},{dataset.vocab_size},{dataset.seq_len}".encode())
    return h.hexdigest()[:16]


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


def _training_key(size: MixtralSize, objective: str, seed: int, n_experts: int, w_star: float,
                  data: str) -> dict:
    return dict(size=asdict(size), objective=objective, seed=seed, n_experts=n_experts,
                w_star=w_star, dataset=data)


def _key(training_key: dict) -> str:
    blob = json.dumps({"v": RESULT_VERSION, "code": code_fingerprint(), **training_key},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


RESULT_KEYS = ("version", "key", "training_key", "exact_match", "train_exact_match", "layers",
               "train_s", "cpu_s")


def _run_from(res: dict, cached: bool) -> RoutingRun:
    layers = tuple(LayerRoutingSummary(**{**d, "counts": tuple(tuple(r) for r in d["counts"])})
                   for d in res["layers"])
    tk = res["training_key"]
    return RoutingRun(objective=tk["objective"], seed=tk["seed"],
                      exact_match=res["exact_match"], train_exact_match=res["train_exact_match"],
                      layers=layers, train_s=res["train_s"], cpu_s=res["cpu_s"], cached=cached)


def train_and_measure(dataset, objective: str, seed: int, n_experts: int,
                      size: MixtralSize | None = None, w_star: float = 0.1,
                      artifacts_dir=None) -> RoutingRun:
    """One Mixtral-style run: train (:func:`moe_routing.hf.train_hf_moe`) and measure
    (:func:`measure_hf_model`); with ``artifacts_dir``, read back a usable cached result or
    write the new one atomically (module docstring)."""
    from ... import hf

    dataset = _dataset(dataset)
    objective = choice("objective", objective, OBJECTIVES)
    seed = integer("seed", seed, low=0)
    n_experts = integer("n_experts", n_experts, low=2)
    w_star = number("w_star", w_star, low=0, low_open=True)
    size = MixtralSize() if size is None else size
    require(isinstance(size, MixtralSize), "size", type(size).__name__,
            "a MixtralSize (None: its defaults)")
    tk = _training_key(size, objective, seed, n_experts, w_star, dataset_fingerprint(dataset))
    key = _key(tk)
    path = None
    if artifacts_dir is not None:
        path = Path(artifacts_dir) / "hf_routing" / f"{key}.json"
        res = load_cached(path, version=RESULT_VERSION, required=RESULT_KEYS, key=key,
                          training_key=tk, log=log, label="hf_routing")
        if res is not None:
            return _run_from(res, cached=True)
    t0, c0 = time.perf_counter(), time.process_time()
    cfg = size.mixtral_config(dataset.vocab_size, dataset.seq_len, n_experts)
    r = hf.train_hf_moe(cfg, dataset, objective, steps=size.steps, seed=seed,
                        batch_size=size.batch_size, lr=size.lr,
                        lb_coef=size.lb_coef if objective == "ce+lb" else None,
                        router_alpha=size.router_alpha, log_every=size.steps,
                        measure_routing=False)
    layers = measure_hf_model(r.model, dataset, w_star, seed)
    res = dict(version=RESULT_VERSION, key=key, training_key=tk, exact_match=r.exact_match,
               train_exact_match=r.train_exact_match, layers=[asdict(x) for x in layers],
               train_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
               history=r.history)
    if path is not None:
        atomic_write_json(path, res)
    return _run_from(json.loads(json.dumps(res)), cached=False)


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


def hf_routing_experiment(dataset, n_experts: int, seeds: Iterable[int] = (0, 1),
                          size: MixtralSize | None = None, objectives=OBJECTIVES,
                          w_star: float = 0.1, artifacts_dir=None) -> RoutingComparison:
    """Train and measure the Mixtral-style model for every objective and seed on ``dataset``
    (the training chapter's A-Fig. 2 dataset, ``n_experts`` its number of experts: task k's
    designated expert is ``k mod n_experts`` in both models); cached under ``artifacts_dir``."""
    dataset = _dataset(dataset)
    objectives, seeds = _objectives(objectives), _seeds(seeds)
    runs = [train_and_measure(dataset, o, s, n_experts, size, w_star, artifacts_dir)
            for o in objectives for s in seeds]
    return summarise("Mixtral-style", runs, w_star, len(dataset.encode_split("test")))


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


__all__ = ["CONTRAST_PAIRS", "HF_ROUTING_CODE", "MixtralSize", "code_fingerprint",
           "dataset_fingerprint", "hf_routing_experiment", "library_routing", "summarise",
           "train_and_measure"]
