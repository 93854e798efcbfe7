"""Reading a cached run: the one check every trained experiment's cache applies before trusting a
file (the training runs, the two-hop runs, the Mixtral-style runs).

A run's JSON is named by its key (:mod:`~moe_routing.experiments.task_routing.runs`,
:mod:`~moe_routing.experiments.two_hop.runs`); the file found under that name is used only if it is
readable JSON, a mapping, of the current format version, with every field a result has, and the
result of *this* configuration (its key and training key). Anything else is reported, never read as
a result: the caller redoes the run and logs why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path


def read_cached(path: Path, *, version: int, required: Sequence[str], key: str,
                training_key: dict) -> tuple[dict | None, str | None]:
    """``(result, None)`` for a usable cached result at ``path``; ``(None, None)`` when there is
    none (absent, or written by another format ``version``); ``(None, why)`` when the file is
    there but corrupt, truncated or not the result of the configuration whose ``key`` and
    ``training_key`` are given."""
    path = Path(path)
    if not path.exists():
        return None, None
    try:
        res = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{path} is unreadable ({type(e).__name__}: {e})"
    if not isinstance(res, dict):
        return None, f"{path} holds a {type(res).__name__}, not a result"
    if res.get("version") != version:
        return None, None
    missing = [k for k in required if k not in res]
    if missing:
        return None, f"{path} lacks {', '.join(missing)}"
    # the training key as JSON stores it (tuples become lists)
    if res["key"] != key or res["training_key"] != json.loads(json.dumps(training_key)):
        return None, f"{path} holds the result of another configuration"
    return res, None


def load_cached(path: Path, *, version: int, required: Sequence[str], key: str,
                training_key: dict, log: logging.Logger, label: str) -> dict | None:
    """The usable cached result at ``path``, or None: :func:`read_cached`, with one warning line
    on the experiment's ``log`` naming a file that is there but unusable (``label``: the
    experiment, first on the line)."""
    res, problem = read_cached(path, version=version, required=required, key=key,
                               training_key=training_key)
    if problem:
        log.warning("%s: ignoring cached run %s", label, problem)
    return res
