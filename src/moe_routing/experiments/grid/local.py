"""The ``local`` backend of the grid executor: a pool of ``spawn``\\ ed worker processes.

Each worker runs with the caller's torch thread count and, on CUDA, its own GPU (round-robin
over the GPUs, :func:`gpu_of_worker`); a worker that dies fails the tasks it took, and an
interruption stops them all.  :func:`.executor.run_tasks` runs a single task, or
``workers=1``, in the calling process instead; the pool is here, apart from the other
backends (:mod:`.ray_cluster`, :mod:`.slurm`), which need packages of their own.
"""

from __future__ import annotations

import contextlib

from ..._internal.validation import integer
from .tasks import Plan, Task, _call, one_line


#: seconds to wait for a stopped worker to exit before it is killed
JOIN_S = 10.0


def _worker_init(threads: int, gpu_slot=None) -> None:
    """A local worker process: the caller's torch thread count and, for CUDA grids, its own GPU.

    ``gpu_slot`` is a shared counter: the i-th worker to start takes GPU ``i mod n_gpus`` as
    its current device, so that workers spread round-robin over the GPUs (one per GPU with
    the automatic size; ``workers`` > GPUs puts several runs on each GPU, for runs small
    enough to share one) and a run's ``device="cuda"`` means that GPU."""
    import torch

    from ..._internal.atomic import clean_exit_on_sigterm

    clean_exit_on_sigterm()              # stopped mid-write, a worker leaves no temporary behind
    torch.set_num_threads(threads)
    if gpu_slot is not None and torch.cuda.is_available():
        with gpu_slot.get_lock():
            slot = gpu_slot.value
            gpu_slot.value += 1
        torch.cuda.set_device(gpu_of_worker(slot, torch.cuda.device_count()))


def gpu_of_worker(slot: int, n_gpus: int) -> int:
    """The GPU the ``slot``-th local worker takes (round-robin; see :func:`_worker_init`)."""
    return integer("slot", slot, low=0) % integer("n_gpus", n_gpus, low=1)


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
        for p in procs:                  # none still writes once the interruption propagates
            with contextlib.suppress(Exception):
                p.join(JOIN_S)
                if p.is_alive():
                    p.kill()
                    p.join(JOIN_S)
        raise
    pool.shutdown(wait=True)
