"""Run a grid of independent, keyed tasks on this machine's cores or on a Ray cluster.

A training grid is many runs that share nothing: each seeds itself and writes its own result, so
they can go in any order, anywhere, and the results are those of a serial loop.  This module
decides *where* they run; what a task computes, and where its result is kept, is the caller's
(:func:`moe_routing.experiments.task_routing.runs.run_grid`).

Backends (``executor``):

* ``local`` (the default) -- a pool of ``spawn``\\ ed worker processes on this machine, each with
  the caller's torch thread count, sized so that workers × threads = cores (``workers=None``);
  ``workers=1``, or a single task, runs in the calling process.  On CUDA the automatic size is
  one worker per GPU, each pinned to its GPU; more workers than GPUs share them round-robin.
* ``ray`` -- every task a Ray task asking for ``threads`` CPUs (and a fraction of a GPU on CUDA).
  With ``RAY_ADDRESS`` set the grid goes to that running cluster (checked with a TCP connection
  first, so an unreachable address is one line here, not a Ray traceback); otherwise a Ray
  instance is started on this machine, listening on the loopback interface only, without a
  dashboard, usage reporting or log forwarding, and shut down when the grid ends.  An instance
  the caller started (``ray.init()`` or
  :func:`~moe_routing.experiments.grid.ray_cluster.ray_session`) is used and left running.  Results
  travel back to the driver as values: the nodes need not share a file system.  Every task carries
  this very ``moe_routing`` package in its ``runtime_env``
  (:func:`~moe_routing.experiments.grid.ray_cluster.ray_runtime_env`): a node of a cluster that does
  not have the library, or has another version of it, runs the driver's code (an instance the caller
  started gets it with
  ``ray.init(runtime_env=ray_runtime_env())``: Ray uploads a local package at the job level
  only).
* ``slurm`` -- every task a SLURM job submitted through ``submitit`` (the ``slurm`` extra),
  asking for ``threads`` CPUs (and a GPU when the runs' device is ``cuda``; ``auto`` runs
  where the job lands, on the CPU without a GPU request), at most ``workers`` in the queue at once
  (``None``: all of them).  Jobs run the driver's Python (``sys.executable``) on the nodes, so
  the environment and the job folder (``MOE_SLURM_FOLDER``, default
  ``~/.cache/moe_routing/submitit``) must be on a file system the nodes share -- the usual
  set-up of a SLURM cluster.  ``MOE_SLURM_PARAMS`` (a JSON object, e.g.
  ``{"slurm_partition": "gpu", "timeout_min": 240}``) is handed to
  ``submitit.AutoExecutor.update_parameters``; ``MOE_SLURM_CLUSTER=local`` runs the same jobs
  with submitit's local executor (subprocesses of this machine, the same pickled calls and job
  files), which is how the backend is tested without a cluster.  Results travel back to the
  driver, which writes them.

``workers`` and ``executor`` left ``None`` are read from ``MOE_GRID_WORKERS`` and
``MOE_GRID_EXECUTOR`` (``make execute EXECUTOR=ray WORKERS=2`` sets them); every value, given or
read, is checked before any task starts.  The backend never changes a result: a task runs the
same code with the same thread count wherever it runs.

Failures are isolated: a task that raises is recorded with a one-line reason and every other
task still runs; the caller raises one :class:`~moe_routing.experiments.grid.tasks.GridError`
listing them at the end (a worker process that dies -- killed, out of memory -- fails the tasks it
took with it, which are listed the same way).  Progress is one ``logging`` line per finished task
(``grid: run 3 of 12 done (...) in 4.1 s; elapsed 12 s, ETA 36 s``, logger
``moe_routing.experiments.grid.executor``), and a tqdm bar on request.  An interrupted grid (Ctrl-C,
a killed kernel) stops its workers; what finished before is kept by the caller, so the rerun skips it.

The backends live in modules of their own -- :mod:`.local`, :mod:`.ray_cluster` and
:mod:`.slurm` -- and the records and helpers they share (:class:`Task`,
:class:`TaskFailure`, :class:`~moe_routing.experiments.grid.tasks.GridError`, :class:`Plan`, the
call each task runs in) in
:mod:`.tasks`; this module chooses and sizes the backend (:func:`plan`) and runs the
grid on it (:func:`run_tasks`).
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Callable, Sequence

from ..._internal.progress import duration
from ..._internal.validation import choice, fail, integer, require
from .local import _run_pool
from .ray_cluster import _ray_address, _run_ray
from .slurm import _run_slurm, _slurm_settings
from .tasks import Plan, Task, TaskFailure, _call, _env, _import_backend, one_line
from .tasks import cpu_cores

log = logging.getLogger(__name__)

#: the backends, the first the default
EXECUTORS = ("local", "ray", "slurm")
#: environment variables read when ``executor`` / ``workers`` are None
ENV_EXECUTOR = "MOE_GRID_EXECUTOR"
ENV_WORKERS = "MOE_GRID_WORKERS"


# ----------------------------------------------------------------------------- choosing a backend
def parse_workers(name: str, value: Any) -> int | None:
    """``None``/``'auto'`` (sized to the machine) or an integer ≥ 1; a string from the
    environment is parsed."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            fail(name, value, "an integer ≥ 1, or auto (as many as the cores allow)")
    require(not isinstance(value, bool), name, value,
            "an integer ≥ 1, or auto (as many as the cores allow)")
    return integer(name, value, low=1)


def plan(executor: str | None = None, workers: int | str | None = None, *,
         threads: int | None = None, devices: Sequence[str] = ("cpu",)) -> Plan:
    """Check the backend choice and size it, before any task runs.

    ``executor``/``workers`` fall back to ``MOE_GRID_EXECUTOR``/``MOE_GRID_WORKERS``, then to
    ``local`` and automatic sizing (a bad value names the variable it came from).  ``threads``
    is each task's torch thread count (default: the caller's); ``devices`` the requested
    devices of the tasks (``cpu``/``cuda``/``auto``), which decide whether they run on CUDA.
    For Ray, the package must be importable and ``RAY_ADDRESS``, when set, reachable; for
    SLURM, submitit importable, ``sbatch`` on the PATH (unless ``MOE_SLURM_CLUSTER=local``) and
    ``MOE_SLURM_PARAMS`` parameters that submitit accepts."""
    import torch

    from ..._internal.runtime import resolve_device

    name = "executor"
    if executor is None and _env(ENV_EXECUTOR) is not None:
        name, executor = ENV_EXECUTOR, _env(ENV_EXECUTOR)
    given = "local" if executor is None else executor
    executor = given.strip().lower() if isinstance(given, str) else given
    require(executor in EXECUTORS, name, given, "one of " + ", ".join(map(repr, EXECUTORS)))
    wname = "workers"
    if workers is None and _env(ENV_WORKERS) is not None:
        wname, workers = ENV_WORKERS, _env(ENV_WORKERS)
    n = parse_workers(wname, workers)
    threads = integer("threads", torch.get_num_threads() if threads is None else threads, low=1)
    devices = {choice("device", d, ("auto", "cpu", "cuda")) for d in devices}
    if executor == "local":
        cuda = any(resolve_device(d) == "cuda" for d in devices)   # ValueError: no CUDA here
        if n is None:
            n = max(1, torch.cuda.device_count()) if cuda else max(1, cpu_cores() // threads)
        return Plan("local", n, threads, cuda)
    if executor == "slurm":
        _import_backend("slurm", name)
        return Plan("slurm", n, threads, "cuda" in devices, "auto" in devices,
                    slurm=_slurm_settings(name))
    _import_backend("ray", name)
    address = _ray_address()
    # on a cluster CUDA is decided where the tasks run (``cuda`` requested, or ``auto`` on GPUs)
    return Plan("ray", n, threads, "cuda" in devices, "auto" in devices, address)


# ----------------------------------------------------------------------------- running a grid
class _Progress:
    """One log line per finished task (elapsed and ETA from the rate so far), a tqdm bar."""

    def __init__(self, n: int, bar: bool):
        self.n, self.i, self.t0 = n, 0, time.perf_counter()
        self.t_ready = self.t0                   # the backend is up: the ETA's rate starts here
        self.bar = None
        if bar:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=n, desc="runs")

    def done(self, task: Task, seconds: float, failure: TaskFailure | None) -> None:
        self.i += 1
        now = time.perf_counter()
        elapsed = now - self.t0
        eta = (now - self.t_ready) / self.i * (self.n - self.i)
        if self.bar is not None:
            self.bar.update(1)
        if failure is None:
            log.info("grid: run %d of %d done (%s) in %s; elapsed %s, ETA %s", self.i, self.n,
                     task.label, duration(seconds), duration(elapsed), duration(eta))
        else:
            log.warning("grid: run %d of %d FAILED (%s) after %s: %s; elapsed %s, ETA %s",
                        self.i, self.n, task.label, duration(seconds), failure.reason,
                        duration(elapsed), duration(eta))
            if failure.details:
                log.debug("grid: traceback of %s:\n%s", task.key, failure.details)

    def ready(self) -> None:
        self.t_ready = time.perf_counter()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_tasks(fn: Callable, tasks: Sequence[Task], how: Plan,
              on_result: Callable[[Task, Any], None] | None = None,
              progress: bool = False) -> list[TaskFailure]:
    """Run ``fn(*task.args)`` for every task as ``how`` says; return the failures.

    ``fn`` must be a module-level function (it is imported by name in worker processes).
    ``on_result(task, result)`` runs in the calling process as each result arrives (e.g. to
    write it); an exception there fails that task only.  An interruption (``KeyboardInterrupt``)
    stops the workers and propagates; what ``on_result`` kept stays."""
    tasks = list(tasks)
    failures: list[TaskFailure] = []
    if not tasks:
        return failures
    bar = _Progress(len(tasks), progress)
    log.info("grid: %d run%s to train on %s", len(tasks), "s" if len(tasks) != 1 else "",
             how.describe())

    def finish(task: Task, out) -> None:
        ok, value, seconds, details = out
        failure = None
        if ok and on_result is not None:
            try:
                on_result(task, value)
            except Exception as e:               # noqa: BLE001 -- isolated and reported
                ok, value, details = False, one_line(e), traceback.format_exc()
        if not ok:
            failure = TaskFailure(task.key, task.label, value, details)
            failures.append(failure)
        bar.done(task, seconds, failure)

    try:
        if how.executor == "ray":
            _run_ray(fn, tasks, how, finish, bar.ready)
        elif how.executor == "slurm":
            _run_slurm(fn, tasks, how, finish, bar.ready)
        elif min(how.workers or 1, len(tasks)) == 1:
            for task in tasks:
                finish(task, _call(fn, task.args, None))
        else:
            _run_pool(fn, tasks, how, finish)
    finally:
        bar.close()
    log.info("grid: %d of %d runs done in %s%s", len(tasks) - len(failures), len(tasks),
             duration(time.perf_counter() - bar.t0),
             f"; {len(failures)} failed" if failures else "")
    return failures
