"""One grid runner for the experiments that train: cached results first, the rest through
:mod:`~moe_routing.experiments.grid.executor`, one row per configuration in order.

Paper A's training grid (:func:`~moe_routing.experiments.task_routing.runs.run_grid`) and the
two-hop grid (:func:`~moe_routing.experiments.two_hop.runs.run_two_hop_grid`) did the same five
things in two copies: look each distinct key up in the cache folders, send the missing runs to
a backend, check and write each result as it arrives (a Ray result comes back as a value; a
local worker writes its own), build the rows in the configurations' order (a repeat of a key
is a shared copy), and raise :class:`~moe_routing.experiments.grid.tasks.GridError` with the rows
of the others when some run failed.  This module is that one loop; an experiment says how to
read, write and run one configuration (:class:`CachedRuns`).

Not part of any cache key: it decides where and when a run is computed, never what it computes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..._internal.atomic import atomic_write_json
from ..._internal.validation import fail, sequence

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CachedRuns:
    """How one experiment's runs are cached and computed.

    ``run(cfg, folder, profile)`` trains and measures one configuration (a module-level
    function: worker processes import it by name) and writes its result in ``folder`` when
    that is not None; ``read(cfg, folder)`` returns ``(result or None, problem or None)``;
    ``path(cfg, folder)`` is where a result is written; ``label(cfg)`` names a run in progress
    lines and errors.  ``name`` starts the grid's log lines and ``log`` is the logger they go
    to: the experiment's own, so a caller listening to it hears them.  ``copy_extra(cfg, src,
    dst)`` (optional) copies what lives beside a result reused from another folder (trained
    weights); ``row_extra(cfg, row)`` (optional) adds fields to a returned row; ``cost(cfg)``
    (optional) estimates a run's time, in any unit: the runs start longest first (module
    docstring of :func:`run_cached_grid`).
    """

    run: Callable
    read: Callable[[Any, Any], tuple[dict | None, str | None]]
    path: Callable[[Any, Any], Path]
    label: Callable[[Any], str]
    name: str = "grid"
    log: logging.Logger = log
    copy_extra: Callable[[Any, Any, Any], None] | None = None
    row_extra: Callable[[Any, dict], None] | None = None
    cost: Callable[[Any], float] | None = None


def _lookup(runs: CachedRuns, cfg, folders: Sequence, artifacts_dir) -> dict | None:
    """The first usable cached result of ``cfg`` in ``folders``, copied into ``artifacts_dir``
    when found elsewhere; problems with unusable copies are logged in one line."""
    res, found_in, problems = None, None, []
    for folder in folders:
        res, problem = runs.read(cfg, folder)
        problems += [problem] if problem else []
        if res is not None:
            found_in = folder
            break
    if found_in is not None and artifacts_dir is not None and found_in is not artifacts_dir:
        atomic_write_json(runs.path(cfg, artifacts_dir), res)
        if runs.copy_extra is not None:
            runs.copy_extra(cfg, found_in, artifacts_dir)
    if problems:
        runs.log.warning("%s: %s run %s: %s", runs.name, "reusing another cached copy of"
                    if res is not None else "re-running", cfg.key(), "; ".join(problems))
    return res


def run_cached_grid(runs: CachedRuns, configs: Sequence, artifacts_dir, how, *,
                    reuse_from: Sequence = (), profile: str = "smoke",
                    progress: bool = True) -> list[dict]:
    """Every configuration's result, reusing cached ones (validated arguments: the callers
    check ``configs``, ``profile`` and the :func:`~.executor.plan` ``how``).

    A result is looked up in ``artifacts_dir``, then in each folder of ``reuse_from``; the
    missing runs go to ``how``'s backend, each result checked against its key and written
    (atomically) as it arrives, so an interrupted grid resumes.  With ``runs.cost`` the runs
    start longest first (ties in the configurations' order): a pool of w workers then ends
    on short runs instead of leaving w − 1 cores idle during a long last one (the longest-
    processing-time rule); the rows' order does not change.  Returns one row per
    configuration, in order: the result with ``config`` (the requested configuration's
    mapping) and ``cached`` (not trained in this call, or a repeat of a key).  A failed run
    does not stop the others; :class:`~moe_routing.experiments.grid.tasks.GridError` lists the
    failures and holds the other rows.
    """
    from .tasks import GridError, Task
    from .executor import run_tasks

    # every grid's reuse_from, checked here once (a lone path would be read letter by letter)
    if isinstance(reuse_from, (str, os.PathLike)):
        fail("reuse_from", reuse_from, "a sequence of folders (a list, even of one)")
    reuse_from = sequence("reuse_from", reuse_from, "a sequence of folders (a list, even of one)",
                          nonempty=False)
    folders = ([] if artifacts_dir is None else [artifacts_dir]) + list(reuse_from)
    done: dict[str, tuple[dict, bool]] = {}      # key -> (result, read from a cache)
    pending: dict[str, Any] = {}                 # key -> configuration to train
    for cfg in configs:
        key = cfg.key()
        if key in done or key in pending:
            continue
        res = _lookup(runs, cfg, folders, artifacts_dir)
        if res is None:
            pending[key] = cfg
        else:
            done[key] = (res, True)

    # Local workers share this file system and write their own results; Ray's and SLURM's
    # come back as values and are written here, as each arrives.
    writes_here = how.executor != "local"
    where = None if writes_here else artifacts_dir

    def keep(task: Task, res: dict) -> None:
        if res.get("key") != task.key:
            raise RuntimeError(f"the result has key {res.get('key')!r}, not {task.key!r}: it was "
                               "computed by other code (moe_routing, torch or Python differ "
                               "where it ran)")
        res = {k: v for k, v in res.items() if k != "cached"}
        if writes_here and artifacts_dir is not None:
            atomic_write_json(runs.path(pending[task.key], artifacts_dir), res)
        done[task.key] = (res, False)

    n_runs = len(done) + len(pending)
    runs.log.info("%s: %d distinct run%s, %d read from a cache", runs.name, n_runs,
             "s" if n_runs != 1 else "", len(done))
    order = list(pending.items())
    if runs.cost is not None:
        order.sort(key=lambda item: -runs.cost(item[1]))                 # stable: ties in order
    tasks = [Task(key, runs.label(cfg), (cfg, where, profile)) for key, cfg in order]
    failures = run_tasks(runs.run, tasks, how, on_result=keep, progress=progress)
    out, first = [], set()
    for cfg in configs:
        key = cfg.key()
        if key not in done:
            continue
        res, cached = done[key]
        row = dict(res)
        row["config"] = cfg.as_dict()             # the requested objective, not the shared one
        row["cached"] = cached or key in first    # a repeat in this call is a shared copy
        first.add(key)
        if runs.row_extra is not None:
            runs.row_extra(cfg, row)
        out.append(row)
    if failures:
        raise GridError(failures, n_runs, out)
    return out


__all__ = ["CachedRuns", "run_cached_grid"]
