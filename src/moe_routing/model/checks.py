"""Argument checks at the model's API boundary, built on :mod:`moe_routing._internal.validation`.

Why a module of its own: the losses and the model run inside every training step, so their
checks must cost nothing -- they read a tensor's *metadata* (type, dtype, shape, emptiness),
never its values (a pass over the logits, or a ``bool(...)`` that waits for the GPU, would).
Checks of values (NaN, token ranges) happen once, where data enter: ``TrainData``, the
evaluation functions, ``routing_metrics``.  Errors follow the library's one idiom:
``ValueError`` naming the argument, showing the bad value, saying what is accepted.
"""

from __future__ import annotations

from typing import Any

import torch

from .._internal.validation import fail, require

KINDS = ("int", "float", "bool")


def _kind_ok(dtype: torch.dtype, kind: str) -> bool:
    if kind == "bool":
        return dtype == torch.bool
    if kind == "float":
        return dtype.is_floating_point
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def tensor(name: str, value: Any, kind: str, *, ndim: int | None = None,
           min_ndim: int | None = None, shape: tuple | None = None,
           nonempty: bool = True) -> torch.Tensor:
    """A ``torch.Tensor`` of the given kind (``"int"``, ``"float"`` or ``"bool"``), rank and
    shape (``None`` in ``shape`` matches any size), non-empty unless allowed.  Metadata only."""
    if not isinstance(value, torch.Tensor):
        fail(name, type(value).__name__, f"a torch.Tensor of {kind} dtype")
    require(_kind_ok(value.dtype, kind), f"{name}.dtype", value.dtype,
            {"int": "an integer dtype (e.g. torch.long)", "float": "a floating dtype",
             "bool": "torch.bool"}[kind])
    if ndim is not None:
        require(value.dim() == ndim, f"{name}.ndim", value.dim(), str(ndim))
    if min_ndim is not None:
        require(value.dim() >= min_ndim, f"{name}.ndim", value.dim(), f"≥ {min_ndim}")
    if shape is not None:
        ok = value.dim() == len(shape) and all(s is None or s == t
                                               for s, t in zip(shape, value.shape))
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
        require(ok, f"{name}.shape", tuple(value.shape), f"shape {want}")
    if nonempty:
        require(value.numel() > 0, f"{name}.numel", value.numel(), "a non-empty tensor")
    return value


def finite_values(name: str, value: torch.Tensor) -> torch.Tensor:
    """A floating tensor without NaN/Inf (one pass over the values: use at entry points only)."""
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        idx = tuple(int(i) for i in torch.nonzero(bad)[0])
        fail(f"{name}[{', '.join(map(str, idx))}]", float(value[idx]),
             "finite entries (no NaN or Inf)")
    return value


def ids_in_range(name: str, value: torch.Tensor, low: int, high: int) -> torch.Tensor:
    """An integer tensor whose entries lie in ``[low, high)`` (a pass over the values)."""
    if value.numel():
        lo, hi = int(value.min()), int(value.max())
        require(low <= lo and hi < high, f"{name} range", f"{lo}..{hi}",
                f"ids in {low}..{high - 1}")
    return value
