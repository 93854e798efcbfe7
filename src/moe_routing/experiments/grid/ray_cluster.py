"""The ``ray`` backend of the grid executor: every task a Ray task, on a cluster or this machine.

:func:`_ray_address` checks ``RAY_ADDRESS`` (a TCP connection first, so that an unreachable
address is one line, not a Ray traceback); :func:`ray_session` connects to that cluster or
starts a loopback-only instance here; :func:`ray_runtime_env` carries this very package to the
workers; :func:`_run_ray` schedules the tasks (``threads`` CPUs each, and a share of a GPU on
CUDA) and hands each result back to the driver.  Ray is imported only when it runs, so the
other backends never need it (the ``ray`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

from ..._internal.validation import fail, integer
from .tasks import Plan, Task, _call, _env, _import_backend, cpu_cores, one_line

#: seconds a TCP connection to ``RAY_ADDRESS`` may take before the address counts as unreachable
CONNECT_TIMEOUT_S = 3.0
#: Ray's default ports: the GCS of ``ray start --head`` and the Ray Client server
RAY_GCS_PORT, RAY_CLIENT_PORT = 6379, 10001


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
    if address == "auto":                        # the file `ray start` writes (Ray's own reader)
        target = _ray_private().read_ray_address(None)
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


# Ray's private names this backend needs, all here. Ray 2.60 has no public equivalent of any:
#  * ray._private.utils.read_ray_address: the address `ray start` recorded on this machine, which
#    RAY_ADDRESS=auto means. ray.init(address="auto") resolves it too, but only by connecting,
#    and an address left by a cluster that is gone makes it retry for minutes; read first, the
#    address gets the same one-line TCP check as any other.
#  * ray._private.ray_constants.ENABLE_RAY_CLUSTER (read from ENABLE_RAY_CLUSTERS_ENV_VAR when
#    Ray is imported): False makes a Ray started here bind to the loopback address only (Ray's
#    own macOS/Windows default, ray-project/ray#18730); ray.init's node address option
#    (_node_ip_address) is itself a hidden option, and 127.0.0.1 there is replaced by the
#    machine's address unless this flag is off.
#  * the logger of ray._private.authentication.authentication_token_setup (a name, not an
#    import): silenced during ray.init, its token-authentication notice line; if Ray renames
#    it, the notice is printed, nothing fails.
RAY_AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


def _ray_private():
    """Ray's private names (above) as one namespace; a Ray without them is one clear error."""
    import types

    import ray

    try:
        from ray._private import ray_constants
        from ray._private.utils import read_ray_address

        names = types.SimpleNamespace(
            read_ray_address=read_ray_address, ray_constants=ray_constants,
            cluster_env_var=ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR,
            cluster_flag=ray_constants.ENABLE_RAY_CLUSTER)
    except (ImportError, AttributeError) as e:
        raise RuntimeError(
            f"Ray {getattr(ray, '__version__', '?')} lacks a private name the ray backend uses "
            f"({e}): ray._private.utils.read_ray_address, ray._private.ray_constants."
            f"ENABLE_RAY_CLUSTER and ENABLE_RAY_CLUSTERS_ENV_VAR; accepted: the Ray release of "
            f"the ray extra (moe_routing[ray], tested on ray 2.60)") from None
    return names


def _ray_is_initialized() -> bool:
    import sys

    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


@contextlib.contextmanager
def ray_session(workers: int | None = None, threads: int | None = None) -> Iterator[bool]:
    """Ray connected for the duration: the caller's instance when already initialised, the
    cluster at ``RAY_ADDRESS`` when set, otherwise a new instance on this machine (loopback
    only, ``workers × threads`` CPUs, or all cores) that is shut down at the end.  Yields
    whether this call started it.  Wrap several
    :func:`~moe_routing.experiments.task_routing.runs.run_grid` calls in one session to pay Ray's
    start-up (seconds) once.  A session started here carries the package to its workers
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
    private = _ray_private()

    # Loopback only: Ray binds to the address other nodes would reach unless it believes
    # clusters are off (its macOS/Windows default, ray-project/ray#18730); no usage report
    # (RAY_USAGE_STATS_ENABLED, Ray's documented switch). Ray's token authentication stays on
    # (its default), without its notice line on stderr.
    saved_env = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", private.cluster_env_var)}
    notice = logging.getLogger(RAY_AUTH_NOTICE_LOGGER)
    saved_level = notice.level
    os.environ.update({"RAY_USAGE_STATS_ENABLED": "0", private.cluster_env_var: "0"})
    private.ray_constants.ENABLE_RAY_CLUSTER = False
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
        private.ray_constants.ENABLE_RAY_CLUSTER = private.cluster_flag
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
    import moe_routing

    package = Path(moe_routing.__file__).resolve().parent     # moe_routing/, wherever it lies
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
