"""Calibrate the two-hop experiment's defaults: do one- and two-layer MoEs compose facts?

Run:  .venv/bin/python benchmarks/calibrate_two_hop.py [--quick] [--out FILE]

The default grid of :mod:`moe_routing.experiments.two_hop.runs` — {1, 2 layers} × {ce, ce+lb,
ce+router} × 2 seeds on the default :class:`~moe_routing.experiments.two_hop.config.TwoHopConfig`
(chains city → country → capital and country → language → script, 60 facts per relation,
3 single-hop and 2–3 two-hop templates, d_model 64, 4 experts of 64 neurons, 800 steps) — is
trained and, per cell (mean over seeds, 95 % interval of
:func:`~moe_routing.experiments.accuracy_interval`), the script prints

* exact match on single-hop test sentences, on seen compositions in an unseen template, and on
  held-out compositions (the test of composition);
* the majority baseline of the held-out queries and the held-out exact match on the queries
  whose answer is not the majority object (what composition has to explain);
* the training exact match on two-hop sentences and how much the seen-composition accuracy
  still moved over the last quarter of training (largest over the seeds): a default is
  usable when training has converged on the seen facts;
* routing at the object-predicting position: the fraction of two-hop queries sent at layer 1
  to the expert the hop-1 task's single-hop queries use (reuse), and at layer 2 to the hop-2
  task's.

The JSON (``benchmarks/results/two_hop.json``, written atomically) holds the table, the commit
and the wall time.  Runs are cached (``build/calibration_two_hop/``): a second call with
unchanged code prints the table at once.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from moe_routing._internal.atomic import atomic_write_json
from moe_routing._internal.runtime import git_commit
from moe_routing.experiments.two_hop.config import TwoHopConfig, two_hop_grid
from moe_routing.experiments.two_hop.runs import run_two_hop_grid, two_hop_cells

ROOT = Path(__file__).resolve().parents[1]



def moving(result: dict) -> float:
    """|seen-composition accuracy at the end − after three quarters| of one run."""
    evals = result["history"]["evals"]
    return abs(evals[-1]["seen"] - evals[-2]["seen"]) if len(evals) >= 2 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, 200 steps (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "two_hop.json"))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of each run (1: on a shared machine, threads that "
                         "spin-wait for a busy core cost far more than they bring)")
    ap.add_argument("--workers", default=None, help="runs at once (default: cores / threads)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = TwoHopConfig()
    seeds = [0] if args.quick else [0, 1]
    configs = two_hop_grid(seeds=seeds, base=base, **(dict(steps=200) if args.quick else {}))
    t0 = time.perf_counter()
    results = run_two_hop_grid(configs, ROOT / "build" / "calibration_two_hop",
                               profile="default", progress=False, workers=args.workers)
    wall = time.perf_counter() - t0
    cells = two_hop_cells(results)
    rows = []
    for cell in cells.to_dict("records"):
        mine = [r for r in results if r["config"]["model"]["n_layers"] == cell["n_layers"]
                and r["config"]["objective"] == cell["objective"]]
        cell["train_two_hop"] = float(np.mean([r["train_two_hop"] for r in mine]))
        cell["seen_moving_last_quarter"] = float(max(moving(r) for r in mine))
        cell["run_wall_s"] = float(np.mean([r["wall_s"] for r in mine]))
        cell["n_held_out"] = int(mine[0]["held_out"]["n"])
        rows.append(cell)
    pct = lambda x: f"{100 * x:5.1f}"  # noqa: E731
    print(f"{'L':>2} {'objective':<10} {'single':>13} {'seen comp.':>13} {'held-out':>13} "
          f"{'majority':>8} {'non-maj.':>8} {'train 2h':>8} {'moving':>6} "
          f"{'reuse l1h1':>10} {'reuse l2h2':>10} {'s/run':>5}")
    for r in rows:
        print(f"{r['n_layers']:>2} {r['objective']:<10} "
              + " ".join(f"{pct(r[k])} ±{pct(r[k + '_half_width'])}"
                         for k in ("single_hop", "two_hop_seen", "held_out"))
              + f" {pct(r['majority_baseline']):>8} {pct(r['held_out_non_majority']):>8} "
              f"{pct(r['train_two_hop']):>8} {pct(r['seen_moving_last_quarter']):>6} "
              f"{pct(r['l1_hop1_reuse']):>10} "
              f"{'–' if np.isnan(r['l2_hop2_reuse']) else pct(r['l2_hop2_reuse']):>10} "
              f"{r['run_wall_s']:>5.1f}")
    print(f"{len(results)} runs in {wall:.0f} s; {rows[0]['n_held_out']} held-out queries per run "
          "(percentages; ± the 95 % half-width)")
    if not args.quick:
        atomic_write_json(Path(args.out), dict(commit=git_commit(ROOT), config=base.as_dict(),
                                               seeds=seeds, rows=rows, wall_s=wall,
                                               threads=args.threads))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
