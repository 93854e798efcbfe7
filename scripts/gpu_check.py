#!/usr/bin/env python3
"""GPU check of the training code (``make gpu-check``): about 8 minutes on one GPU.

1. Names the GPU (name, compute capability, memory; torch and its CUDA version).
2. Runs the CUDA tests (``pytest -m cuda``) in a process of their own.
3. Times a slice of the paper profile's training grid: paper-size runs (the training chapter's
   data, model and batch, from ``notebooks/params/paper.yaml``) of ``--probe-steps`` steps at
   the grid's corners that bound a step's cost -- the fewest and the most tasks (vocabulary)
   at the most experts, and the dense reference -- after a short warm-up; then the evaluations
   a run makes (test exact match at each quarter, the final ``evaluate_run``).
4. Projects the whole grid's wall time: for each distinct training run of the chapter (the
   one-expert cells are shared by the three objectives, as ``run_grid`` does), its steps / the
   measured rate (interpolated linearly in the number of tasks; runs with fewer experts are
   charged the most-experts rate, an overestimate) + its evaluations; runs follow one another
   (the paper profile trains with one worker).  Also an upper bound: every run at the slowest
   probe's rate.
5. Counts the host synchronisations per training step and where they happen (CUDA only).
6. Writes ``build/gpu-check/report.json`` atomically and prints a summary.

Without CUDA it stops at once (exit 2, one line).  ``--device cpu --quick`` runs the same logic
on the CPU with tiny sizes and a few steps (``tests/test_cuda.py`` does), without the CUDA tests.
Exit status: 0 when the CUDA tests passed (or were not run) and a probe was measured, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "notebooks" / "params" / "paper.yaml"
#: the training parameters the probes read themselves (the plan takes every knob of the block
#: by its name: ``plan_knobs``)
PARAM_KEYS = ("seeds", "fig2_tasks", "fig2_experts", "grid_tasks", "grid_experts", "d_expert",
              "steps")
#: tiny sizes of ``--quick``: each probe still stands for its corner of the paper grid
QUICK = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
             batch_size=32, fewest_tasks=2, most_tasks=4, experts=3)
TEST_RESERVE_S = 150          # kept for the probes when the CUDA tests run first


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; accepted: an integer ≥ 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; accepted: a number > 0")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default), or cpu to check the script's logic")
    ap.add_argument("--quick", action="store_true",
                    help="tiny probe sizes, a few steps, no CUDA tests")
    ap.add_argument("--probe-steps", type=_positive_int, default=None,
                    help="timed steps per probe (default 300; 5 with --quick)")
    ap.add_argument("--budget-s", type=_positive_float, default=450.0,
                    help="wall-time budget in seconds: probes that would overrun it are skipped")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check",
                    help="folder of report.json (default build/gpu-check)")
    ap.add_argument("--params", type=Path, default=PARAMS,
                    help="profile parameters (default notebooks/params/paper.yaml)")
    return ap.parse_args(argv)


def refuse(message: str) -> None:
    """One line on stderr, exit status 2 (bad input or no GPU: nothing was done)."""
    print(f"gpu-check: {message}", file=sys.stderr)
    raise SystemExit(2)


def load_training_params(path: Path) -> dict:
    """The training chapter's block of the profile file ``path``, as the pipeline reads it
    (its shared groups taken in), so that the probes are the chapter's runs."""
    from moe_book import project as pl

    project = pl.Project(ROOT)
    if path.resolve().parent != project.params_file(path.stem).parent:
        refuse(f"--params {path} is not allowed; accepted: a profile file under "
               f"{project.params_file(path.stem).parent}")
    try:
        block = pl.load_params(project, path.stem)["training"]
    except (OSError, KeyError, TypeError, pl.PipelineError) as e:
        refuse(f"cannot read the training parameters of {path}: {type(e).__name__}: {e}")
    missing = [k for k in PARAM_KEYS if k not in block]
    if missing:
        refuse(f"{path} lacks the training parameters {', '.join(missing)}")
    return block


def grid_runs(p: dict) -> list:
    """The distinct training runs of the training chapter under these parameters (the
    library's ``training_plan``, which the chapter builds its runs with), one per training key."""
    from moe_routing.experiments.task_routing.plan import plan_knobs, training_plan

    return training_plan(**plan_knobs(p)).distinct()


def probe_plan(p: dict, quick: bool, device: str) -> list[tuple[str, dict, object]]:
    """(kind, the grid corner it stands for, the ExperimentConfig timed): the plan's own runs
    (:func:`grid_runs`) at the grid's corners -- the task-router run with the fewest and with the
    most tasks at the most experts, and the dense reference -- the longest of each where the
    plan holds several (the learned and the fixed-code arm).  ``quick`` shrinks the sizes by
    ``replace``: every other knob of the run (entity codes, controls, the schedule) stays the
    chapter's."""
    from moe_routing.experiments.task_routing.runs import run_cost

    runs = grid_runs(p)
    kmin, kmax, emax = min(p["grid_tasks"]), max(p["grid_tasks"]), max(p["grid_experts"])

    def corner(n_tasks: int, n_experts: int, objective: str):
        found = [c for c in runs if c.n_tasks == n_tasks and c.n_experts == n_experts
                 and c.objective == objective and c.variant == "none" and c.control == "none"]
        if not found:
            refuse(f"the plan has no {objective} run with {n_tasks} tasks and {n_experts} experts")
        return max(found, key=run_cost)

    corners = [("fewest tasks", corner(kmin, emax, "ce+router")),
               ("most tasks", corner(kmax, emax, "ce+router")),
               ("dense", corner(kmax, 1, "ce"))]   # the chapter always trains the dense model
    plan = []
    for kind, cfg in corners:
        stands_for = dict(n_tasks=cfg.n_tasks, n_experts=cfg.n_experts, d_expert=cfg.d_expert)
        if quick:
            small = {k: QUICK[k] for k in ("n_relations", "n_pairs", "n_templates", "d_model",
                                           "n_heads", "batch_size")}
            n_tasks = QUICK["fewest_tasks"] if kind == "fewest tasks" else QUICK["most_tasks"]
            experts = 1 if kind == "dense" else QUICK["experts"]
            d_expert = QUICK["d_expert"] * (QUICK["experts"] if kind == "dense" else 1)
            cfg = cfg.replace(n_tasks=n_tasks, n_experts=experts, d_expert=d_expert, **small)
        plan.append((kind, stands_for, cfg.replace(device=device)))
    return plan


def _build(cfg, steps: int):
    """Data, model config and training config as ``run_experiment`` builds them (the library's
    ``run_parts``), with ``steps`` steps."""
    from moe_routing.experiments.task_routing.data import run_parts
    from moe_routing.model import TrainConfig

    parts = run_parts(cfg, cfg.device)
    tcfg = TrainConfig(**{**parts.loop.as_dict(), "steps": steps, "progress": False})
    return parts.dataset, parts.test, parts.data, parts.model, tcfg


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def measure(kind: str, stands_for: dict, cfg, steps: int, warmup: int) -> dict:
    """Train ``steps`` timed steps (after ``warmup`` untimed ones) and time the evaluations."""
    import torch

    from moe_routing.experiments.task_routing.data import evaluate_run
    from moe_routing.model import MoETransformer, TrainConfig, build_and_train, exact_match, train

    t0 = time.perf_counter()
    ds, te, data, mcfg, tcfg = _build(cfg, steps)
    data_s = time.perf_counter() - t0
    train(MoETransformer(mcfg), data, TrainConfig(**{**tcfg.as_dict(), "steps": warmup}))
    model, hist = build_and_train(mcfg, data, tcfg)
    targets = te.tokens[torch.arange(len(te)), te.object_pos]                 # (M,)
    _sync(cfg.device)
    t = time.perf_counter()
    exact_match(model, te.tokens, te.object_pos, targets)
    _sync(cfg.device)
    exact_match_s = time.perf_counter() - t
    t = time.perf_counter()
    with torch.no_grad():
        evaluate_run(model, ds, cfg.n_experts)
    _sync(cfg.device)
    eval_s = time.perf_counter() - t
    return dict(kind=kind, stands_for=stands_for,
                config=dict(n_tasks=cfg.n_tasks, n_experts=cfg.n_experts, d_model=cfg.d_model,
                            d_expert=cfg.d_expert, batch_size=cfg.batch_size,
                            objective=tcfg.objective, amp=tcfg.amp, tf32=tcfg.tf32),
                vocab_size=ds.vocab_size, n_train=len(data), seq_len=int(data.inputs.shape[1]),
                steps=steps, warmup_steps=warmup, train_s=hist.wall_s,
                steps_per_s=steps / hist.wall_s, tokens_per_s=hist.tokens_per_s,
                final_loss=hist.total[-1], exact_match_s=exact_match_s, eval_s=eval_s,
                data_s=data_s, wall_s=time.perf_counter() - t0)


def count_syncs(cfg, short: int = 3, long: int = 9) -> dict:
    """Host synchronisations per training step (CUDA sync debug mode), by source line: the
    difference between a run of ``long`` and one of ``short`` steps, each logging two steps."""
    import torch

    from moe_routing.model import MoETransformer, TrainConfig, train

    _, _, data, mcfg, tcfg = _build(cfg, short)
    model = MoETransformer(mcfg)

    def sites(steps):
        c = TrainConfig(**{**tcfg.as_dict(), "steps": steps, "log_every": 10 ** 9})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                train(model, data, c)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return Counter(f"{_short_path(w.filename)}:{w.lineno}" for w in caught
                       if "synchroniz" in str(w.message))

    a, b = sites(short), sites(long)
    per_step = {k: (b[k] - a[k]) / (long - short) for k in b if b[k] != a[k]}
    return dict(per_step=sum(per_step.values()),
                by_line=dict(sorted(per_step.items(), key=lambda kv: -kv[1])),
                per_run_outside_steps=sum(a.values()) - short * sum(per_step.values()))


def _short_path(filename: str) -> str:
    for marker in ("site-packages/", "src/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def interpolate(x: float, x0: float, y0: float, x1: float, y1: float) -> float:
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def project(runs: list, probes: list[dict], p: dict) -> dict:
    """Each run's wall time from the probes: steps / rate + quarter evaluations + final one."""
    from moe_routing.experiments.task_routing.runs import EVAL_POINTS

    by_kind = {q["kind"]: q for q in probes}
    moe = [by_kind[k] for k in ("fewest tasks", "most tasks") if k in by_kind]

    def cost(q: dict) -> tuple[float, float]:
        return 1.0 / q["steps_per_s"], EVAL_POINTS * q["exact_match_s"] + q["eval_s"]

    out, kinds = [], Counter()
    for c in runs:
        dense = c.n_experts == 1 and c.d_expert > p["d_expert"] and "dense" in by_kind
        if dense:
            step_s, eval_s = cost(by_kind["dense"])
        else:
            (a, ea), (b, eb) = cost(moe[0]), cost(moe[-1])
            k0, k1 = moe[0]["stands_for"]["n_tasks"], moe[-1]["stands_for"]["n_tasks"]
            step_s = interpolate(c.n_tasks, k0, a, k1, b)
            eval_s = interpolate(c.n_tasks, k0, ea, k1, eb)
        kind = "dense" if c.n_experts == 1 and c.d_expert > p["d_expert"] else (
            f"{c.n_experts} expert" + ("s" if c.n_experts > 1 else ""))
        kinds[kind] += 1
        out.append(dict(n_tasks=c.n_tasks, n_experts=c.n_experts, d_expert=c.d_expert,
                        objective=c.training_key()["objective"], seed=c.seed,
                        train_s=c.steps * step_s, eval_s=eval_s,
                        projected_s=c.steps * step_s + eval_s))
    slowest = min(q["steps_per_s"] for q in probes)
    steps = p["steps"]
    order = sorted(kinds, key=lambda k: (k == "dense", int(k.split()[0]) if k[0].isdigit() else 0))
    return dict(n_runs=len(runs), steps_per_run=steps, runs_by_kind={k: kinds[k] for k in order},
                projected_s=sum(r["projected_s"] for r in out),
                projected_train_s=sum(r["train_s"] for r in out),
                upper_bound_train_s=sum(c.steps for c in runs) / slowest,
                method=("per run: steps / rate interpolated linearly in the number of tasks "
                        "between the probes (most-experts rate for every MoE run; the dense "
                        f"probe for the dense references) + {EVAL_POINTS} test exact matches "
                        "+ the final evaluate_run; runs one after another (one worker)"),
                runs=out)


def gpu_facts(device: str) -> dict:
    import torch

    facts = dict(torch=torch.__version__, cuda=torch.version.cuda)
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        facts.update(name=torch.cuda.get_device_name(), count=torch.cuda.device_count(),
                     capability=f"{props.major}.{props.minor}",
                     memory_gib=round(props.total_memory / 2 ** 30, 1),
                     multiprocessors=props.multi_processor_count)
    return facts


def run_cuda_tests(timeout_s: float) -> dict:
    """``pytest -m cuda`` in a process group of its own (killed whole on a timeout)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
           "-o", "addopts=-ra"]
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        rc, timed_out = proc.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc, timed_out = None, True
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return dict(ran=True, returncode=rc, timed_out=timed_out, timeout_s=timeout_s,
                seconds=time.perf_counter() - t0, summary=lines[-1] if lines else "",
                tail=lines[-40:])


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # a CUDA build without a driver warns here
        has_cuda = torch.cuda.is_available()
    if args.device == "cuda" and not has_cuda:
        refuse(f"torch {torch.__version__} sees no CUDA GPU (CUDA build: "
               f"{torch.version.cuda or 'none'}); run it on a machine with one, or check the "
               "script itself with --device cpu --quick")
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    params = load_training_params(args.params)
    try:
        runs = grid_runs(params)
        plan = probe_plan(params, args.quick, args.device)
    except ValueError as e:
        refuse(f"{args.params}: {e}")
    steps = args.probe_steps or (5 if args.quick else 300)
    warmup = 2 if args.quick else 20
    from moe_routing._internal.atomic import atomic_write_json
    from moe_routing._internal.runtime import provenance

    facts = gpu_facts(args.device)
    prov = provenance("paper", args.device).as_dict()
    print(f"gpu-check on {prov['device_name']}: torch {facts['torch']}, CUDA {facts['cuda']}"
          + (f", capability {facts['capability']}, {facts['memory_gib']} GiB"
             if args.device == "cuda" else ""), flush=True)

    if args.device == "cuda" and not args.quick:
        budget = max(60.0, deadline - time.perf_counter() - TEST_RESERVE_S)
        print(f"CUDA tests (pytest -m cuda, at most {budget:.0f} s) ...", flush=True)
        tests = run_cuda_tests(budget)
        print("  " + ("timed out" if tests["timed_out"] else tests["summary"]), flush=True)
    else:
        tests = dict(ran=False, why="--device cpu" if args.device == "cpu" else "--quick")

    probes, skipped, estimate = [], [], 60.0
    for kind, stands_for, cfg in plan:
        left = deadline - time.perf_counter()
        if probes and left < 1.5 * estimate:
            skipped.append(dict(kind=kind, why=f"{left:.0f} s left of the budget"))
            continue
        q = measure(kind, stands_for, cfg, steps, warmup)
        estimate = q["wall_s"]
        probes.append(q)
        e = q["config"]["n_experts"]
        print(f"probe {kind:12s} {q['config']['n_tasks']:3d} tasks, {e} expert{'s' * (e > 1)}, "
              f"d_expert {q['config']['d_expert']}: {q['steps_per_s']:.1f} steps/s "
              f"({q['tokens_per_s']:.0f} tokens/s), exact match {q['exact_match_s']:.2f} s, "
              f"evaluate_run {q['eval_s']:.2f} s", flush=True)

    syncs = None
    if args.device == "cuda" and probes:
        try:
            syncs = count_syncs(plan[1][2])                # the most tasks
            top = ", ".join(f"{k} ({v:g})" for k, v in list(syncs["by_line"].items())[:5])
            print(f"host synchronisations per training step: {syncs['per_step']:g} ({top})")
        except Exception as e:                   # a diagnostic: never fails the check
            syncs = dict(error=f"{type(e).__name__}: {e}")

    projection = project(runs, probes, params) if probes else None
    report = dict(version=1, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), device=args.device,
                  quick=args.quick, gpu=facts, provenance=prov, cuda_tests=tests,
                  probes=probes, skipped_probes=skipped, syncs=syncs, projection=projection,
                  budget_s=args.budget_s, wall_s=time.perf_counter() - t_start)
    path = args.out / "report.json"
    atomic_write_json(path, report)
    if projection:
        pr = projection
        print(f"paper grid: {pr['n_runs']} training runs × {pr['steps_per_run']} steps "
              f"({', '.join(f'{v} {k}' for k, v in pr['runs_by_kind'].items())}): projected "
              f"{pr['projected_s'] / 3600:.2f} h ({pr['projected_train_s'] / 3600:.2f} h "
              f"training); upper bound for the training at the slowest probe "
              f"{pr['upper_bound_train_s'] / 3600:.2f} h"
              + (" [--quick sizes: not the paper's]" if args.quick else ""))
    print(f"report: {path}")
    tests_ok = not tests["ran"] or tests["returncode"] == 0
    return 0 if tests_ok and probes else 1


if __name__ == "__main__":
    sys.exit(main())
