"""Faults the pipeline must survive, each bounded in time: a chapter's process killed with
SIGKILL mid-execution, two runs of one chapter at once, corrupted state and output files, a
full disk at the atomic-write layer, a hung cell (timeout)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mystnb

from moe_book import execution, staging
from moe_book import project as pl
from moe_routing._internal import atomic

NB = mystnb.chapter("""\
    # Slow

    ```{code-cell} ipython3
    :tags: [parameters]

    profile = "smoke"
    device = "auto"
    artifacts_dir = None
    n = 1
    sleep_s = 0.0
    marker = ""
    ```

    ```{code-cell} ipython3
    import os, pathlib, time
    if marker:
        pathlib.Path(marker).write_text(str(os.getpid()))
    time.sleep(sleep_s)
    pathlib.Path(artifacts_dir, "result.json").write_text('{"n": %d}' % n)
    print("value", n)
    ```
    """)


@pytest.fixture()
def project(tmp_path: Path) -> pl.Project:
    root = tmp_path / "proj"
    (root / "notebooks" / "params").mkdir(parents=True)
    (root / "book").mkdir()
    (root / "lib").mkdir()
    (root / "lib" / "mod.py").write_text("X = 1\n")
    (root / "requirements").mkdir()
    (root / "requirements" / "runtime.in").write_text("torch==2.13.0\n")
    (root / "notebooks" / "slow.md").write_text(NB)
    for prof in ("smoke", "default", "paper"):
        set_params(pl.Project(root), prof, n=1)
    return pl.Project(root, library=root / "lib")


def set_params(project: pl.Project, profile="smoke", **params) -> None:
    block = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in params.items())
    project.params_file(profile).write_text(f"slow:\n{block}")


def run(project, **kw) -> dict:
    params, device = pl.validate(project, "smoke", "cpu")
    messages: list[str] = []
    rec = execution.run_notebook(project, "slow", "smoke", device, params["slow"], log=messages.append,
                          **kw)
    rec["messages"] = messages
    return rec


def cli_run(project: pl.Project, *extra: str) -> subprocess.Popen:
    """The pipeline as `make execute` starts it, with the test's library as the keyed one."""
    code = ("import sys; from pathlib import Path; from moe_book import pipeline as pl\n"
            "root = Path.cwd()\n"
            "pl.find_root = lambda start=None: root\n"
            "pl.Project.__init__.__defaults__ = (root / 'lib',)\n"
            "sys.exit(pl.main(['run', '--profile', 'smoke', '--device', 'cpu', *sys.argv[1:]]))\n")
    return subprocess.Popen([sys.executable, "-c", code, *extra, "slow"], cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def snapshot(bdir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bdir)): p.read_bytes()
            for d in ("executed", "artifacts") for p in (bdir / d).rglob("*") if p.is_file()}


def test_sigkill_mid_execution_keeps_outputs_and_leaves_no_kernel(project, tmp_path):
    assert run(project)["status"] == "ok"
    bdir = project.build_dir("smoke")
    good = snapshot(bdir)
    marker = tmp_path / "kernel.pid"
    set_params(project, n=2, sleep_s=60, marker=str(marker))
    proc = cli_run(project)
    wait_for(marker)
    kernel = int(marker.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    t0 = time.monotonic()
    while alive(kernel) and time.monotonic() - t0 < 10:   # the kernel polls its parent each 1 s
        time.sleep(0.2)
    assert not alive(kernel), "orphan kernel left running after its pipeline was killed"
    assert snapshot(bdir) == good, "the killed run changed the previous outputs"
    set_params(project, n=3)
    rec = run(project)
    assert rec["status"] == "ok" and json.loads(
        (bdir / "artifacts" / "slow" / "result.json").read_text()) == {"n": 3}
    leftovers = [p.name for d in ("executed", "artifacts") for p in (bdir / d).glob(".*")]
    assert leftovers == [], leftovers


def test_two_runs_of_one_chapter_at_once(project, tmp_path):
    set_params(project, n=4, sleep_s=2)
    a, b = cli_run(project), cli_run(project)
    outs = [p.communicate(timeout=120) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs
    text = "\n".join(o + e for o, e in outs)
    assert text.count(": ok in ") == 1 and text.count(": up to date") == 1, text
    assert "waiting for it" in text


@pytest.mark.parametrize("damage", ["truncate-notebook", "delete-notebook", "alter-artifact",
                                    "add-artifact", "garbage-state", "truncate-state"])
def test_corrupted_outputs_make_the_chapter_stale(project, damage):
    assert run(project)["status"] == "ok"
    bdir = project.build_dir("smoke")
    exe, art = bdir / "executed" / "slow.ipynb", bdir / "artifacts" / "slow"
    state = bdir / "state" / "slow.json"
    if damage == "truncate-notebook":
        exe.write_bytes(exe.read_bytes()[:100])
    elif damage == "delete-notebook":
        exe.unlink()
    elif damage == "alter-artifact":
        (art / "result.json").write_text('{"n": 999}')
    elif damage == "add-artifact":
        (art / "stray.txt").write_text("not from the run")
    elif damage == "garbage-state":
        state.write_bytes(b"\x00\xff garbage")
    elif damage == "truncate-state":
        state.write_text(state.read_text()[:40])
    assert [s["notebook"] for s in pl.failed(project, "smoke")] == ["slow"]
    rec = run(project)
    assert not rec.get("skipped") and rec["status"] == "ok"
    assert any("stale" in m for m in rec["messages"]), rec["messages"]
    assert json.loads((art / "result.json").read_text()) == {"n": 1}
    assert pl.verify_outputs(bdir, "slow", pl.read_state(state)) is None
    assert run(project).get("skipped")


def test_staging_refuses_a_corrupted_notebook(project):
    (project.book_dir / "_toc.yml").write_text("format: jb-book\nroot: chapters/slow\n")
    assert run(project)["status"] == "ok"
    exe = project.build_dir("smoke") / "executed" / "slow.ipynb"
    exe.write_bytes(exe.read_bytes()[:100])
    out = staging.stage(project, "smoke")
    page = (out / "chapters" / "slow.ipynb").read_text()
    assert "do not verify" in page and "make execute" in page


def test_hung_cell_times_out_with_a_clear_message_and_keeps_outputs(project):
    assert run(project)["status"] == "ok"
    bdir = project.build_dir("smoke")
    good = snapshot(bdir)
    set_params(project, n=5, sleep_s=600)
    t0 = time.monotonic()
    rec = run(project, timeout_s=3)
    assert time.monotonic() - t0 < 60
    assert rec["status"] == "failed"
    assert "3 s cell timeout" in rec["error"] and "TIMEOUT=" in rec["error"], rec["error"]
    assert snapshot(bdir) == good
    assert pl.verify_outputs(bdir, "slow", pl.read_state(bdir / "state" / "slow.json")) is None


def test_full_disk_at_the_atomic_write_layer(tmp_path, monkeypatch):
    target = tmp_path / "out" / "state.json"
    atomic.atomic_write_json(target, {"good": True})
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space left"):
        atomic.atomic_write_json(target, {"good": False, "pad": "x" * 10_000})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"good": True}
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


SIGTERM_MID_WRITE = """\
import os, signal, sys
from moe_routing._internal import atomic
if sys.argv[2] == "clean":
    atomic.clean_exit_on_sigterm()
real_fsync = os.fsync

def fsync(fd):                        # SIGTERM lands mid-write: written, not yet renamed
    os.kill(os.getpid(), signal.SIGTERM)
    real_fsync(fd)

os.fsync = fsync
atomic.atomic_write_json(sys.argv[1], {"good": False})
print("survived")
"""


@pytest.mark.parametrize("mode", ["clean", "default"])
def test_sigterm_mid_write_leaves_no_temporary_in_a_clean_exit_process(tmp_path, mode):
    """A grid's local workers are stopped with SIGTERM; with the handler they exit 143 and the
    write in flight leaves nothing; SIGTERM's default action (the control) leaves the
    temporary, which is what the handler exists for."""
    target = tmp_path / "out" / "result.json"
    proc = subprocess.run([sys.executable, "-c", SIGTERM_MID_WRITE, str(target), mode],
                          capture_output=True, text=True, timeout=60)
    assert "survived" not in proc.stdout
    left = sorted(p.name for p in target.parent.iterdir())
    if mode == "clean":
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
        assert left == [], left
    else:
        assert proc.returncode == -signal.SIGTERM, proc.stderr
        assert len(left) == 1 and left[0].startswith(".result.json.") and \
            left[0].endswith(".tmp"), left


def test_successful_execution_logs_no_error(project):
    proc = cli_run(project)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "ERROR" not in out + err and "KeyboardInterrupt" not in out + err, out + err
    log = (project.build_dir("smoke") / "logs" / "slow.log").read_text()
    assert "value 1" in log
