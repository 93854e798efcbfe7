"""Atomic file writes: an interrupted run never leaves a half-written output behind."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

#: the temporaries this process is writing (see :func:`clean_exit_on_sigterm`)
_IN_FLIGHT: set[str] = set()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename.

    ``os.replace`` is atomic on POSIX when source and target are on the same file system, which
    is why the temporary file is created beside the target rather than in ``/tmp``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    _IN_FLIGHT.add(tmp)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make outputs private
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        _IN_FLIGHT.discard(tmp)


def clean_exit_on_sigterm() -> None:
    """Make SIGTERM remove this process's temporaries in flight, then exit with status 143.

    An exception (Ctrl-C's ``KeyboardInterrupt``) unwinds through :func:`atomic_write_bytes`,
    which removes its temporary; SIGTERM's default action ends the process where it stands,
    leaving a ``.<name>.*.tmp`` beside the target when it lands during a write.  A grid's local
    workers write their own results and are stopped with SIGTERM when the grid is interrupted,
    so they call this first.  The handler runs between two bytecodes of the main thread and
    removes the temporaries registered and not yet renamed; a signal in the few bytecodes
    between ``mkstemp`` creating a temporary and its registration still leaves that one."""
    signal.signal(signal.SIGTERM, _remove_in_flight_and_exit)


def _remove_in_flight_and_exit(signum, _frame) -> None:
    for tmp in list(_IN_FLIGHT):
        try:
            os.unlink(tmp)
        except OSError:
            pass
    os._exit(128 + signum)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=jsonable) + "\n")


def jsonable(obj: Any) -> Any:
    """Let numpy/torch scalars and arrays pass through ``json.dumps`` (its ``default``): the
    form every result file and every cached row is written in."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
