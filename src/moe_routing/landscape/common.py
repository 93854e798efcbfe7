"""What the two teacher–student models of the landscape chapter share.

Both models — K = 2 regions of the plane (:mod:`.teacher_student`) and K ≥ 2 regions of R^d
(:mod:`.multi_region`) — use *affine* experts, i.e. linear maps of the features x̃ = (x, 1), and
both average population quantities over one *fixed* scrambled-Sobol sample of N(0, I_d): common
random numbers, so that every router, expert and temperature sees the same points and the soft
landscape is a smooth function of the parameters that autograd can differentiate twice.

(The temperature check both models need is :func:`moe_routing._internal.validation.temperature`.)

Shapes: ``n`` sample points, ``d`` input dimension, ``p = d + 1`` features.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import norm, qmc

from .._internal import validation as check


def features(X: torch.Tensor) -> torch.Tensor:
    """``x̃ = (x, 1)``: (n, d) → (n, d+1) — an affine expert is ``θ·x̃``."""
    check.finite_tensor("X", X, ndim=2)
    return torch.cat([X, torch.ones_like(X[:, :1])], dim=1)


def sobol_normal(n: int, d: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    """``2^m ≥ n`` scrambled-Sobol points mapped to N(0, I_d): (2^m, d).

    A power of two keeps the Sobol net balanced (its error bound holds for 2^m points); n ≥ 16
    because a smaller net is no better than a handful of random points.  The uniforms are
    clipped to [1e−15, 1 − 1e−15] so that no point maps to ±∞.
    """
    n = check.integer("n", n, low=16)
    d = check.integer("d", d, low=1)
    seed = check.integer("seed", seed, low=0)
    check.require(dtype in (torch.float32, torch.float64), "dtype", dtype, "torch.float32 or torch.float64")
    m = int(math.ceil(math.log2(n)))
    U = qmc.Sobol(d=d, scramble=True, seed=seed).random_base2(m)
    U = np.clip(U, 1e-15, 1 - 1e-15)
    return torch.tensor(norm.ppf(U), dtype=dtype)


def count_table(points):
    """Critical points found per temperature (rows, decreasing) and kind (columns), a pandas
    DataFrame of counts (empty for no point), for the points of either search: each has ``tau``
    and ``kind`` (a :class:`~.multi_critical.MultiCriticalPoint` or a
    :class:`~.critical_points.SoftCriticalPoint`)."""
    import pandas as pd

    ok = (isinstance(points, (list, tuple))
          and all(isinstance(getattr(c, "tau", None), float)
                  and isinstance(getattr(c, "kind", None), str) for c in points))
    check.require(ok, "points", points, "a list of critical points (a search's points, each "
                  "with a float tau and a str kind; an empty search gives an empty table)")
    return pd.crosstab(pd.Series([c.tau for c in points], name="τ"),
                       pd.Series([c.kind for c in points], name="kind")).sort_index(ascending=False)
