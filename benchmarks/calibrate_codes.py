"""Calibrate the training chapter's regime: fixed entity codes, so that the experts hold the facts.

Run:  .venv/bin/python benchmarks/calibrate_codes.py [--quick] [--out FILE]

Why.  The earlier probes (``calibrate_training.py``, ``calibrate_capacity.py``) found no regime
in which the number of experts decides the accuracy: a one-layer model whose entities have
learned embedding rows stores each fact in those rows (every subject's row is a private memory)
and its linear read-out, and the experts are hardly needed.  The hypothesis tested here (ours):
give the entities **fixed random codes of rank k** (``MoEShape.entity_codes``; the template
words keep learned rows, the unembedding stays learned).  Then everything before the experts
is, up to the LayerNorms and the attention weights, linear in a k-dimensional code, and a linear
read-out of k dimensions separates only about 2k subjects per relation (Cover's count), while a
relation here has 50 -- the rest of each dictionary must be stored in the experts' neurons, as
in the hand-built construction, whose embeddings are fixed codes too.

What it trains: the chapter's 20 tasks (50 facts each, 5 templates, the sentence-level 80/20
split), ``d_model`` 32, two heads, 1,500 steps; for learned rows and codes of rank 8, 6 and
4: one expert of 8 neurons, seven experts of 8 with each objective (CE, CE + load balancing,
CE + task router at weight 1 and at 0.1), and one dense FFN of 56 neurons (the seven experts'
neurons in one expert: the same total, seven times the active expert parameters).  Two seeds
each.

Columns: test exact match (mean over seeds, 95 % interval:
:func:`moe_routing.experiments.accuracy_interval`, the larger of the seed-to-seed and the
binomial standard error), training exact match, the test exact match with every expert switched
off (``knock_out``: how much the model stores outside the experts), active parameters, and how
much test accuracy still moved over the last quarter of training.

What it found when it was written is in the training chapter's section *Why these sizes*; the
JSON (``benchmarks/results/codes_calibration.json``) is what that section reads, with the
commit.  Runs are cached in ``build/calibration/`` like the chapter's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from moe_routing._internal.atomic import atomic_write_json
from moe_routing._internal.runtime import git_commit
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.accuracy import accuracy_interval
from moe_routing.experiments.task_routing.runs import convergence, run_grid
from moe_routing.experiments.task_routing.data import _object_targets, experiment_dataset
from moe_routing.experiments.task_routing.runs import load_model
from moe_routing.model import exact_match

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "build" / "calibration"

#: the shared part of every run
COMMON = dict(n_tasks=20, n_relations=50, n_pairs=50, n_templates=5, d_model=32, n_heads=2,
              steps=1500, batch_size=128, lr=0.01)
#: entity embeddings compared: learned rows (None) and fixed codes of these ranks
CODES = [None, 8, 6, 4]
#: (label, n_experts, d_expert, objective, other knobs); the task-router loss at the chapter's
#: weight (router_alpha 1, the loss added to CE as the paper writes it) and at a tenth of it
MODELS = [
    ("1 expert of 8", 1, 8, "ce", {}),
    ("7 experts of 8, CE", 7, 8, "ce", {}),
    ("7 experts of 8, CE + LB", 7, 8, "ce+lb", {}),
    ("7 experts of 8, CE + task router", 7, 8, "ce+router", {}),
    ("7 experts of 8, CE + 0.1 task router", 7, 8, "ce+router", {"router_alpha": 0.1}),
    ("dense, 56 neurons (same total)", 1, 56, "ce", {}),
]


def config(codes, n_experts, d_expert, objective, other, seed, steps=None) -> ExperimentConfig:
    knobs = dict(COMMON, n_experts=n_experts, d_expert=d_expert, objective=objective,
                 seed=seed, entity_codes=codes, **other)
    if steps is not None:
        knobs["steps"] = steps
    return ExperimentConfig.from_flat(**knobs)


def experts_off_accuracy(cfg: ExperimentConfig) -> float:
    """Test exact match of the trained run with every expert's output set to zero."""
    model = load_model(cfg, ARTIFACTS, profile="default")
    te = experiment_dataset(cfg).encode_split("test")
    model.knock_out(range(cfg.n_experts))
    with torch.no_grad():
        return float(exact_match(model, te.tokens, te.object_pos, _object_targets(te)).accuracy)



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, 200 steps (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"
                                         / "codes_calibration.json"))
    args = ap.parse_args()
    seeds = [0] if args.quick else [0, 1]
    steps = 200 if args.quick else None
    plan = [((codes, label), config(codes, e, f, obj, other, s, steps))
            for codes in CODES for label, e, f, obj, other in MODELS for s in seeds]
    t0 = time.perf_counter()
    results = run_grid([c for _, c in plan], ARTIFACTS, profile="default", progress=False)
    wall = time.perf_counter() - t0
    rows = []
    for codes in CODES:
        for label, e, f, obj, other in MODELS:
            got = [(c, r) for (key, c), r in zip(plan, results) if key == (codes, label)]
            res = [r for _, r in got]
            iv = accuracy_interval([r["accuracy"] for r in res], [r["n_test"] for r in res])
            rows.append(dict(
                codes=codes, model=label, n_experts=e, d_expert=f, objective=obj,
                router_alpha=other.get("router_alpha", 1.0),
                accuracy=iv.mean, accuracy_low=iv.low, accuracy_high=iv.high,
                interval_from=iv.source,
                train_accuracy=float(np.mean([r["train_accuracy"] for r in res])),
                accuracy_experts_off=float(np.mean([experts_off_accuracy(c) for c, _ in got])),
                acc_change_last_quarter=float(max(abs(convergence(r)["acc_change"])
                                                  for r in res)),
                active_params=float(np.mean([r["params"]["active"] for r in res])),
                seeds=len(res), n_test=int(res[0]["n_test"]),
                wall_s=float(np.mean([r["wall_s"] for r in res]))))
    print(f"{'entities':<14} {'model':<34} {'test EM (95 % interval)':>24} {'train':>6} "
          f"{'off':>6} {'active':>7} {'moving':>7}")
    for r in rows:
        ent = "learned rows" if r["codes"] is None else f"codes, rank {r['codes']}"
        print(f"{ent:<14} {r['model']:<34} {100 * r['accuracy']:>8.1f} "
              f"({100 * r['accuracy_low']:.1f}–{100 * r['accuracy_high']:.1f}) "
              f"{100 * r['train_accuracy']:>6.1f} {100 * r['accuracy_experts_off']:>6.1f} "
              f"{r['active_params'] / 1e3:>6.1f}k {100 * r['acc_change_last_quarter']:>7.1f}")
    print(f"{len(results)} runs in {wall:.0f} s")
    if not args.quick:
        atomic_write_json(Path(args.out), dict(commit=git_commit(ROOT), common=COMMON, seeds=seeds,
                                               codes=CODES, rows=rows, wall_s=wall))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
