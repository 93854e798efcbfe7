"""Two-hop knowledge (ours, beyond paper A): do the experts of single-hop facts compose?

One *run* = one :class:`TwoHopConfig`: build the mixed dataset of
:func:`moe_routing.knowledge.two_hop_dataset.build_mixed_dataset` (the single-hop tasks of some chains
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
:mod:`~moe_routing.experiments.task_routing.runs`; every entity is one token):

* ``single_hop`` — the single-hop test sentences (facts mostly seen in training in another
  template: the split is by sentence);
* ``two_hop_seen`` — two-hop compositions seen in training, asked in a template *not* trained
  on: of every composition the dataset puts in training, the sentence of one template (template
  ``p mod T`` for the composition's index p, so every template is asked) is kept out of
  training here.  It separates "the model memorised this composition" from "it memorised the
  sentence";
* ``held_out`` — the held-out compositions of the dataset: (s, o) in no training sentence, both
  hops (s, m) and (m, o) in training in every template, and never *copyable* (o ≠ s, o ≠ m:
  :class:`~moe_routing.knowledge.two_hop_dataset.MixedKnowledgeDataset`).  This is the test of
  composition.  Each of the three carries ``interval``
  (:func:`~moe_routing.experiments.accuracy.accuracy_interval`, one run: the test set's error
  clustered by fact -- the templates of one composition are not independent), and the
  per-sentence ``correct`` (0/1) and ``facts`` (cluster ids) that a cell's interval over
  seeds and a paired difference (:func:`held_out_differences`) are computed from;
* the base rates a held-out score must be read against: ``majority_baseline`` (the accuracy of
  answering, for every query of a two-hop task, the object most frequent among that task's
  training sentences: city → country → capital is dominated by a few countries),
  ``copy_middle_baseline`` (answering with the first hop's object m, a training fact: right
  exactly when o = m), each with its per-sentence ``*_correct``, and
  ``accuracy_non_majority`` (exact match on the held-out queries whose object is *not* the
  majority one); ``identity_fraction`` (held-out queries whose object is their subject) and
  ``copyable_fraction`` (whose object is their subject or their middle entity: 0 by
  construction of the split); ``composition_accuracy`` (held-out compositions answered in every template);
* ``routing`` — one entry per layer, at the position that predicts the object: for the two-hop
  queries labelled by their hop-h task (h = 1, 2), ``designated_fraction`` (routed to the hop's
  designated expert ``task mod E``, what ``ce+router`` asks for), ``reuse_fraction`` (routed to
  the expert the hop's *single-hop* queries use most at the same layer: expert reuse, which
  needs no designated expert and so reads the same for every objective), the same two on the
  held-out queries only, and :func:`~moe_routing.routing_metrics.routing_summary` (purity, NMI
  against the hop labels); ``reuse_se`` is [standard error, degrees of freedom] of the reuse
  share clustered by composition.  NMI and purity only see the partition of the queries: when every
  chain has its own first and its own second hop (the default), the hop-1 and hop-2 labellings
  are the same partition and get the same NMI, so which hop a layer serves is read from the
  two fractions; with a single chain the labels are one task and NMI is 0 by definition.
  ``matched_hop`` is the hop of the layer (layer l ↔ hop l); the single-hop
  queries' summary and, per two-hop task, the single-hop and two-hop majority experts;
* ``history`` — losses every 10 steps and, at each quarter of training, the three accuracies.

The routing is counted on every sentence of a kind (training and test): it is a property of the
computation on a query, and the held-out queries alone are few (their own fractions are kept).

Caching: a run's JSON is named by a hash of its configuration,
:data:`~moe_routing.experiments.two_hop.config.RESULT_VERSION` and the training code fingerprint of
:mod:`~moe_routing.experiments.task_routing.runs` (every module that trains and measures, the torch
and Python versions); it is written atomically, read back by
:func:`run_two_hop` and :func:`run_two_hop_grid` when present, and a cached file that is
corrupt, truncated or the result of another configuration is never read: one warning line
names it and the run is redone.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Sequence

from ..._internal.atomic import jsonable, atomic_write_json
from ..._internal.runtime import PROFILES
import numpy as np

from ..._internal.validation import choice, fail, flag, integer, require, sequence, sequence_of
from ..grid.cache import load_cached, read_cached
from ..task_routing.data import entity_code_start
from .config import RESULT_VERSION, TwoHopConfig, _config
from .measure import (_correct, _take, evaluate_two_hop, hop_tasks, layer_targets, two_hop_dataset,
                      two_hop_split)

log = logging.getLogger(__name__)

#: the accuracies of the history are evaluated after each quarter of training
EVAL_QUARTERS = 4


# ----------------------------------------------------------------------------- one run
def result_path(cfg: TwoHopConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's JSON lives: ``<artifacts_dir>/two_hop/<key>.json``."""
    _config(cfg)
    if not (isinstance(artifacts_dir, (str, os.PathLike)) and os.fspath(artifacts_dir)):
        fail("artifacts_dir", artifacts_dir, "a folder path")
    return Path(artifacts_dir) / "two_hop" / f"{cfg.key()}.json"


#: what a cached result must hold to be used (a file lacking any of them is re-run)
RESULT_KEYS = ("version", "key", "config", "training_key", "single_hop", "two_hop_seen",
               "held_out", "majority_baseline", "experts_off", "routing", "history", "steps",
               "wall_s")


def _read_cached(cfg: TwoHopConfig, folder) -> tuple[dict | None, str | None]:
    """:func:`moe_routing.experiments.grid.cache.read_cached` for the file of ``cfg`` in ``folder``."""
    return read_cached(result_path(cfg, folder), version=RESULT_VERSION, required=RESULT_KEYS,
                       key=cfg.key(), training_key=cfg.training_key())


def load_two_hop(cfg: TwoHopConfig, artifacts_dir) -> dict | None:
    """The cached result of ``cfg``, or None (absent, another format, or unusable: then one
    warning line names the file)."""
    _config(cfg)
    if artifacts_dir is None:
        return None
    return load_cached(result_path(cfg, artifacts_dir), version=RESULT_VERSION,
                       required=RESULT_KEYS, key=cfg.key(), training_key=cfg.training_key(),
                       log=log, label="two_hop")


def run_two_hop(cfg: TwoHopConfig, artifacts_dir: str | Path | None = None,
                profile: str = "smoke", progress: bool = False) -> dict:
    """Train and measure one configuration (module docstring); with ``artifacts_dir``, return
    its cached result when there is a usable one, else write the new one atomically.

    Returns a JSON-ready dict: ``config``, ``key``, ``dataset`` (tasks, hops, sizes), the
    measurements of :func:`evaluate_two_hop`, ``history``, ``steps``, ``train_s``, ``wall_s``,
    ``provenance``; ``cached`` says whether it was read from the cache.
    """
    import torch

    from ...model import TrainData, build_and_train
    from ..._internal.runtime import provenance, resolve_device

    _config(cfg)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    device = resolve_device(cfg.device)
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
    data = TrainData.from_split(tr, layer_tasks=layer_targets(tr, hops, cfg.model.n_layers))
    coded = ({} if cfg.model.entity_codes is None          # the entities' rows fixed codes
             else {"code_start": entity_code_start(ds)})
    mcfg = cfg.model.config(ds.vocab_size, enc.inputs.shape[1], top_k=1, gate="switch",
                            **coded)
    tcfg = cfg.loop_config(device, progress=progress)
    groups = {name: _take(enc, getattr(parts, name))
              for name in ("single_test", "seen", "held_out")}

    def accuracies(model) -> dict:                # read-only: training is not changed by it
        return {name: float(_correct(model, g).mean()) if len(g) else float("nan")
                for name, g in groups.items()}

    model, hist = build_and_train(mcfg, data, tcfg, eval_fn=accuracies,
                                  eval_every=max(1, cfg.train.steps // EVAL_QUARTERS))
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        metrics = evaluate_two_hop(model, ds, parts, cfg.model.n_experts)
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
    return dict(json.loads(json.dumps(res, default=jsonable)), cached=False)


# ----------------------------------------------------------------------------- grids
def run_cost(cfg: TwoHopConfig) -> float:
    """A run's training time, roughly (arbitrary units): steps × sentences per step × layers
    (a two-layer run takes about 1.6 times a one-layer one on 2 cores).  Only the order a
    grid starts its runs in: longest first (:func:`~moe_routing.experiments.grid.runner.run_cached_grid`)."""
    return float(cfg.train.steps * cfg.train.batch_size * cfg.model.n_layers)


def run_two_hop_grid(configs: Sequence[TwoHopConfig], artifacts_dir: str | Path | None,
                     profile: str = "smoke", progress: bool = True,
                     workers: int | str | None = None, executor: str | None = None,
                     threads: int | None = None,
                     reuse_from: Sequence[str | Path] = ()) -> list[dict]:
    """Run every configuration through :mod:`moe_routing.experiments.grid.executor`, reusing cached results.

    As :func:`~moe_routing.experiments.task_routing.runs.run_grid`: the configurations' keys are
    looked up in ``artifacts_dir``, then in each folder of ``reuse_from`` (an earlier
    execution's artifacts: a re-executed chapter trains nothing it has trained before; an
    unusable file is redone, with one warning line);
    the missing runs go to ``executor`` (``local``, ``ray``, ``slurm``; ``workers`` of them at
    once, ``threads`` torch threads each, default the caller's), each result written
    atomically as it arrives, so an interrupted grid resumes; a
    failed run does not stop the others and :class:`~moe_routing.experiments.grid.tasks.GridError` lists it
    at the end.  Returns one result per configuration, in order, each with ``cached``.
    """
    from ..grid.executor import plan
    from ..grid.runner import CachedRuns, run_cached_grid

    configs = sequence_of("configs", configs, TwoHopConfig)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    how = plan(executor, workers, threads=threads, devices=sorted({c.device for c in configs}))
    runs = CachedRuns(run=run_two_hop, read=_read_cached, path=result_path,
                      label=TwoHopConfig.label, name="two-hop grid", log=log,
                      cost=run_cost)
    return run_cached_grid(runs, configs, artifacts_dir, how, reuse_from=reuse_from,
                           profile=profile, progress=progress)


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
                   objective=c["objective"], seed=c["seed"])
        for name in ("single_hop", "two_hop_seen", "held_out"):
            s = r[name]
            row[name] = s["accuracy"]
            row[f"{name}_low"] = s["interval"]["low"] if s["interval"] else nan
            row[f"{name}_high"] = s["interval"]["high"] if s["interval"] else nan
        row.update(n_held_out=r["held_out"]["n"], majority_baseline=r["majority_baseline"],
                   copy_middle_baseline=r["copy_middle_baseline"],
                   copyable_fraction=r["copyable_fraction"],
                   held_out_non_majority=r["accuracy_non_majority"]["accuracy"],
                   composition_accuracy=r["composition_accuracy"],
                   train_two_hop=r["train_two_hop"], train_single_hop=r["train_single_hop"],
                   train_single_hop_experts_off=r["experts_off"]["train_single_hop"],
                   entity_codes=c["model"].get("entity_codes"))
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


def two_hop_convergence(results: Sequence[dict]) -> dict[str, tuple[float, float, float]]:
    """Run label -> (CE drop over the last fifth of training, change of held-out exact match
    over the last quarter, the noise of that change), each run once: what
    :func:`~moe_routing._internal.verdicts.training.runs_converged` judges.  Held-out exact match
    is the quantity the chapter's verdicts compare; its noise is ``1.96·√(2p(1 − p)/n)`` on the
    run's ``n`` held-out sentences (two evaluations, each with its binomial error)."""
    from ..task_routing.runs import convergence

    results = sequence("results", results, "a sequence of result dicts (from run_two_hop_grid)")
    out = {}
    for r in results:
        c, cv = r["config"], convergence(r, metric="held_out")
        words = ", word-disjoint templates" if c["data"].get("templates") else ""
        label = f"{c['model']['n_layers']} layers, {c['objective']}, seed {c['seed']}{words}"
        p, n = float(r["held_out"]["accuracy"]), int(r["held_out"]["n"])
        out[label] = (cv["ce_drop"], cv["acc_change"],
                      1.96 * float(np.sqrt(2 * p * (1 - p) / max(n, 1))))
    return out


def _cell_runs(results: Sequence[dict], n_layers: int, objective: str) -> list[dict]:
    """The runs of one (depth, objective) cell, in seed order."""
    runs = [r for r in results if r["config"]["model"]["n_layers"] == n_layers
            and r["config"]["objective"] == objective]
    return sorted(runs, key=lambda r: r["config"]["seed"])


def _per_sentence(runs: Sequence[dict], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(S, n) per-sentence correctness of the runs in group ``name`` and the (n,) facts;
    refused (named) when the runs were not scored on one test set."""
    facts = [r[name]["facts"] for r in runs]
    require(all(f == facts[0] for f in facts), f"results ({name})",
            [r["config"]["seed"] for r in runs],
            "runs scored on one test set (the same data configuration)")
    return (np.array([r[name]["correct"] for r in runs], dtype=float).reshape(len(runs), -1),
            np.asarray(facts[0]))


def _cell_interval(runs: Sequence[dict], name: str):
    """The interval of a cell's mean accuracy over seeds, the test set's term clustered by
    fact and shared by the seeds (:func:`~moe_routing.experiments.accuracy.shared_sampling_error`)."""
    from ..accuracy import accuracy_interval, shared_sampling_error

    correct, facts = _per_sentence(runs, name)
    accs = [r[name]["accuracy"] for r in runs]
    if correct.shape[1] < 2 or np.unique(facts).size < 2:
        return accuracy_interval(accs, max(correct.shape[1], 1))
    return accuracy_interval(accs, test=shared_sampling_error(correct, facts))


def _reuse_interval(runs: Sequence[dict], layer: int, hop: int):
    """The interval of a cell's mean reuse share at ``layer`` for ``hop`` (NaN: no such layer)
    -- the seeds' spread and the mean of the runs' clustered errors."""
    from ..accuracy import SamplingError, accuracy_interval

    xs = [_routing_at(r, layer, hop) for r in runs]
    if not all(xs) or any(x.get("reuse_se") is None for x in xs):
        return None
    se = SamplingError(float(np.mean([x["reuse_se"][0] for x in xs])),
                       float(min(x["reuse_se"][1] for x in xs)), "clustered by composition")
    return accuracy_interval([x["reuse_fraction"] for x in xs], test=se)


def two_hop_cells(results: Sequence[dict]):
    """One row per (n_layers, objective): the mean over seeds of each accuracy with the
    half-width of its :func:`~moe_routing.experiments.accuracy.accuracy_interval` (the seed
    spread and the test set's error *clustered by fact* -- for the held-out queries, by
    composition), the mean baselines (majority, copy the middle entity), the training exact
    match on the single-hop sentences, and the reuse shares with their half-widths -- the table
    the 1-vs-2-layer comparison is read from."""
    import pandas as pd

    frame = two_hop_frame(results)
    rows = []
    nan = float("nan")
    for (n_layers, objective), g in frame.groupby(["n_layers", "objective"], sort=True):
        runs = _cell_runs(results, int(n_layers), objective)
        row = dict(n_layers=int(n_layers), objective=objective, n_seeds=len(g))
        for name in ("single_hop", "two_hop_seen", "held_out"):
            iv = _cell_interval(runs, name)
            row[name], row[f"{name}_half_width"] = iv.mean, iv.half_width
        for col in ("majority_baseline", "copy_middle_baseline", "copyable_fraction"):
            row[col] = float(g[col].mean())
        row["held_out_non_majority"] = float(g["held_out_non_majority"].mean())
        row["train_single_hop"] = float(g["train_single_hop"].mean())
        # the witness: the same training facts with every expert's output zeroed
        row["train_single_hop_experts_off"] = float(g["train_single_hop_experts_off"].mean())
        for col in ("l1_hop1_reuse", "l2_hop2_reuse", "l1_hop1_designated",
                    "l2_hop2_designated"):
            row[col] = float(g[col].mean())
        for layer in (1, 2):
            iv = _reuse_interval(runs, layer, layer)
            row[f"l{layer}_hop{layer}_reuse_half_width"] = iv.half_width if iv else nan
        rows.append(row)
    return pd.DataFrame(rows)


def held_out_differences(results: Sequence[dict], n_layers: int = 2,
                         objective: str = "ce+router", control: tuple[int, str] = (1, "ce+router")
                         ) -> dict:
    """The held-out exact match of the cell (``n_layers``, ``objective``) against its control
    cell and the two baselines, as :class:`~moe_routing.experiments.accuracy.PairedDifference` s (fractions):

    * ``control`` -- model − control, paired by seed (the seeds both cells have);
    * ``majority`` and ``copy_middle`` -- model − baseline (each baseline is one fixed answer
      per query, the same for every seed).

    The test set's term is that of the per-sentence differences clustered by composition and
    shared by the seeds (:func:`~moe_routing.experiments.accuracy.shared_sampling_error`); with one
    seed the interval is that term alone (a lower bound on the uncertainty).  Refused (named): a cell without
    runs, cells without a common seed, runs scored on different test sets.
    """
    from ..accuracy import paired_difference, shared_sampling_error

    integer("n_layers", n_layers, low=1, high=2)
    require(isinstance(control, tuple) and len(control) == 2, "control", control,
            "a (n_layers, objective) pair")
    model = _cell_runs(results, n_layers, objective)
    base = _cell_runs(results, *control)
    for name, runs, cell in (("n_layers/objective", model, (n_layers, objective)),
                             ("control", base, control)):
        require(bool(runs), name, cell, "a (n_layers, objective) cell of the results: "
                + ", ".join(sorted({f"({r['config']['model']['n_layers']}, "
                                    f"{r['config']['objective']})" for r in results})))
    seeds = sorted({r["config"]["seed"] for r in model} & {r["config"]["seed"] for r in base})
    require(bool(seeds), "control", control, f"a cell run with a seed of {(n_layers, objective)}")
    model = [r for r in model if r["config"]["seed"] in seeds]
    base = [r for r in base if r["config"]["seed"] in seeds]
    a, facts = _per_sentence(model, "held_out")
    b, facts_b = _per_sentence(base, "held_out")
    require(np.array_equal(facts, facts_b), "control", control,
            "a cell scored on the same held-out queries")

    def diff(c: np.ndarray):                       # (S, n) per-sentence differences
        if c.shape[1] < 2 or np.unique(facts).size < 2:
            return None
        return shared_sampling_error(c, facts)

    out = dict(control=paired_difference(a.mean(1), b.mean(1), test=diff(a - b)))
    for name in ("majority", "copy_middle"):
        base_row = np.array(model[0][f"{name}_correct"], dtype=float)
        out[name] = paired_difference(a.mean(1), np.full(len(seeds), base_row.mean()),
                                      test=diff(a - base_row))
    return dict(out, seeds=seeds)


__all__ = ["held_out_differences", "load_two_hop", "result_path", "run_cost", "run_two_hop",
           "run_two_hop_grid", "two_hop_cells", "two_hop_frame"]
