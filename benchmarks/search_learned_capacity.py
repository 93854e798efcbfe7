"""Search for sizes where the experts' capacity binds *with learned entity rows* (paper A's setting).

Run:  .venv/bin/python benchmarks/search_learned_capacity.py [--quick] [--seeds 0 1] [--out FILE]

Why.  Paper A's accuracy claims are decided on the paper's setting, where every entity has a
learned embedding row.  At the chapter's sizes (20 tasks of 50 facts, ``d_model`` 32) those rows
hold the facts: one expert of 8 neurons is as accurate as seven, and most of the accuracy
survives with every expert switched off (``calibrate_codes.py``, its learned-rows block).  The
comparisons "as accurate as CE" and "fewer active parameters at equal accuracy" can only fail
where the experts hold what the model recalls.  This script looks for such sizes along the
directions the paper's data suggest (ours): the paper's 200 facts per relation (four times the
chapter's), and a narrower residual stream (``d_model`` 16: less room in each row).

What it trains, per regime, 20 tasks, 5 templates, learned rows, 3,000 steps of 128 sentences
(twice the chapter's budget, so that more facts have time to settle): one expert of 8 neurons
and seven experts of 8, both with CE (the objectives are compared where capacity binds; the
search only asks whether it does).  The witnesses
that capacity binds, both needed: **the number of experts matters** (seven experts of 8 beat
one expert of 8 by more than the interval of the difference), and **the experts hold the facts**
(test exact match with every expert switched off far below the model's).  Runs still moving by
more than 2 pp over the last quarter are marked: there a gap compares learning speeds.

The JSON (``benchmarks/results/learned_capacity.json``) is what the training chapter's section
*Why these sizes* reads, with the commit it was measured at.  Runs are cached in
``build/calibration/`` like the chapter's.
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
ARTIFACTS = ROOT / "build" / "calibration"

#: the shared part of every run: the chapter's task set and schedule, twice its steps
COMMON = dict(n_tasks=20, n_relations=50, n_templates=5, n_heads=2, steps=3000, batch_size=128,
              lr=0.01)
#: the regimes searched: (label, knobs)
REGIMES = [
    ("200 facts per relation, d_model 32", dict(n_pairs=200, d_model=32)),
    ("200 facts per relation, d_model 16", dict(n_pairs=200, d_model=16)),
]
#: (label, n_experts, d_expert, objective)
MODELS = [
    ("1 expert of 8", 1, 8, "ce"),
    ("7 experts of 8, CE", 7, 8, "ce"),
]


def config(regime: dict, n_experts: int, d_expert: int, objective: str, seed: int,
           steps: int | None = None) -> ExperimentConfig:
    knobs = dict(COMMON, **regime, n_experts=n_experts, d_expert=d_expert,
                 objective=objective, seed=seed)
    if steps is not None:
        knobs["steps"] = steps
    return ExperimentConfig.from_flat(**knobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, 200 steps (a smoke run)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"
                                         / "learned_capacity.json"))
    args = ap.parse_args()
    seeds = [0] if args.quick else args.seeds
    steps = 200 if args.quick else None
    plan = [((name, label), config(knobs, e, f, obj, s, steps))
            for name, knobs in REGIMES for label, e, f, obj in MODELS for s in seeds]
    t0 = time.perf_counter()
    results = run_grid([c for _, c in plan], ARTIFACTS, profile="default", progress=False,
                       workers=args.workers)
    wall = time.perf_counter() - t0
    rows = []
    for name, knobs in REGIMES:
        for label, e, f, obj in MODELS:
            got = [(c, r) for (key, c), r in zip(plan, results) if key == (name, label)]
            res = [r for _, r in got]
            iv = accuracy_interval([r["accuracy"] for r in res], [r["n_test"] for r in res])
            rows.append(dict(
                regime=name, **knobs, model=label, n_experts=e, d_expert=f, objective=obj,
                accuracy=iv.mean, accuracy_low=iv.low, accuracy_high=iv.high,
                accuracies=[r["accuracy"] for r in res],
                train_accuracy=float(np.mean([r["train_accuracy"] for r in res])),
                # every run records it (moe_routing.experiments.task_routing.data.experts_off_accuracy)
                accuracy_experts_off=float(np.mean([r["accuracy_experts_off"] for r in res])),
                acc_change_last_quarter=float(max(abs(convergence(r)["acc_change"])
                                                  for r in res)),
                active_params=float(np.mean([r["params"]["active"] for r in res])),
                seeds=len(res), n_test=int(res[0]["n_test"]),
                wall_s=float(np.mean([r["wall_s"] for r in res]))))
    print(f"{'regime':<36} {'model':<34} {'test EM (95 % interval)':>24} {'train':>6} "
          f"{'off':>6} {'moving':>7}")
    for r in rows:
        print(f"{r['regime']:<36} {r['model']:<34} {100 * r['accuracy']:>8.1f} "
              f"({100 * r['accuracy_low']:.1f}–{100 * r['accuracy_high']:.1f}) "
              f"{100 * r['train_accuracy']:>6.1f} {100 * r['accuracy_experts_off']:>6.1f} "
              f"{100 * r['acc_change_last_quarter']:>7.1f}")
    print(f"{len(results)} runs in {wall:.0f} s")
    if not args.quick:
        atomic_write_json(Path(args.out), dict(commit=git_commit(ROOT), common=COMMON,
                                               seeds=seeds, regimes=[n for n, _ in REGIMES],
                                               rows=rows, wall_s=wall))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
