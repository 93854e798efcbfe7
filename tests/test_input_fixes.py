"""Inputs that gave a wrong number, or a refusal naming nothing, and now give the right number
or a clear ``ValueError`` (the issue "Every input gives a right number or a clear error").

One test per case; each failed on the code before its fix:

* ``rate_scaling`` / ``step_scaling`` with two runs at one (τ, seed): the last silently won
  (the slope depended on the runs' order, ``n_runs`` counted a run that did not enter);
* ``two_hop_grid`` with a repeated seed (or objective, or depth): two configurations, one run;
* ``bound_check`` with M = 0 and a positive gap gave ratio 0 (now inf: the bound is 0), refused
  C_m = inf (``margin_tail_constant``'s value for a zero margin; now a vacuous bound), and
  gave inf where one factor alone left float64 (M·C_m = 1e310 at τ = 1e-5, Γ(201));
* ``fit_growth`` took any ``band`` (a reversed or NaN band: a silent NaN fit; a string: a
  NumPy traceback);
* ``router_z_loss`` of logits 1e200 with β = 1e-300 was inf (its value is 1e100), and a β
  below float32's range was rounded to 0 first -- ordinary values stay bit for bit;
* the two-layer construction refused with a ``ValueError`` naming no hypothesis when a first
  hop's gate spread left no margin (now (H-margin), with witnesses and the η that works);
* bfloat16 tensors were refused as "'Tensor' … a real array" by the validation idiom;
* ``evaluate_two_hop(n_experts=2)`` of a 4-expert model failed deep inside with a message
  naming neither the argument nor the model's count.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from moe_routing._internal import validation as check
from moe_routing.experiments.bridge import margins as br
from moe_routing.experiments.bridge import temperature_fits as fits
from moe_routing.experiments.two_hop.config import two_hop_grid
from moe_routing.model.losses import router_z_loss
from moe_routing.experiments.bridge import soft_hard

pytestmark = pytest.mark.kernels


# ---- rate_scaling: one run per (τ, seed) --------------------------------------------------------
def _run(tau: float, seed: int, rate: float) -> fits.GrowthRun:
    """A run whose two fits are log-linear with ``rate`` (only what the scalings read)."""
    f = fits.GrowthFit((0, 20), rate, 1.0, 1.0)
    a = np.full(21, 1.0)
    return fits.GrowthRun(tau=tau, seed=seed, optimizer="sgd", aligned=a, router_contrast=a,
                          max_scaled=a, loss=a[:-1], fit=f, fit_contrast=f, wall_s=0.0)


def test_rate_scaling_refuses_two_runs_at_one_tau_and_seed():
    good = [_run(0.1, 0, 10.0), _run(0.2, 0, 5.0), _run(0.4, 0, 2.5)]
    assert fits.rate_scaling(good).slope == pytest.approx(1.0)
    dup = _run(0.2, 0, 8.0)
    # before: the slope depended on the order (the later run of the cell won) and n_runs
    # counted a run that did not enter the fit
    for runs, first, second in ((good + [dup], 1, 3), ([dup] + good, 0, 2)):
        want = (r"^runs \(τ, seed\) = \[.*\] is not allowed; accepted: one run per \(τ, seed\) "
                rf"pair \(runs\[{first}\] and runs\[{second}\] are both τ = 0\.2, seed 0\)")
        with pytest.raises(ValueError, match=want):
            fits.rate_scaling(runs)
        with pytest.raises(ValueError, match=want):
            fits.step_scaling(runs, 5)
    # the same τ under another seed is another cell
    other = fits.rate_scaling(good + [_run(0.2, 1, 5.0)])
    assert other.n_runs == 4 and other.n_fitted == 4 and other.slope == pytest.approx(1.0)
    # one τ has no slope (before: NaN, silently); a run's own τ and seed are checked
    with pytest.raises(ValueError, match=r"^runs \(τ\) = \[0\.2\] .*two or more distinct"):
        fits.rate_scaling([_run(0.2, 0, 5.0), _run(0.2, 1, 4.0)])
    with pytest.raises(ValueError, match=r"^runs\[1\]\.tau = nan"):
        fits.rate_scaling([_run(0.1, 0, 5.0), _run(math.nan, 0, 4.0)])


# ---- two_hop_grid: distinct axis values -----------------------------------------------------------
@pytest.mark.parametrize("axes, name", [
    (dict(seeds=[0, 0]), "seeds"),
    (dict(seeds=[0, np.int64(0)]), "seeds"),
    (dict(seeds=[1, 0, 1.0]), "seeds"),
    (dict(objectives=["ce", "ce+lb", "ce"]), "objectives"),
    (dict(n_layers=[2, 2]), "n_layers"),
])
def test_two_hop_grid_refuses_a_repeated_axis_value(axes, name):
    # before: seeds=[0, 0] gave two configurations with one key (one run counted twice)
    with pytest.raises(ValueError, match=rf"^{name} = .*distinct values .* is both {name}\[\d\] "
                                         rf"and {name}\[\d\]"):
        two_hop_grid(**axes)
    grid = two_hop_grid(seeds=[0, 1])
    assert len(grid) == len({c.key() for c in grid}) == 12


# ---- bound_check: M = 0 and C_m = inf -------------------------------------------------------------
TAUS = np.array([0.01, 0.02, 0.05, 0.1])


@pytest.mark.parametrize("key", ["M", "loss_range"])
def test_bound_check_with_no_pointwise_gap_gives_a_zero_bound(key):
    gap = np.array([0.0, 1e-3, 2e-3, 0.0])
    chk = soft_hard.bound_check(gap, 1.0, 2.0, {"n_experts": 3, key: 0.0}, taus=TAUS)
    # before: ratio 0 where the gap is positive (a violated bound read as a tight one)
    np.testing.assert_array_equal(chk.bound, 0.0)
    np.testing.assert_array_equal(chk.ratio, [0.0, np.inf, np.inf, 0.0])
    assert not chk.below
    zero = soft_hard.bound_check(np.zeros(4), 1.0, float("inf"), {"n_experts": 3, key: 0.0}, taus=TAUS)
    assert zero.below and np.all(zero.bound == 0) and np.all(zero.ratio == 0)


def test_bound_check_accepts_the_infinite_tail_constant_of_a_zero_margin():
    C_m = br.margin_tail_constant(np.array([0.0, 0.5, 1.0]), 1.0)
    assert C_m == math.inf
    gap = np.array([1e-3, 2e-3, 5e-3, 1e-2])
    for constants in ({"n_experts": 3, "M": 2.0}, {"n_experts": 3, "loss_range": 1.5},
                      {"n_experts": 3, "B": 1.0, "B_star": 0.5}):
        chk = soft_hard.bound_check(gap, 1.0, C_m, constants, taus=TAUS)     # before: refused
        assert chk.C_m == math.inf and chk.below
        np.testing.assert_array_equal(chk.bound, np.inf)
        np.testing.assert_array_equal(chk.ratio, 0.0)
    for bad in (float("nan"), -math.inf, 0.0, -1.0, "inf"):
        with pytest.raises(ValueError, match=r"^C_m = .*finite, or inf"):
            soft_hard.bound_check(gap, 1.0, bad, {"n_experts": 3, "M": 1.0}, taus=TAUS)
    # a finite C_m gives the numbers it gave before
    chk = soft_hard.bound_check(gap, 1.0, 2.0, {"n_experts": 3, "M": 1.0}, taus=TAUS)
    np.testing.assert_allclose(chk.bound, 2 * 1.0 * 2.0 * TAUS, rtol=1e-15)
    np.testing.assert_allclose(chk.ratio, gap / chk.bound, rtol=1e-15)


def test_bound_check_is_the_bound_where_a_factor_alone_leaves_float64():
    t = np.array([1e-5, 0.1])
    # M·C_m = 1e310 overflows, the bound 2·1e310·τ does not at τ = 1e-5 (before: inf)
    chk = soft_hard.bound_check(np.ones(2), 1.0, 1e10, {"n_experts": 3, "M": 1e300}, taus=t)
    assert chk.bound[0] == pytest.approx(2e305, rel=1e-12) and chk.bound[1] == math.inf
    assert chk.ratio[0] == pytest.approx(0.5e-305, rel=1e-12) and chk.below
    # Γ(1 + α) = inf for α = 200, while Γ(201)·0.1^200 ≈ 1.58e175 (before: inf)
    big = soft_hard.bound_check(np.ones(2), 200.0, 1.0, {"n_experts": 2, "M": 1.0}, taus=t)
    assert big.bound[1] == pytest.approx(math.exp(math.lgamma(201) - 200 * math.log(10)),
                                         rel=1e-10)
    assert big.bound[0] == 0.0 and big.ratio[0] == math.inf and not big.below


# ---- fit_growth's band ----------------------------------------------------------------------------
@pytest.mark.parametrize("band, name", [
    ((0.1, 1e-3), "band"), ((float("nan"), 0.1), r"band\[0\]"), ((1e-3, float("inf")),
                                                                 r"band\[1\]"),
    ("ab", "band"), (0.1, "band"), ((1e-3, 0.05, 0.1), "band"), ((0.0, 0.1), r"band\[0\]"),
    ((1e-3, "0.1"), r"band\[1\]"),
])
def test_fit_growth_refuses_a_bad_band(band, name):
    t = np.arange(60.0)
    v = 1e-4 * np.exp(0.05 * t)
    with pytest.raises(ValueError, match=rf"^{name} = "):      # before: a NaN fit or TypeError
        fits.fit_growth(v, v / 1e-2, band)
    assert fits.fit_growth(v, v / 1e-2, (1e-3, 0.1)).rate == pytest.approx(0.05, rel=1e-9)


# ---- router_z_loss at extreme scales --------------------------------------------------------------
def test_router_z_loss_is_finite_where_its_value_is():
    big = torch.full((3, 4), 1e200, dtype=torch.float64)
    got = router_z_loss(big, beta=1e-300)                 # before: inf
    assert float(got) == pytest.approx(1e100, rel=1e-12)      # (1e-150 · (1e200 + log 4))²
    # ordinary values: β·mean(lse²) bit for bit (training runs are compared bit for bit),
    # masked or not, with its gradient
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        x = torch.randn(5, 7, 4, generator=g).to(dtype).requires_grad_()
        mask = torch.rand(5, 7, generator=g) > 0.3
        for m in (None, mask):
            lse = torch.logsumexp(x.float() if dtype == torch.bfloat16 else x, -1)
            ref = 1e-3 * ((lse if m is None else lse[m]) ** 2).mean()
            out = router_z_loss(x, 1e-3, m)
            assert out.dtype == ref.dtype and torch.equal(out, ref)
            (ga,) = torch.autograd.grad(out, x)
            (gb,) = torch.autograd.grad(ref, x)
            assert torch.equal(ga, gb)
    # a β outside float32's range is not rounded to 0 (or inf) before it multiplies
    x32 = torch.full((2, 4), 1e30)
    assert float(router_z_loss(x32, beta=1e-50)) == pytest.approx(1e-50 * 1e60, rel=1e-6)
    assert float(router_z_loss(torch.zeros(2, 4), beta=1e-40)) == pytest.approx(
        1e-40 * math.log(4) ** 2, rel=1e-3)           # β subnormal in float32: not rounded first
    assert float(router_z_loss(torch.zeros(2, 4, dtype=torch.float64), beta=1e-320)) == \
        pytest.approx(1e-320 * math.log(4) ** 2, rel=1e-3)                   # β subnormal
    assert float(router_z_loss(torch.zeros(2, 4), beta=0.0)) == 0.0


def test_router_z_loss_device_path_is_finite_where_its_value_is():
    """The GPU path (masked mean over the full tensor, the form chosen by ``torch.where``
    without waiting for the device), run on the CPU as test_model_sync runs it."""
    from unittest import mock

    from moe_routing.model import losses

    big = torch.full((3, 4), 1e200, dtype=torch.float64)
    mask = torch.tensor([True, False, True])
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 4, generator=g)
    keep = torch.rand(6, generator=g) > 0.4
    with mock.patch.object(losses, "on_cpu", lambda _: False):
        assert float(router_z_loss(big, 1e-300, mask)) == pytest.approx(1e100, rel=1e-12)
        assert float(router_z_loss(torch.full((2, 4), 1e30), 1e-50, torch.ones(2, dtype=bool))) \
            == pytest.approx(1e10, rel=1e-6)
        device = router_z_loss(x, 1e-3, keep)
    torch.testing.assert_close(device, router_z_loss(x, 1e-3, keep), rtol=1e-6, atol=0)


# ---- the two-layer construction: (H-margin) -------------------------------------------------------
def _spread_dataset():
    """A first hop A whose gate must also fire at the object slots of B∘A: its least spread
    is about 39, so A·η > 1 at the default η = 0.01 (found by a sweep over random datasets)."""
    from moe_routing.knowledge import KnowledgeTask
    from moe_routing.knowledge.two_hop import two_hop_task
    from moe_routing.knowledge.two_hop_dataset import MixedKnowledgeDataset

    A = KnowledgeTask("A", ["green green ⋆1 near blue ⋆2 blue.", "red ⋆1 ⋆2.", "green ⋆1 ⋆2.",
                            "⋆1 gray gray blue ⋆2."], {"E2": "E2", "E8": "E11", "E0": "E4",
                                                       "E7": "E2"})
    B = KnowledgeTask("B", ["⋆1 green near gray near gray ⋆2."],
                      {"E2": "E11", "E11": "E4", "E4": "E0"})
    T = two_hop_task(A, B, ["red near ⋆1 ⋆2.", "red blue green ⋆1 blue ⋆2.",
                            "⋆1 blue red green green ⋆2."], typed=False)
    return MixedKnowledgeDataset([A, B, T], seed=0)


def test_two_layer_margin_refusal_names_its_hypothesis_and_the_eta_that_works():
    from moe_routing.construction import (TwoLayerHypothesisFails, build_two_layer,
                                          verify_two_layer)
    from moe_routing.construction import two_layer, two_layer_routing

    assert "H-margin" in two_layer_routing.TWO_LAYER_HYPOTHESES
    assert "(H-margin)" in two_layer.__doc__
    ds = _spread_dataset()
    # before: "no margin for the layer-2 lookup … lower max_coherence or eta", no hypothesis,
    # and max_coherence=0.2 changed nothing (μ is 0 here: the codes are orthogonal)
    for kw in ({}, {"max_coherence": 0.2}):
        with pytest.raises(TwoLayerHypothesisFails) as err:
            build_two_layer(ds, **kw)
        e = err.value
        assert e.hypothesis == "H-margin" and e.tasks == ("A",)
        assert e.witnesses == ("green green ⋆1 near blue", "red blue green ⋆1 blue")
        text = str(e)
        assert text.startswith("hypothesis (H-margin) fails for task(s) ['A']")
        assert "(i) v_lo = 1 − A·η" in text and "lower max_coherence" not in text
    eta = float(re.search(r"eta ≤ ([0-9.e+-]+)", text).group(1))
    assert 0 < eta < 0.01
    model, rep = build_two_layer(ds, eta=eta)             # the η the refusal gives: it builds
    assert verify_two_layer(model, rep, ds).passed
    assert rep.v_lo > rep.mu * rep.v_hi and rep.mu * rep.v2_hi < 1 and rep.v_min > rep.i_max


# ---- bfloat16 tensors in the validation idiom -----------------------------------------------------
def test_bfloat16_tensors_are_real_arrays():
    values = [0.5, 1.25, 3.0]
    bf = torch.tensor(values, dtype=torch.bfloat16, requires_grad=True)
    got = check.finite_array("x", bf)          # before: "x = 'Tensor' is not allowed"
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, check.finite_array("x", bf.detach().half()))
    np.testing.assert_array_equal(check.temperatures("taus", bf), values)
    assert check.finite_tensor("x", bf) is bf
    assert br.margin_tail_constant(bf, 1.0) == br.margin_tail_constant(np.array(values), 1.0)
    with pytest.raises(ValueError, match=r"^x\[1\] = nan .*finite entries"):
        check.finite_array("x", torch.tensor([1.0, float("nan")], dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"^x = .*dtype complex64.* a real \(integer or float\) array"):
        check.finite_array("x", torch.ones(2, dtype=torch.complex64))


# ---- evaluate_two_hop: the model's expert count ---------------------------------------------------
def test_evaluate_two_hop_refuses_an_expert_count_that_is_not_the_models():
    from moe_routing.experiments.two_hop.config import TwoHopConfig
    from moe_routing.experiments.two_hop.measure import (evaluate_two_hop, two_hop_dataset,
                                                         two_hop_split)
    from moe_routing.model import MoETransformer

    cfg = TwoHopConfig.from_flat(n_pairs=12, n_templates=2, d_model=16, d_expert=16, n_heads=2,
                                 n_experts=4, steps=6, batch_size=32, warmup_steps=2)
    ds = two_hop_dataset(cfg)
    parts = two_hop_split(ds)
    enc = ds.encode_split("all")
    torch.manual_seed(0)
    model = MoETransformer(cfg.model.config(ds.vocab_size, enc.inputs.shape[1], top_k=1,
                                            gate="switch")).eval()
    for n in (2, 8, np.int64(3)):
        # before: "expert_ids range = '0..3' is not allowed; accepted: accepted 0..1"
        with pytest.raises(ValueError, match=rf"^n_experts = {int(n)} is not allowed; accepted: "
                                             r"the model's expert count, 4"):
            evaluate_two_hop(model, ds, parts, n)
    with pytest.raises(ValueError, match=r"^model = "):
        evaluate_two_hop("model", ds, parts, 4)


# ---- what the sweep found outside its first modules ------------------------------------------
def test_the_one_layer_logit_margin_refusal_names_its_hypothesis():
    from moe_routing.construction.build import logit_scale

    with pytest.raises(ValueError, match=r"\(H-margin\).*v_min − i_max"):
        logit_scale(1e-4, 100, 0.2, 0.3)


def test_gate_gap_bound_refuses_an_expert_count_no_float_holds():
    from moe_routing.boundary.margin import gate_gap_bound

    with pytest.raises(ValueError, match="n_experts"):
        gate_gap_bound([0.1], 0.1, 10 ** 400)
    assert gate_gap_bound([0.0], 0.1, 3)[0] == pytest.approx(2.0)


def test_an_id_out_of_range_is_named_once():
    from moe_routing import routing_metrics as rm

    with pytest.raises(ValueError) as e:
        rm.task_expert_counts([0, 5], [0, 1], 2, 2)
    assert "accepted: accepted" not in str(e.value) and "0..1" in str(e.value)


def test_temperature_sweep_refuses_a_repeated_seed():
    from moe_routing.experiments.bridge import temperature as rt

    with pytest.raises(ValueError, match="distinct seeds"):
        rt.temperature_sweep(rt.TemperatureSetup(), [0.05, 0.2], [0, 0])
