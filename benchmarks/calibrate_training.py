"""Calibrate the training chapter's sizes: where does a one-layer MoE keep its facts?

Run:  .venv/bin/python benchmarks/calibrate_training.py [--quick] [--out FILE]

Paper A's accuracy claims ("task routing costs no accuracy", "fewer active parameters at equal
accuracy") carry information only in a regime where the models *could* lose accuracy: where
storing the dictionaries is hard and the number of experts matters.  This script trains, for
one task set (20 tasks of 50 facts each, 5 templates per relation; the last two rows 200 facts
each), models of three residual widths ``d_model`` with experts of different widths and
numbers, two seeds each, and prints

* test exact match (mean over seeds, 95 % interval: the larger of the seed-to-seed standard
  error and the test set's binomial standard error, times 1.96 — see
  :func:`moe_routing.experiments.accuracy_interval`),
* training-sentence exact match (were the facts memorised at all?),
* the parameters a token uses (active) and the facts per expert neuron,
* how much the test accuracy still moved over the last quarter of training (largest over the
  seeds): a row still moving by more than 2 pp compares training speeds, not capacities.

What it found when it was written is in the training chapter's section *Why these sizes*;
the JSON it writes (``benchmarks/results/training_calibration.json``) is what that section
reads, with the commit it was measured at.  The runs are cached like the chapter's
(``build/calibration/``): a second call with unchanged code prints the table at once.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from moe_routing._internal.atomic import atomic_write_json
from moe_routing._internal.runtime import git_commit
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.accuracy import accuracy_interval
from moe_routing.experiments.task_routing.runs import convergence, run_grid

ROOT = Path(__file__).resolve().parents[1]

#: the shared part of every calibration run (the chapter's default profile, K = 20)
COMMON = dict(n_tasks=20, n_relations=50, n_templates=5, n_heads=2, steps=1500,
              batch_size=128, lr=0.01, objective="ce")

#: (label, d_model, n_experts, d_expert, n_pairs): the models compared; the last rows take the
#: paper's 200 pairs per relation (four times the facts, the same 20 tasks)
MODELS = [
    ("d_model 64, 1 expert of 4 neurons", 64, 1, 4, 50),
    ("d_model 64, 1 expert of 32", 64, 1, 32, 50),
    ("d_model 64, 7 experts of 32", 64, 7, 32, 50),
    ("d_model 32, 1 expert of 4", 32, 1, 4, 50),
    ("d_model 32, 1 expert of 32", 32, 1, 32, 50),
    ("d_model 32, 7 experts of 32", 32, 7, 32, 50),
    ("d_model 16, 1 expert of 8", 16, 1, 8, 50),
    ("d_model 16, 1 expert of 32", 16, 1, 32, 50),
    ("d_model 16, 3 experts of 32", 16, 3, 32, 50),
    ("d_model 16, 7 experts of 32", 16, 7, 32, 50),
    ("d_model 16, 1 expert of 224 (dense, same total)", 16, 1, 224, 50),
    ("d_model 16, 1 expert of 32, 200 pairs", 16, 1, 32, 200),
    ("d_model 16, 7 experts of 32, 200 pairs", 16, 7, 32, 200),
]


def configs(seeds) -> list[tuple[str, ExperimentConfig]]:
    return [(label, ExperimentConfig.from_flat(d_model=dm, n_experts=e, d_expert=de,
                                               n_pairs=n_pairs, seed=s, **COMMON))
            for label, dm, e, de, n_pairs in MODELS for s in seeds]



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, 300 steps (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"
                                         / "training_calibration.json"))
    args = ap.parse_args()
    seeds = [0] if args.quick else [0, 1]
    pairs = configs(seeds)
    if args.quick:
        pairs = [(label, c.replace(steps=300)) for label, c in pairs]
    t0 = time.perf_counter()
    results = run_grid([c for _, c in pairs], ROOT / "build" / "calibration",
                       profile="default", progress=False)
    wall = time.perf_counter() - t0
    rows = []
    for label, dm, e, de, n_pairs in MODELS:
        res = [r for (lab, _), r in zip(pairs, results) if lab == label]
        iv = accuracy_interval([r["accuracy"] for r in res], [r["n_test"] for r in res])
        train = float(np.mean([r["train_accuracy"] for r in res]))
        # still learning? the largest change of test accuracy over the last quarter
        moving = float(max(abs(convergence(r)["acc_change"]) for r in res))
        neurons = e * de
        rows.append(dict(model=label, d_model=dm, n_experts=e, d_expert=de, n_pairs=n_pairs,
                         accuracy=iv.mean, accuracy_low=iv.low, accuracy_high=iv.high,
                         interval_from=iv.source, train_accuracy=train,
                         acc_change_last_quarter=moving,
                         active_params=float(np.mean([r["params"]["active"] for r in res])),
                         total_params=float(np.mean([r["params"]["total"] for r in res])),
                         facts=int(res[0]["n_test"]), facts_per_neuron=res[0]["n_test"]
                         / neurons, seeds=len(res), n_test=int(res[0]["n_test"]),
                         wall_s=float(np.mean([r["wall_s"] for r in res]))))
    print(f"{'model':<50} {'test EM (95 % interval)':>24} {'train EM':>9} {'active':>8} "
          f"{'facts/neuron':>12} {'moving (pp)':>11}")
    for r in rows:
        print(f"{r['model']:<50} {100 * r['accuracy']:>8.1f} ({100 * r['accuracy_low']:.1f}–"
              f"{100 * r['accuracy_high']:.1f}) {100 * r['train_accuracy']:>9.1f} "
              f"{r['active_params'] / 1e3:>7.1f}k {r['facts_per_neuron']:>12.1f} "
              f"{100 * r['acc_change_last_quarter']:>11.1f}")
    print(f"{len(results)} runs in {wall:.0f} s")
    if not args.quick:
        atomic_write_json(Path(args.out), dict(commit=git_commit(ROOT), common=COMMON, seeds=seeds,
                                               rows=rows, wall_s=wall))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
