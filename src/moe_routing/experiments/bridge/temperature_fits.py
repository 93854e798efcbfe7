"""What a temperature-in-training run measured, and how its rates are read (ours): one run's
record (:class:`GrowthRun`), the exponential fit of a trajectory over the softmax's linear band
(:func:`fit_growth`, :class:`GrowthFit`: R² and the halves' ratio keep a power-law drift from
passing for a rate), and the fits across temperatures -- the rate's slope against 1/τ
(:func:`rate_scaling`, prediction 1) and the value after a fixed number of steps
(:func:`step_scaling`: AdamW's slope is about 0, SGD's positive).

The setup and the training runs are :mod:`.temperature`'s (its docstring states every
hypothesis); this module only reads numbers, so the fits can be tested and re-run on stored
trajectories without training.
Shapes: ``S`` steps.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..._internal import validation as check

#: the two measures of the router (:class:`GrowthRun`)
MEASURES = ("aligned", "contrast")


@dataclass(frozen=True)
class GrowthFit:
    """The exponential fit of one trajectory: ``window`` (first, last) step, ``rate`` = the
    least-squares slope of log value against the step (NaN when the window holds fewer than
    5 steps), ``r2`` its R², ``halves`` = (slope over the window's second half) / (slope over
    its first half): 1 for an exponential, ≪ 1 for a power of t (a linear drift gives ≈ 0.1
    over three decades), so a band of the softmax's argument cannot pass a drift for a rate."""

    window: tuple[int, int]
    rate: float
    r2: float
    halves: float

    def log_linear(self, min_r2: float = 0.9, halves: tuple[float, float] = (0.5, 2.0)
                   ) -> bool:
        """The growth is exponential on the window: R² ≥ ``min_r2`` and the halves' ratio in
        ``halves``."""
        return bool(np.isfinite(self.rate) and self.rate > 0 and self.r2 >= min_r2
                    and halves[0] <= self.halves <= halves[1])


def _slope(steps, ly) -> float:
    return float(np.polyfit(steps, ly, 1)[0]) if steps.size >= 3 else math.nan


def _band(band) -> tuple[float, float]:
    """``band`` as (lo, hi) floats with 0 < lo < hi (a reversed or NaN band would select no
    window, or a wrong one, and give a NaN fit without saying why)."""
    accepted = "(lo, hi) with 0 < lo < hi: the band of max |centred logit|/τ fitted"
    if isinstance(band, (str, bytes)):
        check.fail("band", band, accepted)
    try:
        lo, hi = band
    except (TypeError, ValueError):
        check.fail("band", band, accepted)
    lo = check.positive("band[0]", lo)
    hi = check.positive("band[1]", hi)
    check.require(lo < hi, "band", band, accepted)
    return lo, hi


def fit_growth(values, scaled, band) -> GrowthFit:
    """Fit log ``values`` (S,) against the step over the window where the softmax's argument
    ``scaled`` (S,) first lies in ``band`` = (lo, hi): from the first step with scaled ≥ lo to
    the last before scaled first exceeds hi -- the same band of the linearisation for every
    τ (below lo the start's transient, above hi the softmax is no longer linear).  ``band``:
    two finite numbers 0 < lo < hi (as :attr:`.temperature.TemperatureSetup.band`)."""
    values = check.finite_array("values", values, ndim=1, low=0)
    scaled = check.finite_array("scaled", scaled, shape=(values.size,), low=0)
    lo, hi = _band(band)
    start = np.nonzero(scaled >= lo)[0]
    if not start.size:
        return GrowthFit((0, -1), math.nan, math.nan, math.nan)
    a = int(start[0])
    over = np.nonzero(scaled[a:] > hi)[0]
    b = a + int(over[0]) - 1 if over.size else scaled.size - 1
    steps = np.arange(a, b + 1)
    y = values[a:b + 1]
    if steps.size < 5 or not np.all(y > 0):
        return GrowthFit((a, b), math.nan, math.nan, math.nan)
    ly = np.log(y)
    slope, icpt = np.polyfit(steps, ly, 1)
    resid = ly - (slope * steps + icpt)
    ss = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss if ss > 0 else 0.0
    m = steps.size // 2
    first, second = _slope(steps[:m + 1], ly[:m + 1]), _slope(steps[m:], ly[m:])
    halves = second / first if first > 0 else math.nan
    return GrowthFit((a, b), float(slope), r2, float(halves))


@dataclass(frozen=True)
class GrowthRun:
    """One run from the symmetric start at temperature ``tau``, ``seed``.

    ``aligned`` (S + 1,): the task-aligned component A before each of the S steps taken and
    after the last (a run stopped early ends at the step that left the band: S ≤ ``steps``);
    ``router_contrast`` (S + 1,): Frobenius norm of the router weights centred over experts
    (B's |w|); ``max_scaled`` (S + 1,): largest |centred logit|/τ (the softmax's argument);
    ``loss`` (S,): cross-entropy at each step.  ``fit`` / ``fit_contrast``: the
    :class:`GrowthFit` of A and of |w|; :meth:`rate` reads either when it is log-linear.
    ``spread`` (S + 1,) or None: the whole spread S = sqrt(mean |c − μ|²) of the centred logits
    at the same positions as A (:meth:`task_fraction`).  ``yardsticks`` (S + 1, 2) or None: the
    between-task fractions of a router of random weights and of the best task separator on the
    router's inputs at each step (:func:`~moe_routing.experiments.bridge.temperature.
    separator_fractions`; :meth:`separator_alignment`).
    """

    tau: float
    seed: int
    optimizer: str
    aligned: np.ndarray
    router_contrast: np.ndarray
    max_scaled: np.ndarray
    loss: np.ndarray
    fit: "GrowthFit"
    fit_contrast: "GrowthFit"
    wall_s: float
    spread: np.ndarray | None = None
    yardsticks: np.ndarray | None = None

    def rate(self, measure: str = "aligned") -> float:
        """The fitted rate of A (``"aligned"``) or of |w| (``"contrast"``) when its growth is
        log-linear on the window, else NaN."""
        check.choice("measure", measure, MEASURES)
        f = self.fit if measure == "aligned" else self.fit_contrast
        return f.rate if f.log_linear() else math.nan

    def task_fraction(self) -> float:
        """A²/S² at the end of the fitted window of |w|: the between-task fraction of the
        variance of the router's centred logits at the determined positions, in [0, 1] (1:
        they separate the tasks only, ≈ 0: they ignore the task); NaN without a spread or
        where the logits do not vary."""
        check.require(self.spread is not None, "GrowthRun.spread", None,
                      "the spread recorded by train_from_symmetry")
        b = self._window_end()
        s2 = float(self.spread[b]) ** 2
        return min(float(self.aligned[b]) ** 2 / s2, 1.0) if s2 > 0 else math.nan

    def separator_alignment(self) -> tuple[float, float, float]:
        """(fraction, chance, best) at the end of the fitted window of |w|: the between-task
        fraction of the router's logits (:meth:`task_fraction`), what a router of random
        weights would give on the same inputs, and what the best task separator would."""
        check.require(self.yardsticks is not None, "GrowthRun.yardsticks", None,
                      "the yardsticks recorded by train_from_symmetry")
        chance, best = self.yardsticks[self._window_end()]
        return self.task_fraction(), float(chance), float(best)

    def _window_end(self) -> int:
        b = self.fit_contrast.window[1]
        return b if b >= 0 else self.aligned.size - 1


@dataclass(frozen=True)
class TemperatureScaling:
    """log(rate) against log(1/τ) over the fitted runs: ``slope`` (prediction 1) with its
    ``slope_ci`` (95 %, t quantile, the runs of every seed pooled), ``rate_tau`` (per τ, the
    seeds' mean rate·τ: constant under the prediction), ``n_fitted`` of ``n_runs``."""

    taus: np.ndarray
    rates: np.ndarray          # (n_seeds, n_taus), NaN where not fitted
    slope: float
    slope_ci: tuple[float, float]
    rate_tau: np.ndarray
    n_fitted: int
    n_runs: int


def _loglog(taus, values, confidence: float):
    """Pooled fit log(value) = p·log(1/τ) + c over the finite positive values: (p, (lo, hi),
    n) with a t interval of n − 2 degrees of freedom (lo = hi = p when n = 2)."""
    from scipy import stats

    ok = np.isfinite(values) & (values > 0)
    x = np.log(1.0 / np.broadcast_to(taus, values.shape)[ok])
    y = np.log(values[ok])
    n = int(ok.sum())
    if n < 2 or np.ptp(x) <= 0:
        return math.nan, (math.nan, math.nan), n
    slope, icpt = np.polyfit(x, y, 1)
    if n == 2:
        return float(slope), (float(slope), float(slope)), n
    resid = y - (slope * x + icpt)
    se = math.sqrt(float((resid ** 2).sum()) / (n - 2) / float(((x - x.mean()) ** 2).sum()))
    q = float(stats.t.ppf(0.5 + confidence / 2, n - 2))
    return float(slope), (float(slope - q * se), float(slope + q * se)), n


def _distinct(runs: list) -> list:
    """``runs`` when no two share (τ, seed) -- each is one cell of the (seed, τ) grid, and a
    second run of a cell would silently replace the first (the fit would depend on the runs'
    order and count a run that did not enter it) -- and they span two temperatures or more
    (one τ has no slope)."""
    seen: dict[tuple[float, int], int] = {}
    for i, r in enumerate(runs):
        key = (check.temperature(f"runs[{i}].tau", r.tau),
               check.integer(f"runs[{i}].seed", r.seed, low=0))
        if key in seen:
            check.fail("runs (τ, seed)", [(float(x.tau), int(x.seed)) for x in runs],
                       f"one run per (τ, seed) pair (runs[{seen[key]}] and runs[{i}] are both "
                       f"τ = {key[0]:g}, seed {key[1]})")
        seen[key] = i
    taus = sorted({t for t, _ in seen})
    check.require(len(taus) >= 2, "runs (τ)", taus,
                  "runs at two or more distinct temperatures (a slope against 1/τ)")
    return runs


def _grid(runs, value):
    """(taus (T,), seeds, values (n_seeds, T)) with ``value(run)`` placed by seed and τ."""
    taus = np.unique([r.tau for r in runs])
    seeds = sorted({r.seed for r in runs})
    out = np.full((len(seeds), taus.size), np.nan)
    for r in runs:
        out[seeds.index(r.seed), int(np.searchsorted(taus, r.tau))] = value(r)
    return taus, seeds, out


def rate_scaling(runs, measure: str = "contrast", confidence: float = 0.95
                 ) -> TemperatureScaling:
    """Fit log(rate) = p·log(1/τ) + c over the runs whose ``measure`` (``"contrast"``: |w|,
    ``"aligned"``: A) grew log-linearly, pooled over seeds (the interval uses the t quantile
    with n − 2 degrees of freedom: the seeds' runs are treated as independent).  Two runs at
    the same (τ, seed) are refused (ValueError naming both), and so are runs at one τ only;
    the slope is NaN when fewer than two runs at distinct τ grew log-linearly
    (``n_fitted`` says how many did)."""
    runs = _distinct(check.sequence_of("runs", runs, GrowthRun))
    check.choice("measure", measure, MEASURES)
    confidence = check.probability("confidence", confidence)
    taus, _, rates = _grid(runs, lambda r: r.rate(measure))
    slope, (lo, hi), n = _loglog(taus, rates, confidence)
    ok = np.isfinite(rates) & (rates > 0)
    with warnings.catch_warnings():          # a τ with no fitted run: NaN, said by n_fitted
        warnings.simplefilter("ignore", RuntimeWarning)
        rate_tau = np.nanmean(np.where(ok, rates, np.nan) * taus, axis=0)
    return TemperatureScaling(taus=taus, rates=rates, slope=float(slope),
                              slope_ci=(float(lo), float(hi)), rate_tau=rate_tau,
                              n_fitted=n, n_runs=len(runs))


@dataclass(frozen=True)
class StepScaling:
    """The value of ``measure`` after ``step`` steps against 1/τ: ``values`` (n_seeds, n_taus),
    ``slope`` of log value against log(1/τ) with ``slope_ci`` (as :func:`rate_scaling`).  Under
    AdamW the router moves by about ``lr`` per coordinate and step whatever its gradient's
    scale, so the slope is about 0; under SGD the 1/τ of the gradient makes it positive."""

    taus: np.ndarray
    values: np.ndarray
    step: int
    measure: str
    slope: float
    slope_ci: tuple[float, float]


def step_scaling(runs, step: int, measure: str = "contrast", confidence: float = 0.95
                 ) -> StepScaling:
    """:class:`StepScaling` of the runs at ``step`` (every run must have reached it)."""
    runs = _distinct(check.sequence_of("runs", runs, GrowthRun))
    check.choice("measure", measure, MEASURES)
    shortest = min(r.aligned.size for r in runs) - 1
    step = check.integer("step", step, low=1, high=shortest)
    confidence = check.probability("confidence", confidence)
    taus, _, values = _grid(runs, lambda r: (r.router_contrast if measure == "contrast"
                                             else r.aligned)[step])
    slope, ci, _ = _loglog(taus, values, confidence)
    return StepScaling(taus=taus, values=values, step=step, measure=measure, slope=slope,
                       slope_ci=ci)
