"""Shared test setup: one torch thread; the smoke book (tests/test_book.py, tests/test_dist.py)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="session")
def smoke_book() -> Path:
    """Execute every chapter with the smoke profile (incremental) and build its HTML."""
    res = make("execute", "PROFILE=smoke", "DEVICE=cpu")
    assert res.returncode == 0, f"smoke execution failed:\n{res.stdout}\n{res.stderr}"
    res = make("html", "PROFILE=smoke")
    assert res.returncode == 0, f"book build failed (warnings are errors):\n{res.stdout}\n{res.stderr}"
    return ROOT / "build" / "smoke" / "_build" / "html"


@pytest.fixture(scope="session")
def student_book(smoke_book) -> Path:
    res = make("student", "PROFILE=smoke")
    assert res.returncode == 0, f"student build failed:\n{res.stdout}\n{res.stderr}"
    return ROOT / "build" / "smoke" / "student" / "_build" / "html"


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests use small tensors: one intra-op thread is faster than two, and far faster on shared
    cores (OpenMP threads wait on each other, 20-100x slowdowns measured)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
