"""Paper B's quantities on paper A's trained routers: stored weights, margins, boundary mass,
soft mixture against hard routing, and the bound."""

import json
import shutil

import numpy as np
import pytest
import torch
from scipy import special

from moe_routing._internal import atomic
from moe_routing.boundary import risk_bound
from moe_routing.experiments.bridge import margins as br
from moe_routing.experiments.task_routing import runs as tr
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.runs import load_model, run_experiment, run_grid
from moe_routing.experiments.task_routing.store import result_path, weights_path
from moe_routing.experiments.bridge import layers
from moe_routing.experiments.bridge import soft_hard
from moe_routing.experiments.task_routing import data

pytestmark = pytest.mark.kernels

TINY = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
            batch_size=32, warmup_steps=2)
TAUS = np.logspace(-3, 1.5, 10)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny trained run (cross-entropy only: the router is not pushed to large margins),
    trained with the one torch thread of the tests (a module fixture runs before the
    per-test thread setting; the recomputation test retrains it under that setting)."""
    art = tmp_path_factory.mktemp("art")
    cfg = ExperimentConfig.from_flat(n_tasks=3, n_experts=3, objective="ce", steps=36, lr=1e-2, **TINY)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = run_experiment(cfg, art)
    finally:
        torch.set_num_threads(old)
    return cfg, art, res, load_model(cfg, art), data.experiment_dataset(cfg)


@pytest.fixture(scope="module")
def soft(run):
    _, _, _, model, ds = run
    return soft_hard.soft_vs_hard(model, ds, TAUS)


# ----------------------------------------------------------------------------- weights
def test_weights_reload_the_measured_model(run):
    cfg, art, res, model, ds = run
    path = weights_path(cfg, art)
    assert path.exists() and path.stem == result_path(cfg, art).stem
    assert path.parent.name == "task_routing_weights"
    # the reloaded model reproduces every cached measurement exactly
    with torch.no_grad():
        again = json.loads(json.dumps(tr.evaluate_run(model, ds, cfg.n_experts),
                                      default=atomic.jsonable))
    on_disk = json.loads(result_path(cfg, art).read_text())
    for k in tr.REPRODUCED_KEYS:
        if k in again:
            assert again[k] == on_disk[k], k
    # the JSON is the result, nothing about weights was added to it
    assert on_disk == json.loads(json.dumps(res)) and "weights" not in json.dumps(on_disk)


@pytest.mark.training
def test_missing_weights_are_recomputed_identically(run, tmp_path, caplog):
    cfg, art, res, model, ds = run
    shutil.copytree(art / "task_routing", tmp_path / "task_routing")
    assert not weights_path(cfg, tmp_path).exists()
    with pytest.raises(FileNotFoundError, match=str(weights_path(cfg, tmp_path))):
        load_model(cfg, tmp_path, recompute=False)
    again = load_model(cfg, tmp_path)
    assert weights_path(cfg, tmp_path).exists()
    x = ds.encode_split("test").inputs
    with torch.no_grad():
        assert torch.equal(again(x).logits, model(x).logits)
        assert torch.equal(again(x).router_logits, model(x).router_logits)
    # a cached result that the recomputed model does not reproduce is refused, never replaced
    other = tmp_path / "other"
    shutil.copytree(art / "task_routing", other / "task_routing")
    p = result_path(cfg, other)
    doctored = json.loads(p.read_text())
    doctored["accuracy"] = 1.0 - doctored["accuracy"]
    p.write_text(json.dumps(doctored))
    with pytest.raises(RuntimeError, match="accuracy"):
        load_model(cfg, other)
    assert not weights_path(cfg, other).exists()


def test_reused_results_bring_their_weights(run, tmp_path):
    cfg, art, _, _, _ = run
    (row,) = run_grid([cfg], tmp_path, progress=False, reuse_from=[art])
    assert row["cached"]
    assert weights_path(cfg, tmp_path).read_bytes() == weights_path(cfg, art).read_bytes()


def test_collapsed_variant_reloads_as_measured(tmp_path):
    """The collapsed variant's routing is changed after training by a knock-out whose mode is
    not part of the state_dict: the weights file keeps it, so the reloaded model is the one
    that was measured (and the bridge refuses it: its dead experts have no finite logit)."""
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=3, objective="ce", steps=3,
                           variant="collapsed", **TINY)
    res = run_experiment(cfg, tmp_path)
    model = load_model(cfg, tmp_path)
    assert model.knockout_mode == "reroute" and (model.expert_alive == 0).sum() == 2
    with torch.no_grad():
        again = tr.evaluate_run(model, data.experiment_dataset(cfg), cfg.n_experts)
    assert again["routing_all"]["counts"] == res["routing_all"]["counts"]
    with pytest.raises(ValueError, match="all experts alive"):
        br.router_margins(model, data.experiment_dataset(cfg))


def test_corrupt_or_foreign_weights_are_refused_naming_the_file(run, tmp_path):
    cfg, art, _, _, _ = run
    good = weights_path(cfg, art).read_bytes()
    target = weights_path(cfg, tmp_path)
    target.parent.mkdir(parents=True)
    target.write_bytes(good[: len(good) // 2])                      # truncated
    with pytest.raises(ValueError, match=f"weights file {target} is unreadable"):
        load_model(cfg, tmp_path)
    # the weights of another run under this run's name
    other = cfg.replace(seed=1)
    target2 = weights_path(other, tmp_path)
    target2.write_bytes(good)
    with pytest.raises(ValueError, match=f"{target2} holds the weights of run"):
        load_model(other, tmp_path)
    # right key, but a model of another shape stored in it
    payload = torch.load(weights_path(cfg, art), weights_only=True)
    payload["model_config"]["d_expert"] = 8
    torch.save(payload, target)
    with pytest.raises(ValueError, match="another model configuration.*d_expert"):
        load_model(cfg, tmp_path)
    with pytest.raises(FileNotFoundError, match="no cached run"):
        load_model(cfg.replace(seed=2), tmp_path)


# ----------------------------------------------------------------------------- margins
def test_margins_count_kinds_and_sign(run):
    cfg, _, res, model, ds = run
    te = ds.encode_split("test")
    m = br.router_margins(model, ds)
    assert m.margins.shape == (int(te.loss_mask.sum()),) == (res["n_routing_positions_all"],)
    assert np.all(m.margins >= 0) and m.logits.shape == (m.margins.size, cfg.n_experts)
    # the determined positions are those of the cached routing_determined measurement
    assert m.determined.mean() == pytest.approx(res["routing_all"]["determined_fraction"])
    assert m.is_object.sum() == len(te)
    obj = br.router_margins(model, ds, positions="object")
    np.testing.assert_array_equal(obj.margins, m.of_kind("object"))
    det, sh = (br.router_margins(model, ds, positions=k) for k in ("determined", "shared"))
    assert det.margins.size + sh.margins.size == m.margins.size
    assert set(m.kind) <= {"determined", "shared"}


def test_margin_is_on_logits_not_probabilities(run):
    """p_(2)/p_(1) = e^{−Δ} exactly for the logit margin: a margin on the probabilities (or on
    logits scaled differently) fails it."""
    _, _, _, model, ds = run
    m = br.router_margins(model, ds)
    te = ds.encode_split("test")
    with torch.no_grad():
        probs = model(te.inputs).router_probs[te.loss_mask].double().numpy()
    p = np.sort(probs, axis=1)
    np.testing.assert_allclose(p[:, -2] / p[:, -1], np.exp(-m.margins), rtol=1e-5)
    assert m.router_temperature == 1.0


def test_bad_arguments_are_named(run):
    _, _, _, model, ds = run
    with pytest.raises(ValueError, match="positions.*'all', 'object'"):
        br.router_margins(model, ds, positions="subject")
    with pytest.raises(ValueError, match="MoETransformer"):
        br.router_margins("model", ds)
    with pytest.raises(ValueError, match="taus"):
        soft_hard.soft_vs_hard(model, ds, [0.1, 0.0])
    with pytest.raises(ValueError, match="constants.*exactly one of"):
        soft_hard.bound_check(np.ones(2), 1.0, 1.0, dict(n_experts=3, B=1.0), taus=[0.1, 0.2])


# ----------------------------------------------------------------------------- boundary mass
def test_boundary_mass_is_monotone_with_exact_ends_and_tail_constant(run):
    _, _, _, model, ds = run
    m = br.router_margins(model, ds)
    d = np.sort(m.margins)
    w = np.concatenate([[d[0] / 2], np.logspace(np.log10(d[0]), np.log10(d[-1]), 40),
                        [2 * d[-1]]])
    bm = br.boundary_mass_of_router(m, w)
    assert bm.n == d.size and np.all(np.diff(bm.estimate) >= 0)
    assert bm.estimate[0] == 0.0 and bm.estimate[-1] == 1.0
    assert np.all((bm.lower <= bm.estimate) & (bm.estimate <= bm.upper))
    assert bm.alpha_ci[0] <= bm.alpha <= bm.alpha_ci[1] and bm.alpha > 0
    # C_m is the supremum of the empirical BM(w)/w^α: attained at a margin, above every w
    brute = np.max(np.arange(1, d.size + 1) / d.size / d ** bm.alpha)
    assert bm.C_m == pytest.approx(brute, rel=1e-12)
    dense = np.logspace(-6, 3, 20001)
    ecdf = np.searchsorted(d, dense, side="right") / d.size
    assert np.all(ecdf / dense ** bm.alpha <= bm.C_m * (1 + 1e-12))
    assert br.margin_tail_constant(np.array([0.0, 1.0]), 1.0) == float("inf")
    with pytest.raises(ValueError, match="≥ 2 widths"):
        br.boundary_mass_of_router(m, [d[0] / 4, d[0] / 2])


# ----------------------------------------------------------------------------- soft vs hard
def test_soft_mixture_tends_to_hard_routing_and_to_the_uniform_mixture(run):
    cfg, _, _, model, ds = run
    te = ds.encode_split("test")
    sel = te.loss_mask
    out = soft_hard.mixture_logits(model, te.inputs, sel, [1e-4, 1e-2, 1e7])
    a = out["router_logits"].numpy()
    s = np.sort(a, axis=1)
    margin = s[:, -1] - s[:, -2]
    err = [(out["soft"][i] - out["hard"]).abs().amax(-1).numpy() for i in range(3)]
    # τ → 0: wherever Δ/τ is large the soft mixture's logits are the hard model's
    far = margin / 1e-4 > 50
    assert far.mean() > 0.9 and err[0][far].max() < 1e-12
    assert np.all(err[0] <= err[1] + 1e-15)                     # and it gets there as τ falls
    # τ large: the uniform mixture Σ_k FF_k / K, through the model's own dispatch
    m = layers._float64(model)
    with torch.no_grad():
        o = m(te.inputs, return_internals=True)
        a1 = o.resid_mid[sel]
        x = m.ln_moe(a1)
        n, K = x.shape[0], cfg.n_experts
        uni = m.experts(x, torch.arange(K).expand(n, K), torch.full((n, K), 1 / K,
                        dtype=x.dtype), backend="dense")
        uniform = m.unembed(m.ln_out(a1 + uni))
        # the trained model (Switch gate p_{k*}) is neither: its logits are A' + p FF_{k*}
        switch = m.unembed(m.ln_out(a1 + o.gate[sel] * m.experts(
            x, o.expert_index[sel], torch.ones(n, 1, dtype=x.dtype), backend="dense")))
    torch.testing.assert_close(out["soft"][2], uniform, rtol=0, atol=1e-6)
    torch.testing.assert_close(out["switch"], switch, rtol=0, atol=1e-10)
    assert (out["switch"] - out["hard"]).abs().max() > 1e-3


def test_soft_vs_hard_measurements(run, soft):
    _, _, res, model, ds = run
    n_test = res["n_test"]
    assert soft.n == n_test and soft.margins.shape == (n_test,)
    # the trained model's exact match is the cached accuracy (same positions, same model)
    assert soft.em_switch == pytest.approx(res["accuracy"], abs=1e-12)
    assert np.all(soft.gap >= 0) and soft.gap[0] < 1e-12 < soft.gap[-1]
    assert np.all((0 <= soft.em_soft) & (soft.em_soft <= 1))
    assert soft.ce_soft[0] == pytest.approx(soft.ce_hard, abs=1e-10)
    np.testing.assert_allclose(soft.gap, np.abs(soft.ce_soft - soft.ce_hard), atol=1e-12)
    assert soft.loss_range > 0 and soft.envelope > 0
    # the mean of the pointwise absolute gaps is at least the absolute mean gap (the signed
    # ones cancel between positions), and it is what the slope is fitted to
    assert np.all(soft.abs_gap >= soft.gap - 1e-12)
    assert np.all(soft.abs_gap_losses >= soft.gap_losses - 1e-12)
    assert np.all(np.diff(soft.abs_gap_losses) >= 0)     # E|ℓτ − ℓ0| grows with τ here


def test_abs_gap_of_the_mixture_of_losses_is_exact_far_below_rounding(run):
    """Σ_{k≠k*} π_k (ℓ_k − ℓ_k*) has no (1 − ε)·ℓ − ℓ cancellation: at τ far below the
    margins the gap is e^{−Δ/τ}-small but positive, not rounding (1e-16) or 0."""
    _, _, _, model, ds = run
    d = br.router_margins(model, ds, positions="object").margins
    tau = float(np.quantile(d, 0.5)) / 200
    sh = soft_hard.soft_vs_hard(model, ds, [tau, 2 * tau, 4 * tau])
    assert np.all(sh.abs_gap_losses > 0) and sh.abs_gap_losses[0] < 1e-20


def test_resolving_taus_read_the_margins_where_their_exponent_was_fitted(run, soft):
    """The widths are the margins' quantiles, α the boundary mass's exponent there, τ = w/α;
    on that grid the gap is positive at every τ and its slope is close to α."""
    _, _, _, model, ds = run
    om = br.router_margins(model, ds, positions="object")
    levels = [0.1, 0.2, 0.3, 0.5]
    g = br.resolving_taus(om, levels)
    np.testing.assert_allclose(g.widths, np.quantile(om.margins, levels))
    np.testing.assert_allclose(g.taus, g.widths / g.bm.alpha)
    assert g.bm.fitted.all() and g.bm.C_m == br.margin_tail_constant(om.margins, g.bm.alpha)
    sh = soft_hard.soft_vs_hard(model, ds, g.taus)
    assert np.all(sh.abs_gap_losses > 0)
    # an exact power law BM(w) = (w/w0)^α: the grid's α is its exponent
    rng = np.random.default_rng(0)
    exact = 3.0 * rng.random(20000) ** (1 / 2.5)              # BM(w) = (w/3)^2.5
    e = br.resolving_taus(exact, [0.01, 0.02, 0.05, 0.1, 0.2])
    assert e.bm.alpha == pytest.approx(2.5, abs=0.15)
    with pytest.raises(ValueError, match="levels"):
        br.resolving_taus(om, [0.2, 0.1, 0.3])
    with pytest.raises(ValueError, match="ties or margins of 0"):
        br.resolving_taus(np.r_[np.zeros(50), np.ones(50)], [0.1, 0.2, 0.3])


def test_power_law_check_tells_one_law_from_two_populations():
    rng = np.random.default_rng(1)
    w = np.geomspace(1e-2, 1.0, 16)                              # counts ≥ 20
    one = rng.random(20000) ** (1 / 1.5)                         # BM(w) = w^1.5 on [0, 1]
    assert br.power_law_check(br.boundary_mass_of_router(one, w)).power_law
    # 2 % of positions with margins spread over [0, 0.03], the rest at 2 and above: BM
    # rises, plateaus at 0.02, then jumps -- no single exponent describes it
    two = np.concatenate([0.03 * rng.random(400), 2 + rng.random(19600)])
    wide = np.geomspace(1e-3, 2.5, 20)
    chk = br.power_law_check(br.boundary_mass_of_router(two, wide, fit_max_mass=1.0))
    assert not chk.power_law and chk.alpha_low > chk.alpha_high


# ----------------------------------------------------------------------------- bound
def test_bound_holds_for_the_measured_positions(soft):
    """With C_m the exact sup of the positions' empirical BM and the loss range across experts,
    the bound is a theorem for the mixture of losses, at any α; with the measured envelope
    it holds for the mixture of predictions."""
    for alpha in (0.5, 1.0, 2.0):
        C_m = br.margin_tail_constant(soft.margins, alpha)
        losses = soft_hard.bound_check(soft, alpha, C_m, dict(n_experts=soft.n_experts,
                                                       loss_range=soft.loss_range))
        np.testing.assert_array_equal(losses.gap, soft.abs_gap_losses)
        assert losses.below and np.all(losses.ratio <= 1)
        pred = soft_hard.bound_check(soft, alpha, C_m, dict(n_experts=soft.n_experts,
                                                     M=soft.envelope))
        assert pred.below
        want = (soft.n_experts - 1) * soft.envelope * C_m * special.gamma(1 + alpha) \
            * soft.taus ** alpha
        np.testing.assert_allclose(pred.bound, want, rtol=1e-12)


def test_bound_check_forms_rate_and_a_violation():
    taus = np.logspace(-3, -1, 8)
    gap = 0.3 * taus ** 0.7 * np.exp(0.01 * np.sin(np.arange(8)))
    sq = soft_hard.bound_check(gap, 0.7, 2.0, dict(n_experts=4, B=1.0, B_star=0.5), taus=taus)
    np.testing.assert_allclose(sq.bound, risk_bound(taus, 4, 1.0, 0.5, 2.0, 0.7), rtol=1e-12)
    assert sq.below and sq.rate_matches and sq.slope == pytest.approx(0.7, abs=0.02)
    assert sq.M == pytest.approx(4 * 1.0 * 1.5)
    wrong = soft_hard.bound_check(gap, 1.0, 2.0, dict(n_experts=4, B=1.0, B_star=0.5), taus=taus)
    assert not wrong.rate_matches
    tight = soft_hard.bound_check(gap, 0.7, 1e-3, dict(n_experts=2, M=1.0), taus=taus)
    assert not tight.below and tight.ratio.max() > 1


def test_a_top_two_model_is_measured_at_its_boundary_and_refused_by_soft_vs_hard(run):
    """A top-k router's margin is a_(k) − a_(k+1) (it changes its set of experts there); the
    soft mixture's τ → 0 limit is top-1 routing, so soft_vs_hard refuses a top-2 model
    (before: it was measured as if top-1, silently)."""
    import copy
    from dataclasses import replace as dc_replace

    _, _, _, model, ds = run
    top2 = copy.deepcopy(model)
    top2.config = dc_replace(model.config, top_k=2)
    m1, m2 = br.router_margins(model, ds), br.router_margins(top2, ds)
    s = np.sort(m2.logits, axis=1)
    assert np.allclose(m2.margins, s[:, -2] - s[:, -3])
    assert np.allclose(m1.margins, s[:, -1] - s[:, -2])
    assert not np.allclose(m1.margins, m2.margins)
    with pytest.raises(ValueError, match="model.config.top_k"):
        soft_hard.soft_vs_hard(top2, ds, TAUS)
