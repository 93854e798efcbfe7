"""What every backend of the grid executor shares: the tasks, their failures, the plan, the call.

A grid is a list of :class:`Task`; :func:`.executor.plan` turns the caller's choice into a
:class:`Plan` (with its :class:`SlurmSettings` for the ``slurm`` backend); every backend runs
each task through :func:`_call`, which catches the task's exception where it ran, so that a
:class:`TaskFailure` reads the same whichever backend it came from, and the caller raises one
:class:`GridError` for them all.  These records and the helpers the backends need (the cores
of this machine, the environment's settings, the backends' own packages) are kept apart from
:mod:`.executor` so that each backend module (:mod:`.local`, :mod:`.ray_cluster`,
:mod:`.slurm`) imports them without importing the others.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..._internal.validation import fail


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
    still return (for :func:`~moe_routing.experiments.task_routing.runs.run_grid`: the rows of the
    configurations that have a result, in their order)."""

    def __init__(self, failures: Sequence[TaskFailure], total: int, results: Sequence = ()):
        self.failures, self.total, self.results = list(failures), total, list(results)
        lines = [f"{len(self.failures)} of {total} runs failed; every other run finished and is "
                 "kept, so a rerun trains only these:"]
        lines += [f"  {f.key} ({f.label}): {f.reason}" for f in self.failures]
        super().__init__("\n".join(lines))


# ----------------------------------------------------------------------------- the plan
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


# ----------------------------------------------------------------------------- one task
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


def one_line(e: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
    return line if len(line) <= 300 else line[:299] + "…"
