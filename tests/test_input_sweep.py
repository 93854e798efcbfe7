"""Every input gives a right number or a clear error: a property-based sweep (Hypothesis).

The functions of the issue's modules -- the validation idiom (``moe_routing._internal.validation``), the
router margins and gates (``moe_routing.boundary.margin``), paper B's quantities on a trained
router (``moe_routing.experiments.bridge.margins``: margins, boundary mass, tail constant, soft versus
hard, the bound), the temperature fits (``router_temperature_fits``), the router z-loss, the
two-hop configuration, data and measurement (``two_hop_config``, ``two_hop_measure``) and the
two-layer construction -- are called with drawn inputs: shapes (empty, 0-d, the wrong rank),
dtypes (NumPy float16/32/64, torch float16/bfloat16/float32/float64, lists, integers, bools,
complex, strings, objects), NaN and ±∞, duplicates, and extreme scales (5e-324 … 1.7e308).
Each call must either

* return a **right number**: finite, and equal (to rounding) to a reference computed here in
  another way -- in log space where a factor alone leaves float64, so that an inf or a 0 is
  accepted only where the value itself is beyond float64 (or below its range); or
* raise a ``ValueError`` whose message starts with the **name of the argument** at fault
  (``x[2] = nan …``, ``logits.shape = …``, ``TwoHopData.n_pairs = …``) -- for the two-layer
  construction a hypothesis refusal naming its hypothesis.

A value a container cannot hold (1e300 as bfloat16 is inf) is the container's value: the
reference is what the argument holds.  The sweep's size is written to the terminal at the end
of the module (``input sweep: N calls, M distinct inputs``).
"""

from __future__ import annotations

import collections
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_routing._internal import validation as check
from moe_routing.boundary import margin as mg
from moe_routing.experiments.bridge import layers
from moe_routing.experiments.bridge import soft_hard

# extreme scales overflow and underflow on purpose (5e-324 ** 2, 1e300 / 1e-300): the values
# are checked, NumPy's warnings about them are noise
pytestmark = [pytest.mark.kernels, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

NAN, INF = math.nan, math.inf
F64_MAX, F64_TINY = float(np.finfo(float).max), float(np.finfo(float).tiny)
LOG_MAX, LOG_TINY = math.log(F64_MAX), math.log(F64_TINY)


def sweep(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# ------------------------------------------------------------------------------ the record
CALLS: collections.Counter = collections.Counter()
INPUTS: dict = collections.defaultdict(set)
ANSWERED: collections.Counter = collections.Counter()     # calls that returned a value


def _print(x):
    """A hashable fingerprint of an input (what makes two inputs distinct)."""
    if isinstance(x, torch.Tensor):
        v = x.detach()
        vals = v.reshape(-1).tolist() if not v.is_complex() else [str(c) for c in v.reshape(-1)]
        return ("tensor", str(v.dtype), tuple(v.shape), tuple(map(repr, vals)))
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.shape, x.tobytes())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_print(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), _print(v)) for k, v in x.items())))
    if isinstance(x, (bool, int, float, complex, str, bytes, type(None), np.generic)):
        return (type(x).__name__, repr(x))
    return (type(x).__name__, id(x))          # a model, a dataset: one object, one input


def call(fn, *args, **kw):
    CALLS[fn.__qualname__] += 1
    INPUTS[fn.__qualname__].add((_print(args), _print(kw)))
    out = fn(*args, **kw)
    ANSWERED[fn.__qualname__] += 1
    return out


def refused(names, fn, *args, **kw) -> str:
    """``fn(*args, **kw)`` raises a ValueError whose message starts with one of ``names``
    (followed by ``[``, ``.``, `` =`` or `` (``); returns the message."""
    with pytest.raises(ValueError) as err:
        call(fn, *args, **kw)
    msg = str(err.value)
    ok = any(re.match(re.escape(n) + r"(\[| =|\.| \()", msg) for n in names)
    assert ok, f"{fn.__qualname__}: the error names none of {sorted(names)}: {msg}"
    return msg


def summary() -> str:
    n_calls, n_answered = sum(CALLS.values()), sum(ANSWERED.values())
    n_inputs = sum(len(v) for v in INPUTS.values())
    return (f"input sweep: {n_calls} calls ({n_answered} answered with a number, "
            f"{n_calls - n_answered} refused), {n_inputs} distinct inputs, "
            f"{len(CALLS)} functions")


class _Summary:
    """Writes :func:`summary` in pytest's terminal summary (not captured)."""

    def pytest_terminal_summary(self, terminalreporter):
        if CALLS:
            terminalreporter.write_line(summary())


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    manager = request.config.pluginmanager
    if not manager.has_plugin("input-sweep-summary"):
        manager.register(_Summary(), "input-sweep-summary")
    yield


# ------------------------------------------------------------------------------ values
SPECIAL = [0.0, -0.0, 5e-324, F64_TINY, 1e-300, -1e-300, 1e-30, 1e30, 1e300, -1e300, 1.7e308,
           -1.7e308]
NON_FINITE = [NAN, INF, -INF]
CONTAINERS = ("list", "np64", "np32", "np16", "t64", "t32", "t16", "bf16")
#: the largest magnitude and the smallest positive value each container holds
RANGE = {"list": (1.7e308, 5e-324), "np64": (1.7e308, 5e-324), "t64": (1.7e308, 5e-324),
         "np32": (3.4e38, 1.4e-45), "t32": (3.4e38, 1.4e-45), "bf16": (3.3e38, 9.2e-41),
         "np16": (6.5e4, 6e-8), "t16": (6.5e4, 6e-8)}
JUNK = [None, "abc", object(), [[1.0, 2.0], [3.0]], np.array([True, False]),
        np.array(["a", "b"]), np.ones(2, dtype=complex), torch.ones(2, dtype=torch.complex64),
        torch.tensor([True, False])]
TORCH = {"t64": torch.float64, "t32": torch.float32, "t16": torch.float16,
         "bf16": torch.bfloat16}


def elements(sign: str = "any", kind: str = "list"):
    """Floats a container ``kind`` holds: moderate ones and the extremes of its range;
    ``sign`` "any", "nonneg" (≥ 0) or "pos" (> 0)."""
    big, small = RANGE[kind]
    special = [x for x in SPECIAL if abs(x) <= big and (
        sign == "any" or (sign == "nonneg" and x >= 0) or (sign == "pos" and x >= small))]
    base = {"any": st.floats(-1e3, 1e3), "nonneg": st.floats(0, 1e3),
            "pos": st.floats(1e-3, 1e3)}[sign]
    return st.one_of(base, st.sampled_from(special)) if special else base


def hold(values, kind: str):
    """``values`` (a float64 array) in container ``kind``, and what it holds, as float64."""
    a = np.asarray(values, dtype=float)
    if kind == "list":                   # an empty (0, 0) array is the list [] of shape (0,)
        lst = a.tolist()
        return lst, np.asarray(lst, dtype=float)
    if kind in ("np64", "np32", "np16"):
        with np.errstate(over="ignore"):
            v = a.astype({"np64": np.float64, "np32": np.float32, "np16": np.float16}[kind])
        return v, v.astype(float)
    t = torch.tensor(a, dtype=torch.float64).to(TORCH[kind])
    return t, t.double().numpy()


BAD_ARRAY = ("junk", "nan", "inf", "-inf", "empty", "rank")


def draw_array(data, shape, label, *, sign="any", bad=False):
    """(argument, what it holds as float64, None for junk): values of ``sign`` in a drawn
    container; ``bad``: one corruption -- junk, a NaN or ±inf entry, no entries, an extra
    dimension, or (``sign`` "nonneg"/"pos") an entry below the range."""
    kind = data.draw(st.sampled_from(CONTAINERS), label=f"{label} container")
    n = int(np.prod(shape))
    vals = np.array(data.draw(st.lists(elements(sign, kind), min_size=n, max_size=n),
                              label=label), dtype=float).reshape(shape)
    if not bad:
        return hold(vals, kind)
    mode = data.draw(st.sampled_from(BAD_ARRAY + (("sign",) if sign != "any" else ())),
                     label=f"{label} corruption")
    if mode == "junk" or (mode in ("nan", "inf", "-inf", "sign", "empty") and vals.size == 0
                          and mode != "empty") or (mode == "empty" and vals.ndim == 0):
        return data.draw(st.sampled_from(JUNK), label=f"{label} junk"), None
    if mode in ("nan", "inf", "-inf", "sign"):
        i = data.draw(st.integers(0, vals.size - 1), label=f"{label} where")
        vals.flat[i] = {"nan": NAN, "inf": INF, "-inf": -INF,
                        "sign": -1.0 if sign == "nonneg" else 0.0}[mode]
    elif mode == "empty":
        vals = np.empty((0,) + vals.shape[1:])
    else:
        vals = vals[None]
    return hold(vals, kind)


SCALARS = ("py", "np64", "np32", "t64", "t32", "bf16", "np0d")
BAD_SCALARS = [None, "1.0", True, [1.0], torch.ones(2), 1j, np.ones(2), NAN, INF, -INF]


def _wrap(x: float, kind: str):
    with np.errstate(over="ignore"):
        return {"py": lambda: x, "np64": lambda: np.float64(x), "np32": lambda: np.float32(x),
                "t64": lambda: torch.tensor(x, dtype=torch.float64),
                "t32": lambda: torch.tensor(x, dtype=torch.float32),
                "bf16": lambda: torch.tensor(x, dtype=torch.float64).to(torch.bfloat16),
                "np0d": lambda: np.array(x)}[kind]()


def draw_scalar(data, values, label, *, bad=False, bad_values=()):
    """(argument, the float it holds, None for junk): one of ``values`` as a Python, NumPy or
    torch scalar (a float32 or bfloat16 rounds it); ``bad``: junk, NaN, ±inf or one of
    ``bad_values``."""
    kind = data.draw(st.sampled_from(SCALARS), label=f"{label} kind")
    x = data.draw(st.sampled_from(BAD_SCALARS + list(bad_values)) if bad else values,
                  label=label)
    if not isinstance(x, float) or isinstance(x, bool):
        return x, None
    v = _wrap(x, kind)
    return v, float(v)


BAD_INTS = [None, "3", True, 2.5, NAN, INF, [2], 1j, torch.ones(2)]


def draw_int(data, values, label, *, bad=False, bad_values=()):
    """(argument, the int it holds, None when it is no integer): one of ``values`` as a
    Python or NumPy integer, a 0-d tensor or an integral float; ``bad``: junk or one of
    ``bad_values``."""
    if bad:
        x = data.draw(st.sampled_from(BAD_INTS + list(bad_values)), label=label)
        return x, (int(x) if isinstance(x, int) and not isinstance(x, bool) else None)
    x = data.draw(values, label=label)
    k = data.draw(st.integers(0, 4), label=f"{label} kind")
    v = [x, np.int64(x) if abs(x) < 2**62 else x, torch.tensor(x) if abs(x) < 2**62 else x,
         float(x) if abs(x) < 2**52 else x, x][k]
    return v, int(x)


def which_bad(data, names):
    """None (every argument valid) half of the time, else the name of the one corrupted."""
    return data.draw(st.sampled_from([None] * len(names) + list(names)), label="corrupted")


def close(got, want, rel=1e-9):
    """``got`` is ``want`` where ``want`` is a normal float64, inf where it overflows, and
    about 0 where it underflows (both arrays)."""
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape
    big, small = want >= F64_MAX, np.abs(want) < F64_TINY
    assert np.all(got[big] == INF), (got, want)
    assert np.all(np.abs(got[small]) <= 4 * F64_TINY), (got, want)
    mid = ~big & ~small
    np.testing.assert_allclose(got[mid], want[mid], rtol=rel, atol=0)


# ------------------------------------------------------------------------------ validation idiom
@sweep(120)
@given(data=st.data())
def test_finite_array(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=3), label="shape"))
    bad = which_bad(data, ["x"]) is not None
    low = data.draw(st.sampled_from([None, 0.0]), label="low")
    value, held = draw_array(data, shape, "x", sign="any" if low is None else "nonneg", bad=bad)
    ndim = data.draw(st.sampled_from([None, len(shape)] if not bad else [None, len(shape), 1]),
                     label="ndim")
    nonempty = data.draw(st.booleans(), label="nonempty")
    refuse = (held is None or (ndim is not None and held.ndim != ndim)
              or (nonempty and held.size == 0) or not np.isfinite(held).all()
              or (low is not None and bool((held < low).any())))
    if refuse:
        refused({"x"}, check.finite_array, "x", value, ndim=ndim, nonempty=nonempty, low=low)
        return
    got = call(check.finite_array, "x", value, ndim=ndim, nonempty=nonempty, low=low)
    assert got.dtype == np.float64 and np.array_equal(got, held)


@sweep(100)
@given(data=st.data())
def test_number_and_integer(data):
    bad = which_bad(data, ["v"]) is not None
    low = data.draw(st.sampled_from([None, 0.0, -1.0]), label="low")
    low_open = data.draw(st.booleans(), label="open")
    value, held = draw_scalar(data, st.one_of(elements(), st.integers(-5, 5).map(float)), "v",
                              bad=bad)
    ok = held is not None and math.isfinite(held) and (
        low is None or (held > low if low_open else held >= low))
    if ok:
        assert call(check.number, "v", value, low=low, low_open=low_open) == held
    else:
        refused({"v"}, check.number, "v", value, low=low, low_open=low_open)
    ilow = None if low is None else int(low)
    if held is not None and math.isfinite(held) and held.is_integer() and (
            ilow is None or held >= ilow):
        assert call(check.integer, "v", value, low=ilow) == int(held)
    else:
        refused({"v"}, check.integer, "v", value, low=ilow)


@sweep(60)
@given(data=st.data())
def test_temperatures_widths_points(data):
    n = data.draw(st.integers(1, 4), label="n")
    bad = which_bad(data, ["taus", "x"])
    value, held = draw_array(data, (n,), "taus", sign="pos", bad=bad == "taus")
    ok = held is not None and held.ndim == 1 and held.size > 0 and np.isfinite(held).all()
    if ok and bool((held > 0).all()):
        assert np.array_equal(call(check.temperatures, "taus", value), held)
    else:
        refused({"taus"}, check.temperatures, "taus", value)
    if ok and bool((held >= 0).all()):
        assert np.array_equal(call(check.widths, "w", value), held)
    else:
        refused({"w"}, check.widths, "w", value)
    d = data.draw(st.integers(1, 3), label="d")
    pts, held = draw_array(data, (n, d), "x", bad=bad == "x")
    if held is not None and held.ndim == 2 and held.size > 0 and np.isfinite(held).all():
        assert np.array_equal(call(check.points, "x", pts, d), held)
    else:
        refused({"x"}, check.points, "x", pts, d)


# ------------------------------------------------------------------------------ boundary.margin
@sweep(150)
@given(data=st.data())
def test_margin_functions(data):
    which = data.draw(st.sampled_from(["top_two_margin", "soft_gates", "hard_gates",
                                       "gate_gap_bound"]), label="function")
    n, K = data.draw(st.integers(1, 4), label="n"), data.draw(st.integers(2, 5), label="K")
    if which == "gate_gap_bound":
        bad = which_bad(data, ["margin", "tau", "n_experts"])
        margin, m = draw_array(data, (n,), "margin", sign="nonneg", bad=bad == "margin")
        tau, t = draw_scalar(data, elements("pos"), "tau", bad=bad == "tau",
                             bad_values=[0.0, -1.0])
        K_, kv = draw_int(data, st.integers(2, 2**40), "n_experts", bad=bad == "n_experts",
                          bad_values=[1, 0, -3])
        if (m is None or m.size == 0 or not np.isfinite(m).all() or bool((m < 0).any())
                or t is None or not math.isfinite(t) or t <= 0 or kv is None or kv < 2):
            refused({"margin", "tau", "n_experts"}, mg.gate_gap_bound, margin, tau, K_)
            return
        got = call(mg.gate_gap_bound, margin, tau, K_)
        with np.errstate(over="ignore", under="ignore"):
            want = np.exp(math.log(kv - 1) - m.astype(np.longdouble) / np.longdouble(t))
        close(got, want.astype(float))
        return
    bad = which_bad(data, ["logits"] + (["k"] if which == "top_two_margin" else [])
                    + (["tau"] if which == "soft_gates" else []))
    if bad == "logits" and data.draw(st.integers(0, 3), label="one expert?") == 0:
        K = 1                                  # no second logit: no margin, no gate gap
    logits, a = draw_array(data, (n, K), "logits", bad=bad == "logits" and K > 1)
    bad_logits = a is None or a.ndim != 2 or a.size == 0 or K < 2 or not np.isfinite(a).all()
    if which == "top_two_margin":
        k, kv = draw_int(data, st.integers(1, max(K - 1, 1)), "k", bad=bad == "k",
                         bad_values=[0, -1, K, 2**70])
        if bad_logits or kv is None or not 1 <= kv <= K - 1:
            refused({"logits", "k"}, mg.top_two_margin, logits, k)
            return
        got = call(mg.top_two_margin, logits, k)
        want = [sorted(row)[-kv] - sorted(row)[-kv - 1] for row in a.tolist()]
        assert np.array_equal(got, want) and np.all(got >= 0)
    elif which == "soft_gates":
        tau, t = draw_scalar(data, elements("pos"), "tau", bad=bad == "tau",
                             bad_values=[0.0, -1.0])
        if bad_logits or t is None or not (math.isfinite(t) and t > 0):
            refused({"logits", "tau"}, mg.soft_gates, logits, tau)
            return
        got = call(mg.soft_gates, logits, tau)
        z = (a.astype(np.longdouble) - a.max(axis=1, keepdims=True)) / np.longdouble(t)
        e = np.exp(z)
        want = (e / e.sum(axis=1, keepdims=True)).astype(float)
        assert np.isfinite(got).all() and np.allclose(got.sum(1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    else:
        if bad_logits:
            refused({"logits"}, mg.hard_gates, logits)
            return
        got = call(mg.hard_gates, logits)
        assert np.array_equal(got, np.eye(K)[a.argmax(axis=1)])


# ------------------------------------------------------------------------------ experiments.bridge
def _tail_constant_reference(d: np.ndarray, alpha: float) -> float:
    """log C_m = max over the distinct margins v of log F(v) − α log v (inf at a zero)."""
    if (d == 0).any():
        return INF
    v = np.unique(d)
    F = np.searchsorted(np.sort(d), v, side="right") / d.size
    log_c = float(np.max(np.log(F) - alpha * np.log(v)))
    return INF if log_c > LOG_MAX else math.exp(log_c)


@sweep(100)
@given(data=st.data())
def test_margin_tail_constant(data):
    from moe_routing.experiments.bridge import margins as br

    n = data.draw(st.integers(1, 6), label="n")
    bad = which_bad(data, ["margins", "alpha"])
    margins, d = draw_array(data, (n,), "margins", sign="nonneg", bad=bad == "margins")
    alpha, al = draw_scalar(data, st.floats(0.05, 5), "alpha", bad=bad == "alpha",
                            bad_values=[0.0, -1.0])
    if (d is None or d.ndim != 1 or d.size == 0 or not np.isfinite(d).all()
            or bool((d < 0).any()) or al is None or not math.isfinite(al) or al <= 0):
        refused({"margins", "alpha"}, br.margin_tail_constant, margins, alpha)
        return
    got = call(br.margin_tail_constant, margins, alpha)
    want = _tail_constant_reference(d, al)
    if want == INF:
        assert got == INF
    else:
        close(got, want)


@sweep(30)
@given(data=st.data())
def test_boundary_mass_of_router(data):
    from moe_routing.experiments.bridge import margins as br

    n = data.draw(st.integers(1, 40), label="n")
    scale = data.draw(st.sampled_from([1e-300, 1e-3, 1.0, 1e3, 1e300]), label="scale")
    u = np.array(data.draw(st.lists(st.floats(0, 1), min_size=n, max_size=n), label="u"))
    margins, d = hold(scale * u, data.draw(st.sampled_from(["list", "np64", "t64"]),
                                           label="container"))
    bad = which_bad(data, ["margins", "w_grid", "fit_max_mass"])
    if bad == "margins":
        margins, d = draw_array(data, (n,), "margins", sign="nonneg", bad=True)
    grid = np.unique(data.draw(st.lists(st.floats(1e-3, 1.0), min_size=2, max_size=6),
                               label="grid"))
    w_grid = scale * grid
    if bad == "w_grid":
        w_grid = data.draw(st.sampled_from([w_grid[::-1], np.append(w_grid, NAN),
                                            np.append(w_grid, -1.0), np.array([]), "grid",
                                            np.stack([w_grid, w_grid])]), label="bad grid")
    fit_max = data.draw(st.sampled_from([0.5, 1.0] if bad != "fit_max_mass"
                                        else [0.0, 1.5, NAN, "0.5"]), label="fit_max_mass")
    refuse = set()
    if d is None or d.ndim != 1 or d.size == 0 or not np.isfinite(d).all() or (d < 0).any():
        refuse.add("margins")
    w = np.asarray(w_grid, dtype=float) if not isinstance(w_grid, str) else None
    if (w is None or w.ndim != 1 or w.size == 0 or not np.isfinite(w).all()
            or bool((w <= 0).any()) or bool((np.diff(w) <= 0).any())):
        refuse.add("w_grid")
    if isinstance(fit_max, str) or not (math.isfinite(fit_max) and 0 < fit_max <= 1):
        refuse.add("fit_max_mass")
    if not refuse:
        counts = np.searchsorted(np.sort(d), w, side="right")
        if np.unique(w[(counts >= 1) & (counts / d.size <= fit_max)]).size < 2:
            refuse.add("w_grid")             # no two widths to fit on: said, by name
    kw = dict(fit_max_mass=fit_max, n_boot=20, rng=0)
    if refuse:
        refused(refuse, br.boundary_mass_of_router, margins, w_grid, **kw)
        return
    try:
        got = call(br.boundary_mass_of_router, margins, w_grid, **kw)
    except ValueError as err:            # every fitted width has one count: no slope
        assert str(err).startswith("alpha (fitted) = "), str(err)
        return
    assert math.isfinite(got.alpha) and got.alpha > 0
    assert got.C_m == br.margin_tail_constant(d, got.alpha)
    assert np.all(np.diff(got.estimate) >= 0)
    assert np.all((0 <= got.estimate) & (got.estimate <= 1))
    assert np.all((got.lower <= got.estimate) & (got.estimate <= got.upper))


@sweep(150)
@given(data=st.data())
def test_bound_check(data):
    from scipy import special


    bad = which_bad(data, ["taus", "gap", "alpha", "C_m", "constants"])
    T = data.draw(st.integers(1, 5), label="T")
    taus, t = draw_array(data, (T,), "taus", sign="pos", bad=bad == "taus")
    gap, g = draw_array(data, (T,), "gap", bad=bad == "gap")
    alpha, al = draw_scalar(data, st.one_of(st.floats(0.05, 5), st.sampled_from(
        [1e-300, 200.0, 1e300])), "alpha", bad=bad == "alpha", bad_values=[0.0, -1.0])
    C_m, c = draw_scalar(data, st.one_of(elements("pos"), st.just(INF)), "C_m",
                         bad=bad == "C_m", bad_values=[0.0, -1.0, -INF])
    if c == INF and not (bad == "C_m"):
        C_m = INF                            # as margin_tail_constant returns it
    form = data.draw(st.sampled_from(["M", "loss_range", "B"]), label="form")
    K_, kv = draw_int(data, st.integers(2, 2**40), "n_experts", bad=False)
    M_or_B = data.draw(st.one_of(elements("nonneg" if form != "B" else "pos"),
                                 st.just(0.0) if form != "B" else st.just(1.0)), label="M")
    Bs = data.draw(elements("pos"), label="B_star")
    const = {"n_experts": K_}
    if form == "B":
        const.update(B=M_or_B, B_star=Bs)
    else:
        const[form] = M_or_B
    if bad == "constants":
        kind = data.draw(st.integers(0, 6), label="bad constants")
        if kind == 0:
            const = [("n_experts", 3), ("M", 1.0)]
        elif kind == 1:
            const["n_experts"] = data.draw(st.sampled_from([1, 0, 2.5, None, "3"]))
        elif kind == 2:
            const.update(M=1.0, loss_range=1.0)
        elif kind == 3:
            const["C"] = 2.0
        elif kind == 4:
            const = {"n_experts": 3}
        else:
            key = "B" if form == "B" else form
            const[key] = data.draw(st.sampled_from([NAN, INF, -1.0, "1"] + ([0.0] if form == "B"
                                                                            else [])))
    refuse = set()
    if bad == "constants":
        refuse.add("constants")
    if t is None or t.ndim != 1 or t.size == 0 or not np.isfinite(t).all() or (t <= 0).any():
        refuse.add("taus")
    elif g is None or g.shape != t.shape or not np.isfinite(g).all():
        refuse.add("gap")
    if al is None or not math.isfinite(al) or al <= 0:
        refuse.add("alpha")
    if c is None or math.isnan(c) or c <= 0:
        refuse.add("C_m")
    if refuse:
        refused(refuse, soft_hard.bound_check, gap, alpha, C_m, const, taus=taus)
        return
    got = call(soft_hard.bound_check, gap, alpha, C_m, const, taus=taus)
    g = np.abs(g)
    if form == "B":
        log_M = math.log(4) + math.log(M_or_B) + float(np.logaddexp(math.log(M_or_B),
                                                                     math.log(Bs)))
    else:
        log_M = math.log(M_or_B) if M_or_B > 0 else -INF
    if log_M == -INF:
        want = np.zeros(t.shape)
    elif c == INF:
        want = np.full(t.shape, INF)
    else:
        log_b = (math.log(kv - 1) + log_M + math.log(c) + float(special.gammaln(1 + al))
                 + al * np.log(t))
        with np.errstate(over="ignore", under="ignore"):
            want = np.where(log_b > LOG_MAX, INF, np.exp(np.minimum(log_b, LOG_MAX)))
    close(got.bound, want)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ratio = np.where(got.bound > 0, g / np.where(got.bound > 0, got.bound, 1.0),
                         np.where(g > 0, INF, 0.0))
    assert np.array_equal(got.ratio, ratio) and not np.isnan(got.ratio).any()
    assert got.below == bool(np.all(g <= got.bound))
    assert math.isfinite(got.slope) == (np.unique(t[g > 0]).size >= 3)


# ------------------------------------------------------------------------------ temperature fits
BANDS = {"good": [(1e-3, 0.1), (np.float32(1e-3), torch.tensor(0.1)), [0.01, 0.5]],
         "bad": [(0.0, 0.1), (0.1, 1e-3), (NAN, 0.1), (1e-3, INF), "ab", 0.1, (1e-3, 0.05, 0.1),
                 (1e-3, "0.1"), None]}


@sweep(100)
@given(data=st.data())
def test_fit_growth(data):
    from moe_routing.experiments.bridge import temperature_fits as fits

    bad = which_bad(data, ["values", "scaled", "band"])
    S = data.draw(st.integers(1, 40), label="S")
    r = data.draw(st.floats(1e-3, 1.0), label="rate")
    v0 = data.draw(st.sampled_from([1e-300, 1e-6, 1.0, 1e6, 1e200]), label="v0")
    base = v0 * np.exp(r * np.arange(S))
    exact = data.draw(st.booleans(), label="exponential?")
    if bad == "values":
        values, v = draw_array(data, (S,), "values", sign="nonneg", bad=True)
    elif exact:
        values, v = hold(base, data.draw(st.sampled_from(["list", "np64", "t64", "t32"]),
                                         label="container"))
    else:
        values, v = draw_array(data, (S,), "values", sign="nonneg")
    lo_scale = data.draw(st.sampled_from([1e-4, 1e-3, 1e-2]), label="start")
    scaled, s = hold(base / base[0] * lo_scale, "np64")
    if bad == "scaled":
        scaled, s = draw_array(data, (S,), "scaled", sign="nonneg", bad=True)
    band = data.draw(st.sampled_from(BANDS["bad" if bad == "band" else "good"]), label="band")
    refuse = set()
    if v is None or v.ndim != 1 or v.size == 0 or not np.isfinite(v).all() or (v < 0).any():
        refuse.add("values")
    elif s is None or s.shape != v.shape or not np.isfinite(s).all() or (s < 0).any():
        refuse.add("scaled")
    if bad == "band":
        refuse |= {"band"}
    if refuse:
        refused(refuse, fits.fit_growth, values, scaled, band)
        return
    got = call(fits.fit_growth, values, scaled, band)
    lo, hi = float(band[0]), float(band[1])
    start = [i for i in range(S) if s[i] >= lo]
    if not start:
        assert got.window == (0, -1) and math.isnan(got.rate)
        return
    a = start[0]
    over = [i for i in range(a, S) if s[i] > hi]
    b = over[0] - 1 if over else S - 1
    assert got.window == (a, b)
    y = v[a:b + 1]
    if b - a + 1 < 5 or not (y > 0).all():
        assert math.isnan(got.rate)            # no fit: said by NaN (documented)
        return
    assert math.isfinite(got.rate) and math.isfinite(got.r2)
    want = np.polyfit(np.arange(a, b + 1), np.log(y), 1)[0]
    assert got.rate == pytest.approx(want, rel=1e-6, abs=1e-9)
    if exact and bad is None:
        assert got.rate == pytest.approx(r, rel=1e-5, abs=1e-6)


def _run(tau, seed, rate, contrast):
    from moe_routing.experiments.bridge import temperature_fits as fits

    f = fits.GrowthFit((0, 20), rate, 1.0, 1.0)
    c = np.asarray(contrast, dtype=float)
    return fits.GrowthRun(tau=tau, seed=seed, optimizer="sgd", aligned=c, router_contrast=c,
                          max_scaled=c, loss=c[:-1], fit=f, fit_contrast=f, wall_s=0.0)


@sweep(100)
@given(data=st.data())
def test_rate_and_step_scaling(data):
    from moe_routing.experiments.bridge import temperature_fits as fits

    bad = which_bad(data, ["runs", "runs (τ, seed)", "runs (τ)", "measure", "confidence",
                           "step"])
    n = data.draw(st.integers(2, 7), label="n runs")
    cells = data.draw(st.lists(st.tuples(st.sampled_from([0.05, 0.1, 0.2, 0.4]),
                                         st.sampled_from([0, 1, 2])),
                               min_size=n, max_size=n, unique=True).filter(
        lambda cs: len({c[0] for c in cs}) >= 2), label="cells")
    taus, seeds = [c[0] for c in cells], [c[1] for c in cells]
    if bad == "runs (τ)":
        taus = [taus[0]] * len(taus)
        seeds = list(range(len(taus)))
    rates = data.draw(st.lists(st.one_of(st.floats(1e-3, 10), st.sampled_from(
        [NAN, 0.0, -1.0, 1e-300, 1e300])), min_size=n, max_size=n), label="rates")
    S = data.draw(st.integers(1, 6), label="S")
    contrast = data.draw(st.lists(st.lists(st.one_of(st.floats(1e-6, 1e3), st.sampled_from(
        [0.0, 1e-300, 1e300])), min_size=S + 1, max_size=S + 1), min_size=n, max_size=n))
    runs = [_run(*x) for x in zip(taus, seeds, rates, contrast)]
    if bad == "runs":
        i = data.draw(st.integers(0, n - 1), label="which run")
        kind = data.draw(st.sampled_from(["junk", "tau", "seed", "empty", "one"]), label="how")
        if kind == "junk":
            runs[i] = "run"
        elif kind == "tau":
            runs[i] = _run(data.draw(st.sampled_from([0.0, -0.1, NAN, INF])), seeds[i], 1.0,
                           contrast[i])
        elif kind == "seed":
            runs[i] = _run(taus[i], data.draw(st.sampled_from([-1, 1.5, None])), 1.0, contrast[i])
        elif kind == "empty":
            runs = []
        else:
            runs = runs[0]
    if bad == "runs (τ, seed)":
        j = data.draw(st.integers(0, n - 1), label="duplicate of")
        runs.append(_run(taus[j], seeds[j], 2.0, contrast[j]))
    measure = data.draw(st.sampled_from(["contrast", "aligned"] if bad != "measure"
                                        else ["rate", None, 1]), label="measure")
    confidence = data.draw(st.sampled_from([0.95, 0.5] if bad != "confidence"
                                           else [0.0, 1.0, NAN, "0.9"]), label="confidence")
    step, sv = draw_int(data, st.integers(1, S), "step", bad=bad == "step",
                        bad_values=[0, -1, S + 1])
    if bad not in (None, "step"):
        refused({bad}, fits.rate_scaling, runs, measure, confidence)
        refused({bad, "step"}, fits.step_scaling, runs, step, measure, confidence)
        return
    got = call(fits.rate_scaling, runs, measure, confidence)
    ok = [(t, r) for t, r in zip(taus, rates) if math.isfinite(r) and r > 0]
    assert got.n_runs == n and got.n_fitted == len(ok)
    if len({t for t, _ in ok}) >= 2:
        x, y = np.log([1 / t for t, _ in ok]), np.log([r for _, r in ok])
        assert got.slope == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-9, abs=1e-9)
        assert all(math.isfinite(e) for e in got.slope_ci)
    else:
        assert math.isnan(got.slope)         # fewer than two fitted temperatures: n_fitted says
    if bad == "step":
        refused({"step"}, fits.step_scaling, runs, step, measure, confidence)
        return
    sc = call(fits.step_scaling, runs, step, measure, confidence)
    ok = [(t, c[sv]) for t, c in zip(taus, contrast) if c[sv] > 0]
    if len({t for t, _ in ok}) >= 2:
        x, y = np.log([1 / t for t, _ in ok]), np.log([c for _, c in ok])
        assert sc.slope == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-9, abs=1e-9)
    else:
        assert math.isnan(sc.slope)


# ------------------------------------------------------------------------------ router z-loss
@sweep(150)
@given(data=st.data())
def test_router_z_loss(data):
    from moe_routing.model.losses import router_z_loss

    bad = which_bad(data, ["router_logits", "beta", "mask"])
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="shape"))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float32, torch.float16,
                                       torch.bfloat16]), label="dtype")
    kind = {torch.float64: "t64", torch.float32: "t32", torch.float16: "t16",
            torch.bfloat16: "bf16"}[dtype]
    n = int(np.prod(shape))
    lim = RANGE[kind][0] / 2
    vals = np.clip(np.array(data.draw(st.lists(elements("any", kind), min_size=n, max_size=n),
                                      label="logits"), dtype=float), -lim, lim).reshape(shape)
    logits = torch.tensor(vals).to(dtype)
    if bad == "router_logits":
        logits = data.draw(st.sampled_from([vals, torch.zeros(shape, dtype=torch.int64),
                                            torch.zeros((0,) + shape[1:], dtype=dtype),
                                            torch.tensor(1.0, dtype=dtype), None, "logits"]),
                           label="bad logits")
    beta, b = draw_scalar(data, st.one_of(st.sampled_from([0.0, 1e-3, 1.0]), elements("pos")),
                          "beta", bad=bad == "beta", bad_values=[-1.0, -1e-300])
    lead = shape[:-1]
    g = torch.Generator().manual_seed(n)
    mask = data.draw(st.sampled_from([None, torch.rand(lead, generator=g) > 0.5]), label="mask")
    if bad == "mask":
        mask = data.draw(st.sampled_from([torch.ones(lead + (2,), dtype=torch.bool),
                                          torch.ones(lead), np.ones(lead, dtype=bool)]),
                         label="bad mask")
    refuse = {bad} - {None}
    if b is None or not math.isfinite(b) or b < 0:      # 1e300 as float32 is inf
        refuse.add("beta")
    if refuse:
        refused(refuse, router_z_loss, logits, beta, mask)
        return
    got = call(router_z_loss, logits, beta, mask)
    out = torch.float64 if dtype == torch.float64 else torch.float32
    assert got.dtype == out and got.dim() == 0
    x = logits.double()
    lse = torch.logsumexp(x, -1).reshape(-1)
    keep = torch.ones_like(lse, dtype=torch.bool) if mask is None else mask.reshape(-1)
    lse = lse[keep].numpy()
    if lse.size == 0 or b == 0:
        assert float(got) == 0.0
        return
    # the logsumexp is computed in ``out``: its rounding, relative to the logits' scale
    eps = float(torch.finfo(out).eps)
    err = np.float64(4 * eps * (float(np.abs(x.numpy()).max()) + math.log(shape[-1]) + 1))
    m = float(np.abs(lse).max()) + err
    mean_sq = float(np.mean((np.abs(lse) / m) ** 2))
    log_want = math.log(b) + 2 * math.log(m) + (math.log(mean_sq) if mean_sq > 0 else -INF)
    info = torch.finfo(out)
    v = float(got)
    if log_want > math.log(float(info.max)) + 1e-6:
        assert v == INF
    elif math.log(b) + 2 * math.log(m) < math.log(float(info.tiny)):
        assert 0 <= v <= 2 * float(info.tiny)
    else:
        assert math.isfinite(v) and v >= 0
        want = math.exp(log_want)
        with np.errstate(over="ignore"):
            slack = b * float(np.mean(2 * np.abs(lse) * err + err ** 2)) * 1.1
        assert abs(v - want) <= 1e-5 * want + slack + float(info.tiny) * 4, (v, want, slack)


# ------------------------------------------------------------------------------ two-hop config/data
POOL = {"n_layers": [1, 2, 2.0, np.int64(1), 3, 0, "2", NAN],
        "objectives": ["ce", "ce+lb", "ce+router", "ce+zz", None],
        "seeds": [0, 1, 2, np.int64(1), 1.0, -1, 1.5, "0", NAN]}
FIELD = {"n_layers": "n_layers", "objectives": "objective", "seeds": "seed"}


def _valid(axis, v) -> bool:
    if isinstance(v, (str, type(None))) and axis != "objectives":
        return False
    if axis == "n_layers":
        return not isinstance(v, str) and v == v and v in (1, 2)
    if axis == "objectives":
        return v in ("ce", "ce+lb", "ce+router")
    return not isinstance(v, str) and v == v and float(v).is_integer() and v >= 0


@sweep(60)
@given(data=st.data())
def test_two_hop_grid(data):
    from moe_routing.experiments.two_hop.config import two_hop_grid

    bad = which_bad(data, list(POOL))
    axes = {}
    for axis, pool in POOL.items():
        good = [v for v in pool if _valid(axis, v)]
        if axis != bad:
            if data.draw(st.integers(0, 2), label=f"{axis} default?") == 0:
                continue
            held = {}                  # distinct values (1 and 1.0 are one depth)
            for v in data.draw(st.lists(st.sampled_from(good), min_size=1, max_size=3),
                               label=axis):
                held.setdefault(v if axis == "objectives" else int(v), v)
            axes[axis] = list(held.values())
            continue
        how = data.draw(st.sampled_from(["repeat", "value", "repeat", "empty", "repeat",
                                         "string"]), label="how")
        if how == "value":
            axes[axis] = [good[0], data.draw(st.sampled_from(
                [v for v in pool if not _valid(axis, v)]), label=f"bad {axis}")]
        elif how == "repeat":              # the same value, maybe spelt otherwise (2 and 2.0)
            v0 = data.draw(st.sampled_from(good), label=f"{axis} repeated")
            same = [v for v in good if (v if axis == "objectives" else int(v))
                    == (v0 if axis == "objectives" else int(v0))]       # v0 among them
            axes[axis] = data.draw(st.permutations([v0] + same), label=f"{axis} repeat")
        else:
            axes[axis] = [] if how == "empty" else "12"
    refuse = set()
    if bad is not None:
        values = axes[bad]
        if isinstance(values, str) or not values or (
                all(_valid(bad, v) for v in values)):       # empty, a string or a repeat
            refuse.add(bad)
        else:
            field = FIELD[bad]
            refuse |= {f"TwoHopConfig.{field}", f"TwoHopConfig.model.{field}",
                       f"MoEShape.{field}", f"MoEConfig.{field}"}
        refused(refuse, two_hop_grid, **axes)
        return
    grid = call(two_hop_grid, **axes)
    sizes = [len(axes.get(a, d)) for a, d in (("n_layers", (1, 2)), ("objectives", (0, 1, 2)),
                                               ("seeds", (0, 1)))]
    assert len(grid) == int(np.prod(sizes)) == len({c.key() for c in grid})
    assert {(c.model.n_layers, c.objective, c.seed) for c in grid} == {
        (int(n), o, int(s)) for n in axes.get("n_layers", (1, 2))
        for o in axes.get("objectives", ("ce", "ce+lb", "ce+router"))
        for s in axes.get("seeds", (0, 1))}


@sweep(40)
@given(data=st.data())
def test_two_hop_data_fields(data):
    from moe_routing.experiments.two_hop.config import TwoHopData

    field, pool, ok = data.draw(st.sampled_from([
        ("n_pairs", [2, 60, np.int64(12), 1, 0, 2.5, NAN, "60", True], lambda v: v in (2, 60, 12)),
        ("n_templates", [1, 5, np.int64(3), 0, 6, 2.5, None], lambda v: v in (1, 5, 3)),
        ("test_fraction", [0.2, np.float32(0.5), torch.tensor(0.25, dtype=torch.bfloat16), 0.0,
                           1.0, NAN, INF, "0.2"], lambda v: not isinstance(v, str)
         and 0 < float(v) < 1),
        ("data_seed", [0, 7, np.int64(3), -1, 1.5, NAN, None], lambda v: v in (0, 7, 3)),
        ("chains", [(("P17", "P36"),), (("P17", "P36"), ("P17", "P36")), (("P17", "P999"),),
                    "P17", ()], lambda v: v == (("P17", "P36"),))]), label="field")
    value = data.draw(st.sampled_from(pool), label=field)
    try:
        good = ok(value)
    except (TypeError, ValueError):
        good = False
    if not good:
        refused({f"TwoHopData.{field}"}, TwoHopData, **{field: value})
        return
    got = call(TwoHopData, **{field: value})
    held = getattr(got, field)
    assert held == (value if field == "chains" else type(held)(value))


@pytest.fixture(scope="module")
def two_hop_run():
    """A tiny two-hop dataset, its split and an untrained 4-expert two-layer model."""
    from moe_routing.experiments.two_hop.config import TwoHopConfig
    from moe_routing.experiments.two_hop.measure import hop_tasks, two_hop_dataset, two_hop_split
    from moe_routing.model import MoETransformer

    cfg = TwoHopConfig.from_flat(n_pairs=12, n_templates=2, d_model=16, d_expert=16, n_heads=2,
                                 n_experts=4, steps=6, batch_size=32, warmup_steps=2)
    ds = two_hop_dataset(cfg)
    enc = ds.encode_split("all")
    torch.manual_seed(0)
    model = MoETransformer(cfg.model.config(ds.vocab_size, enc.inputs.shape[1], top_k=1,
                                            gate="switch")).eval()
    return ds, two_hop_split(ds), hop_tasks(ds), enc, model


@pytest.mark.parametrize("n_layers", [1, 2, np.int64(2), 2.0, torch.tensor(1), 0, 3, -1, 1.5,
                                      NAN, None, "2", True])
def test_two_hop_layer_targets(n_layers, two_hop_run):
    from moe_routing.experiments.two_hop.measure import layer_targets

    ds, parts, hops, enc, model = two_hop_run
    whole = not isinstance(n_layers, (bool, str, type(None))) and float(n_layers).is_integer()
    nl = int(n_layers) if whole else None
    if nl is None or not 1 <= nl <= 2:
        refused({"n_layers"}, layer_targets, enc, hops, n_layers)
        return
    got = call(layer_targets, enc, hops, n_layers)
    assert tuple(got.shape) == (len(enc), nl)
    assert torch.equal(got, torch.from_numpy(hops[enc.task.numpy(), :nl]))


@pytest.mark.parametrize("n_experts", [4, np.int64(4), 2, 8, 1, 0, -1, 2**40, 4.5, NAN, None,
                                       "4", True, torch.tensor(2)])
def test_two_hop_evaluate_expert_count(n_experts, two_hop_run):
    from moe_routing.experiments.two_hop.measure import evaluate_two_hop

    ds, parts, hops, enc, model = two_hop_run
    if not (isinstance(n_experts, (int, np.integer)) and not isinstance(n_experts, bool)
            and n_experts == 4):
        msg = refused({"n_experts"}, evaluate_two_hop, model, ds, parts, n_experts)
        integral = not isinstance(n_experts, (bool, str, type(None))) and \
            float(n_experts) == float(n_experts) and float(n_experts).is_integer()
        assert not integral or "the model's expert count, 4" in msg, msg
        return
    with torch.no_grad():
        out = call(evaluate_two_hop, model, ds, parts, n_experts)
    for part in ("single_hop", "two_hop_seen", "held_out"):
        assert 0 <= out[part]["accuracy"] <= 1
    assert len(out["routing"]) == 2


# ------------------------------------------------------------------------------ bridge on a model
@pytest.fixture(scope="module")
def bridge_model():
    """A small knowledge dataset and an untrained one-layer 3-expert model over it."""
    from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask
    from moe_routing.model import MoEConfig, MoETransformer

    D = {"Paris": "France", "Rome": "Italy", "Lyon": "France", "Milan": "Italy",
         "Bern": "Switzerland"}
    ds = KnowledgeDataset([KnowledgeTask("A", ["⋆1 is in ⋆2.", "the city ⋆1 lies in ⋆2."], D),
                           KnowledgeTask("B", ["⋆1 was once in ⋆2.",
                                               "the town ⋆1 belongs to ⋆2."], D)], seed=0)
    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(vocab_size=ds.vocab_size, max_len=ds.seq_len, d_model=16,
                                     n_heads=2, n_experts=3, d_expert=8)).eval()
    return ds, model


@sweep(30)
@given(data=st.data())
def test_bridge_measurements(data, bridge_model):
    from moe_routing.experiments.bridge import margins as br

    ds, model = bridge_model
    which = data.draw(st.sampled_from(["router_margins", "soft_vs_hard", "mixture_logits"]),
                      label="function")
    if which == "router_margins":
        bad = which_bad(data, ["positions", "split", "batch_size"])
        positions = data.draw(st.sampled_from(["subject", 1, None] if bad == "positions"
                                              else list(br.POSITIONS)), label="positions")
        split = data.draw(st.sampled_from(["all", None] if bad == "split" else list(layers.SPLITS)),
                          label="split")
        batch, bv = draw_int(data, st.integers(1, 600), "batch_size", bad=bad == "batch_size",
                             bad_values=[0, -1])
        if bad is not None:
            refused({bad}, br.router_margins, model, ds, positions, split, batch)
            return
        try:
            got = call(br.router_margins, model, ds, positions, split, batch)
        except ValueError as err:             # a kind of position the split does not have
            assert str(err).startswith(f"positions = {positions!r}"), str(err)
            return
        s = np.sort(got.logits, axis=1)
        assert np.array_equal(got.margins, s[:, -1] - s[:, -2])
        assert np.isfinite(got.margins).all() and (got.margins >= 0).all()
        return
    names = ["taus"] + (["split"] if which == "soft_vs_hard" else ["select"])
    bad = which_bad(data, names)
    T = data.draw(st.integers(1, 4), label="T")
    taus, t = draw_array(data, (T,), "taus", sign="pos", bad=bad == "taus")
    refuse = {bad} - {None}
    if t is None or t.ndim != 1 or t.size == 0 or not np.isfinite(t).all() or (t <= 0).any():
        refuse.add("taus")
    if which == "soft_vs_hard":
        split = data.draw(st.sampled_from(["all", None] if bad == "split" else list(layers.SPLITS)),
                          label="split")
        if refuse:
            refused(refuse, soft_hard.soft_vs_hard, model, ds, taus, split)
            return
        got = call(soft_hard.soft_vs_hard, model, ds, taus, split)
        for name in ("gap", "ce_soft", "em_soft", "ce_losses", "gap_losses"):
            v = getattr(got, name)
            assert v.shape == t.shape and np.isfinite(v).all(), name
        assert (got.gap >= 0).all() and (0 <= got.em_soft).all() and (got.em_soft <= 1).all()
        assert math.isfinite(got.loss_range) and got.loss_range >= 0
        assert math.isfinite(got.envelope) and got.envelope >= 0
        return
    enc = ds.encode_split("test")
    sel = enc.loss_mask
    if bad == "select":
        sel = data.draw(st.sampled_from([sel.float(), sel[:, :-1], sel.numpy(), None]),
                        label="select")
    if refuse:
        refused(refuse, soft_hard.mixture_logits, model, enc.inputs, sel, taus)
        return
    out = call(soft_hard.mixture_logits, model, enc.inputs, sel, taus)
    assert tuple(out["soft"].shape[:2]) == (t.size, int(enc.loss_mask.sum()))
    assert all(bool(torch.isfinite(v).all()) for v in out.values())


# ------------------------------------------------------------------------------ two-layer build
WORDS = ["red", "green", "blue", "gray", "near"]


def _template(rng, n_words: int) -> str:
    words = list(rng.choice(WORDS, size=n_words))
    pos = int(rng.integers(0, n_words + 1))
    words.insert(pos, "⋆1")
    if rng.random() < 0.5:
        words.append("⋆2")
    else:
        words.insert(int(rng.integers(pos + 1, len(words) + 1)), "⋆2")
    return " ".join(words) + "."


def _random_dataset(seed: int):
    """Two single-hop tasks A, B and B∘A with random templates over five words (the sweep
    that found the (H-margin) refusals that named no hypothesis)."""
    from moe_routing.knowledge import KnowledgeTask
    from moe_routing.knowledge.two_hop import two_hop_task
    from moe_routing.knowledge.two_hop_dataset import MixedKnowledgeDataset

    rng = np.random.default_rng(seed)
    ents = [f"E{i}" for i in range(12)]
    subj = rng.choice(ents, size=4, replace=False)
    mids = rng.choice(ents, size=3, replace=False)
    A = KnowledgeTask("A", [_template(rng, rng.integers(1, 6))
                            for _ in range(rng.integers(1, 5))],
                      {str(s): str(rng.choice(mids)) for s in subj})
    B = KnowledgeTask("B", [_template(rng, rng.integers(1, 6))
                            for _ in range(rng.integers(1, 5))],
                      {str(m): str(rng.choice(ents)) for m in mids})
    T = two_hop_task(A, B, [_template(rng, rng.integers(1, 6))
                            for _ in range(rng.integers(1, 5))], typed=False)
    return MixedKnowledgeDataset([A, B, T], seed=0)


@sweep(25)
@given(seed=st.integers(0, 10**6), eta=st.sampled_from([0.01, 0.01, 0.001]))
def test_two_layer_construction_builds_or_names_a_hypothesis(seed, eta):
    from moe_routing.construction import (HypothesisFails, HypothesisUndecided,
                                          build_two_layer, verify_two_layer)
    from moe_routing.construction.refusals import HYPOTHESES
    from moe_routing.construction.two_layer_routing import TWO_LAYER_HYPOTHESES

    try:
        ds = _random_dataset(seed)
    except ValueError as err:            # e.g. a shared object slot refused by the dataset
        assert re.match(r"\S.* = .* is not allowed; accepted: ", str(err)), str(err)
        return
    try:
        model, rep = call(build_two_layer, ds, eta=eta)
    except HypothesisFails as err:
        assert err.hypothesis in {**HYPOTHESES, **TWO_LAYER_HYPOTHESES}
        assert str(err).startswith(f"hypothesis ({err.hypothesis}) fails"), str(err)
        return
    except HypothesisUndecided:          # not a refusal: the LP did not decide
        return
    v = verify_two_layer(model, rep, ds)
    assert v.passed and v.max_invalid <= rep.eps / 2, (v.max_invalid, v.misrouted)


@sweep(10)
@given(data=st.data())
def test_two_layer_parameters(data):
    from moe_routing.construction import HypothesisFails, build_two_layer

    ds = _random_dataset(20)                 # one that builds at the defaults
    args = {}
    bad = set()
    for name, good, junk in (("eps", [1e-4, 0.5], [0.0, 1.0, NAN]),
                             ("rho", [0.5, 0.25], [0.0, 1.0, -1.0]),
                             ("eta", [0.01, 0.05], [0.0, 0.1, 1.0]),
                             ("max_coherence", [0.3, 0.2], [0.0, 0.5, NAN]),
                             ("router_margin", [20.0, 1.0], [0.0, -1.0, INF])):
        if data.draw(st.integers(0, 2), label=f"{name} given?") == 0:
            continue
        if data.draw(st.integers(0, 6), label=f"{name} bad?") == 0:
            args[name] = data.draw(st.sampled_from(junk + [None, "0.5", True]), label=name)
            bad.add(name)
        else:
            v = data.draw(st.sampled_from(good), label=name)
            kind = data.draw(st.sampled_from(["py", "np32", "t64", "bf16"]), label=f"{name} kind")
            args[name] = {"py": v, "np32": np.float32(v), "t64": torch.tensor(v),
                          "bf16": torch.tensor(v).to(torch.bfloat16)}[kind]
    if bad:
        msg = refused(bad, build_two_layer, ds, **args)
        assert not msg.startswith("hypothesis")
        return
    try:
        model, rep = call(build_two_layer, ds, **args)
    except HypothesisFails as err:           # e.g. (H-margin) at a larger eta, (H-code) at rho
        assert str(err).startswith(f"hypothesis ({err.hypothesis}) fails"), str(err)
        return
    assert math.isfinite(rep.beta) and rep.beta > 0 and math.isfinite(rep.gamma) and rep.gamma > 0
    assert rep.v_lo > rep.mu * rep.v_hi and rep.mu * rep.v2_hi < 1 and rep.v_min > rep.i_max
