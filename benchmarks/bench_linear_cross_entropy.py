"""The training loop's cross-entropy on a CPU: the logits tensor against factored logits.

The training chapter's runs spend most of a step on the unembedding and the softmax over the
vocabulary: (1,290 supervised positions × 1,443 tokens) logits per batch for a 20-task run.  The
loop on a CPU now computes that cross-entropy block of rows by block
(:mod:`moe_routing.model.factored_logits`), each block's logits in cache; before, it made the
whole tensor and passed over it five times in memory.  This benchmark times both with the real
loop (``moe_routing.model.train``, ``FACTORED_LOGITS_ON_CPU`` switched) on the chapter's own
default-profile data and model (E = 7, entity codes of rank 4, batch 128, one torch thread):

* **alone**: one process;
* **two at once**: two processes training side by side, as ``make book`` runs them (2 workers on
  2 cores) -- where the two share the machine's caches and memory bandwidth.

Every ratio is measured in one run: the two paths alternate, round after round, so load from
other processes hits both alike; the ratio printed is the median over rounds of
(tensor path's time / factored path's time) per step (> 1: the factored path is faster).  The
last lines say how far the two paths' losses are apart after the same steps (rounding only).

Usage: ``python benchmarks/bench_linear_cross_entropy.py [--steps 200] [--rounds 3]
[--tasks 20 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time

TRAIN = "moe_routing.model.train"


def one_run(factored: bool, n_tasks: int, steps: int) -> dict:
    """Train the chapter's E = 7 CE run on ``n_tasks`` tasks for ``steps`` steps; ms/step."""
    import torch

    from moe_routing.experiments.task_routing.data import run_parts
    from moe_routing.experiments.task_routing.plan import training_plan
    from moe_routing.model import MoETransformer

    torch.set_num_threads(1)
    loop = importlib.import_module(TRAIN)
    loop.FACTORED_LOGITS_ON_CPU = factored
    plan = training_plan(seeds=[0], n_relations=50, n_pairs=50, n_templates=5,
                         fig2_tasks=n_tasks, fig2_experts=7, grid_tasks=[n_tasks],
                         grid_experts=[7], d_model=32, n_heads=2, d_expert=8, steps=steps,
                         batch_size=128, lr=0.01, codes_variant=dict(entity_codes=4), rule_power=False)
    cfg = next(c for c in plan.fig2 if c.objective == "ce")
    parts = run_parts(cfg, "cpu")
    data, mcfg, tcfg = parts.data, parts.model, parts.loop
    torch.manual_seed(0)
    model = MoETransformer(mcfg)
    t0 = time.perf_counter()
    hist = loop.train(model, data, tcfg)
    return {"ms_per_step": 1e3 * (time.perf_counter() - t0) / steps, "vocab": parts.dataset.vocab_size,
            "final_loss": hist.total[-1]}


def in_processes(factored: bool, n_tasks: int, steps: int, at_once: int) -> list[dict]:
    """``at_once`` fresh processes training side by side; their results."""
    cmd = [sys.executable, __file__, "--one", "factored" if factored else "tensor",
           str(n_tasks), str(steps)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(at_once)]
    out = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a benchmark process failed (exit {p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tasks", type=int, nargs="+", default=[20, 10])
    p.add_argument("--json", default=None)
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        mode, n_tasks, steps = args.one
        print(json.dumps(one_run(mode == "factored", int(n_tasks), int(steps))))
        return 0
    out = {"steps": args.steps, "rounds": args.rounds, "cases": []}
    print(f"{args.steps} steps per run, {args.rounds} rounds, paths alternating; ratio = "
          "tensor / factored time per step (> 1: factored faster)")
    for n_tasks in args.tasks:
        for at_once in (1, 2):
            times = {True: [], False: []}
            losses = {}
            for _ in range(args.rounds):
                for factored in (False, True):
                    res = in_processes(factored, n_tasks, args.steps, at_once)
                    times[factored].append(statistics.mean(r["ms_per_step"] for r in res))
                    losses[factored] = res[0]["final_loss"]
                    vocab = res[0]["vocab"]
            ratio = statistics.median(a / b for a, b in zip(times[False], times[True]))
            case = {"tasks": n_tasks, "vocab": vocab, "at_once": at_once,
                    "tensor_ms": statistics.median(times[False]),
                    "factored_ms": statistics.median(times[True]), "ratio": ratio,
                    "loss_gap": abs(losses[True] - losses[False])}
            out["cases"].append(case)
            print(f"  {n_tasks} tasks (vocabulary {vocab}), {at_once} at once: tensor "
                  f"{case['tensor_ms']:.1f} ms/step, factored {case['factored_ms']:.1f} ms/step"
                  f", ×{ratio:.2f}; loss after {args.steps} steps differs by "
                  f"{case['loss_gap']:.1e}", flush=True)
    if args.json:
        from moe_routing._internal.atomic import atomic_write_json
        atomic_write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
