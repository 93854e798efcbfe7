"""Dispatch: send each token to its chosen experts and combine the gated outputs.

Shape legend: ``n`` tokens (batch × sequence flattened), ``k`` experts per token (top-k),
``d`` model width, ``e`` experts, ``f`` expert hidden width.

Every backend computes the same function

    y_n = Σ_{j<k} g_{n,j} · FF_{i_{n,j}}(x_n),    FF_e(x) = act(x W1_e + b1_e) W2_e + b2_e

and differs only in how the work is laid out:

* ``loop`` — the readable reference (Mixtral style): one pass per expert over the tokens that
  chose it.  Its scatter is ``index_put(accumulate=True)`` rather than ``index_add_``: the latter
  is non-deterministic on CUDA.
* ``sorted`` — the fast default: the n·k (token, expert) assignments are sorted by expert so that
  each expert's tokens are contiguous; then one matmul per contiguous segment (CPU), or a single
  grouped matmul over all segments (``torch.nn.functional.grouped_mm``, CUDA, float32/bfloat16)
  when the shapes allow it.  Un-sorting is a permutation gather (deterministic on CUDA).
* ``grouped`` — ``sorted`` with the grouped matmul forced (any device; float32/bfloat16/float16
  and widths that are multiples of 4 only).  Used to measure it against the segment loop.
* ``dense`` — every expert on every token, outputs weighted by a combine matrix that is zero
  off the chosen experts.  E times the work: a test oracle only.

Waiting for the GPU.  Segment ends are found on the device (``searchsorted`` in the sorted
expert ids; a CUDA ``bincount`` reads its input's maximum back to the host).  The grouped
matmul takes them as a device tensor, but torch runs it without a host read only where it has
a grouped kernel (bfloat16 on sm90/sm100 GPUs in torch 2.8-2.13); elsewhere its fallback copies
the offsets to the host in every call, forward and backward.  Hence on CUDA:

* the matmuls run in autocast's dtype when autocast is on (as autocast runs ``mm``/``addmm``),
  so a bfloat16-autocast training step takes the grouped kernel;
* ``sorted`` picks the grouped matmul only where it does not wait (probed once per dtype,
  :func:`grouped_mm_waits`), the segment loop otherwise: one wait per call (its split sizes
  must be on the host), fewer than the fallback's one per grouped matmul call;
* ``loop`` waits once per expert (``torch.where``); ``dense`` never waits, at E times the work
  (padding every expert to the worst case, n rows each, is the same E·n rows: ``dense`` is that
  sync-free formulation).

On the CPU nothing waits and none of this changes a result: the code there is as it was.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache

import torch
import torch.nn.functional as F

from .._internal.validation import choice, fail

_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def activation_fn(name: str):
    if name == "relu":
        return torch.relu
    if name == "gelu":
        return F.gelu
    fail("activation", name, "one of 'relu', 'gelu'")


@contextmanager
def _sync_debug_mode(device_type: str, mode):
    """CUDA's sync debug mode ``mode`` (0, "warn", "error") for the block, the caller's restored:
    the probes below must neither trip nor be counted by a caller's setting."""
    if device_type != "cuda":
        yield
        return
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def _probe_inputs(device_type: str, dtype: torch.dtype):
    x = torch.ones(8, 8, device=device_type, dtype=dtype, requires_grad=True)
    w = torch.ones(2, 8, 8, device=device_type, dtype=dtype, requires_grad=True)
    offs = torch.tensor([3, 8], device=device_type, dtype=torch.int32)
    return x, w, offs


@lru_cache(maxsize=None)
def grouped_mm_available(device_type: str, dtype: torch.dtype) -> bool:
    """Whether this torch build runs ``grouped_mm`` (forward and backward) on this device/dtype."""
    fn = getattr(F, "grouped_mm", None)
    if fn is None or dtype not in _GROUPED_DTYPES:
        return False
    try:
        with _sync_debug_mode(device_type, 0):
            x, w, offs = _probe_inputs(device_type, dtype)
            y = fn(x, w, offs=offs)
            (y * y).sum().backward()
        return True
    except (RuntimeError, NotImplementedError):
        return False


@lru_cache(maxsize=None)
def grouped_mm_waits(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``grouped_mm`` (forward and backward) synchronises with the host on this CUDA
    device and dtype -- torch's fallback for dtypes and GPUs without a grouped kernel reads the
    offsets back.  Probed once under ``torch.cuda.set_sync_debug_mode("error")``; False off
    CUDA (nothing waits on the CPU) and where ``grouped_mm`` does not run at all."""
    if device_type != "cuda" or not grouped_mm_available(device_type, dtype):
        return False
    with _sync_debug_mode(device_type, 0):
        x, w, offs = _probe_inputs(device_type, dtype)    # their copy to the device is not it
        try:
            with _sync_debug_mode(device_type, "error"):
                y = F.grouped_mm(x, w, offs=offs)
                (y * y).sum().backward()
            return False
        except RuntimeError:
            return True


def _matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the expert matmuls run in: autocast's on CUDA when it is on (what it does to
    ``mm``/``addmm``; the grouped matmul is cast explicitly), ``x``'s otherwise."""
    if x.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return x.dtype


def _grouped_shapes_ok(*widths: int, dtype: torch.dtype) -> bool:
    # grouped_mm wants row strides that are multiples of 16 bytes.
    per = 16 // torch.empty((), dtype=dtype).element_size()
    return all(w % per == 0 for w in widths)


def _contig_grad(t: torch.Tensor) -> torch.Tensor:
    # grouped_mm's backward rejects non-contiguous incoming gradients (e.g. the expanded
    # gradient of a .sum()); make them contiguous before they reach it.
    if t.requires_grad:
        t.register_hook(lambda g: g.contiguous())
    return t


def dispatch_loop(x, expert_index, gate, w1, b1, w2, b2, activation="relu"):
    """Reference: one pass per expert.  x (n, d), expert_index (n, k), gate (n, k) → (n, d)."""
    act = activation_fn(activation)
    out = torch.zeros_like(x)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(expert_index == e)                       # (m,), (m,)
        if tok.numel() == 0:
            continue
        h = act(x[tok] @ w1[e] + b1[e])                                   # (m, f)
        y = (h @ w2[e] + b2[e]) * gate[tok, slot].unsqueeze(-1)           # (m, d)
        out = out.index_put((tok,), y, accumulate=True)
    return out


def dispatch_dense(x, expert_index, gate, w1, b1, w2, b2, activation="relu"):
    """Oracle: all experts on all tokens, combined with a (n, e) matrix zero off the chosen."""
    act = activation_fn(activation)
    h = act(torch.einsum("nd,edf->enf", x, w1) + b1[:, None, :])          # (e, n, f)
    y = torch.einsum("enf,efd->end", h, w2) + b2[:, None, :]              # (e, n, d)
    combine = torch.zeros(x.shape[0], w1.shape[0], dtype=gate.dtype, device=x.device)
    combine = combine.scatter_add(1, expert_index, gate)                  # (n, e)
    return torch.einsum("ne,end->nd", combine, y)


def dispatch_sorted(x, expert_index, gate, w1, b1, w2, b2, activation="relu", grouped=None):
    """Fast path: sort assignments by expert, then segment matmuls or one grouped matmul.

    ``grouped=None`` picks the grouped matmul on CUDA when available, shapes allow and it does
    not wait for the host (module docstring), the segment loop otherwise (measured faster on
    CPU, see ``benchmarks/bench_moe.py``); ``True`` forces it (ValueError when impossible),
    ``False`` forbids it.
    """
    act = activation_fn(activation)
    n, k = expert_index.shape
    n_exp, d, f = w1.shape
    mm_dtype = _matmul_dtype(x)                                           # x.dtype on the CPU
    can_group = (grouped_mm_available(x.device.type, mm_dtype)
                 and _grouped_shapes_ok(d, f, dtype=mm_dtype))
    if grouped is None:
        grouped = (can_group and x.device.type == "cuda"
                   and not grouped_mm_waits(x.device.type, mm_dtype))
    elif grouped and not can_group:
        size = torch.empty((), dtype=mm_dtype).element_size()
        fail("backend", "grouped",
             f"'grouped' only where torch.nn.functional.grouped_mm runs: device "
             f"{x.device.type!r} and dtype {mm_dtype} with d_model and d_expert multiples of "
             f"{16 // size} (got d_model={d}, d_expert={f}), dtypes float32, "
             "bfloat16, float16; use backend 'sorted' otherwise")

    flat_e = expert_index.reshape(-1)                                     # (n k,)
    order = torch.argsort(flat_e, stable=True)                            # (n k,)
    # Replicate tokens k times by expand+reshape (its backward is a plain sum), then permute:
    # a gather with unique indices, whose backward is deterministic on CUDA.
    xs = x.unsqueeze(1).expand(n, k, d).reshape(n * k, d)[order]          # (n k, d)
    es = flat_e[order]                                                    # (n k,) sorted ids
    # end of each expert's segment = number of assignments to experts ≤ e (= cumsum of the
    # counts), found on the device: no host read, unlike a CUDA bincount
    ends = torch.searchsorted(es, torch.arange(n_exp, device=es.device, dtype=es.dtype),
                              right=True)                                 # (e,)

    if grouped:
        offs = ends.to(torch.int32)
        w1c, w2c = w1.to(mm_dtype), w2.to(mm_dtype)
        h = _contig_grad(F.grouped_mm(xs.to(mm_dtype), w1c, offs=offs))   # (n k, f)
        h = act(h + b1.to(mm_dtype)[es])
        ys = _contig_grad(F.grouped_mm(h, w2c, offs=offs)) + b2.to(mm_dtype)[es]  # (n k, d)
    else:
        # unbind (not w1[e]): its backward stacks the E slice gradients in one buffer instead
        # of zero-filling a full (e, d, f) gradient per expert.
        w1s, b1s, w2s, b2s = w1.unbind(0), b1.unbind(0), w2.unbind(0), b2.unbind(0)
        # the split sizes must be on the host: on CUDA this is the one wait of this path
        counts = torch.diff(ends, prepend=ends.new_zeros(1))              # (e,)
        parts = []
        for e, xe in enumerate(torch.split(xs, counts.tolist())):
            if xe.shape[0] == 0:
                continue
            parts.append(torch.addmm(b2s[e], act(torch.addmm(b1s[e], xe, w1s[e])), w2s[e]))
        ys = torch.cat(parts) if parts else xs.new_zeros(0, d)
    ys = ys * gate.reshape(-1)[order].unsqueeze(-1).to(ys.dtype)          # (n k, d)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return ys[inverse].view(n, k, d).sum(1)                               # (n, d)


def dispatch(backend: str, x, expert_index, gate, w1, b1, w2, b2, activation="relu"):
    """Run the named backend; all return (n, d) and agree to rounding (tests: 1e-6 in float64)."""
    choice("backend", backend, ("sorted", "grouped", "loop", "dense"))
    if backend == "sorted":
        return dispatch_sorted(x, expert_index, gate, w1, b1, w2, b2, activation)
    if backend == "grouped":
        return dispatch_sorted(x, expert_index, gate, w1, b1, w2, b2, activation, grouped=True)
    if backend == "loop":
        return dispatch_loop(x, expert_index, gate, w1, b1, w2, b2, activation)
    return dispatch_dense(x, expert_index, gate, w1, b1, w2, b2, activation)
