"""Wall time of a training grid by executor: one process with every core's thread vs a pool of
single-threaded worker processes vs Ray, and each backend's overhead per task.

Small runs use several threads poorly (their matrices are small, every step synchronises the
threads), so ``cores`` runs side by side, one thread each, finish a grid sooner than one run
after another with ``cores`` threads.  Measured in one run, interleaved (``--rounds``):

1. grid wall time, sequential (1 process × ``cores`` threads) vs the local pool (``cores``
   workers × 1 thread, start-up of the workers included): the ratio is the pool's speed-up;
   sequential with one thread too, which separates the two causes (threads that help little,
   processes that run side by side);
2. the same grid on Ray (``cores`` tasks at once × 1 thread) on an instance started beforehand
   (its start-up is printed apart: it is paid once per session, the pool's once per grid);
   Ray and the pool run with one thread each, so their results must be identical;
3. overhead per task: trivial tasks (``abs``) through each backend, timed from the first result
   to the last (the workers' start-up is over by then): what each run pays to be dispatched.

The machine's load average is printed with the numbers: other processes on the cores slow the
multi-threaded sequential baseline most (its threads wait for each other at every step).
Usage: ``python benchmarks/bench_grid.py [--runs 8] [--steps 400] [--rounds 1] [--no-ray]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

import torch

from moe_routing.experiments.grid import executor as ex
from moe_routing.experiments.task_routing.runs import grid_configs, run_grid
from moe_routing.experiments.grid import ray_cluster

#: the training chapter's smoke sizes; 400 steps: runs of a few seconds with one thread
SMALL = dict(n_relations=8, n_pairs=20, n_templates=5, d_model=32, n_heads=4, d_expert=32,
             batch_size=64, lr=0.01)
#: where the rows of two backends may differ: wall-clock measurements
TIMING = ("wall_s", "train_s", "cached", "provenance")


def grid(runs: int, steps: int) -> list:
    cfgs = grid_configs([2, 3, 4, 5], [2, 3, 4], ["ce", "ce+lb", "ce+router"], steps=steps,
                        **SMALL)
    assert runs <= len(cfgs), f"--runs at most {len(cfgs)}"
    return cfgs[:runs]


def timed_grid(cfgs, executor: str, workers: int, threads: int) -> tuple[float, list]:
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    rows = run_grid(cfgs, None, progress=False, executor=executor, workers=workers)
    return time.perf_counter() - t0, rows


def per_task(n: int, how: ex.Plan, repeats: int = 3) -> float:
    """Seconds per dispatched no-op task: from the first result to the last (the start-up of the
    workers is over by the first), best of ``repeats`` (other processes only ever add time)."""
    best = float("inf")
    for _ in range(repeats):
        arrived: list[float] = []
        tasks = [ex.Task(str(i), "no-op", (-i,)) for i in range(n)]
        failures = ex.run_tasks(abs, tasks, how,
                                on_result=lambda _t, _r, a=arrived: a.append(time.perf_counter()))
        assert not failures and len(arrived) == n, failures
        best = min(best, (arrived[-1] - arrived[0]) / (n - 1))
    return best


def comparable(rows: list) -> list:
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in TIMING}
        r["history"] = {k: v for k, v in r["history"].items() if k != "tokens_per_s"}
        out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="runs in the grid")
    ap.add_argument("--steps", type=int, default=400, help="optimiser steps per run")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (best of)")
    ap.add_argument("--cores", type=int, default=ex.cpu_cores(), help="cores to fill")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray measurements")
    args = ap.parse_args()
    for var in (ex.ENV_EXECUTOR, ex.ENV_WORKERS, "RAY_ADDRESS"):
        os.environ.pop(var, None)
    with_ray = not args.no_ray and importlib.util.find_spec("ray") is not None
    cfgs, n = grid(args.runs, args.steps), args.cores
    load0 = os.getloadavg()
    print(f"grid: {len(cfgs)} runs of {args.steps} steps (d_model 32, 8 relations), "
          f"{n} cores; load average before {load0[0]:.1f}")

    best = {"sequential": float("inf"), "sequential-1": float("inf"), "pool": float("inf"),
            "ray": float("inf")}
    session = ray_cluster.ray_session(workers=n, threads=1) if with_ray else None
    if with_ray:
        t0 = time.perf_counter()
        session.__enter__()
        ray_start = time.perf_counter() - t0
    try:
        for _ in range(args.rounds):
            t, _rows = timed_grid(cfgs, "local", 1, n)
            best["sequential"] = min(best["sequential"], t)
            t, _rows = timed_grid(cfgs, "local", 1, 1)
            best["sequential-1"] = min(best["sequential-1"], t)
            t, pool_rows = timed_grid(cfgs, "local", n, 1)
            best["pool"] = min(best["pool"], t)
            if with_ray:
                t, ray_rows = timed_grid(cfgs, "ray", n, 1)
                best["ray"] = min(best["ray"], t)
        torch.set_num_threads(1)
        pool_task = per_task(1000, ex.Plan("local", n, 1))
        ray_task = per_task(1000, ex.Plan("ray", n, 1)) if with_ray else float("nan")
    finally:
        if with_ray:
            session.__exit__(None, None, None)
    load1 = os.getloadavg()

    print(f"sequential, 1 process × {n} threads: {best['sequential']:7.1f} s")
    print(f"sequential, 1 process × 1 thread:   {best['sequential-1']:7.1f} s")
    print(f"local pool, {n} workers × 1 thread:   {best['pool']:7.1f} s  "
          f"(speed-up {best['sequential'] / best['pool']:.2f}x; "
          f"{best['sequential-1'] / best['pool']:.2f}x over one thread)")
    if with_ray:
        same = comparable(ray_rows) == comparable(pool_rows)
        print(f"ray, {n} tasks × 1 thread:            {best['ray']:7.1f} s  "
              f"(speed-up {best['sequential'] / best['ray']:.2f}x; ray / pool "
              f"{best['ray'] / best['pool']:.2f}); results identical to the pool's: {same}")
        print(f"ray start-up (once per session): {ray_start:.1f} s; the grid with it: "
              f"{best['ray'] + ray_start:.1f} s (ray / pool {(best['ray'] + ray_start) / best['pool']:.2f})")
    print(f"overhead per task (no-op tasks): local pool {1e3 * pool_task:.2f} ms, "
          f"ray {1e3 * ray_task:.2f} ms"
          + (f" ({ray_task / pool_task:.1f}x the pool's)" if with_ray and pool_task > 0 else ""))
    print(f"load average after {load1[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
