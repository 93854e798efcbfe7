"""Temperature in training (ours): the symmetric start, the growth fits, SGD against AdamW."""

import numpy as np
import pytest
import torch

from moe_routing.experiments.bridge import temperature as rt
from moe_routing._internal.verdicts import bridge as rules
from moe_routing.experiments.bridge import temperature_fits

pytestmark = pytest.mark.kernels

SMALL = rt.TemperatureSetup(n_sentences=32, steps=50)


def _model(setup, tau, seed=0):
    inputs, *_, vocab = rt._batch(setup)
    return rt.symmetric_model(setup, tau, seed, vocab, inputs.shape[1]), inputs


def test_same_start_for_every_temperature():
    a, _ = _model(SMALL, 0.05)
    b, _ = _model(SMALL, 0.4)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.router.temperature == 0.05 and b.router.temperature == 0.4


def test_exact_symmetry_output_ignores_the_router():
    setup = SMALL.replace(router_init=0.0, expert_init=0.0)
    model, inputs = _model(setup, 0.1)
    ex = model.experts
    assert all(torch.equal(p[0], p[1]) for p in (ex.w1, ex.b1, ex.w2, ex.b2))
    base = model(inputs).logits
    with torch.no_grad():
        model.router.weight.normal_(0.0, 1.0)            # any router: the same output
    assert torch.allclose(model(inputs).logits, base, atol=1e-5)
    model.zero_grad()
    model(inputs).logits.sum().backward()
    assert float(model.router.weight.grad.abs().max()) < 1e-6


def test_sgd_breaks_symmetry_faster_at_lower_temperature():
    runs = rt.temperature_sweep(SMALL, [0.05, 0.1], [0])
    fast, slow = runs
    # the same step: the router moved further at the lower temperature
    k = min(fast.router_contrast.size, slow.router_contrast.size) - 1
    assert fast.router_contrast[k] > 1.5 * slow.router_contrast[k]
    assert fast.fit_contrast.log_linear() and slow.fit_contrast.log_linear()
    assert fast.rate("contrast") > 1.3 * slow.rate("contrast")
    sc = temperature_fits.rate_scaling(runs, "contrast")
    assert sc.n_fitted == 2 and sc.slope > 0.5


def test_adamw_removes_the_temperature_factor_and_the_rule_says_so():
    setup = SMALL.replace(optimizer="adamw", lr=1e-3, steps=8, stop_early=False)
    runs = rt.temperature_sweep(setup, [0.05, 0.2], [0])
    st = temperature_fits.step_scaling(runs, 8, "contrast")
    assert abs(st.slope) < 0.2                       # the same pace at every τ
    # a slope near 0 over a 4x range of τ (read as if fitted on 4 runs): no amplification
    v = rules.temperature_amplifies(st.slope, st.slope - 0.05, st.slope + 0.05, 4, 4)
    assert v.verdict == "not supported"


def test_fit_tells_an_exponential_from_a_drift():
    t = np.arange(200.0)
    expo = 1e-4 * np.exp(0.05 * t)
    f = rt.fit_growth(expo, expo / 1e-2, (1e-3, 0.1))
    assert f.rate == pytest.approx(0.05, rel=1e-6) and f.log_linear()
    drift = 1e-5 * (t + 1)                      # grows like t: never a rate
    g = rt.fit_growth(drift, drift / 1e-5 * 1e-3, (1e-3, 0.1))
    assert g.window[1] - g.window[0] >= 5 and not g.log_linear()


def test_task_aligned_component_reads_the_between_task_spread():
    det = torch.ones(4, 1, dtype=torch.bool)
    task = torch.tensor([0, 0, 1, 1])
    same = torch.tensor([[[1.0, -1.0]], [[-1.0, 1.0]], [[1.0, -1.0]], [[-1.0, 1.0]]])
    assert rt.task_aligned(same, det, task) == pytest.approx(0.0)
    split = torch.tensor([[[1.0, -1.0]], [[1.0, -1.0]], [[-1.0, 1.0]], [[-1.0, 1.0]]])
    assert rt.task_aligned(split, det, task) == pytest.approx(np.sqrt(2.0))


def test_task_fraction_is_a_fraction_of_variance():
    """A / max|a − ā| was no share (√2 for purely task-determined logits); the between-task
    fraction of the variance is: 1 for purely task-determined logits, ≈ 0 for logits that
    ignore the task, in [0, 1] always."""
    g = torch.Generator().manual_seed(0)
    n, e = 400, 3
    task = torch.arange(n) % 4
    det = torch.ones(n, 1, dtype=torch.bool)
    means = torch.randn(4, e, generator=g)
    pure = means[task][:, None, :]                                   # (n, 1, e)
    assert rt.task_fraction(pure, det, task) == pytest.approx(1.0)
    assert rt.task_fraction(pure * 37.0 + 5.0, det, task) == pytest.approx(1.0)   # scale-free
    noise = torch.randn(n, 1, e, generator=g)
    assert rt.task_fraction(noise, det, task) < 0.03
    mixed = rt.task_fraction(pure + noise, det, task)
    assert 0.1 < mixed < 0.9
    # a shift common to every expert is not a contrast: it is centred away
    assert np.isnan(rt.task_fraction(torch.ones(n, 1, e), det, task))
    # the sentences' other positions do not enter
    two = torch.cat([pure, noise], 1)
    det2 = torch.tensor([[True, False]]).expand(n, 2)
    assert rt.task_fraction(two, det2, task) == pytest.approx(1.0)


def test_a_run_reports_its_task_fraction_at_the_end_of_its_window():
    (run,) = rt.temperature_sweep(SMALL.replace(steps=30), [0.05, 0.1], [0])[:1]
    assert run.spread is not None and run.spread.shape == run.aligned.shape
    assert np.all(run.aligned <= run.spread * (1 + 1e-9))
    f = run.task_fraction()
    assert 0.0 <= f <= 1.0


def test_bad_input_is_refused_with_the_value_and_what_is_accepted():
    with pytest.raises(ValueError, match="optimizer"):
        rt.TemperatureSetup(optimizer="adam")
    with pytest.raises(ValueError, match="band"):
        rt.TemperatureSetup(band=(0.1, 0.01))
    with pytest.raises(ValueError, match="n_experts"):
        rt.TemperatureSetup.from_flat(n_experts=1)
    with pytest.raises(ValueError, match="two distinct temperatures"):
        rt.temperature_sweep(SMALL, [0.1, 0.1], [0])
    with pytest.raises(ValueError, match="tau"):
        rt.train_from_symmetry(SMALL, 0.0)
    runs = rt.temperature_sweep(SMALL.replace(steps=6, stop_early=False), [0.1, 0.2], [0])
    with pytest.raises(ValueError, match="step"):
        temperature_fits.step_scaling(runs, 7)


def test_the_sweep_trains_on_one_thread_and_restores_the_callers_count(monkeypatch):
    """The sweep's slope moved in its third digit between one and two torch threads (1.634 /
    1.637 at the default profile), so every run trains on one thread whatever the machine has,
    and the caller's count comes back -- also when a run fails."""
    seen = []

    def record(setup, tau, seed):
        seen.append(torch.get_num_threads())
        if tau > 0.15:
            raise RuntimeError("a failing run")
        return (tau, seed)

    monkeypatch.setattr(rt, "train_from_symmetry", record)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert rt.temperature_sweep(None, [0.05, 0.1], [0, 1]) == (
            (0.05, 0), (0.1, 0), (0.05, 1), (0.1, 1))
        with pytest.raises(RuntimeError, match="failing"):
            rt.temperature_sweep(None, [0.1, 0.2], [0])
        assert seen == [1] * 6 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
