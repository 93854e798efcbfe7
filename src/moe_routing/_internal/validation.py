"""The library's one idiom for checking arguments.

Every public constructor and function checks its arguments *before* any long work starts and
raises ``ValueError`` with one message that names the argument, shows the bad value and says what
is accepted -- never returns a number computed from NaN.  NumPy and torch scalars are accepted
wherever the Python type is (``np.float32(1e-3)`` as an ε, ``np.int64(4)`` as a count); ``bool``
is never accepted as a number.

    >>> number("tau", float("nan"), low=0, low_open=True)
    Traceback (most recent call last):
    ...
    ValueError: tau = nan is not allowed; accepted: a finite number > 0
"""

from __future__ import annotations

import numbers
import os
from typing import Any

import numpy as np


def fail(name: str, value: Any, accepted: str) -> None:
    """Raise the library's standard error for argument ``name``."""
    shown = value if isinstance(value, str) and len(value) > 80 else repr(value)
    if isinstance(shown, str) and len(shown) > 200:
        shown = shown[:200] + " …"
    raise ValueError(f"{name} = {shown} is not allowed; accepted: {accepted}")


def require(ok: bool, name: str, value: Any, accepted: str) -> None:
    """``fail`` unless ``ok``."""
    if not ok:
        fail(name, value, accepted)


def _is_scalar_number(value: Any) -> bool:
    """Python/NumPy real scalars and 0-d real NumPy arrays or torch tensors; never a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Real):          # int, float, np.floating, np.integer
        return True
    if getattr(value, "ndim", None) != 0:
        return False
    dtype = getattr(value, "dtype", None)
    if hasattr(dtype, "is_floating_point"):      # torch.dtype
        return not dtype.is_complex and dtype != __import__("torch").bool
    return dtype is not None and np.issubdtype(dtype, np.number) and \
        not np.issubdtype(dtype, np.complexfloating)


def _range_text(low, high, low_open, high_open) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '≥'} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '≤'} {high:g}")
    return " and ".join(parts)


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, allow_inf: bool = False) -> float:
    """A finite real scalar in the given range, returned as a Python ``float`` (with
    ``allow_inf``, +inf too, when the range allows it: a constant whose infinite value means
    something, such as a tail constant C_m = ∞)."""
    rng = _range_text(low, high, low_open, high_open)
    accepted = ("a number (finite, or inf)" if allow_inf else "a finite number") + \
        (f" {rng}" if rng else "")
    if not _is_scalar_number(value):
        fail(name, value, accepted)
    v = float(value)
    ok = bool(np.isfinite(v)) or (allow_inf and v == float("inf"))
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    require(bool(ok), name, value, accepted)
    return v


def positive(name: str, value: Any) -> float:
    """A finite number > 0."""
    return number(name, value, low=0, low_open=True)


def probability(name: str, value: Any, *, open_interval: bool = True) -> float:
    """A number in (0, 1) (or [0, 1] with ``open_interval=False``)."""
    return number(name, value, low=0, high=1, low_open=open_interval, high_open=open_interval)


def integer(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (Python, NumPy, a 0-d array or tensor, or an integral float such as
    ``2.0 ** 10``) in [low, high]."""
    rng = _range_text(low, high, False, False)
    accepted = "an integer" + (f" {rng}" if rng else "")
    if isinstance(value, (bool, np.bool_)):
        fail(name, value, accepted)
    if getattr(value, "ndim", None) == 0 and _is_scalar_number(value):
        value = value.item()            # a 0-d NumPy array or torch tensor
    if isinstance(value, bool):
        fail(name, value, accepted)
    if isinstance(value, (numbers.Integral, np.integer)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        fail(name, value, accepted)
    require((low is None or v >= low) and (high is None or v <= high), name, value, accepted)
    return v


def memory_bytes() -> int:
    """This machine's physical memory in bytes (NumPy's largest array size where unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return int(np.iinfo(np.intp).max)


def sample_size(name: str, value: Any, *, row_bytes: int, low: int = 1) -> int:
    """A number of draws (or nodes) n ≥ ``low`` whose arrays, n rows of ``row_bytes`` bytes,
    fit in this machine's physical memory.

    Why before the work: NumPy refuses an impossible allocation only when it is made — with
    "array is too big" or a ``MemoryError`` that names no argument — possibly after the other
    arguments were processed at length.  A count that cannot fit is refused here, by name.
    """
    n = integer(name, value, low=low)
    mem = memory_bytes()
    limit = max(mem // max(int(row_bytes), 1), low)
    require(n <= limit, name, value,
            f"an integer {low} ≤ {name} ≤ {limit:.3g} (its arrays, {name} rows of {int(row_bytes)} "
            f"bytes, must fit in this machine's {mem / 2 ** 30:.3g} GiB of memory)")
    return n


def choice(name: str, value: Any, accepted: tuple | list) -> Any:
    """One of ``accepted``."""
    require(value in accepted, name, value, "one of " + ", ".join(map(repr, accepted)))
    return value


def _host(value: Any) -> Any:
    """A torch tensor as a CPU tensor NumPy can read (a floating dtype NumPy lacks, such as
    bfloat16, as float32: exact); anything else unchanged."""
    if not hasattr(value, "detach"):
        return value
    t = value.detach().cpu()
    dtype = t.dtype
    if getattr(dtype, "is_floating_point", False) and not getattr(dtype, "is_complex", False):
        import torch

        if dtype not in (torch.float16, torch.float32, torch.float64):
            t = t.float()
    return t


def finite_array(name: str, value: Any, *, ndim: int | tuple[int, ...] | None = None,
                 shape: tuple[int | None, ...] | None = None, nonempty: bool = True,
                 low: float | None = None, low_open: bool = False) -> np.ndarray:
    """A real array with finite entries (float64 NumPy copy), of the given ``ndim`` or ``shape``
    (``None`` in ``shape`` matches any size), non-empty unless allowed, entries above ``low``.

    A torch tensor is read on the CPU; one of a floating dtype NumPy has no counterpart for
    (``bfloat16``, the float8 types) through float32, which holds each of its values exactly.
    """
    try:
        a = np.asarray(_host(value))
    except (TypeError, ValueError):
        dtype = getattr(value, "dtype", None)
        fail(name, type(value).__name__ if dtype is None else f"a {type(value).__name__} of "
             f"dtype {dtype}", "a real array")
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer)
                                   or np.issubdtype(a.dtype, np.floating)):
        fail(name, f"an array of dtype {a.dtype}", "a real (integer or float) array")
    a = a.astype(np.float64, copy=True)
    if ndim is not None:
        ndims = (ndim,) if isinstance(ndim, int) else ndim
        require(a.ndim in ndims, f"{name}.ndim", a.ndim, " or ".join(map(str, ndims)))
    if shape is not None:
        ok = a.ndim == len(shape) and all(s is None or s == t for s, t in zip(shape, a.shape))
        want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
        require(ok, f"{name}.shape", tuple(a.shape), f"shape {want}")
    if nonempty:
        require(a.size > 0, f"{name}.size", a.size, "a non-empty array")
    bad = ~np.isfinite(a)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        fail(f"{name}[{', '.join(map(str, idx))}]", float(a[idx]), "finite entries (no NaN or Inf)")
    if low is not None:
        below = a <= low if low_open else a < low
        if below.any():
            idx = tuple(int(i) for i in np.argwhere(below)[0])
            fail(f"{name}[{', '.join(map(str, idx))}]", float(a[idx]),
                 f"entries {'>' if low_open else '≥'} {low:g}")
    return a


def finite_tensor(name: str, value: Any, **kw):
    """Like :func:`finite_array` for a torch tensor; returns the tensor itself (not a copy)."""
    import torch

    if not isinstance(value, torch.Tensor):
        fail(name, type(value).__name__, "a torch.Tensor")
    finite_array(name, value, **kw)
    return value


# ------------------------------------------------------------------ arguments of paper B's library
# Generic shapes of argument that the boundary-mass and landscape modules share (and any other
# module may use): temperatures, slab widths, input points, seeds, objects of a given kind.

def flag(name: str, value: Any) -> bool:
    """A ``bool`` (Python or NumPy); ``0``/``1`` are not flags."""
    require(isinstance(value, (bool, np.bool_)), name, value, "True or False")
    return bool(value)


def temperature(name: str, value: Any) -> float:
    """A softmax temperature τ: a finite number > 0.

    τ = 0 is the hard router, which has its own functions (``hard_gates``, ``hard_risk``, …):
    accepting it here would divide by zero; τ = ∞ (the uniform gate) is never a limit taken.
    """
    return number(name, value, low=0, low_open=True)


def temperatures(name: str, value: Any) -> np.ndarray:
    """One temperature or a 1-D array of them, as a non-empty 1-D float64 array of finite τ > 0.

    Estimators that take several τ evaluate them on one sample or one set of nodes (common
    random numbers), so a whole grid is one argument.
    """
    if _is_scalar_number(value):
        return np.array([temperature(name, value)])
    return finite_array(name, value, ndim=1, low=0, low_open=True)


def widths(name: str, value: Any, *, positive: bool = False) -> np.ndarray:
    """One slab width w or a 1-D array of them, as a non-empty 1-D float64 array of finite
    w ≥ 0 (w > 0 with ``positive=True``, e.g. for a fit on log–log axes)."""
    if _is_scalar_number(value):
        return np.array([number(name, value, low=0, low_open=positive)])
    return finite_array(name, value, ndim=1, low=0, low_open=positive)


def points(name: str, value: Any, dim: int) -> np.ndarray:
    """Input points as an (n, d) float64 array with finite entries, d matching the router or law
    that evaluates them (a 1-D array is n points when d = 1)."""
    a = finite_array(name, value, ndim=(1, 2) if dim == 1 else 2)
    if a.ndim == 1:
        a = a[:, None]
    require(a.shape[1] == dim, f"{name}.shape", tuple(a.shape),
            f"shape (n, {dim}) to match dimension d = {dim}")
    return a


def generator(name: str, value: Any) -> np.random.Generator:
    """A NumPy random generator from ``None`` (fresh entropy), a seed (an integer ≥ 0), a
    ``SeedSequence``, or a ``Generator`` (returned as is, so that callers can share one stream)."""
    if isinstance(value, np.random.Generator):
        return value
    if value is None or isinstance(value, np.random.SeedSequence):
        return np.random.default_rng(value)
    accepted = "None, an integer seed ≥ 0, a numpy SeedSequence or a numpy Generator"
    ok = not isinstance(value, (bool, np.bool_)) and (
        isinstance(value, (numbers.Integral, np.integer))
        or (isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer()))
    require(ok and int(value) >= 0, name, value, accepted)
    return np.random.default_rng(int(value))


def instance(name: str, value: Any, types: type | tuple[type, ...], accepted: str) -> Any:
    """``value`` itself when it is an instance of ``types`` (a law, a router, a model, …)."""
    require(isinstance(value, types), name, value, accepted)
    return value


def function(name: str, value: Any) -> Any:
    """``value`` itself when it is callable (a teacher f*, experts, a derivative oracle)."""
    require(callable(value), name, value, "a callable")
    return value


# Collections: a bare string, a number or a 0-d array passed where a sequence is expected would
# otherwise be iterated character by character or fail with a TypeError deep inside.

def sequence(name: str, value: Any, accepted: str, *, nonempty: bool = True) -> list:
    """The items of ``value`` as a list: any iterable except a string or bytes (a 0-d array or
    a number is refused), non-empty unless allowed."""
    if isinstance(value, (str, bytes)):
        fail(name, value, accepted)
    try:
        items = list(value)
    except TypeError:
        fail(name, value, accepted)
    if nonempty:
        require(len(items) > 0, name, items, f"{accepted}, at least one")
    return items


def sequence_of(name: str, value: Any, cls: type, *, nonempty: bool = True) -> list:
    """The items of ``value`` as a list, each an instance of ``cls``; a single instance (a
    common slip for a list of one) is refused with that hint, and a bad item is named by its
    index."""
    what = f"a sequence of {cls.__name__}"
    if isinstance(value, cls):
        fail(name, value, f"{what} (a list, even of one)")
    items = sequence(name, value, what, nonempty=nonempty)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            fail(f"{name}[{i}]", type(item).__name__, f"a {cls.__name__}")
    return items
