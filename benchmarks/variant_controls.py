"""The four controls of the task-router loss on our variant, at the default profile's size.

Run:  .venv/bin/python benchmarks/variant_controls.py [--quick] [--workers 2] [--out FILE]

Why.  The training chapter's controls (the loss's gradient stopped at the router's input; the
loss only at the task-determined positions; routing by the task itself with no router loss;
a tenth of its weight) are 20 runs as long as the variant's longest, beyond the default
profile's budget on two cores, so the default profile does not train them (``controls =
False``) and the ``paper`` profile does.  This script trains them once at the default
profile's size -- its own parameters, read from ``notebooks/params/default.yaml`` as the book's
pipeline reads them (the shared A-Fig. 2 group included) -- beside the variant's three
objectives (the task-router and CE runs the controls are paired with; reused from the default
build's artifacts when they are there), and writes what the chapter shows: per control its test
exact match, its paired differences to the task-router run and to CE, and what they say of
the router's cost (``claims.control_effect``).

The JSON (``benchmarks/results/variant_controls.json``) carries the commit and the variant's
configuration; the chapter reads it only when that configuration is the profile's own (a
table of another size is never shown as this one's).  Runs are cached in
``build/variant_controls/``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from moe_book import project as pl
from moe_routing._internal.atomic import atomic_write_json
from moe_routing._internal.chapters.training import control_groups
from moe_routing._internal.runtime import git_commit
from moe_routing.experiments.task_routing import claims, plan_knobs, run_grid, training_plan

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "build" / "variant_controls"
#: where the default build keeps the variant's runs (read back by key, never written)
REUSE = ROOT / "build" / "default" / "artifacts" / "training"


def interval(d) -> dict:
    return dict(mean=d.mean, low=d.low, high=d.high)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="two seeds of 100 steps (a smoke run: nothing is written)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reuse", nargs="*", default=[str(REUSE)],
                    help="folders whose cached runs are read back by key (default: the "
                         "default build's training artifacts)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"
                                         / "variant_controls.json"))
    args = ap.parse_args()
    p = pl.load_params(pl.Project(ROOT), "default")["training"]
    # the chapter's knobs, by the names the plan takes; the plan's own switches set here
    knobs = {**plan_knobs(p), "rule_power": False, "controls": True}
    if args.quick:
        knobs.update(seeds=[0, 1], codes_variant={**knobs["codes_variant"], "steps": 100})
    plan = training_plan(**knobs)
    t0 = time.perf_counter()
    # one torch thread per run, as the chapter trains (the thread count changes the last bits)
    runs = run_grid([*plan.variant, *plan.controls], ARTIFACTS, profile="default",
                    progress=True, workers=args.workers, threads=1,
                    reuse_from=[Path(f) for f in args.reuse if Path(f).is_dir()])
    wall = time.perf_counter() - t0
    variant, ctrl = runs[:len(plan.variant)], runs[len(plan.variant):]
    router = [r for r in variant if r["config"]["objective"] == "ce+router"]
    ce = [r for r in variant if r["config"]["objective"] == "ce"]
    rows = []
    for name, rs in control_groups(ctrl).items():
        vs_router, vs_ce = claims.cell_difference(rs, router), claims.cell_difference(rs, ce)
        rows.append(dict(control=name, accuracy=interval(claims.cell_interval(rs)),
                         vs_router=interval(vs_router), vs_ce=interval(vs_ce),
                         effect=claims.control_effect(vs_router, vs_ce)))
        print(f"{name:<46} {100 * rows[-1]['accuracy']['mean']:5.1f} %  − router "
              f"{100 * vs_router.mean:+5.1f} [{100 * vs_router.low:+.1f}, "
              f"{100 * vs_router.high:+.1f}]  − CE {100 * vs_ce.mean:+5.1f}  "
              f"{rows[-1]['effect']}")
    print(f"{len(runs)} runs ({sum(r['cached'] for r in runs)} read back) in {wall:.0f} s")
    if not args.quick:
        atomic_write_json(Path(args.out), dict(
            commit=git_commit(ROOT), profile="default", seeds=knobs["seeds"],
            codes_variant=knobs["codes_variant"], fig2=[knobs["fig2_tasks"],
                                                        knobs["fig2_experts"]],
            router=interval(claims.cell_interval(router)), rows=rows, wall_s=wall))
        print(f"written: {args.out}")


if __name__ == "__main__":
    main()
