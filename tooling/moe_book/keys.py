"""A chapter's cache key: exactly what its executed outputs depend on.

The key is the SHA-256 of the chapter's MyST source, its resolved parameters, the profile and the
device, the lock's pins (every installed version, :func:`moe_book.environment.lock_constraints`:
the versions, not the lock files' bytes, so a new hash or comment re-executes nothing), the
science library's source (without the claims' wording: :mod:`moe_routing._internal.fingerprint`), the
Python version and the platform.  What
is *not* in it is deliberate: the book tooling (this package), page templates, the book's
configuration and the claims' wording change only what is generated at staging time, so editing
them re-executes nothing -- on the ``paper`` profile a needless re-execution costs GPU hours.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

from moe_routing._internal.fingerprint import source_fingerprint

from .environment import lock_constraints

KEY_VERSION = "moe-book-key-v2"


def chapter_key(source: Path, params: dict, profile: str, device: str, lock: Path,
                library: Path) -> str:
    """``lock``: the lock's folder (``requirements/``); ``library``: the science package's
    folder (``moe_routing``)."""
    h = hashlib.sha256()
    h.update(KEY_VERSION.encode() + b"\0")
    h.update(Path(source).read_bytes())
    h.update(json.dumps({"profile": profile, "device": device, "params": params,
                         "python": platform.python_version(), "platform": platform.machine(),
                         "system": platform.system()}, sort_keys=True).encode())
    h.update(lock_constraints(lock).encode() if lock.is_dir() else b"no-lock")
    h.update(source_fingerprint(root=library).encode())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (executed notebooks, artifacts, bundle
    files: the checksums the pipeline records and the release manifest lists)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
