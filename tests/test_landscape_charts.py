"""The one search stack of the landscape chapters: charts, dedupe and descent for both models."""

from __future__ import annotations

import numpy as np
import pytest

from moe_routing.landscape import multi_region as mr
from moe_routing.landscape.profiled import ProfiledObjective
from moe_routing.landscape.charts import MultiRegionChart, TwoRegionChart, dedupe, descend

pytestmark = pytest.mark.kernels

TWO = TwoRegionChart()


def test_two_region_distance_knows_the_chart_symmetry():
    p = np.array([0.4, 0.7])
    assert TWO.distance(p, [0.4 + np.pi, -0.7]) < 1e-12          # (α + π, −b) is the same router
    assert TWO.distance(p, [0.4 + 2 * np.pi, 0.7]) < 1e-12
    assert TWO.distance(p, [0.4, -0.7]) == pytest.approx(1.4)


def test_multi_region_distance_is_modulo_relabelling():
    chart = MultiRegionChart(3, 2)
    phi = mr.random_routers(2, 3, 2, np.random.default_rng(0))
    for q in mr.relabel_all(phi[0], 3, 2):
        assert chart.distance(phi[0], q) < 1e-12
    assert chart.distance(phi[0], phi[1]) > 1e-3


@pytest.mark.parametrize("chart, dup", [
    (TWO, lambda p: np.array([p[0] + np.pi, -p[1]])),
    (MultiRegionChart(3, 2), lambda p: mr.relabel_all(p, 3, 2)[4]),
])
def test_dedupe_keeps_one_router_per_equivalence_class(chart, dup):
    rng = np.random.default_rng(1)
    base = (rng.uniform(-1, 1, (3, 2)) if chart is TWO
            else mr.random_routers(3, 3, 2, rng))
    batch = np.concatenate([base, [dup(base[1])], base[:1] + 1e-5])
    kept = dedupe(batch, chart, radius=1e-3)
    assert kept.shape == (3, chart.M)
    assert np.array_equal(kept, base)
    assert dedupe(batch[:0], chart, radius=1e-3).shape == (0, chart.M)


def quadratic(centre):
    """L(φ) = ½|φ − centre|²: value (S,), gradient (S, 2)."""
    def fn(phi):
        return 0.5 * ((phi - centre) ** 2).sum(1), phi - centre
    return fn


def test_two_region_descent_reaches_the_minimum_and_clips_b():
    starts = np.array([[0.0, 0.0], [1.0, -1.0]])
    ends, slow = descend(TWO.local(quadratic(np.array([0.5, 0.5]))), starts, TWO, steps=200,
                         lr_start=0.2, lr_end=1e-4)
    assert np.abs(ends - [0.5, 0.5]).max() < 1e-3 and slow.shape == (0, 2)
    far = TwoRegionChart(b_max=1.0)
    ends, _ = descend(far.local(quadratic(np.array([0.0, 5.0]))), starts, far, steps=100,
                      lr_start=0.5, lr_end=1e-3)
    assert np.allclose(ends[:, 1], 1.0)                     # the minimum lies outside |b| ≤ b_max


def test_slow_points_are_where_a_path_slowed_down():
    """A path along a gradient that dips near φ = 0.5 (|∇L| has an interior minimum there)
    yields that point as a slow point; n_slow = 0 yields none."""
    def fn(phi):
        x = phi[:, 0]
        g = np.stack([0.05 + (x - 0.5) ** 2, np.zeros_like(x)], 1)       # always downhill in x
        return -x, -g
    starts = np.array([[0.0, 0.0]])
    _, none = descend(TWO.local(fn), starts, TWO, steps=60, lr_start=0.05, lr_end=0.02)
    _, slow = descend(TWO.local(fn), starts, TWO, steps=60, lr_start=0.05, lr_end=0.02, n_slow=1)
    assert none.shape == (0, 2) and slow.shape == (1, 2)
    assert abs(slow[0, 0] - 0.5) < 0.05


def test_a_chart_and_an_objective_of_another_model_are_refused():
    obj = ProfiledObjective(mr.three_region_plane(), 64, seed=0)
    with pytest.raises(ValueError, match="an objective of this chart's K = 4, d = 3"):
        MultiRegionChart(4, 3).local(obj, 0.1)
    with pytest.raises(ValueError, match="a TwoRegionChart or a MultiRegionChart"):
        dedupe(np.zeros((1, 2)), "two-region", radius=1e-3)
