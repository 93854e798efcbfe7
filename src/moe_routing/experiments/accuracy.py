"""Accuracy intervals and paired differences: is a difference between two grid cells larger than
the noise, for the number of seeds we have?

A cell's accuracy is the mean ``p̄`` of its ``S`` seeds' test exact matches.  Two sources of
error make ``p̄`` uncertain, and they **add** (they do not compete):

* the **seed-to-seed spread** (initialisation and data order): ``s² / S``, ``s`` the sample
  standard deviation of the seeds' accuracies;
* the **test set** (which sentences, which facts we happened to test on): every seed is scored on
  the *same* test sentences, so this error is common to the seeds and does not shrink with
  ``S``.  Several test sentences share a fact (the same subject and object under other
  templates), and a model that knows a fact tends to get all its sentences right: the sentences
  are not independent.  :func:`shared_sampling_error` estimates the common term with the fact as the
  unit: the cluster-robust covariance of two seeds' per-sentence residuals (what the seeds share;
  each seed's own sampling noise is already in the seed spread), with ``m − 1`` degrees of
  freedom for ``m`` facts; :func:`binomial_se` treats the sentences as independent where they
  are not known (too narrow when they share facts; ``AccuracyInterval.test_source`` says which).

The half-width is the larger of ``t_{S−1} · √(s²/S)`` (the seed term alone, at its own
Student quantile: with two seeds ``t = 12.7``, not 1.96 -- the normal quantile covers about 70 %
at ``S = 2``) and ``t_ν · √(s²/S + se_test²)`` (both terms, ``ν`` the Welch–Satterthwaite degrees
of freedom).  Satterthwaite alone under-covers when one seed degree of freedom dominates (89 %
at ``S = 2`` in our simulation); the maximum does not.  Measured by simulation
(``tests/test_accuracy_interval.py``: facts a model knows or does not, seeds shifting every fact):
within two points of 95 % at ``S = 3`` and ``S = 5`` whichever term decides, and at ``S = 2``
when the seeds decide; at ``S = 2`` with the test set contributing it is conservative (up to
about 98 %).  With one seed the seed spread is unknown: the interval is the test term alone and
``AccuracyInterval.one_seed`` says it is a lower bound on the uncertainty.

Comparisons of two objectives use :func:`paired_difference`: seed ``s`` fixes the
initialisation and the data order for every objective, so the per-seed differences
``d_s = a_s − b_s`` remove what the seeds share, and the test-set term is that of the
per-sentence differences (clustered by fact); the result carries a two-sided p-value of the
t-test of ``d̄ = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .._internal.validation import finite_array, number, require

#: the confidence of every interval unless a caller names another
CONFIDENCE = 0.95


@dataclass(frozen=True)
class SamplingError:
    """Standard error of a mean over one test set, with its degrees of freedom and how it was
    estimated (``"clustered by fact (m facts)"`` or ``"binomial (sentences independent)"``)."""

    se: float
    df: float
    source: str


def binomial_se(p: float, n: int) -> SamplingError:
    """``√(p(1 − p)/n)`` of an accuracy ``p`` on ``n`` sentences taken as independent."""
    p = number("p", p, low=0, high=1)
    require(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1, "n", n,
            "an integer number of test sentences ≥ 1")
    return SamplingError(float(math.sqrt(p * (1 - p) / n)), float(max(n - 1, 1)),
                        "binomial (sentences independent)")


def clustered_se(values, clusters) -> SamplingError:
    """Cluster-robust standard error of ``values.mean()``: the variance of a mean of ``n`` values
    in ``m`` clusters is ``m/(m − 1) · Σ_c (Σ_{i∈c} (v_i − v̄))² / n²`` (the sandwich estimator
    with the small-sample factor), with ``m − 1`` degrees of freedom.

    values : (n,) per-sentence values (1/0 correct, a seed mean of them, or a difference).
    clusters : (n,) the fact of each sentence (any hashable ids, e.g. ints).
    """
    v = finite_array("values", values, ndim=1)
    c = np.asarray(clusters)
    require(c.shape == v.shape, "clusters.shape", c.shape, f"one cluster id per value {v.shape}")
    require(v.size >= 2, "values.size", v.size, "at least two values")
    _, inv = np.unique(c, return_inverse=True)
    m = int(inv.max()) + 1
    require(m >= 2, "clusters", f"{m} distinct", "at least two distinct clusters")
    sums = np.bincount(inv, weights=v - v.mean(), minlength=m)                # (m,)
    var = m / (m - 1) * float(np.sum(sums ** 2)) / v.size ** 2
    return SamplingError(float(math.sqrt(var)), float(m - 1), f"clustered by fact ({m} facts)")


def shared_sampling_error(correct, facts) -> SamplingError:
    """The test set's error of a cell's mean accuracy, clustered by fact (module docstring).

    correct : (S, n) per-seed, per-sentence values: 1/0 for right/wrong (or the difference of
        two cells' 1/0 for a paired difference), the same ``n`` test sentences for every seed.
    facts : (n,) the fact of each sentence (e.g. ``task * 10**6 + pair``).

    With ``S ≥ 2`` seeds the term is the covariance of the seeds' fact sums of residuals,
    averaged over pairs of distinct seeds, ``m/(m − 1) · Σ_c Σ_{s≠s'} R_cs R_cs' / (S(S − 1) n²)``
    (clipped at 0): what the seeds share, which averaging over seeds cannot remove.  With one
    seed it is :func:`clustered_se` of its values.
    """
    c = finite_array("correct", correct, ndim=2)
    require(c.shape[1] >= 2, "correct.shape", c.shape, "(S, n) with n ≥ 2 test sentences")
    f = np.asarray(facts)
    require(f.shape == (c.shape[1],), "facts.shape", f.shape,
            f"one fact per test sentence ({c.shape[1]},)")
    S, n = c.shape
    if S == 1:
        return clustered_se(c[0], f)
    _, inv = np.unique(f, return_inverse=True)
    m = int(inv.max()) + 1
    require(m >= 2, "facts", f"{m} distinct", "at least two distinct facts")
    r = c - c.mean(1, keepdims=True)                                           # (S, n)
    sums = np.stack([np.bincount(inv, weights=r[s], minlength=m) for s in range(S)])  # (S, m)
    total = sums.sum(0)                                                        # (m,)
    shared = float(np.sum(total ** 2 - np.sum(sums ** 2, 0))) / (S * (S - 1))
    var = max(m / (m - 1) * shared / n ** 2, 0.0)
    return SamplingError(float(math.sqrt(var)), float(m - 1),
                        f"clustered by fact ({m} facts, shared by the {S} seeds)")


def _half_width(seed_var: float, s: int, test: SamplingError, confidence: float
                ) -> tuple[float, float]:
    """(half-width, Welch–Satterthwaite df) of a mean with a seed term on ``s − 1`` df and a
    test-set term (module docstring: the larger of the seed term at its own quantile and both
    terms at the combined one)."""
    t_var = test.se ** 2
    df = _welch_df(seed_var, s - 1, t_var, test.df)
    both = _quantile(confidence, df) * math.sqrt(seed_var + t_var)
    alone = _quantile(confidence, s - 1) * math.sqrt(seed_var)
    return max(both, alone), df


def _welch_df(a: float, df_a: float, b: float, df_b: float) -> float:
    """Welch–Satterthwaite degrees of freedom of the variance sum ``a + b``."""
    if a + b == 0:
        return float("inf")
    den = (a * a / df_a if df_a > 0 else 0.0) + (b * b / df_b if df_b > 0 else 0.0)
    return float("inf") if den == 0 else (a + b) ** 2 / den


def _quantile(confidence: float, df: float) -> float:
    q = 0.5 + confidence / 2
    return float(stats.norm.ppf(q) if math.isinf(df) else stats.t.ppf(q, df))


@dataclass(frozen=True)
class AccuracyInterval:
    """Mean accuracy of a cell with its interval (fractions in [0, 1])."""

    mean: float
    half_width: float
    low: float
    high: float
    seed_se: float            # s/√S; NaN with one seed
    test_se: float            # the test set's term (clustered or binomial)
    df: float                 # Welch–Satterthwaite degrees of freedom of the quantile
    source: str               # the larger term: "seeds" or "test set"
    test_source: str          # how the test term was estimated
    n_seeds: int
    confidence: float = CONFIDENCE

    @property
    def one_seed(self) -> bool:
        """One seed: the seed spread is unknown and the interval a lower bound."""
        return self.n_seeds == 1

    def overlaps(self, other: "AccuracyInterval") -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_dict(self) -> dict:
        return dict(mean=self.mean, half_width=self.half_width, low=self.low, high=self.high,
                    seed_se=self.seed_se, test_se=self.test_se, df=self.df, source=self.source,
                    test_source=self.test_source, n_seeds=self.n_seeds,
                    confidence=self.confidence)


def _accuracies(name: str, values) -> np.ndarray:
    a = finite_array(name, values, ndim=1, low=0)
    require(a.size >= 1, f"{name}.size", a.size, "at least one accuracy")
    require(float(a.max()) <= 1, f"{name}.max()", float(a.max()), "fractions in [0, 1]")
    return a


def _test_term(mean: float, n_tests, test: SamplingError | None, size: int) -> SamplingError:
    if test is not None:
        require(isinstance(test, SamplingError), "test", type(test).__name__,
                "a SamplingError (clustered_se or binomial_se)")
        return test
    require(n_tests is not None, "n_tests", None,
            "the number of test sentences (or test=clustered_se(...))")
    if isinstance(n_tests, (bool, np.bool_)):
        raise ValueError(f"n_tests = {n_tests!r} is not allowed; accepted: an integer ≥ 1 "
                         "(one, or one per accuracy)")
    n_raw = np.asarray(n_tests)
    require(n_raw.dtype.kind in "iuf", "n_tests", n_tests, "integers ≥ 1 (not booleans)")
    require(n_raw.ndim == 0 or n_raw.shape == (size,), "n_tests.shape", n_raw.shape,
            f"one integer, or one per accuracy ({size},)")
    n = finite_array("n_tests", np.broadcast_to(n_raw.astype(float), (size,)), ndim=1, low=1)
    require(bool(np.all(n == np.round(n))), "n_tests", n_tests, "integers ≥ 1")
    # the seeds' test sets are one set (the error is common to the seeds) or of one size
    return binomial_se(min(max(mean, 0.0), 1.0), int(round(float(n.mean()))))


def accuracy_interval(accuracies, n_tests=None, *, test: SamplingError | None = None,
                      confidence: float = CONFIDENCE) -> AccuracyInterval:
    """Interval of the mean of per-seed accuracies (module docstring).

    accuracies : (S,) fractions in [0, 1], one per seed, all on the same test set.
    n_tests : the number of test sentences (one integer, or one per seed, all equal): the test
        term is then binomial; give ``test`` (:func:`shared_sampling_error` of the per-sentence
        correctness, clustered by fact) instead where the sentences are known.
    """
    a = _accuracies("accuracies", accuracies)
    confidence = number("confidence", confidence, low=0, high=1, low_open=True,
                        high_open=True)
    s, mean = a.size, float(a.mean())
    t = _test_term(mean, n_tests, test, s)
    seed_var = float(a.var(ddof=1) / s) if s > 1 else float("nan")
    if s == 1:
        half, df = _quantile(confidence, t.df) * t.se, t.df
    else:
        half, df = _half_width(seed_var, s, t, confidence)
    source = "seeds" if s > 1 and seed_var >= t.se ** 2 else "test set"
    return AccuracyInterval(mean=mean, half_width=half, low=max(0.0, mean - half),
                            high=min(1.0, mean + half), seed_se=math.sqrt(seed_var)
                            if s > 1 else float("nan"), test_se=t.se, df=df, source=source,
                            test_source=t.source, n_seeds=s, confidence=confidence)


@dataclass(frozen=True)
class PairedDifference:
    """``a − b`` of two cells run with the same seeds on the same test set: mean of the per-seed
    differences, its interval, and the two-sided p-value of ``mean = 0`` (fractions)."""

    mean: float
    half_width: float
    low: float
    high: float
    seed_se: float
    test_se: float
    df: float
    p_value: float
    n_seeds: int
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict:
        return dict(mean=self.mean, half_width=self.half_width, low=self.low, high=self.high,
                    seed_se=self.seed_se, test_se=self.test_se, df=self.df,
                    p_value=self.p_value, n_seeds=self.n_seeds, confidence=self.confidence)


def paired_difference(a, b, *, test: SamplingError | None = None,
                      confidence: float = CONFIDENCE) -> PairedDifference:
    """Per-seed paired difference ``a − b`` (module docstring).

    a, b : (S,) accuracies of the two cells, seed ``s`` at index ``s`` in both (S ≥ 2; one
        seed only with ``test``: the test set's error alone, a lower bound on the uncertainty).
    test : the test-set term of the difference (:func:`shared_sampling_error` of the per-sentence
        differences, ``correct_a − correct_b``, clustered by fact); None: the seeds alone.
    """
    x, y = _accuracies("a", a), _accuracies("b", b)
    require(x.shape == y.shape, "b.shape", y.shape, f"the shape of a {x.shape} (same seeds)")
    require(x.size >= 2 or test is not None, "a.size", x.size,
            "at least two seeds (paired by seed), or one with the test set's error (test=)")
    confidence = number("confidence", confidence, low=0, high=1, low_open=True,
                        high_open=True)
    d = x - y
    s = d.size
    if test is None:
        test = SamplingError(0.0, float("inf"), "none")
    require(isinstance(test, SamplingError), "test", type(test).__name__,
            "a SamplingError (shared_sampling_error)")
    mean, t_var = float(d.mean()), test.se ** 2
    if s == 1:              # one seed: the test set's error alone, a lower bound
        seed_var, half, df = 0.0, _quantile(confidence, test.df) * test.se, test.df
    else:
        seed_var = float(d.var(ddof=1) / s)
        half, df = _half_width(seed_var, s, test, confidence)
    se = math.sqrt(seed_var + t_var)
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:                        # the t-test at the same degrees of freedom
        p = float(2 * (stats.norm.sf(abs(mean) / se) if math.isinf(df)
                       else stats.t.sf(abs(mean) / se, df)))
    return PairedDifference(mean=mean, half_width=half, low=mean - half, high=mean + half,
                            seed_se=math.sqrt(seed_var) if s > 1 else float("nan"),
                            test_se=math.sqrt(t_var), df=df,
                            p_value=p, n_seeds=s, confidence=confidence)


__all__ = ["AccuracyInterval", "CONFIDENCE", "PairedDifference", "SamplingError",
           "accuracy_interval", "binomial_se", "clustered_se", "paired_difference",
           "shared_sampling_error"]
