"""Run a grid of independent, keyed tasks on this machine's cores or on a Ray cluster.

A training grid is many runs that share nothing: each seeds itself and writes its own result, so
they can go in any order, anywhere, and the results are those of a serial loop.  This module
decides *where* they run; what a task computes, and where its result is kept, is the caller's
(:func:`moe_routing.experiments.task_routing.run_grid`).

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
  the caller started (``ray.init()`` or :func:`ray_session`) is used and left running.  Results
  travel back to the driver as values: the nodes need not share a file system.  Every task
  carries this very ``moe_routing`` package in its ``runtime_env`` (:func:`ray_runtime_env`):
  a node of a cluster that does not have the library, or has another version of it, runs the
  driver's code (an instance the caller started gets it with
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
task still runs; the caller raises one :class:`GridError` listing them at the end (a worker
process that dies -- killed, out of memory -- fails the tasks it took with it, which are listed
the same way).  Progress is one ``logging`` line per finished task (``grid: run 3 of 12 done
(...) in 4.1 s; elapsed 12 s, ETA 36 s``, logger ``moe_routing.experiments.executor``), and
a tqdm bar on request.  An interrupted grid (Ctrl-C, a killed kernel) stops its workers; what
finished before is kept by the caller, so the rerun skips it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shutil
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import urlsplit

from ..progress import duration
from ..validation import choice, fail, integer, require

log = logging.getLogger(__name__)

#: the backends, the first the default
EXECUTORS = ("local", "ray", "slurm")
#: environment variables read when ``executor`` / ``workers`` are None
ENV_EXECUTOR = "MOE_GRID_EXECUTOR"
ENV_WORKERS = "MOE_GRID_WORKERS"
#: seconds a TCP connection to ``RAY_ADDRESS`` may take before the address counts as unreachable
CONNECT_TIMEOUT_S = 3.0
#: Ray's default ports: the GCS of ``ray start --head`` and the Ray Client server
RAY_GCS_PORT, RAY_CLIENT_PORT = 6379, 10001
#: the ``slurm`` backend's settings (environment variables, read and checked by :func:`plan`)
ENV_SLURM_CLUSTER = "MOE_SLURM_CLUSTER"
ENV_SLURM_FOLDER = "MOE_SLURM_FOLDER"
ENV_SLURM_PARAMS = "MOE_SLURM_PARAMS"
#: submitit's executors the backend may use: a SLURM cluster, or its local stand-in
SLURM_CLUSTERS = ("slurm", "local")
#: a job's time limit unless ``MOE_SLURM_PARAMS`` sets ``timeout_min``: submitit's own default
#: (minutes) would kill a long training run; SLURM still caps it at the partition's limit
SLURM_TIMEOUT_MIN = 12 * 60
#: seconds between two looks at the jobs in flight (submitit throttles its ``sacct`` calls)
SLURM_POLL_S = 0.25


@dataclass(frozen=True)
class Task:
    """One unit of a grid: ``fn(*args)`` run somewhere, known by ``key`` and ``label``."""

    key: str
    label: str
    args: tuple


@dataclass(frozen=True)
class TaskFailure:
    """A task that did not produce a result: ``reason`` is one line, ``details`` the traceback."""

    key: str
    label: str
    reason: str
    details: str = ""


class GridError(RuntimeError):
    """Some tasks of a grid failed; every other one finished (and was kept by the caller).

    ``failures`` lists them (:class:`TaskFailure`), ``results`` holds what the caller could
    still return (for :func:`~moe_routing.experiments.task_routing.run_grid`: the rows of the
    configurations that have a result, in their order)."""

    def __init__(self, failures: Sequence[TaskFailure], total: int, results: Sequence = ()):
        self.failures, self.total, self.results = list(failures), total, list(results)
        lines = [f"{len(self.failures)} of {total} runs failed; every other run finished and is "
                 "kept, so a rerun trains only these:"]
        lines += [f"  {f.key} ({f.label}): {f.reason}" for f in self.failures]
        super().__init__("\n".join(lines))


# ----------------------------------------------------------------------------- choosing a backend
@dataclass(frozen=True)
class SlurmSettings:
    """Where the ``slurm`` backend submits: submitit's ``cluster`` (``slurm`` or ``local``), the
    job folder, and the extra parameters for ``AutoExecutor.update_parameters``."""

    cluster: str = "slurm"
    folder: str = ""
    params: dict = field(default_factory=dict, hash=False, compare=True)


@dataclass(frozen=True)
class Plan:
    """Where a grid runs: the backend, the number of tasks at once (``None``: as many as the
    Ray cluster schedules), the torch threads of each, whether they run on CUDA (for Ray:
    ``cuda`` requested, or ``auto_device`` and the cluster has GPUs), the cluster address."""

    executor: str
    workers: int | None
    threads: int
    cuda: bool = False
    auto_device: bool = False
    ray_address: str | None = None
    slurm: SlurmSettings | None = None

    def describe(self) -> str:
        where = (f"Ray at {self.ray_address}" if self.ray_address
                 else "Ray" if self.executor == "ray"
                 else f"SLURM jobs ({self.slurm.cluster} executor of submitit, job files in "
                      f"{self.slurm.folder})" if self.executor == "slurm" else "local processes")
        n = "as many as fit" if self.workers is None else str(self.workers)
        return (f"{where}: {n} at once × {self.threads} torch thread"
                f"{'s' if self.threads != 1 else ''}" + (" on CUDA" if self.cuda else ""))


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and ``taskset``
    narrow; ``os.cpu_count`` counts the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                       # not on Linux
        return os.cpu_count() or 1


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


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

    from ..runtime import resolve_device

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


#: backend -> (module, the package extra that installs it)
_BACKEND_MODULES = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}


def _import_backend(backend: str, name: str = "executor"):
    """The module a backend runs on, or an error naming the setting and how to install it."""
    module, extra = _BACKEND_MODULES[backend]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        fail(name, backend, f"'local' here: the {module} package is not importable ({e}); "
                            f"install it with pip install 'moe_routing[{extra}]'")


def _slurm_settings(name: str = "executor") -> SlurmSettings:
    """The ``slurm`` backend's settings from the environment, each checked (a bad value names
    its variable): the cluster (``slurm`` needs ``sbatch`` on the PATH), the job folder, the
    extra parameters (a JSON object)."""
    cluster = (_env(ENV_SLURM_CLUSTER) or "slurm").lower()
    require(cluster in SLURM_CLUSTERS, ENV_SLURM_CLUSTER, _env(ENV_SLURM_CLUSTER),
            "one of " + ", ".join(map(repr, SLURM_CLUSTERS)) + " (submitit's local executor)")
    if cluster == "slurm" and shutil.which("sbatch") is None:
        fail(name, "slurm", f"a machine with SLURM's sbatch on the PATH (none here), or "
                                  f"{ENV_SLURM_CLUSTER}=local to run the jobs with submitit's "
                                  "local executor")
    folder = Path(_env(ENV_SLURM_FOLDER) or "~/.cache/moe_routing/submitit").expanduser()
    raw = _env(ENV_SLURM_PARAMS)
    try:
        params = {} if raw is None else json.loads(raw)
    except json.JSONDecodeError:
        params = None
    require(isinstance(params, dict), ENV_SLURM_PARAMS, raw,
            'a JSON object of submitit parameters, e.g. {"slurm_partition": "gpu", '
            '"timeout_min": 240}')
    settings = SlurmSettings(cluster, str(folder.resolve()), params)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:    # the parameters checked before any job
        _slurm_executor(_import_backend("slurm", name), Path(scratch), settings, 1, False)
    return settings


def _ray_address() -> str | None:
    """``RAY_ADDRESS`` when set (checked reachable); None to start Ray on this machine."""
    address = _env("RAY_ADDRESS")
    if address is None or address == "local":
        return None
    if _ray_is_initialized():
        return address                           # the caller's connection is used as it is
    accepted = ("host:port of a running Ray cluster's head (ray start --head), ray://host:port "
                "of its Ray Client server, or auto for the cluster started on this machine; "
                "unset it to start Ray here")
    target = address
    if address == "auto":
        try:                                     # the file `ray start` writes (Ray's own reader)
            from ray._private.utils import read_ray_address
        except ImportError:                      # another Ray layout: ray.init resolves it
            return address
        target = read_ray_address(None)
        if target is None:
            raise RuntimeError(f"RAY_ADDRESS = 'auto' finds no Ray cluster started on this "
                               f"machine; accepted: {accepted}")
    parts = urlsplit(target if "://" in target else f"ray-gcs://{target}")
    if parts.scheme not in ("ray", "ray-gcs") or not parts.hostname:
        fail("RAY_ADDRESS", address, accepted)
    try:
        port = parts.port or (RAY_CLIENT_PORT if parts.scheme == "ray" else RAY_GCS_PORT)
    except ValueError:
        fail("RAY_ADDRESS", address, accepted)
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise RuntimeError(f"RAY_ADDRESS = {address!r} cannot be reached ({parts.hostname}:{port}"
                           f": {why}); accepted: {accepted}") from None
    return address


def _ray_is_initialized() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


# ----------------------------------------------------------------------------- running a grid
def _call(fn: Callable, args: tuple, threads: int | None) -> tuple[bool, Any, float, str]:
    """Run one task where it landed: (ok, result or one-line reason, seconds, traceback).

    The exception is caught here, in the worker, so every backend reports it the same way."""
    if threads is not None:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        return True, fn(*args), time.perf_counter() - t0, ""
    except Exception as e:                       # noqa: BLE001 -- isolated and reported
        return False, one_line(e), time.perf_counter() - t0, traceback.format_exc()


def _worker_init(threads: int, gpu_slot=None) -> None:
    """A local worker process: the caller's torch thread count and, for CUDA grids, its own GPU.

    ``gpu_slot`` is a shared counter: the i-th worker to start takes GPU ``i mod n_gpus`` as
    its current device, so that workers spread round-robin over the GPUs (one per GPU with
    the automatic size; ``workers`` > GPUs puts several runs on each GPU, for runs small
    enough to share one) and a run's ``device="cuda"`` means that GPU."""
    import torch

    torch.set_num_threads(threads)
    if gpu_slot is not None and torch.cuda.is_available():
        with gpu_slot.get_lock():
            slot = gpu_slot.value
            gpu_slot.value += 1
        torch.cuda.set_device(gpu_of_worker(slot, torch.cuda.device_count()))


def gpu_of_worker(slot: int, n_gpus: int) -> int:
    """The GPU the ``slot``-th local worker takes (round-robin; see :func:`_worker_init`)."""
    return integer("slot", slot, low=0) % integer("n_gpus", n_gpus, low=1)


def one_line(e: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    return line if len(line) <= 300 else line[:299] + "…"


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


def _run_pool(fn, tasks: list[Task], how: Plan, finish) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")
    gpu_slot = ctx.Value("i", 0) if how.cuda else None
    pool = ProcessPoolExecutor(max_workers=min(how.workers, len(tasks)), mp_context=ctx,
                               initializer=_worker_init, initargs=(how.threads, gpu_slot))
    try:
        futures = {pool.submit(_call, fn, t.args, how.threads): t for t in tasks}
        for fut in as_completed(futures):
            try:
                out = fut.result()
            except Exception as e:               # noqa: BLE001 -- the worker process died
                out = (False, f"the worker process died ({one_line(e)})", 0.0, "")
            finish(futures[fut], out)
    except BaseException:
        # an interruption: the queued tasks are cancelled and the running ones stopped (their
        # results would be lost anyway); shutdown(wait=True) would wait for them to finish
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            with contextlib.suppress(Exception):
                p.terminate()
        raise
    pool.shutdown(wait=True)


# ----------------------------------------------------------------------------- Ray
@contextlib.contextmanager
def ray_session(workers: int | None = None, threads: int | None = None) -> Iterator[bool]:
    """Ray connected for the duration: the caller's instance when already initialised, the
    cluster at ``RAY_ADDRESS`` when set, otherwise a new instance on this machine (loopback
    only, ``workers × threads`` CPUs, or all cores) that is shut down at the end.  Yields
    whether this call started it.  Wrap several :func:`run_grid` calls in one session to pay
    Ray's start-up (seconds) once.  A session started here carries the package to its workers
    (``runtime_env``, :func:`ray_runtime_env`)."""
    ray = _import_backend("ray")
    if ray.is_initialized():
        yield False
        return
    address = _ray_address()
    common = dict(log_to_driver=False, configure_logging=False, runtime_env=ray_runtime_env())
    if address is not None:
        ray.init(address=address, **common)
        try:
            yield True
        finally:
            ray.shutdown()
        return
    threads = integer("threads", threads if threads is not None else 1, low=1)
    cpus = max(threads, (workers * threads) if workers else cpu_cores())
    from ray._private import ray_constants

    # Loopback only: Ray binds to the address other nodes would reach unless it believes
    # clusters are off (its macOS/Windows default, ray-project/ray#18730); no usage report.
    # Ray's token authentication stays on (its default), without its notice line on stderr.
    saved_env = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED",
                                                ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    saved_level = notice.level
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0",
                       ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR: "0"})
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        notice.setLevel(logging.ERROR)
        try:
            ray.init(num_cpus=cpus, include_dashboard=False,
                     object_store_memory=200 * 2 ** 20, **common)
        finally:
            notice.setLevel(saved_level)
        try:
            yield True
        finally:
            ray.shutdown()
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ray_runtime_env() -> dict:
    """The ``runtime_env`` of every Ray task of a grid: this ``moe_routing`` package, uploaded
    by the driver and put first on the workers' ``sys.path``.

    A grid's runs must be computed by the driver's code (its training cache keys the results by
    that code), and a cluster's nodes are often bare Python environments: carrying the package
    (3-4 MB, its data files included; ``__pycache__`` left out) makes both hold on any node,
    with or without an installed library.  Ray caches the upload by content, so a grid pays it
    once.  The library's dependencies (torch, numpy, ...) must be on the nodes.  Ray uploads a
    local folder only for a whole job (``ray.init(runtime_env=...)``), not for one task: a
    session of :func:`ray_session` passes it; a caller's own ``ray.init`` should too."""
    package = Path(__file__).resolve().parents[1]              # moe_routing/
    return {"py_modules": [str(package)], "excludes": ["__pycache__/", "*.pyc"]}


def _run_ray(fn, tasks: list[Task], how: Plan, finish, ready) -> None:
    with ray_session(how.workers, how.threads):
        import ray

        ready()

        res = ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 0)), float(res.get("GPU", 0))
        if cpus < how.threads:
            raise RuntimeError(f"the Ray cluster has {cpus:g} CPUs; every run asks for "
                               f"{how.threads} (the caller's torch threads): lower the threads "
                               "or use a larger cluster")
        at_once = how.workers or len(tasks)
        num_gpus = 0.0
        if how.cuda or (how.auto_device and gpus > 0):
            if gpus < 1:
                raise RuntimeError("the runs ask for device 'cuda' but the Ray cluster has no "
                                   "GPU; accepted: a cluster with GPUs, or device 'cpu'")
            # automatic: one run per GPU; WORKERS runs at once share the GPUs evenly
            at_once = how.workers or int(gpus)
            per_gpu = -(-min(at_once, int(cpus // how.threads)) // int(gpus))     # ceil
            num_gpus = 1.0 if per_gpu <= 1 else int(10_000 / per_gpu) / 10_000
        remote = ray.remote(num_cpus=how.threads, num_gpus=num_gpus)(_call)
        queue, running = list(tasks), {}
        try:
            while queue or running:
                while queue and len(running) < at_once:
                    t = queue.pop(0)
                    running[remote.remote(fn, t.args, how.threads)] = t
                (ref,), _ = ray.wait(list(running), num_returns=1)
                task = running.pop(ref)
                try:
                    out = ray.get(ref)
                except Exception as e:           # noqa: BLE001 -- a worker or node was lost
                    out = (False, f"Ray could not run it ({one_line(e)})", 0.0, "")
                finish(task, out)
        except BaseException:
            for ref in running:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise


# ----------------------------------------------------------------------------- SLURM (submitit)
def _slurm_executor(submitit, folder: Path, s: SlurmSettings, threads: int, cuda: bool):
    """submitit's executor for ``s`` with the jobs' resources: one task on one node with the
    caller's torch threads as CPUs, a GPU on CUDA, the backend's time limit; ``s.params`` last
    (they override).  A parameter submitit refuses names ``MOE_SLURM_PARAMS``."""
    executor = submitit.AutoExecutor(folder=Path(folder) / "%j", cluster=s.cluster)
    params = {"name": "moe_routing-grid", "timeout_min": SLURM_TIMEOUT_MIN,
              "cpus_per_task": threads, "gpus_per_node": 1 if cuda else 0,
              "tasks_per_node": 1, "nodes": 1, **s.params}
    try:
        executor.update_parameters(**params)
    except (ValueError, TypeError, NameError) as e:
        fail(ENV_SLURM_PARAMS, json.dumps(s.params), f"parameters submitit accepts ({one_line(e)})")
    return executor


def _run_slurm(fn, tasks: list[Task], how: Plan, finish, ready) -> None:
    """Each task a submitit job; at most ``how.workers`` in flight (``None``: all submitted at
    once, the scheduler queues them).  A job that SLURM kills (time limit, memory, node lost)
    fails its task only; an interruption cancels the jobs in flight."""
    submitit = _import_backend("slurm")
    s = how.slurm or SlurmSettings()
    folder = Path(s.folder) if s.folder else Path("~/.cache/moe_routing/submitit").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    executor = _slurm_executor(submitit, folder, s, how.threads, how.cuda)
    ready()
    at_once = how.workers or len(tasks)
    queue, running = list(tasks), {}
    try:
        while queue or running:
            while queue and len(running) < at_once:
                t = queue.pop(0)
                running[id(t)] = (executor.submit(_call, fn, t.args, how.threads), t)
            done = [k for k, (job, _) in running.items() if job.done()]
            if not done:
                time.sleep(SLURM_POLL_S)
                continue
            for k in done:
                job, task = running.pop(k)
                try:
                    out = job.result()
                except Exception as e:           # noqa: BLE001 -- the job itself failed
                    out = (False, f"SLURM job {job.job_id} did not finish ({one_line(e)})", 0.0,
                           str(e))
                finish(task, out)
    except BaseException:
        for job, _ in running.values():
            with contextlib.suppress(Exception):
                job.cancel(check=False)
        raise
