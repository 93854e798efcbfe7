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
* ``history`` — the training losses every 10 steps and ``evals``: test exact match after each
  eighth of training (:data:`EVAL_POINTS`): the learning curves, and what :func:`convergence`
  reads (the evaluations read the model only: training is unchanged).

The training budget is a number of optimiser **steps** (``steps``), the same for every grid
cell: a run with more tasks sees each sentence fewer times, but gets no more updates (a budget
in epochs would confound the task axis of the grid with the training length).

The objectives and their coefficients are the package's (``moe_routing.model.losses``): Switch
load balancing ``α·E·Σ_i f_i P_i`` with α = 0.01, the task-router loss weighted by
``router_alpha`` = 1 on every supervised position, designated expert ``task mod E``.  Model and
optimiser sizes are **ours**: the paper reports none of them.

Task selection (ours): the ``n_tasks`` tasks are the first ``n_tasks`` of a permutation of the
dataset's relations drawn with ``task_seed``, so a run with 20 tasks contains the 10 of a run
with 10 tasks (a nested grid) and a different ``task_seed`` draws other relations.

Caching: a run's JSON file is named by a hash of its configuration *and of the code that trains
and measures it* (:data:`~moe_routing.experiments.task_routing.config.TRAINING_CODE`: the model, the
knowledge datasets, the routing measurements, the runtime and this module; the torch and Python
versions and the platform);
:func:`run_grid` skips a configuration whose file exists, so rerunning a chapter whose text
changed does not retrain, while a change to that code invalidates every cached run.  With one expert the
three objectives are the same training problem (the router's softmax is identically 1: the LB
term is the constant α and the task-router loss is 0, both with zero gradient), so they share
one run, recorded as such in each result (``shared_with``).  Results are written atomically
(:mod:`moe_routing._internal.atomic`); a cached file that is corrupt, truncated or not a result of its
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

import json
import logging
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..._internal.atomic import jsonable, atomic_write_json
from ..._internal.validation import choice, fail, flag, number, sequence, sequence_of
from ...model.losses import OBJECTIVES
from ..._internal.runtime import PROFILES
from .config import RESULT_VERSION, ExperimentConfig, _config
from .data import _object_targets, evaluate_run, oracle_route, run_parts
from .store import (_copy_weights, _read_cached, _read_weights, _save_weights, result_path,
                    weights_path)

log = logging.getLogger(__name__)

#: test exact match is evaluated after each eighth of training: the learning curves, and the
#: change over the last quarter that :func:`convergence` reads (6/8 → 8/8)
EVAL_POINTS = 8

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
    fresh = json.loads(json.dumps(fresh, default=jsonable))
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
    res, model = _train_and_measure(cfg, profile, progress, artifacts_dir)
    if artifacts_dir is not None:
        # weights first: a JSON on disk then (nearly always) has its weights beside it, and
        # an interruption in between leaves a JSON that load_model can recompute
        _save_weights(cfg, model, artifacts_dir)
        atomic_write_json(result_path(cfg, artifacts_dir), res)
    return res


def _train_and_measure(cfg: ExperimentConfig, profile: str, progress: bool,
                       folder: str | Path | None = None):
    """(the result dict of :func:`run_experiment`, the trained model as measured); ``folder``:
    where the collapsed variant looks for its trained CE run (:func:`_trained_base`)."""
    import torch

    from ...model import exact_match
    from ..._internal.runtime import provenance, resolve_device

    device = resolve_device(cfg.device)          # ValueError before any work
    t0 = time.perf_counter()
    parts = run_parts(cfg, device, progress)
    ds, te, data, mcfg, tcfg = parts.dataset, parts.test, parts.data, parts.model, parts.loop

    def test_accuracy(m) -> dict:                 # read-only: training is not changed by it
        return {"accuracy": exact_match(m, te.tokens, te.object_pos, _object_targets(te),
                                        route=oracle_route(cfg, te)).accuracy}

    model, hist = _trained_base(cfg, folder) or _train_variant(cfg, mcfg, data, tcfg,
                                                               test_accuracy)
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        if cfg.variant == "collapsed":
            _collapse_routing(model, te)
        metrics = evaluate_run(model, ds, cfg.model.n_experts, cfg=cfg)
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


def _trained_base(cfg: ExperimentConfig, folder: str | Path | None):
    """For the collapsed variant, ``(model, history)`` of its CE run when ``folder`` holds that
    run's result and weights, else None (then it is trained here).  The variant *is* the
    trained CE model, measured with its routing collapsed, and its training is that run's
    step for step (same configuration, data order and seed: bit for bit on one machine), so
    reading it back measures the same model without training it twice; the grid starts the
    variant last (:func:`run_cost`), when its CE run is written."""
    if cfg.variant != "collapsed" or folder is None:
        return None
    from ...model.train import History

    base = cfg.replace(variant="none")
    res, _problem = _read_cached(base, folder)
    if res is None or not weights_path(base, folder).exists():
        return None
    h = res["history"]
    hist = History(step=h["step"], total=h["total"], ce=h["ce"], lb=h["lb"],
                   router=h["router"], evals=h["evals"], tokens_per_s=h["tokens_per_s"])
    return _read_weights(base, weights_path(base, folder)), hist


def _train_variant(cfg: ExperimentConfig, mcfg, data, tcfg, eval_fn):
    """``build_and_train`` for ordinary runs (bit for bit); the broken variants build the same
    seeded model and change one thing (:data:`~moe_routing.experiments.task_routing.config.VARIANTS`)."""
    import torch

    from ...model import MoETransformer, TrainData, build_and_train, train
    from ...model.train import History
    from ..._internal.runtime import seed_everything

    eval_every = max(1, cfg.train.steps // EVAL_POINTS)
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
    from ...model import collect_routing

    rec = collect_routing(model, te.inputs, te.task, te.loss_mask)
    busiest = int(np.bincount(rec.expert[:, 0].numpy(),
                              minlength=model.config.n_experts).argmax())
    model.knock_out([e for e in range(model.config.n_experts) if e != busiest], "reroute")


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
             executor: str | None = None, threads: int | None = None) -> list[dict]:
    """Run every configuration, reusing cached results.

    A result is looked up in ``artifacts_dir``, then in each folder of ``reuse_from`` (e.g. the
    artifacts of the chapter's previous execution: the pipeline gives every execution a fresh
    folder); one found there is copied into ``artifacts_dir``.  Each returned result has
    ``cached`` (True when not trained in this call) and, for one-expert runs that reuse the
    ``ce`` run, ``shared_with`` naming that key.  Configurations with the same training key are
    trained once per call even without an artifacts folder.

    The missing runs are trained by :mod:`moe_routing.experiments.grid.executor`: ``executor``
    ``'local'`` (processes on this machine, each with ``threads`` torch threads, default the
    caller's count;
    ``workers`` of them, ``None``/``'auto'``: as many as make workers × threads = cores,
    1: in this process) or ``'ray'`` (Ray tasks on the cluster at ``RAY_ADDRESS``, or on a Ray
    instance started here for the grid).  Left ``None`` they come from ``MOE_GRID_EXECUTOR`` and
    ``MOE_GRID_WORKERS``, else ``local`` and auto.  Every run seeds itself and does not depend
    on the others, so the results (and the cache keys) are those of a serial call whatever the
    executor.  Each result is written (atomically) as soon as its run finishes, so an
    interrupted grid resumes where it stopped.  ``progress`` adds a tqdm bar to the log lines.

    A run that raises does not stop the others: every other run finishes and is written, then
    :class:`~moe_routing.experiments.grid.tasks.GridError` lists the failed runs (key,
    configuration, one-line reason); its ``results`` holds the rows of the others.
    """
    from ..grid.executor import plan
    from ..grid.runner import CachedRuns, run_cached_grid

    configs = sequence_of("configs", configs, ExperimentConfig)
    choice("profile", profile, PROFILES)
    progress = flag("progress", progress)
    how = plan(executor, workers, threads=threads, devices=sorted({c.device for c in configs}))
    runs = CachedRuns(run=run_experiment, read=_read_cached, path=result_path, label=run_label,
                      name="task_routing", log=log, copy_extra=_copy_weights,
                      row_extra=_shared_with, cost=run_cost)
    return run_cached_grid(runs, configs, artifacts_dir, how, reuse_from=reuse_from,
                           profile=profile, progress=progress)


def run_cost(cfg: ExperimentConfig) -> float:
    """A run's training time, roughly, in arbitrary units: the order a grid starts its runs in
    (longest first, :func:`~moe_routing.experiments.grid.runner.run_cached_grid`), never a result.
    Steps × sentences per step × (the vocabulary's size, about the tasks' facts, plus the rest of
    the step's work); 0 for the untrained variant.  On 2 cores it puts the 20-task runs (about 25 s
    each) before the 10-task ones (about 20 s) and the stopped-early, collapsed and untrained variants
    last."""
    if cfg.variant == "untrained":
        return 0.0
    if cfg.variant == "collapsed":               # its CE run read back (_trained_base)
        return 1.0
    return float(cfg.train.steps * cfg.train.batch_size
                 * (cfg.data.n_tasks * cfg.data.n_pairs + 1000))


def _shared_with(cfg: ExperimentConfig, row: dict) -> None:
    """A one-expert run of another objective is the ``ce`` run: its row names that key."""
    if cfg.model.n_experts == 1 and cfg.objective != "ce":
        row["shared_with"] = cfg.key()


def convergence(result: dict, tail: float = 0.2, metric: str = "accuracy") -> dict:
    """Has a run stopped improving?  Two measurements from its ``history``.

    ``ce_drop`` — the relative decrease of the logged training cross-entropy from the window
    of steps ``[(1 − 2·tail)·S, (1 − tail)·S)`` to the last window ``[(1 − tail)·S, S]``: each
    logged value is the loss of one batch, so a window mean averages the batch noise out; a
    value near 0 means the loss had flattened.  ``acc_change`` — test exact match at the end
    minus test exact match at the evaluation closest to three quarters of training (the
    ``evals`` of the history):
    whether the quantity the chapter compares was still moving.  The cosine schedule lowers the
    learning rate towards the end, so a flat tail can also mean a slow optimiser; the two
    numbers are what the chapter's convergence rule judges, the reader sees both.  A run too
    short to have a logged loss in both windows (or without evaluations) gets NaN for what
    cannot be measured; the chapter's rule refuses NaN, so such a run cannot pass as converged.
    ``metric``: the evaluation's key of the accuracy judged (``accuracy``; a two-hop run's
    ``held_out``, the quantity its verdicts compare).
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
    acc = {int(e["step"]): float(e[metric]) for e in evals}
    # the evaluation closest to three quarters of training, strictly before the last one
    q3 = [s for s in acc if s < max(acc, default=0) and s >= 0.6 * total]
    q3_step = min(q3, key=lambda s: abs(s - 0.75 * total)) if q3 else None
    acc_change = (acc[max(acc)] - acc[q3_step]) if q3_step is not None else float("nan")
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
