"""Paper A §4: train one-layer MoE transformers with three objectives and measure routing.

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
  ``routing_object`` — only the position that predicts the object (the last token before ⋆2).
  Each is :func:`moe_routing.routing_metrics.routing_summary`: P(E|T), purity, NMI, diagonal
  (designated expert ``task mod E``) and Hungarian-matched accuracy, router entropy, expert
  utilisation.
* ``params`` — total parameters and active parameters per token (embedding rows, attention,
  router, the expert actually used, unembedding).

The objectives and their coefficients are the package's (``moe_routing.model.losses``): Switch
load balancing ``α·E·Σ_i f_i P_i`` with α = 0.01, the task-router loss weighted by
``router_alpha`` = 1 on every supervised position, designated expert ``task mod E``.  Model and
optimiser sizes are **ours**: the paper reports none of them.

Task selection (ours): the ``n_tasks`` tasks are the first ``n_tasks`` of a permutation of the
dataset's relations drawn with ``task_seed``, so a run with 20 tasks contains the 10 of a run
with 10 tasks (a nested grid) and a different ``task_seed`` draws other relations.

Caching: a run's JSON file is named by a hash of its configuration *and of the code that trains
and measures it* (every module of the package, and the torch version); :func:`run_grid` skips
a configuration whose file exists, so rerunning a chapter whose text changed does not retrain,
while any change to the library invalidates every cached run.  With one expert the
three objectives are the same training problem (the router's softmax is identically 1: the LB
term is the constant α and the task-router loss is 0, both with zero gradient), so they share
one run, recorded as such in each result (``shared_with``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..atomic import atomic_write_json
from ..model.losses import OBJECTIVES

#: version of the result format and of the measurement code; part of every cache key
RESULT_VERSION = 1


@dataclass(frozen=True)
class ExperimentConfig:
    """One training run of paper A's experiments.  Sizes are ours (the paper gives none).

    Data: ``n_relations`` relations of the knowledge base (the pool the tasks are drawn from),
    ``n_pairs`` (subject, object) pairs and ``n_templates`` templates per relation, split seed
    ``data_seed``; ``n_tasks`` of them chosen with ``task_seed``.
    Model: ``d_model``, ``n_heads``, ``d_expert`` (width of each expert), ``n_experts``, top-1
    Switch gate.  Training: ``epochs`` passes over the training sentences with ``batch_size``,
    AdamW at ``lr`` (cosine schedule of the training loop), ``seed`` (initialisation and data
    order), ``lb_alpha`` and ``router_alpha`` the loss weights, ``device`` and ``amp`` (bfloat16
    autocast on CUDA).
    """

    n_tasks: int
    n_experts: int
    objective: str
    seed: int = 0
    n_relations: int = 50
    n_pairs: int = 200
    n_templates: int = 5
    data_seed: int = 0
    task_seed: int = 0
    d_model: int = 128
    n_heads: int = 4
    d_expert: int = 128
    epochs: int = 30
    batch_size: int = 256
    lr: float = 3e-3
    warmup_steps: int = 20
    lb_alpha: float = 0.01
    router_alpha: float = 1.0
    device: str = "cpu"
    amp: bool = True

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, accepted: str) -> None:
            if not ok:
                raise ValueError(f"ExperimentConfig.{name} = {getattr(self, name)!r} is "
                                 f"invalid; accepted: {accepted}")

        ints = ("n_tasks", "n_experts", "seed", "n_relations", "n_pairs", "n_templates",
                "data_seed", "task_seed", "d_model", "n_heads", "d_expert", "epochs",
                "batch_size", "warmup_steps")
        for name in ints:
            v = getattr(self, name)
            if isinstance(v, np.integer):
                object.__setattr__(self, name, int(v))
            need(isinstance(getattr(self, name), int) and not isinstance(v, bool), name,
                 "an integer")
        need(self.objective in OBJECTIVES, "objective", ", ".join(OBJECTIVES))
        need(self.n_relations >= 1, "n_relations", "an integer ≥ 1")
        need(1 <= self.n_tasks <= self.n_relations, "n_tasks",
             f"an integer in [1, n_relations={self.n_relations}]")
        need(self.n_experts >= 1, "n_experts", "an integer ≥ 1")
        need(self.n_pairs >= 2, "n_pairs", "an integer ≥ 2")
        need(self.n_templates >= 1, "n_templates", "an integer ≥ 1")
        need(self.n_heads >= 1, "n_heads", "an integer ≥ 1")
        need(self.d_model >= 1 and self.d_model % self.n_heads == 0, "d_model",
             f"an integer ≥ 1 divisible by n_heads={self.n_heads}")
        need(self.d_expert >= 1, "d_expert", "an integer ≥ 1")
        need(self.epochs >= 1, "epochs", "an integer ≥ 1")
        need(self.batch_size >= 1, "batch_size", "an integer ≥ 1")
        need(self.warmup_steps >= 0, "warmup_steps", "an integer ≥ 0")
        need(isinstance(self.lr, (int, float)) and self.lr > 0, "lr", "a number > 0")
        need(isinstance(self.lb_alpha, (int, float)) and self.lb_alpha >= 0, "lb_alpha",
             "a number ≥ 0")
        need(isinstance(self.router_alpha, (int, float)) and self.router_alpha >= 0,
             "router_alpha", "a number ≥ 0")
        need(self.device in ("auto", "cpu", "cuda"), "device", "auto, cpu, cuda")

    def as_dict(self) -> dict:
        return asdict(self)

    def training_key(self) -> dict:
        """What determines the trained model: the config, with the objective replaced by
        ``ce`` when there is one expert (the three objectives coincide there)."""
        d = self.as_dict()
        if self.n_experts == 1:
            d["objective"] = "ce"
        return d

    def key(self) -> str:
        """Cache key: hash of :meth:`training_key`, the result format version and the code
        fingerprint (a result computed by other code is never reused)."""
        blob = json.dumps({"v": RESULT_VERSION, "code": code_fingerprint(),
                           **self.training_key()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def replace(self, **changes) -> "ExperimentConfig":
        return replace(self, **changes)


# The code a training run's result depends on: the model, its training and evaluation, the
# knowledge datasets, the measurements and this module (not the book tooling, not the boundary-
# mass or landscape modules, not the claims' wording).
TRAINING_CODE = ("model", "knowledge", "experiments", "routing_metrics.py", "runtime.py")


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
    perm = np.random.default_rng(cfg.task_seed).permutation(cfg.n_relations)
    return sorted(int(i) for i in perm[:cfg.n_tasks])


@lru_cache(maxsize=8)
def _sub_dataset(n_relations, n_pairs, n_templates, data_seed, tasks: tuple[int, ...]):
    full = _full_dataset(n_relations, n_pairs, n_templates, data_seed)
    if full.n_tasks < n_relations:
        raise ValueError(f"the knowledge base provides {full.n_tasks} relations; "
                         f"n_relations={n_relations} asks for more")
    return full.subset(list(tasks))


def experiment_dataset(cfg: ExperimentConfig):
    """The :class:`~moe_routing.knowledge.KnowledgeDataset` of the run's ``n_tasks`` tasks."""
    return _sub_dataset(cfg.n_relations, cfg.n_pairs, cfg.n_templates, cfg.data_seed,
                        tuple(task_selection(cfg)))


# ----------------------------------------------------------------------------- evaluation
def _object_targets(split):
    import torch

    return split.tokens[torch.arange(len(split)), split.object_pos]          # (M,)


def evaluate_run(model, ds, n_experts: int, batch_size: int = 512) -> dict:
    """Every measurement of the module docstring, for a trained model on dataset ``ds``."""
    import torch

    from .. import routing_metrics as rm
    from ..model import collect_routing, exact_match, valid_next_token_mass

    te, tr = ds.encode_split("test"), ds.encode_split("train")
    acc = exact_match(model, te.tokens, te.object_pos, _object_targets(te))
    n_tr = min(len(tr), 2000)
    acc_tr = exact_match(model, tr.tokens[:n_tr], tr.object_pos[:n_tr],
                         _object_targets(tr)[:n_tr])
    per_task = np.bincount(te.task.numpy(), weights=acc.correct.numpy().astype(float),
                           minlength=ds.n_tasks) / np.maximum(
        np.bincount(te.task.numpy(), minlength=ds.n_tasks), 1)

    # valid-next-token mass, batched (the (M, n, V) mask would not fit for large V)
    device = next(model.parameters()).device
    inputs, loss_mask = te.inputs, te.loss_mask                               # (M, n-1)
    obj_pred = torch.zeros_like(loss_mask)
    obj_pred[torch.arange(len(te)), te.object_pos - 1] = True                 # predicts object
    masses, masses_obj = [], []
    with torch.no_grad():
        for s in range(0, len(te), batch_size):
            sl = slice(s, s + batch_size)
            logits = model(inputs[sl].to(device)).logits.float().cpu()       # (b, n-1, V)
            valid = ds.valid_next_mask(te.prefix_node[sl, :-1])               # (b, n-1, V)
            m, _ = valid_next_token_mass(logits, valid)
            masses.append(m[loss_mask[sl]])
            masses_obj.append(m[obj_pred[sl]])
    mass, mass_obj = torch.cat(masses), torch.cat(masses_obj)

    rec_all = collect_routing(model, inputs, te.task, loss_mask)
    rec_obj = collect_routing(model, inputs, te.task, obj_pred)
    routing_all = rm.routing_summary(rec_all.task, rec_all.expert[:, 0], ds.n_tasks, n_experts,
                                     rec_all.probs)
    routing_obj = rm.routing_summary(rec_obj.task, rec_obj.expert[:, 0], ds.n_tasks, n_experts,
                                     rec_obj.probs)
    pc = rm.active_parameters(model, rec_all.expert)
    return dict(
        accuracy=acc.accuracy, train_accuracy=acc_tr.accuracy,
        accuracy_per_task=per_task.tolist(),
        valid_mass=float(mass.mean()), valid_mass_min=float(mass.min()),
        valid_mass_object=float(mass_obj.mean()),
        routing_all=routing_all, routing_object=routing_obj,
        params=dict(total=pc.total, active=pc.active, experts_total=pc.experts_total,
                    experts_active=pc.experts_active, active_fraction=pc.active_fraction),
        n_test=len(te), n_train=len(tr), n_routing_positions_all=int(rec_all.task.numel()),
    )


# ----------------------------------------------------------------------------- one run
def result_path(cfg: ExperimentConfig, artifacts_dir: str | Path) -> Path:
    """Where the run's JSON lives: ``<artifacts_dir>/task_routing/<key>.json``."""
    return Path(artifacts_dir) / "task_routing" / f"{cfg.key()}.json"


def load_result(cfg: ExperimentConfig, artifacts_dir: str | Path | None) -> dict | None:
    """The cached result of ``cfg`` (None when absent or written by another format version)."""
    if artifacts_dir is None:
        return None
    p = result_path(cfg, artifacts_dir)
    if not p.exists():
        return None
    res = json.loads(p.read_text())
    if res.get("version") != RESULT_VERSION or res.get("training_key") != cfg.training_key():
        return None
    return res


def run_experiment(cfg: ExperimentConfig, artifacts_dir: str | Path | None = None,
                   profile: str = "smoke", progress: bool = False) -> dict:
    """Train and evaluate one configuration; write its JSON when ``artifacts_dir`` is given.

    Returns the result dict: ``config``, ``training_key``, ``dataset`` (task names, sizes),
    ``history`` (losses), the measurements of :func:`evaluate_run`, ``wall_s`` and
    ``provenance``.
    """
    import torch

    from ..model import MoEConfig, TrainConfig, TrainData, build_and_train
    from ..runtime import provenance, resolve_device

    device = resolve_device(cfg.device)          # ValueError before any work
    t0 = time.perf_counter()
    ds = experiment_dataset(cfg)
    tr = ds.encode_split("train")
    data = TrainData.from_split(tr)
    mcfg = MoEConfig(vocab_size=ds.vocab_size, max_len=tr.inputs.shape[1], d_model=cfg.d_model,
                     n_heads=cfg.n_heads, n_experts=cfg.n_experts, d_expert=cfg.d_expert,
                     top_k=1, gate="switch")
    tcfg = TrainConfig(objective="ce" if cfg.n_experts == 1 else cfg.objective, lr=cfg.lr,
                       epochs=cfg.epochs, batch_size=cfg.batch_size,
                       warmup_steps=cfg.warmup_steps, lb_alpha=cfg.lb_alpha,
                       router_alpha=cfg.router_alpha, seed=cfg.seed, device=device,
                       amp=cfg.amp, progress=progress, log_every=10)
    model, hist = build_and_train(mcfg, data, tcfg)
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        metrics = evaluate_run(model, ds, cfg.n_experts)
    res = dict(
        version=RESULT_VERSION, key=cfg.key(), config=cfg.as_dict(),
        training_key=cfg.training_key(), model_config=mcfg.as_dict(),
        train_config=tcfg.as_dict(),
        dataset=dict(tasks=[t.name for t in ds.tasks], labels=[t.label for t in ds.tasks],
                     vocab_size=ds.vocab_size, seq_len=ds.seq_len, **ds.split_stats()),
        history=dict(step=hist.step, total=hist.total, ce=hist.ce, lb=hist.lb,
                     router=hist.router, tokens_per_s=hist.tokens_per_s),
        steps=tcfg.total_steps(len(data)), train_s=train_s,
        wall_s=time.perf_counter() - t0, provenance=provenance(profile, device).as_dict(),
        **metrics)
    if artifacts_dir is not None:
        atomic_write_json(result_path(cfg, artifacts_dir), res)
    return res


# ----------------------------------------------------------------------------- grids
def grid_configs(n_tasks: Iterable[int], n_experts: Iterable[int],
                 objectives: Iterable[str] = OBJECTIVES, seeds: Iterable[int] = (0,),
                 **common) -> list[ExperimentConfig]:
    """Every combination, validated up front (a bad value fails before any training)."""
    return [ExperimentConfig(n_tasks=k, n_experts=e, objective=o, seed=s, **common)
            for k in n_tasks for e in n_experts for o in objectives for s in seeds]


def run_grid(configs: Sequence[ExperimentConfig], artifacts_dir: str | Path | None,
             profile: str = "smoke", progress: bool = True,
             reuse_from: Sequence[str | Path] = ()) -> list[dict]:
    """Run every configuration, reusing cached results.

    A result is looked up in ``artifacts_dir``, then in each folder of ``reuse_from`` (e.g. the
    artifacts of the chapter's previous execution: the pipeline gives every execution a fresh
    folder); one found there is copied into ``artifacts_dir``.  Each returned result has
    ``cached`` (True when not trained in this call) and, for one-expert runs that reuse the
    ``ce`` run, ``shared_with`` naming that key.  Configurations with the same training key are
    trained once per call even without an artifacts folder.
    """
    from tqdm.auto import tqdm

    configs = list(configs)
    done: dict[str, dict] = {}
    out = []
    for cfg in tqdm(configs, disable=not progress, desc="runs"):
        key = cfg.key()
        if key in done:
            res, cached = done[key], True
        else:
            res = load_result(cfg, artifacts_dir)
            for folder in reuse_from:
                if res is not None:
                    break
                res = load_result(cfg, folder)
                if res is not None and artifacts_dir is not None:
                    atomic_write_json(result_path(cfg, artifacts_dir), res)
            cached = res is not None
            if res is None:
                res = run_experiment(cfg, artifacts_dir, profile=profile)
            done[key] = res
        row = dict(res)
        row["config"] = cfg.as_dict()             # the requested objective, not the shared one
        row["cached"] = cached
        if cfg.n_experts == 1 and cfg.objective != "ce":
            row["shared_with"] = key
        out.append(row)
    return out


def results_frame(results: Sequence[dict]):
    """One row per run: configuration, accuracies, valid mass, routing scalars, parameters."""
    import pandas as pd

    rows = []
    for r in results:
        c = r["config"]
        ra, ro = r["routing_all"], r["routing_object"]
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
            steps=r["steps"], wall_s=r["wall_s"], cached=r.get("cached", False)))
    return pd.DataFrame(rows)
