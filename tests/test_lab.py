"""`make lab`: the project environment's Jupyter server opens the chapters (MyST files) as
notebooks through jupytext, on a free local port, and stops cleanly."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyter_opens_a_chapter_as_a_notebook(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
         "--ServerApp.port_retries=0", "--allow-root"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "HOME": str(tmp_path),
             "PATH": "/usr/bin:/bin"})
    try:
        url = (f"http://127.0.0.1:{port}/api/contents/notebooks/intro.md"
               "?type=notebook&content=1")
        req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        t0, model = time.monotonic(), None
        while time.monotonic() - t0 < 60:
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    model = json.loads(r.read())
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stdout.read()[-3000:]) from None
                time.sleep(0.5)
        assert model is not None, "the server did not answer within 60 s"
        assert model["type"] == "notebook" and model["format"] == "json"
        cells = model["content"]["cells"]
        assert any("parameters" in c["metadata"].get("tags", []) for c in cells)
        assert model["content"]["metadata"]["jupytext"]["text_representation"]["format_name"] == "myst"
        lab = urllib.request.Request(f"http://127.0.0.1:{port}/lab",
                                     headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(lab, timeout=10) as r:
            assert r.status == 200 and b"JupyterLab" in r.read()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode is not None
