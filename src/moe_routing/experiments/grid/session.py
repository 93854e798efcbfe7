"""A chapter's training session: every grid a chapter trains, run one way for its whole
execution.

The training chapter trains its grids (every run in one pool, then the sections read them back)
and the two-hop chapter one of its own, each through :meth:`GridSession.run_with` with the
experiment's grid runner; all of them want: where the
runs go, checked before anything is trained (:func:`~.executor.plan`); one progress line per
finished run on stderr (the pipeline's chapter log keeps stderr, the book's pages drop it); one
Ray session shared by the grids (its start-up costs seconds) and closed at the end; the folders
cached runs are read back from (the pipeline injects them as ``runs_from``: the chapter's
previous execution, a failed attempt, the bridge chapter's runs); and the wall and CPU time of
the whole, workers included.  A :class:`GridSession` holds them, so the chapter calls
:meth:`GridSession.run_with` and keeps no plumbing of its own.  The session knows no experiment
(the grid runner is the caller's), so the grid package imports none.  Not part of any cache
key: it never changes a result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from ..._internal import validation as check


def cpu_seconds() -> float:
    """CPU time of this process and of its finished child processes (the local executor's
    workers), user and system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class GridSession:
    """Where a chapter's runs go, its progress lines, its Ray session and the folders its cached
    runs are read back from (module docstring).

    ``executor``, ``workers``, ``threads`` and ``device`` are :func:`~.executor.plan`'s, checked
    here (a bad value fails before anything is trained), and every grid of the session runs
    so (``threads`` torch threads per run, whatever the calling kernel's own count);
    ``runs_from``: folders to look for cached runs in (the pipeline's ``runs_from``; a folder
    that does not exist is skipped).
    Use it as a context manager or call :meth:`close` (it shuts down a Ray instance the session
    started and removes its progress handler).
    """

    def __init__(self, executor: str | None = None, workers: int | str | None = None, *,
                 threads: int | None = None, device: str = "cpu",
                 runs_from: Sequence[str | Path] = ()):
        from . import executor as grid_executor
        from .ray_cluster import ray_session

        if isinstance(runs_from, (str, os.PathLike)):
            check.fail("runs_from", runs_from, "a sequence of folders (a list, even of one)")
        folders = check.sequence("runs_from", runs_from,
                                 "a sequence of folders (a list, even of one)", nonempty=False)
        for i, f in enumerate(folders):
            check.require(isinstance(f, (str, os.PathLike)) and os.fspath(f) != "",
                          f"runs_from[{i}]", f, "a folder path")
        self.plan = grid_executor.plan(executor, workers, threads=threads, devices=[device])
        self.runs_from = tuple(Path(f) for f in folders)
        self._t0, self._cpu0 = time.perf_counter(), cpu_seconds()
        self._logger = logging.getLogger(grid_executor.__name__)
        self._handler = logging.StreamHandler(sys.stderr)
        self._handler.setFormatter(logging.Formatter("%(message)s"))   # the log adds the time
        self._logger.addHandler(self._handler)
        self._level = self._logger.level
        self._logger.setLevel(logging.INFO)
        self._stack = contextlib.ExitStack()
        if self.plan.executor == "ray":
            self._stack.enter_context(ray_session(self.plan.workers, threads))
        self.closed = False

    def describe(self) -> str:
        """One line: the backend, how many runs at once and threads per run."""
        return self.plan.describe()

    def run_with(self, grid, configs, artifacts_dir, profile: str = "smoke") -> list[dict]:
        """A grid runner of the library on this session's backend, with its progress lines and
        the session's cached runs: ``grid`` takes ``(configs, artifacts_dir, profile=,
        progress=, workers=, executor=, threads=, reuse_from=)``, as
        :func:`~moe_routing.experiments.task_routing.runs.run_grid` and
        :func:`~moe_routing.experiments.two_hop.runs.run_two_hop_grid` do; ``reuse_from`` is
        the session's ``runs_from`` (the folders that exist, ``artifacts_dir`` left out)."""
        check.require(not self.closed, "session", "closed", "an open GridSession")
        grid = check.function("grid", grid)
        here = None if artifacts_dir is None else Path(artifacts_dir).resolve()
        reuse = [f for f in self.runs_from if f.is_dir() and f.resolve() != here]
        return grid(configs, artifacts_dir, profile=profile, progress=False,
                    workers=self.plan.workers, executor=self.plan.executor,
                    threads=self.plan.threads, reuse_from=reuse)

    def close(self) -> tuple[float, float]:
        """End the session: ``(wall seconds, CPU seconds)`` since it started."""
        if not self.closed:
            self._stack.close()
            self._logger.removeHandler(self._handler)
            self._logger.setLevel(self._level)
            self.closed = True
        return time.perf_counter() - self._t0, cpu_seconds() - self._cpu0

    def __enter__(self) -> "GridSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["GridSession", "cpu_seconds"]
