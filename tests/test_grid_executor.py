"""Where a training grid runs (moe_routing.experiments.grid.executor): every backend gives the results
of a serial loop, isolates a failing run, resumes an interrupted grid, and refuses a bad choice
in one line before any run starts.  The SLURM backend is tested through submitit's local
executor (the same pickled jobs and job files, run as subprocesses of this machine); the Ray
backend on an instance of its own, whose workers import the package it carries.

The comparisons are exact: every run seeds itself and runs with one torch thread wherever it
lands (the serial reference too), so the same CPU computes the same numbers."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import re

import pytest
import torch

from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.grid.tasks import GridError
from moe_routing.experiments.task_routing.runs import grid_configs, run_grid
from moe_routing.experiments.grid import executor as ex
from moe_routing.experiments.task_routing import runs as tr
from moe_routing.experiments.grid import local
from moe_routing.experiments.grid import ray_cluster
from moe_routing.experiments.grid import slurm

TINY = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
            batch_size=32, warmup_steps=2, steps=6)
#: four distinct runs (two experts counts × two objectives)
GRID = grid_configs([2], [2, 3], ["ce", "ce+router"], **TINY)
#: a configuration that passes every check but fails when it runs: the knowledge base has
#: fewer relations than it asks for (found when its dataset is built, inside the run)
FAILS = ExperimentConfig.from_flat(n_tasks=2, n_experts=2, objective="ce", **{**TINY, "n_relations": 500})
#: what may differ between two runs of one configuration: wall-clock measurements, whether it
#: came from the cache, and the provenance (the working tree's commit is read at each run)
NOT_RESULTS = ("wall_s", "train_s", "cached", "provenance")

ray_installed = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not ray_installed, reason="the ray package is not installed "
                               "(pip install 'moe_routing[ray]'); the Ray backend is untested")
submitit_installed = importlib.util.find_spec("submitit") is not None
needs_submitit = pytest.mark.skipif(not submitit_installed, reason="the submitit package is not "
                                    "installed (pip install 'moe_routing[slurm]'); the SLURM "
                                    "backend is untested")


@pytest.fixture(autouse=True)
def one_thread_no_env(monkeypatch):
    """One torch thread in this process (the serial reference and the thread count handed to
    workers) and no grid settings from the environment."""
    for var in (ex.ENV_EXECUTOR, ex.ENV_WORKERS, "RAY_ADDRESS", slurm.ENV_SLURM_CLUSTER,
                slurm.ENV_SLURM_FOLDER, slurm.ENV_SLURM_PARAMS):
        monkeypatch.delenv(var, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def comparable(row: dict) -> dict:
    row = {k: v for k, v in row.items() if k not in NOT_RESULTS}
    row["history"] = {k: v for k, v in row["history"].items() if k != "tokens_per_s"}
    return json.loads(json.dumps(row))


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The reference: the grid trained one run after another in this process."""
    with pytest.MonkeyPatch.context() as mp:
        for var in (ex.ENV_EXECUTOR, ex.ENV_WORKERS):
            mp.delenv(var, raising=False)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            rows = run_grid(GRID, tmp_path_factory.mktemp("serial"), progress=False,
                            executor="local", workers=1)
        finally:
            torch.set_num_threads(threads)
    assert [r["cached"] for r in rows] == [False] * 4
    return [comparable(r) for r in rows]


def files(folder) -> list:
    return sorted((folder / "task_routing").glob("*.json"))


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == ex.__name__ and re.match(r"grid: run \d+ of \d+", r.getMessage())]


# ---- bad choices: one line, before any run ---------------------------------------------------

@pytest.fixture
def no_training(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a run started although the grid's settings were refused")

    monkeypatch.setattr(tr, "run_experiment", boom)


@pytest.mark.parametrize("kw,env,name,words", [
    (dict(executor="dask"), {}, "executor", "'local', 'ray', 'slurm'"),
    (dict(workers=0), {}, "workers", "integer ≥ 1"),
    (dict(workers=1.5), {}, "workers", "integer ≥ 1"),
    (dict(workers=True), {}, "workers", "integer ≥ 1"),
    (dict(workers="two"), {}, "workers", "integer ≥ 1, or auto"),
    ({}, {ex.ENV_EXECUTOR: "dask"}, ex.ENV_EXECUTOR, "'local', 'ray', 'slurm'"),
    ({}, {ex.ENV_WORKERS: "0"}, ex.ENV_WORKERS, "integer ≥ 1"),
    ({}, {ex.ENV_WORKERS: "many"}, ex.ENV_WORKERS, "integer ≥ 1, or auto"),
])
def test_a_bad_choice_is_one_line_before_any_run(kw, env, name, words, monkeypatch,
                                                 no_training, tmp_path):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as err:
        run_grid(GRID, tmp_path, progress=False, **kw)
    msg = str(err.value)
    assert msg.startswith(f"{name} = ") and words in msg and "\n" not in msg
    assert not (tmp_path / "task_routing").exists()


@pytest.mark.parametrize("address,error,words", [
    ("127.0.0.1:1", RuntimeError, "cannot be reached (127.0.0.1:1: "),
    ("ray://127.0.0.1:1", RuntimeError, "cannot be reached (127.0.0.1:1: "),
    ("127.0.0.1:notaport", ValueError, "host:port"),
    ("http://127.0.0.1:6379", ValueError, "ray://host:port"),
])
@needs_ray
def test_an_unreachable_ray_address_is_one_line_before_any_run(address, error, words,
                                                               monkeypatch, no_training,
                                                               tmp_path):
    import ray

    assert not ray.is_initialized(), "a connected Ray instance would be used as it is"
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(error) as err:
        run_grid(GRID, tmp_path, progress=False, executor="ray")
    msg = str(err.value)
    assert msg.startswith(f"RAY_ADDRESS = {address!r}") and words in msg and "\n" not in msg
    assert not (tmp_path / "task_routing").exists() and not ray.is_initialized()


def test_ray_missing_is_one_line_naming_the_extra(monkeypatch, no_training, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)     # import ray fails
    monkeypatch.setenv(ex.ENV_EXECUTOR, "ray")
    with pytest.raises(ValueError) as err:
        run_grid(GRID, tmp_path, progress=False)
    msg = str(err.value)
    assert msg.startswith(f"{ex.ENV_EXECUTOR} = 'ray'") and "moe_routing[ray]" in msg
    assert "\n" not in msg


@needs_ray
def test_a_ray_without_the_private_names_used_is_one_clear_error(monkeypatch, no_training,
                                                                 tmp_path):
    """Ray's private names (executor_ray._ray_private: no public equivalent) are read in one
    place; a Ray release without them is one line naming them and the tested release."""
    import ray
    from ray._private import utils

    assert not ray.is_initialized(), "a connected Ray instance would be used as it is"
    monkeypatch.delattr(utils, "read_ray_address")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(RuntimeError) as err:
        run_grid(GRID, tmp_path, progress=False, executor="ray")
    msg = str(err.value)
    assert "lacks a private name" in msg and "ray._private.utils.read_ray_address" in msg
    assert "ray 2.60" in msg and "\n" not in msg
    assert not (tmp_path / "task_routing").exists() and not ray.is_initialized()


def test_submitit_missing_is_one_line_naming_the_extra(monkeypatch, no_training, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "submitit", None)     # import submitit fails
    monkeypatch.setenv(ex.ENV_EXECUTOR, "slurm")
    with pytest.raises(ValueError) as err:
        run_grid(GRID, tmp_path, progress=False)
    msg = str(err.value)
    assert msg.startswith(f"{ex.ENV_EXECUTOR} = 'slurm'") and "moe_routing[slurm]" in msg
    assert "\n" not in msg


@needs_submitit
@pytest.mark.parametrize("env,name,words", [
    ({}, "executor", "sbatch on the PATH (none here)"),                 # no SLURM on this machine
    ({slurm.ENV_SLURM_CLUSTER: "pbs"}, slurm.ENV_SLURM_CLUSTER, "'slurm', 'local'"),
    ({slurm.ENV_SLURM_CLUSTER: "local", slurm.ENV_SLURM_PARAMS: "partition=gpu"}, slurm.ENV_SLURM_PARAMS,
     "a JSON object"),
    ({slurm.ENV_SLURM_CLUSTER: "local", slurm.ENV_SLURM_PARAMS: '["gpu"]'}, slurm.ENV_SLURM_PARAMS,
     "a JSON object"),
    ({slurm.ENV_SLURM_CLUSTER: "local", slurm.ENV_SLURM_PARAMS: '{"partitoin": "gpu"}'},
     slurm.ENV_SLURM_PARAMS, "parameters submitit accepts"),
])
def test_a_bad_slurm_setting_is_one_line_before_any_job(env, name, words, monkeypatch,
                                                       no_training, tmp_path):
    monkeypatch.setattr(slurm.shutil, "which", lambda _cmd: None)
    monkeypatch.setenv(slurm.ENV_SLURM_FOLDER, str(tmp_path / "jobs"))
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as err:
        run_grid(GRID, tmp_path, progress=False, executor="slurm")
    msg = str(err.value)
    assert msg.startswith(f"{name} = ") and words in msg and "\n" not in msg
    assert not (tmp_path / "task_routing").exists() and not (tmp_path / "jobs").exists()


# ---- sizing ---------------------------------------------------------------------------------

def test_automatic_size_fills_the_cores_and_the_environment_chooses(monkeypatch):
    cores = ex.cpu_cores()
    assert ex.plan(threads=1) == ex.Plan("local", cores, 1)
    assert ex.plan(threads=cores).workers == 1
    assert ex.plan(threads=cores + 1).workers == 1                   # never zero
    assert ex.plan(workers="auto", threads=1).workers == cores
    monkeypatch.setenv(ex.ENV_WORKERS, "3")
    monkeypatch.setenv(ex.ENV_EXECUTOR, "local")
    assert ex.plan(threads=2) == ex.Plan("local", 3, 2)
    assert ex.plan(workers=5, threads=2).workers == 5                 # an argument wins


# ---- interrupted, resumed, one run failing: every backend gives the serial results ------------

class Interrupt(BaseException):
    """Stands for Ctrl-C in the calling process (not an Exception: nothing may swallow it)."""


class InterruptAfter(logging.Handler):
    """Interrupts the grid in the calling process when the progress line of run ``n`` is
    logged, i.e. after that run's result was kept; notes where a Ray node listens then."""

    def __init__(self, n: int):
        super().__init__(logging.INFO)
        self.n, self.ray_nodes = n, None

    def emit(self, record):
        if re.match(rf"grid: run {self.n} of \d+ done", record.getMessage()):
            if ray_installed:
                import ray

                if ray.is_initialized():
                    self.ray_nodes = {n["NodeManagerAddress"] for n in ray.nodes()}
            raise Interrupt


@contextlib.contextmanager
def interrupt_after(n: int):
    logger = logging.getLogger(ex.__name__)
    handler, level = InterruptAfter(n), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


BACKENDS = [pytest.param(("local", 1), id="serial"), pytest.param(("local", 2), id="local-pool"),
            pytest.param(("ray", 2), id="ray", marks=needs_ray),
            pytest.param(("slurm", 2), id="slurm-local", marks=needs_submitit)]


@pytest.mark.parametrize("which", BACKENDS)
def test_interrupted_grid_resumes_and_a_failing_run_loses_no_other(which, serial, tmp_path,
                                                                   caplog, monkeypatch):
    """Interrupted after two runs, the grid is run again with one more configuration, which
    fails: the finished runs are skipped, the rest trained, the failure listed in one error,
    and every result is the serial one.  Ray runs on an instance of run_grid's own (loopback
    only), stopped when the grid ends, interrupted or not; its driver writes the results, as
    SLURM's does (submitit's local executor here; the jobs in flight at the interruption are
    cancelled)."""
    executor, workers = which
    if executor == "slurm":
        monkeypatch.setenv(slurm.ENV_SLURM_CLUSTER, "local")
        monkeypatch.setenv(slurm.ENV_SLURM_FOLDER, str(tmp_path / "jobs"))
    if executor == "ray":
        import ray

        assert not ray.is_initialized(), "a connected Ray instance would be used as it is"
    with interrupt_after(2) as stop, pytest.raises(Interrupt):
        run_grid(GRID, tmp_path, progress=False, executor=executor, workers=workers)
    kept = {p.stem for p in files(tmp_path)}
    # two results kept; local workers write their own, so a run in flight may have finished
    assert len(kept) == 2 if executor in ("ray", "slurm") or workers == 1 else 2 <= len(kept) <= 4
    if executor == "ray":
        assert stop.ray_nodes == {"127.0.0.1"} and not ray.is_initialized()

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=ex.__name__), pytest.raises(GridError) as err:
        run_grid(GRID + [FAILS], tmp_path, progress=False, executor=executor, workers=workers)
    e = err.value
    assert isinstance(e, RuntimeError) and str(e).startswith("1 of 5 runs failed")
    (failure,) = e.failures
    assert failure.key == FAILS.key() and failure.label == tr.run_label(FAILS)
    assert failure.reason.startswith("ValueError: n_relations = 500") and "\n" not in failure.reason
    assert f"{FAILS.key()} ({tr.run_label(FAILS)}): ValueError: n_relations = 500" in str(e)
    # every other run is there, identical to the serial run, and written (no temporary left)
    assert [comparable(r) for r in e.results] == serial
    assert [r["cached"] for r in e.results] == [r["key"] in kept for r in e.results]
    assert sorted(p.name for p in (tmp_path / "task_routing").iterdir()) == \
        [p.name for p in files(tmp_path)] and len(files(tmp_path)) == 4
    # one progress line per trained run, one of them the failure
    lines = progress_lines(caplog)
    assert len(lines) == 5 - len(kept) and sum("FAILED" in line for line in lines) == 1
    done = [line for line in lines if "FAILED" not in line]
    d = r"(?:[\d.]+ s|\d+ min \d\d s|\d+ h \d\d min)"        # every form of ex.duration
    assert all(re.fullmatch(rf"grid: run \d of {5 - len(kept)} done \(E=\d, ce(\+router)?, "
                            rf"k=2, seed 0\) in {d}; elapsed {d}, ETA {d}", line)
               for line in done), done
    if executor == "ray":
        assert not ray.is_initialized()


def test_finished_runs_are_never_trained_again(serial, tmp_path, monkeypatch):
    run_grid(GRID[:2], tmp_path, progress=False, workers=1)

    def boom(*a, **k):
        raise AssertionError("retrained a finished run")

    monkeypatch.setattr(tr, "run_experiment", boom)
    rows = run_grid(GRID[:2], tmp_path, progress=False, executor="local", workers=2)
    assert all(r["cached"] for r in rows) and [comparable(r) for r in rows] == serial[:2]


def test_local_workers_spread_round_robin_over_the_gpus():
    assert [local.gpu_of_worker(i, 4) for i in range(6)] == [0, 1, 2, 3, 0, 1]
    assert [local.gpu_of_worker(i, 1) for i in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError, match="n_gpus"):
        local.gpu_of_worker(0, 0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_grid_sizes_one_worker_per_gpu_and_pins_them():
    how = ex.plan("local", None, threads=1, devices=["cuda"])
    assert how.cuda and how.workers == torch.cuda.device_count()
    tasks = [ex.Task(f"t{i}", f"task {i}", ()) for i in range(2 * how.workers)]
    if how.workers < 2:
        how = ex.Plan("local", 2, 1, True)
    seen = []
    assert ex.run_tasks(torch.cuda.current_device, tasks, how,
                        on_result=lambda _task, gpu: seen.append(gpu)) == []
    assert sorted(set(seen)) == list(range(min(how.workers, torch.cuda.device_count())))


def _imported_from() -> str:
    import moe_routing

    return moe_routing.__file__


@needs_ray
def test_ray_workers_import_the_package_the_grid_carries(tmp_path):
    """The Ray session of a chapter's grids (GridSession) passes ``runtime_env={"py_modules":
    [the package]}``, and stops the instance it started when it closes: its workers import
    ``moe_routing`` from Ray's copy of the driver's package (first on their path), not from an
    installation of their own, which a cluster's node need not have."""
    import sys
    from pathlib import Path

    import ray
    from ray import cloudpickle                   # Ray's own copy pickles the task's arguments

    import moe_routing
    from moe_routing.experiments.grid import GridSession

    package = Path(moe_routing.__file__).parent
    assert ray_cluster.ray_runtime_env()["py_modules"] == [str(package)]
    assert not ray.is_initialized(), "a connected Ray instance would be used as it is"
    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # _imported_from by value:
    # the workers cannot import this test module
    try:
        seen = []
        # in a chapter's GridSession: one Ray instance for its grids, shut down when it closes
        with GridSession(executor="ray", workers=1, threads=1) as session:
            assert ray.is_initialized()
            failures = ex.run_tasks(_imported_from, [ex.Task("where", "where", ())],
                                    session.plan,
                                    on_result=lambda _task, path: seen.append(Path(path)))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert failures == [] and len(seen) == 1
    (where,) = seen
    assert not where.is_relative_to(package) and "py_modules" in where.as_posix(), where
    assert where.name == "__init__.py" and where.parent.name == "moe_routing"
    assert not ray.is_initialized()
