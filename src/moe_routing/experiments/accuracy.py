"""Accuracy intervals: is a difference between two grid cells larger than the noise?

A cell's accuracy is the mean of its seeds' test exact matches.  Two sources of error bound
how well that mean is known, and neither dominates everywhere:

* the **seed-to-seed spread** (initialisation and data order): the standard error
  ``s / √S`` of the mean of ``S`` seeds, ``s`` the sample standard deviation;
* the **test set's binomial error**: each run is scored on ``n`` test sentences, so even a
  fixed model's accuracy ``p`` is known only to ``√(p(1 − p) / n)``; for the mean of ``S``
  runs we use the pooled ``√(p̄(1 − p̄) / (S·n))`` (the runs' errors treated as independent).

The interval is ``p̄ ± z · max(seed SE, binomial SE)`` with ``z`` = 1.96 (95 % for a normal
mean), clipped to [0, 1], and says which source set its width.  With one seed the seed spread
is unknown and the binomial error is used alone (the interval is then a lower bound on the
uncertainty, and says so through ``source = "binomial (one seed)"``).

Two cells *differ* when their intervals do not overlap; they are *comparable within* ``t`` when
the lower one's upper end reaches the other's mean minus ``t`` (the rules of
:mod:`moe_routing.verdicts.training` decide on these, not on a flat tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import finite_array, number, require


@dataclass(frozen=True)
class AccuracyInterval:
    """Mean accuracy of a cell with its interval (fractions in [0, 1])."""

    mean: float
    half_width: float
    low: float
    high: float
    seed_se: float            # NaN with one seed
    binomial_se: float
    source: str               # "seeds", "binomial" or "binomial (one seed)"
    n_seeds: int

    def overlaps(self, other: "AccuracyInterval") -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_dict(self) -> dict:
        return dict(mean=self.mean, half_width=self.half_width, low=self.low, high=self.high,
                    seed_se=self.seed_se, binomial_se=self.binomial_se, source=self.source,
                    n_seeds=self.n_seeds)


def accuracy_interval(accuracies, n_tests, z: float = 1.96) -> AccuracyInterval:
    """Interval of the mean of per-seed accuracies (module docstring).

    accuracies : (S,) fractions in [0, 1], one per seed.
    n_tests : the number of test sentences each was scored on: one integer, or (S,) of them.
    """
    a = finite_array("accuracies", accuracies, ndim=1, low=0)
    require(a.size >= 1, "accuracies.size", a.size, "at least one accuracy")
    require(float(a.max()) <= 1, "accuracies.max()", float(a.max()), "fractions in [0, 1]")
    n_raw = np.asarray(n_tests, dtype=float)
    require(n_raw.ndim == 0 or n_raw.shape == a.shape, "n_tests.shape", n_raw.shape,
            f"one integer, or one per accuracy {a.shape}")
    n = finite_array("n_tests", np.broadcast_to(n_raw, a.shape), ndim=1, low=1)
    require(bool(np.all(n == np.round(n))), "n_tests", n_tests, "integers ≥ 1")
    z = number("z", z, low=0, low_open=True)
    s = a.size
    mean = float(a.mean())
    binomial = float(np.sqrt(max(mean * (1 - mean), 0.0) / n.sum()))
    seed = float(a.std(ddof=1) / np.sqrt(s)) if s > 1 else float("nan")
    if s == 1:
        se, source = binomial, "binomial (one seed)"
    elif seed >= binomial:
        se, source = seed, "seeds"
    else:
        se, source = binomial, "binomial"
    half = z * se
    return AccuracyInterval(mean=mean, half_width=half, low=max(0.0, mean - half),
                            high=min(1.0, mean + half), seed_se=seed, binomial_se=binomial,
                            source=source, n_seeds=s)


__all__ = ["AccuracyInterval", "accuracy_interval"]
