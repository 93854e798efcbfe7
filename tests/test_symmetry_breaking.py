"""Two-expert Gaussian model (paper B, Proposition 6.3): the operator M, the linearised rates
and the simulated gradient flow. Targets from our derivation (the symmetry-breaking chapter)."""

import math

import numpy as np
import pytest
import torch

from moe_routing.landscape.symmetry import (TwoExpertGaussian, linear_growth_rates,
                                            m_operator_closed_form, m_operator_mc, top_direction)
from moe_routing.landscape.symmetry_flow import (fit_growth_rate, fit_power_law, gradient_flow,
                                                 naive_gradient_flow_step, population_gradients,
                                                 soft_risk, symmetric_start)

pytestmark = pytest.mark.kernels

U_GENERIC = (0.6, -0.48, 0.64)          # |u| = 1
BETA1, BETA2 = (0.7, 0.4, -0.2), (-0.5, -0.1, 0.3)




def test_abs_teacher_eigenvalues_closed_form():
    M = m_operator_closed_form(TwoExpertGaussian.abs_teacher(3, u=U_GENERIC))
    ev = np.linalg.eigvalsh(M)
    assert ev == pytest.approx([0.7978846, 0.7978846, 1.5957691], abs=1e-6)
    assert abs(top_direction(M) @ np.array(U_GENERIC)) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("model", [TwoExpertGaussian.abs_teacher(3, u=U_GENERIC),
                                   TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA2)])
def test_closed_form_matches_monte_carlo(model):
    X, Y = model.sample(200_000, seed=1)
    u, b1, b2 = model.arrays()
    Mn, se, theta_bar = m_operator_mc(X, Y)
    M = m_operator_closed_form(model)
    # entrywise within 5 Monte Carlo standard errors (se ≈ 0.003–0.007 at n = 2e5)
    assert np.all(np.abs(Mn - M) <= 5 * se + 1e-12), (Mn - M) / se
    # the fitted expert mean is (β_1 + β_2)/2 (least squares; error O(n^-1/2))
    assert np.abs(theta_bar - 0.5 * (b1 + b2)).max() < 0.02


def test_growth_rates_are_eigs_over_sqrt2_tau():
    model = TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA2)
    M = m_operator_closed_form(model)
    lam = np.linalg.eigvalsh(M)
    rates = linear_growth_rates(M, [1.0, 0.1])
    expect = np.sort(np.concatenate([lam, -lam]) / math.sqrt(2))[::-1]
    assert rates[0] == pytest.approx(expect, abs=1e-10)
    assert rates[1] == pytest.approx(expect / 0.1, abs=1e-9)
    assert rates[0, 0] * 1.0 == pytest.approx(np.max(lam) / math.sqrt(2))


def test_vectorised_gradients_and_step_match_autograd_reference():
    model = TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA2)
    X, Y = model.sample(2_000, seed=2)
    g = torch.Generator().manual_seed(0)
    th1, th2, w = (torch.randn(3, 3, generator=g, dtype=torch.float64) for _ in range(3))
    tau = torch.tensor([1.0, 0.3, 0.05], dtype=torch.float64)
    p = [q.clone().requires_grad_(True) for q in (th1, th2, w)]
    auto = torch.autograd.grad(soft_risk(X, Y, *p, tau).sum(), p)
    mine = population_gradients(X, Y, th1, th2, w, tau)
    for a, b in zip(auto, mine):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)
    res = gradient_flow(X, Y, th1, th2, w, tau.numpy(), steps=1, h=0.05)
    ref = naive_gradient_flow_step(X, Y, th1, th2, w, tau.numpy(), h=0.05)
    assert np.allclose(res.w_final, ref[2].detach().numpy(), atol=1e-12)
    assert np.allclose(res.delta_final, (ref[0] - ref[1]).detach().numpy(), atol=1e-12)


def test_simulated_growth_times_tau_matches_1128_and_aligns_with_separator():
    model = TwoExpertGaussian.abs_teacher(3, u=U_GENERIC)
    X, Y = model.sample(20_000, seed=3)
    taus = np.array([1.0, 0.25])
    th1, th2, w = symmetric_start(X, Y, 2, scale_w=1e-8, scale_delta=1e-8, seed=4, tau=taus)
    res = gradient_flow(X, Y, th1, th2, w, taus, steps=140, h=0.1)
    rate_tau, rate = fit_growth_rate(res, 1e-5, 1e-3)
    assert np.all(np.isfinite(rate_tau))
    Mn, _, _ = m_operator_mc(X, Y)
    pred_sample = np.linalg.eigvalsh(Mn).max() / math.sqrt(2)
    # the flow on the sample follows the sample operator closely (linearisation + RK4 error)
    assert rate_tau == pytest.approx([pred_sample] * 2, rel=0.02)
    # and the population value 2/√π ≈ 1.1284 within the Monte Carlo error of λ_max(M_n) (n = 2e4)
    assert rate_tau == pytest.approx([2 / math.sqrt(math.pi)] * 2, rel=0.05)
    p, _ = fit_power_law(taus, rate)
    assert p == pytest.approx(-1.0, abs=0.03)
    cos = np.abs(res.w_final @ np.array(U_GENERIC)) / np.linalg.norm(res.w_final, axis=1)
    assert np.all(cos > 0.97)


def test_exact_symmetry_nothing_grows():
    model = TwoExpertGaussian.abs_teacher(3)
    X, Y = model.sample(5_000, seed=5)
    theta_bar = torch.linalg.lstsq(X, Y[:, None]).solution[:, 0]
    B = 3
    th = theta_bar[None].repeat(B, 1)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(B, 3, generator=g, dtype=torch.float64)
    taus = np.array([1.0, 0.1, 0.01])
    # identical experts: the output and the loss do not depend on the router at all
    _, _, gw = population_gradients(X, Y, th, th.clone(), w, torch.tensor(taus))
    assert float(gw.abs().max()) == 0.0
    # router-only flow with identical experts: the router never moves, at any τ
    res = gradient_flow(X, Y, th, th.clone(), w, taus, steps=50, h=0.1, train_experts=False)
    assert np.array_equal(res.w_final, w.numpy())
    # the fully symmetric state (δ = 0, w = 0) is a fixed point of the joint flow at every τ
    res0 = gradient_flow(X, Y, th, th.clone(), torch.zeros_like(w), taus, steps=50, h=0.1)
    assert np.abs(res0.w_norm).max() < 1e-12 and np.abs(res0.delta_norm).max() < 1e-12


def test_bad_input_raises():
    with pytest.raises(ValueError, match="tau = 0.0"):
        linear_growth_rates(np.eye(2), 0.0)
    with pytest.raises(ValueError, match=r"tau\[0\] = -1.0"):
        linear_growth_rates(np.eye(2), [-1.0])
    with pytest.raises(ValueError, match="non-zero"):
        TwoExpertGaussian(u=(0, 0, 0), beta1=BETA1, beta2=BETA2)
    with pytest.raises(ValueError, match="degenerate teacher"):
        TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA1)
    with pytest.raises(ValueError, match=r"beta1.shape = \(3,\)"):
        TwoExpertGaussian(u=(1.0, 0.0), beta1=BETA1, beta2=BETA2)
    with pytest.raises(ValueError, match=r"M.shape = \(2, 3\)"):
        linear_growth_rates(np.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match="d = 0 is not allowed"):
        TwoExpertGaussian.abs_teacher(0)
    model = TwoExpertGaussian.abs_teacher(2)
    X, Y = model.sample(100, seed=0)
    z = torch.zeros(1, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"w.shape = \(1, 3\)"):
        gradient_flow(X, Y, z, z, z, [1.0], steps=1)
    z2 = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"tau\[0\] = 0.0"):
        gradient_flow(X, Y, z2, z2, z2, [0.0], steps=1)


def test_couplings_are_one_half_and_one_so_the_rate_is_lambda_over_sqrt2():
    """The √2 of the rates is √(½·1): ẇ = Mδ/(2τ) (the gate slope σ'(0) = ¼ once) and
    δ̇ = Mw/τ (π_1 − π_2 = 2π_1 − 1: twice the gate change). Read both couplings off the
    library's gradients at the symmetric state; their product fixes λ/√2, whatever the scale
    of δ."""
    model = TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA2)
    X, Y = model.sample(3_000, seed=7)
    Mn, _, theta_bar = m_operator_mc(X, Y)
    tb = torch.as_tensor(theta_bar)[None]
    e = torch.tensor([[0.3, -0.5, 0.8]], dtype=torch.float64)
    zero = torch.zeros_like(e)
    tau = 0.2
    # router velocity from a contrast δ = ε e at w = 0 (exactly linear in δ there)
    eps = 1e-6
    _, _, gw = population_gradients(X, Y, tb + eps * e / 2, tb - eps * e / 2, zero,
                                    torch.tensor([tau]))
    c_w = (-gw[0].numpy()) / (Mn @ (eps * e[0].numpy()) / tau)
    # contrast velocity from a router w = ε e at δ = 0 (linear up to O(ε³))
    g1, g2, _ = population_gradients(X, Y, tb, tb.clone(), eps * e, torch.tensor([tau]))
    c_d = (-(g1 - g2)[0].numpy()) / (Mn @ (eps * e[0].numpy()) / tau)
    assert c_w == pytest.approx([0.5] * 3, rel=1e-6)
    assert c_d == pytest.approx([1.0] * 3, rel=1e-6)
    rate = math.sqrt(c_w[0] * c_d[0]) * np.abs(np.linalg.eigvalsh(Mn)).max() / tau
    assert rate == pytest.approx(linear_growth_rates(Mn, tau)[0, 0], rel=1e-6)


def test_orthogonal_teacher_router_direction_is_set_by_the_start():
    """γ ⊥ u: M = c(uγᵀ + γuᵀ) has eigenvalues ±c|γ|, both growing at the same rate, so the
    router's direction in span{u, γ̂} is the start's, not 45° from u (|cos| = 1/√2 is one mode
    alone). The flow follows the linear prediction e^{At} z_0 start by start."""
    from scipy.linalg import expm

    g = 0.8
    model = TwoExpertGaussian(u=(1.0, 0.0, 0.0), beta1=(0.0, g, 0.0), beta2=(0.0, -g, 0.0))
    c = math.sqrt(2 / math.pi)
    assert np.linalg.eigvalsh(m_operator_closed_form(model)) == pytest.approx(
        [-c * g, 0.0, c * g], abs=1e-12)
    top = linear_growth_rates(m_operator_closed_form(model), 1.0)[0]
    assert top[0] == pytest.approx(top[1], abs=1e-12)       # a two-dimensional growing space
    assert top[0] == pytest.approx(g / math.sqrt(math.pi), abs=1e-12)
    X, Y = model.sample(4_000, seed=1)
    Mp = m_operator_mc(X, Y)[0]
    A = np.block([[np.zeros((3, 3)), Mp / 2], [Mp, np.zeros((3, 3))]])
    B = 6
    s = symmetric_start(X, Y, B, scale_w=1e-8, scale_delta=1e-8, seed=2, shared=False)
    res = gradient_flow(X, Y, *s, np.ones(B), steps=300, h=0.1, record_path=True)
    z0 = np.hstack([s[2].numpy(), (s[0] - s[1]).numpy()])
    cos, cos_lin = [], []
    for b in range(B):
        i = int(np.argmax(res.w_norm[:, b] >= 1e-4))
        w, w_lin = res.w_path[i, b], (expm(A * res.t_over_tau[i]) @ z0[b])[:3]
        cos.append(abs(w[0]) / np.linalg.norm(w))
        cos_lin.append(abs(w_lin[0]) / np.linalg.norm(w_lin))
    cos = np.array(cos)
    assert cos == pytest.approx(cos_lin, abs=1e-3)
    assert np.ptp(cos) > 0.5                                  # not one angle for every start
    assert np.abs(cos - 1 / math.sqrt(2)).max() > 0.2


def test_doubling_the_contrast_shifts_the_breaking_by_the_left_eigenvector_weight():
    """General teacher: the eigenvalue of M of largest modulus is negative, the fastest mode is
    (v, −√2v), and the start's weight on it is √2 v·w_0 − v·δ_0 (left eigenvector (√2v, −v)).
    Doubling δ_0 shifts the time to reach a given |w| by log(|p_old|/|p_new|)/(rate·τ); with the
    positive-eigenvalue weight √2 v·w_0 + v·δ_0 the prediction would have the wrong sign."""
    u = np.random.default_rng(0).standard_normal(3)          # the chapter's `general`
    model = TwoExpertGaussian(u=u, beta1=BETA1, beta2=BETA2)
    ev_pop = np.linalg.eigvalsh(m_operator_closed_form(model))
    assert ev_pop[np.argmax(np.abs(ev_pop))] == pytest.approx(-0.7536, abs=1e-4)
    X, Y = model.sample(4_000, seed=1)
    Mn = m_operator_mc(X, Y)[0]
    ev, V = np.linalg.eigh(Mn)
    k = int(np.argmax(np.abs(ev)))
    v, sgn = V[:, k], np.sign(ev[k])
    assert sgn == -1
    lam = abs(ev[k]) / math.sqrt(2)
    starts = [symmetric_start(X, Y, 1, scale_w=1e-8, scale_delta=sd, seed=2)
              for sd in (1e-8, 2e-8)]
    th1, th2, w0 = (torch.cat(parts) for parts in zip(*starts))
    res = gradient_flow(X, Y, th1, th2, w0, np.ones(2), steps=320, h=0.1)
    t_hit = [np.interp(np.log(1e-3), np.log(res.w_norm[:, b]), res.t_over_tau)
             for b in range(2)]
    a, b0 = float(v @ w0[0].numpy()), float(v @ (th1 - th2)[0].numpy())
    p_old, p_new = math.sqrt(2) * a + sgn * b0, math.sqrt(2) * a + sgn * 2 * b0
    predicted = math.log(abs(p_old / p_new)) / lam
    assert t_hit[1] - t_hit[0] == pytest.approx(predicted, abs=0.02)
    # the closing rule: a delay exactly when a, b have the same sign and |b| < (2√2/3)|a|
    assert (predicted > 0) == (a * b0 > 0 and abs(b0) < 2 * math.sqrt(2) / 3 * abs(a))
    wrong = math.log(abs((math.sqrt(2) * a + b0) / (math.sqrt(2) * a + 2 * b0))) / lam
    assert np.sign(wrong) != np.sign(t_hit[1] - t_hit[0])


# ------------------------------------------------- the faster paths against the references

def test_fused_gradients_and_moments_match_the_reference_paths():
    model = TwoExpertGaussian(u=U_GENERIC, beta1=BETA1, beta2=BETA2)
    X, Y = model.sample(4_096, seed=11)
    taus = np.array([1.0, 0.1, 0.02])
    start = symmetric_start(X, Y, 3, scale_w=1e-3, scale_delta=1e-3, seed=12, tau=taus)
    new = gradient_flow(X, Y, *start, taus, steps=40, h=0.1)
    old = gradient_flow(X, Y, *start, taus, steps=40, h=0.1, reference=True)
    assert new.w_final == pytest.approx(old.w_final, rel=1e-9, abs=1e-15)
    assert new.delta_final == pytest.approx(old.delta_final, rel=1e-9, abs=1e-15)
    M, se, tb = m_operator_mc(X, Y)
    M0, se0, tb0 = m_operator_mc(X, Y, reference=True)
    assert M == pytest.approx(M0, rel=1e-12, abs=1e-14) and tb == pytest.approx(tb0)
    assert se == pytest.approx(se0, rel=1e-8)


def test_sobol_sample_stands_for_the_population_better_than_16_times_more_iid_draws():
    """The chapter's choice: n/16 scrambled Sobol' points put the sample's rate closer to the
    population's 2/√π than n i.i.d. draws (RMS over seeds); and the sample is N(0, I)."""
    model = TwoExpertGaussian.abs_teacher(3, u=U_GENERIC)
    pop = 2 / math.sqrt(math.pi)
    from moe_routing.landscape.symmetry import fastest_rate_times_tau

    def rms(n, method):
        e = [fastest_rate_times_tau(m_operator_mc(*model.sample(n, seed=s, method=method))[0])
             - pop for s in range(6)]
        return float(np.sqrt(np.mean(np.square(e))))

    assert rms(1 << 12, "sobol") < rms(1 << 16, "iid")
    X, _ = model.sample(1 << 14, seed=0, method="sobol")
    assert X.mean(0).abs().max() < 1e-3 and (X.T @ X / X.shape[0] - torch.eye(3)).abs().max() < 5e-3
    with pytest.raises(ValueError, match="^n = 1000 "):
        model.sample(1000, seed=0, method="sobol")
    with pytest.raises(ValueError, match="^method = "):
        model.sample(1024, seed=0, method="halton")


def test_flow_reports_progress_once_per_step():
    model = TwoExpertGaussian.abs_teacher(3)
    X, Y = model.sample(256, seed=0)
    calls = []
    start = symmetric_start(X, Y, 1, scale_w=1e-3, scale_delta=1e-3, seed=1)
    gradient_flow(X, Y, *start, [1.0], steps=7, progress=lambda i, n: calls.append((i, n)))
    assert calls == [(i, 7) for i in range(1, 8)]
    with pytest.raises(ValueError, match="^progress = "):
        gradient_flow(X, Y, *start, [1.0], steps=2, progress="yes")
