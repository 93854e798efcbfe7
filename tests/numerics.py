"""Comparisons between *different* code paths, with tolerances derived from the computation.

Exact equality (``torch.equal``) is a property only of the same code path rerun on the same
machine, or of integer results.  Two algebraically equal float computations (a matmul against a
sum of elementwise products, a chart's logits against the original ones) round differently
whenever the CPU's kernels differ: torch's CPU BLAS (MKL) dispatches AVX-512, AVX2 or SSE4.2
kernels by CPU, and torch's own vectorised kernels follow ``ATEN_CPU_CAPABILITY``.  ``make test``
runs the numerical tests under two dispatch levels so that such a dependence is caught here.
"""

from __future__ import annotations

import torch

EPS64 = torch.finfo(torch.float64).eps


def assert_same_argmax(scores_a: torch.Tensor, scores_b: torch.Tensor, *, rel_tie: float = 1e-9,
                       max_ties: int = 0) -> None:
    """Row-wise argmax of two (n, K) score tables computed by different paths agree.

    A row whose top-two gap (in either table) is below ``rel_tie`` times the row's largest
    magnitude is a tie up to rounding: its argmax may legitimately differ between kernels, so it
    is excluded, and at most ``max_ties`` such rows are allowed (a sample that keeps landing on
    ties would hide a real disagreement).
    """
    assert scores_a.shape == scores_b.shape, (scores_a.shape, scores_b.shape)

    def ties(s):
        top2 = s.topk(2, dim=1).values
        return (top2[:, 0] - top2[:, 1]) <= rel_tie * s.abs().amax(1).clamp_min(1.0)

    tie = ties(scores_a) | ties(scores_b)
    assert int(tie.sum()) <= max_ties, f"{int(tie.sum())} near-tied rows (allowed {max_ties})"
    disagree = (scores_a.argmax(1) != scores_b.argmax(1)) & ~tie
    assert not disagree.any(), f"argmax differs on {int(disagree.sum())} untied rows"


def assert_close_ulps(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | float,
                      ulps: float = 16) -> None:
    """``|a − b| ≤ ulps · ε · scale`` elementwise, ``scale`` the magnitude of the terms summed
    (e.g. ``Σ_i |x_i β_i|`` for a dot product: its rounding error is at most n ε Σ|x_i β_i|)."""
    err = (a - b).abs()
    bound = ulps * EPS64 * torch.as_tensor(scale, dtype=err.dtype)
    assert bool((err <= bound).all()), f"max error {float(err.max()):.3g} above {ulps} ulps"
