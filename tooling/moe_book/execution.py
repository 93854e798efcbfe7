"""Executing one chapter: jupytext → papermill in its own kernel, with the chapter's lock, a
cell timeout, a log file and atomic swaps of its outputs.

Why a module of its own: this is the part of the pipeline that starts kernels and touches
``executed/``, ``artifacts/``, ``failed/`` and ``logs/`` (layout in :mod:`moe_book.pipeline`);
what decides *whether* to run (the key, the recorded outputs) stays with the pipeline, which
staging reads too.  A failed run never touches ``executed/`` or ``artifacts/``: the previous
good outputs stay.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

from moe_routing._internal.atomic import atomic_write_json, atomic_write_text

from .project import (Project, notebook_key, output_checksums, parameters_cell_names,
                       read_state, run_folders, verify_outputs)


# Cell timeout per profile (seconds): a hung cell fails its chapter with a clear message instead
# of hanging the build; ``make execute TIMEOUT=s`` overrides it.
CELL_TIMEOUT_S = {"smoke": 600, "default": 1800, "paper": 12 * 3600}


def _finalise_notebook(nb, name: str, profile: str, prov: dict, artifacts: Path) -> None:
    """Record provenance and the true paths in the executed notebook.

    papermill records its input as the whole input notebook when given a notebook object
    (doubling the file and leaking every cell, solutions included, into metadata): replace it
    by the source path, and the temporary output/artifact paths by the final ones. What the
    reader sees of the parameters is set at staging time
    (:func:`moe_book.staging.reader_notebook`), so changing it re-executes nothing.
    """
    pm_meta = nb.metadata.get("papermill", {})
    pm_meta["input_path"] = f"notebooks/{name}.md"
    pm_meta["output_path"] = f"build/{profile}/executed/{name}.ipynb"
    if "parameters" in pm_meta:
        pm_meta["parameters"] = {**pm_meta["parameters"], "artifacts_dir": str(artifacts)}
    nb.metadata["moe_routing"] = prov


def _ipc_kernel_manager(sock_dir: str):
    """A kernel manager talking to the kernel over Unix sockets in ``sock_dir`` (a private
    temporary directory) instead of TCP on localhost: no port is opened, and the kernel no
    longer warns that it runs over unencrypted TCP."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.transport = "ipc"
            self.ip = os.path.join(sock_dir, "kernel")

        async def _async_interrupt_kernel(self):
            # jupyter_client interrupts every kernel before shutting it down; an idle kernel
            # then logs "ERROR | KeyboardInterrupt caught in kernel" into a successful build.
            # At shutdown the notebook has finished: ask the kernel to quit instead. (Timeouts
            # still interrupt: nbclient calls the public interrupt_kernel.)
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return IPCKernelManager


def _clear_leftovers(bdir: Path, name: str) -> None:
    """Remove what an attempt killed mid-way (SIGKILL, power loss) left behind: temporary
    notebooks and artifact folders. Called under the chapter's lock, so no live attempt owns
    them."""
    for d in (bdir / "executed", bdir / "artifacts"):
        for f in d.glob(f".{name}.tmp-*"):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        for f in d.glob(f".{name}.old-*"):
            shutil.rmtree(f, ignore_errors=True)


def run_notebook(project: Project, name: str, profile: str, device: str, params: dict,
                 force: bool = False, log=print, timeout_s: float | None = None) -> dict:
    """Execute one notebook unless its key is unchanged and its recorded outputs verify;
    returns its state record.

    The chapter's cell outputs and progress messages go to ``build/P/logs/NAME.log`` as they
    happen (``tail -f`` it during a long run); ``timeout_s`` bounds every cell (default: the
    profile's :data:`CELL_TIMEOUT_S`).
    """
    bdir = project.build_dir(profile)
    state_dir, exe_dir, art_root = bdir / "state", bdir / "executed", bdir / "artifacts"
    log_dir = bdir / "logs"
    for d in (state_dir, exe_dir, art_root, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    state_path = state_dir / f"{name}.json"
    key = notebook_key(project, name, params, profile, device)
    timeout_s = CELL_TIMEOUT_S[profile] if timeout_s is None else timeout_s

    with open(state_dir / f"{name}.lock", "w") as lockf:
        try:
            fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another make runs this chapter: wait for it, then re-check
            log(f"[{profile}] {name}: another run holds this chapter; waiting for it")
            fcntl.flock(lockf, fcntl.LOCK_EX)
        _clear_leftovers(bdir, name)
        old = read_state(state_path)
        if not force and old and old.get("key") == key and old.get("status") == "ok":
            why = verify_outputs(bdir, name, old)
            if why is None:
                log(f"[{profile}] {name}: up to date")
                return {**old, "skipped": True}
            log(f"[{profile}] {name}: stale: {why}; re-executing")
        elif not force and old is None and state_path.exists():
            log(f"[{profile}] {name}: stale: its state file is unreadable; re-executing")

        log(f"[{profile}] {name}: executing on {device} (log: {_rel(project, log_dir)}/{name}.log)")
        # imported here, not above: an up-to-date chapter (every chapter of a no-op `make book`,
        # one process each) returned above without them (jupytext alone took 0.5 s)
        import jupytext
        import nbformat
        import papermill as pm

        from moe_routing._internal.runtime import provenance

        prov = provenance(profile, device).as_dict()
        tmp_art = art_root / f".{name}.tmp-{os.getpid()}"
        tmp_art.mkdir(parents=True)
        tmp_nb = exe_dir / f".{name}.tmp-{os.getpid()}.ipynb"
        nb = jupytext.read(project.notebook_path(name))
        injected = {**params, "profile": profile, "device": device,
                    "artifacts_dir": str(tmp_art.resolve())}
        if "runs_from" in parameters_cell_names(project.notebook_path(name))[0]:
            injected["runs_from"] = [str(p.resolve()) for p in run_folders(project, profile, name)]
        t0 = time.perf_counter()
        status, error = "ok", None
        sock_dir = tempfile.mkdtemp(prefix="moe-kernel-")       # private (0700)
        try:
            with _chapter_log(log_dir / f"{name}.log"):
                out = pm.execute_notebook(
                    nb, str(tmp_nb), parameters=injected, kernel_name="python3",
                    cwd=str(project.notebooks_dir), progress_bar=False, log_output=True,
                    request_save_on_cell_execute=False, execution_timeout=timeout_s,
                    kernel_manager_class=_ipc_kernel_manager(sock_dir))
        except Exception as exc:  # noqa: BLE001 -- any notebook error is reported, not raised
            status = "failed"
            error = _short_error(exc, timeout_s)
            out = None
        finally:
            shutil.rmtree(sock_dir, ignore_errors=True)
        wall = time.perf_counter() - t0
        record = {"notebook": name, "key": key, "status": status, "error": error,
                  "wall_s": round(wall, 2), "profile": profile,
                  "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "provenance": prov}
        if status == "ok":
            # Final artifacts dir name replaces the temp name in the displayed parameters.
            _finalise_notebook(out, name, profile, {**prov, "wall_s": record["wall_s"]},
                               (art_root / name).resolve())
            atomic_write_text(exe_dir / f"{name}.ipynb", nbformat.writes(out))
            final = art_root / name
            trash = art_root / f".{name}.old-{os.getpid()}"
            if final.exists():
                os.replace(final, trash)
            os.replace(tmp_art, final)
            shutil.rmtree(trash, ignore_errors=True)
            record["outputs"] = output_checksums(bdir, name)
            log(f"[{profile}] {name}: ok in {wall:.1f} s")
        else:
            failed_dir = bdir / "failed"
            failed_dir.mkdir(exist_ok=True)
            if tmp_nb.exists():
                os.replace(tmp_nb, failed_dir / f"{name}.ipynb")
            # what the failed attempt wrote (e.g. training runs, each written as it finished)
            # is kept for the next attempt to reuse, never for the book
            kept = failed_dir / f"{name}.artifacts"
            shutil.rmtree(kept, ignore_errors=True)
            os.replace(tmp_art, kept)
            if old and old.get("status") == "ok" and verify_outputs(bdir, name, old) is None:
                # the previous good outputs stay in place and stay verifiable
                record["outputs"] = old["outputs"]
            log(f"[{profile}] {name}: FAILED after {wall:.1f} s: {error}")
        if tmp_nb.exists():
            tmp_nb.unlink()
        atomic_write_json(state_path, record)
        return record


def _rel(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)


class _chapter_log:
    """Route papermill's cell-output logging (and nbclient's) into one file per chapter for the
    duration of an execution."""

    def __init__(self, path: Path):
        import logging

        self.path = path
        self.handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        self.loggers = [logging.getLogger(n) for n in ("papermill", "nbclient")]

    def __enter__(self):
        import logging

        self.saved = [(lg.level, lg.propagate) for lg in self.loggers]
        for lg in self.loggers:
            lg.addHandler(self.handler)
            lg.setLevel(logging.INFO)
            lg.propagate = False          # the terminal shows one line per chapter, not this
        return self

    def __exit__(self, *exc):
        for lg, (level, prop) in zip(self.loggers, self.saved):
            lg.removeHandler(self.handler)
            lg.setLevel(level)
            lg.propagate = prop
        self.handler.close()
        return False


def _short_error(exc: BaseException, timeout_s: float | None = None) -> str:
    """One readable line: papermill's error name, value and the cell it happened in."""
    ename = getattr(exc, "ename", type(exc).__name__)
    if ename in ("CellTimeoutError", "TimeoutError") or "timed out" in str(exc).lower():
        cell = getattr(exc, "exec_count", None)
        return (f"a cell ran longer than the {timeout_s:g} s cell timeout"
                + (f" (cell [{cell}])" if cell is not None else "")
                + "; raise it with make execute TIMEOUT=seconds")
    evalue = getattr(exc, "evalue", str(exc))
    cell = getattr(exc, "exec_count", None)
    where = f" (cell [{cell}])" if cell is not None else ""
    text = f"{ename}: {evalue}{where}".replace("\n", " ")
    return text[:500]
