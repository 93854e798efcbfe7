"""The ``slurm`` backend of the grid executor: every task a SLURM job submitted through submitit.

:func:`_slurm_settings` reads and checks the backend's environment variables before any job
(the cluster, the job folder, the extra parameters for submitit); :func:`_slurm_executor` is
submitit's executor with the jobs' resources; :func:`_run_slurm` keeps at most ``workers``
jobs in flight and hands each result back to the driver.  submitit is imported only when the
backend runs (the ``slurm`` extra), so the other backends never need it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

from ..._internal.validation import fail, require
from .tasks import Plan, SlurmSettings, Task, _call, _env, _import_backend, one_line

#: the ``slurm`` backend's settings (environment variables, read and checked by
#: :func:`.executor.plan`)
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
