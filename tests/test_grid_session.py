"""A chapter's training session (moe_routing.experiments.grid.session): its choices are checked
before anything trains, its grids read cached runs back from the folders the pipeline injects,
its progress lines reach stderr while it is open and stop when it closes."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from moe_routing.experiments.grid import executor as ex
from moe_routing.experiments.task_routing.runs import grid_configs, run_grid
from moe_routing.experiments.task_routing import runs as tr
from moe_routing.experiments.grid.session import GridSession, cpu_seconds
from moe_routing.experiments.grid import tasks

TINY = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
            batch_size=32, warmup_steps=2, steps=6)
CFGS = grid_configs([2], [2], ["ce", "ce+router"], **TINY)


@pytest.fixture(autouse=True)
def one_thread_no_env(monkeypatch):
    for var in (ex.ENV_EXECUTOR, ex.ENV_WORKERS, "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("kwargs,match", [
    (dict(executor="bogus"), r"executor = 'bogus'"),
    (dict(workers=0), r"workers = 0"),
    (dict(runs_from="build/artifacts/training"), r"runs_from = 'build/artifacts/training'.*"
                                                 r"a sequence of folders"),
    (dict(runs_from=[""]), r"runs_from\[0\] = ''.*a folder path"),
    (dict(runs_from=[3]), r"runs_from\[0\] = 3.*a folder path"),
])
def test_a_bad_choice_is_refused_before_anything_runs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GridSession(**kwargs)


def test_runs_are_read_back_from_the_injected_folders_and_nothing_retrains(tmp_path,
                                                                          monkeypatch):
    first = tmp_path / "artifacts" / "training"
    with GridSession(workers=1) as s:
        trained = s.run_with(run_grid, CFGS, first)
    assert not any(r["cached"] for r in trained)

    def boom(*_a, **_k):
        raise AssertionError("a cached run was trained again")

    monkeypatch.setattr(tr, "run_experiment", boom)
    again = tmp_path / "artifacts" / ".training.tmp-1"
    missing = tmp_path / "artifacts" / "never-written"
    with GridSession(workers=1, runs_from=[missing, again, first]) as s:
        rows = s.run_with(run_grid, CFGS, again)            # its own folder among runs_from is skipped
    assert all(r["cached"] for r in rows)
    assert [r["key"] for r in rows] == [r["key"] for r in trained]
    assert all(tr.result_path(c, again).is_file() for c in CFGS)   # copied into the new folder
    # without the folders, the same grid would train (and here fail)
    with GridSession(workers=1) as s, pytest.raises(tasks.GridError, match="trained again"):
        s.run_with(run_grid, CFGS, tmp_path / "elsewhere")


def test_progress_lines_while_open_and_the_times_at_close(capsys):
    s = GridSession(workers=1)
    logger = logging.getLogger(ex.__name__)
    logger.info("grid: a progress line")
    t0 = time.perf_counter()
    wall, cpu = s.close()
    assert 0 <= wall and 0 <= cpu and wall <= time.perf_counter() - t0 + 60
    logger.info("grid: after the session")
    err = capsys.readouterr().err
    assert "grid: a progress line" in err and "after the session" not in err
    assert s.close()[0] >= wall                        # closing twice is harmless
    with pytest.raises(ValueError, match="session = 'closed'.*an open GridSession"):
        s.run_with(run_grid, CFGS, None)
    assert cpu_seconds() > 0


def test_another_grid_runner_gets_the_sessions_backend_and_progress_lines(capsys, tmp_path):
    """run_with hands any grid runner (the two-hop chapter's) the session's workers,
    executor and threads per run and its cached-run folders (those that exist, the grid's own
    folder left out), and what the executor logs while it runs reaches stderr."""
    seen = {}

    def grid(configs, artifacts_dir, *, profile, progress, workers, executor, threads,
             reuse_from):
        seen.update(configs=configs, artifacts_dir=artifacts_dir, profile=profile,
                    progress=progress, workers=workers, executor=executor, threads=threads,
                    reuse_from=reuse_from)
        logging.getLogger(ex.__name__).info("grid: run 1 of 1 done")
        return [{"key": "k"}]

    here, earlier = tmp_path / "here", tmp_path / "earlier"
    here.mkdir(), earlier.mkdir()
    with GridSession(workers=1, threads=3, runs_from=[here, earlier, tmp_path / "none"]) as s:
        assert s.run_with(grid, ["cfg"], here, profile="default") == [{"key": "k"}]
        with pytest.raises(ValueError, match="grid = 3"):
            s.run_with(3, ["cfg"], here)
    assert seen == dict(configs=["cfg"], artifacts_dir=here, profile="default",
                        progress=False, workers=1, executor="local", threads=3,
                        reuse_from=[earlier])
    assert "grid: run 1 of 1 done" in capsys.readouterr().err
    with pytest.raises(ValueError, match="session = 'closed'"):
        s.run_with(grid, ["cfg"], here)


def test_the_sessions_threads_reach_the_grids_plan(monkeypatch):
    """A session of one thread per run plans its grids so even when the kernel runs two
    torch threads (the two-hop chapter ran 1 at once × 2 threads before: the session's
    threads were not handed on)."""
    from moe_routing.experiments.grid import runner as grid_module

    planned = []
    def spy(_runs, _configs, _artifacts_dir, how, **_kw):
        planned.append(how)
        return []

    monkeypatch.setattr(grid_module, "run_cached_grid", spy)
    torch.set_num_threads(2)
    with GridSession(threads=1) as s:
        s.run_with(run_grid, CFGS, None)
    assert [(h.workers, h.threads) for h in planned] == [(ex.cpu_cores(), 1)]
    torch.set_num_threads(1)
    with GridSession(threads=2) as s:
        s.run_with(run_grid, CFGS, None)
    assert planned[-1].threads == 2


class _Cfg:
    """A configuration stand-in for the grid runner: a key, a label and a cost."""

    def __init__(self, name: str, cost: float):
        self.name, self.cost = name, cost

    def key(self) -> str:
        return self.name

    def as_dict(self) -> dict:
        return {"name": self.name}


def _run(cfg, _folder, _profile):
    return {"key": cfg.key()}


def test_runs_start_longest_first_and_rows_keep_the_configurations_order(monkeypatch):
    """With a cost, the grid runner hands the executor the runs longest first (ties in the
    configurations' order); the rows come back in the configurations' order. Without one,
    the runs start in the configurations' order."""
    from moe_routing.experiments.grid import runner as grid_module

    cfgs = [_Cfg("short", 1), _Cfg("long", 9), _Cfg("mid-a", 5), _Cfg("mid-b", 5), _Cfg("zero", 0)]
    started = []

    def fake_run_tasks(fn, tasks, how, on_result=None, progress=False):
        started.append([t.key for t in tasks])
        for t in tasks:
            on_result(t, fn(*t.args))
        return []

    monkeypatch.setattr(ex, "run_tasks", fake_run_tasks)
    how = ex.plan("local", 1)
    for cost, order in ((lambda c: c.cost, ["long", "mid-a", "mid-b", "short", "zero"]),
                        (None, ["short", "long", "mid-a", "mid-b", "zero"])):
        runs = grid_module.CachedRuns(run=_run, read=lambda *_: (None, None),
                                      path=lambda *_: None, label=lambda c: c.name, cost=cost)
        rows = grid_module.run_cached_grid(runs, cfgs, None, how)
        assert started[-1] == order
        assert [r["key"] for r in rows] == [c.name for c in cfgs]
    # the experiments' estimates order their real runs so
    stopped = CFGS[0].replace(steps=1)
    assert (tr.run_cost(CFGS[0]) > tr.run_cost(stopped)
            > tr.run_cost(CFGS[0].replace(variant="untrained")) == 0)
