"""Devices, seeds, profiles and provenance: the facts every executed notebook records."""

from __future__ import annotations

import os
import platform
import random
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

PROFILES = ("smoke", "default", "paper")
DEVICES = ("auto", "cpu", "cuda")


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; accepted: {', '.join(PROFILES)}")
    return profile


def resolve_device(device: str = "auto") -> str:
    """Map a requested device to the one torch will use.

    ``auto`` takes CUDA when present; ``cuda`` without CUDA is an error (never a silent fall-back
    to the CPU, which would make a 'GPU run' quietly take hours).
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"  # no torch import: keeps the pipeline's no-op path fast
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ValueError("DEVICE=cuda requested but torch sees no CUDA device; accepted here: auto, cpu")
    if device == "auto":
        return "cuda" if has_cuda else "cpu"
    return device


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the block, the caller's count restored after.

    A computation whose printed numbers must not depend on the machine runs at a fixed count:
    a reduction split over two threads adds in another order than over one, and training
    amplifies that last bit (the temperature sweep's slope moves in its third digit)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch so that CPU reruns are bit-identical on the same machine
    (same torch build, thread count and CPU kernel dispatch; another CPU kind rounds otherwise)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def git_commit(root: str | os.PathLike | None = None) -> str:
    """The commit of the working tree, with ``+dirty`` when it has uncommitted changes."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha[:12] + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@dataclass(frozen=True)
class Provenance:
    profile: str
    device: str
    device_name: str
    torch_version: str
    python_version: str
    git_commit: str
    hostname_cpu_count: int

    def as_dict(self) -> dict:
        return asdict(self)


def device_name(device: str) -> str:
    """The GPU's name (the current CUDA device: the one ``"cuda"`` tensors go to) or the CPU's."""
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def provenance(profile: str, device: str) -> Provenance:
    import torch

    return Provenance(profile=profile, device=device, device_name=device_name(device),
                      torch_version=torch.__version__, python_version=platform.python_version(),
                      git_commit=git_commit(), hostname_cpu_count=os.cpu_count() or 0)
