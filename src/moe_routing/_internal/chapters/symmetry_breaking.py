"""The tables, figures and ledger lines of the symmetry-breaking chapter (B-Prop 6.3).

The chapter simulates the population gradient flow near the symmetric state with
:mod:`moe_routing.landscape.symmetry_flow` and checks the operator :math:`M` of
:mod:`moe_routing.landscape.symmetry`; what is here only lays those numbers out: the comparison
table of :math:`M` against Monte Carlo, the growth and alignment figures, and the sentences the
ledger keeps. Keeping them out of the chapter leaves the reader the calls that make the numbers.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...landscape.symmetry import (fastest_rate_times_tau, m_operator_closed_form,
                                   m_operator_mc, top_direction)
from ..plots import column_figsize

# one line style per temperature, so that coinciding curves stay distinguishable
LINE_STYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1))]


def operator_table(models: dict, n_mc: int, seed: int, u):
    """The closed-form :math:`M` against its Monte Carlo estimate, one row per teacher in
    ``models`` (name -> :class:`TwoExpertGaussian`), each sampled with ``n_mc`` independent draws
    of ``seed`` (independent, so that the standard errors hold). Returns the table and
    ``{name: (M, M_n, se)}`` (three ``(d, d)`` arrays) for the checks that follow."""
    rows, mc = [], {}
    for name, model in models.items():
        X, Y = model.sample(n_mc, seed=seed)
        Mn, se, theta_bar = m_operator_mc(X, Y)
        M = m_operator_closed_form(model)
        mc[name] = (M, Mn, se)
        mean_expert = 0.5 * (np.array(model.beta1) + np.array(model.beta2))
        rows.append({
            "teacher": name,
            "closed-form eigenvalues": np.linalg.eigvalsh(M).round(4),
            "Monte Carlo eigenvalues": np.linalg.eigvalsh(Mn).round(4),
            "max |Mₙ − M| / se": float((np.abs(Mn - M) / se).max()),
            "|θ̄ₙ − (β₁+β₂)/2|": float(np.abs(theta_bar - mean_expert).max()),
            "fastest rate × τ": fastest_rate_times_tau(M),
            "|cos(vₘₐₓ(M), u)|": float(abs(top_direction(M) @ u)),
        })
    return pd.DataFrame(rows), mc


def rate_table(taus, rate, rate_tau, pred_sample: float, pred_pop: float) -> pd.DataFrame:
    """Fitted growth rates per temperature (``taus``, ``rate``, ``rate_tau``: ``(B,)``) beside
    the sample's prediction :math:`\\max|\\lambda(M_n)|/\\sqrt2` and the population's
    :math:`2/\\sqrt\\pi`: rate·τ must be the same number at every temperature."""
    return pd.DataFrame({
        "τ": taus,
        "fitted rate": rate,
        "rate × τ": rate_tau,
        "max|λ(Mₙ)|/√2 (sample)": pred_sample,
        "2/√π (population)": pred_pop,
    })


def growth_figure(flow, taus, window, pred_pop: float, init_scale: float):
    """Router norm against :math:`t/\\tau` for every temperature (``flow.w_norm``:
    ``(steps+1, B)``), with the linearised slope :math:`2/\\sqrt\\pi` drawn through the point
    where the coldest flow enters the fit window: in these units the linearisation predicts a
    single curve, so the curves may part only where the flow stops being linear."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    for b, (t, ls) in enumerate(zip(taus, LINE_STYLES)):
        ax.semilogy(flow.t_over_tau, flow.w_norm[:, b], ls=ls, lw=1.6, label=f"τ = {t:g}")
    tt = flow.t_over_tau
    i0 = np.argmin(np.abs(flow.w_norm[:, -1] - window[0]))
    ax.semilogy(tt, window[0] * np.exp(pred_pop * (tt - tt[i0])), "k:", lw=1,
                label="slope 2/√π (linearisation)")
    ax.axhspan(*window, facecolor="0.8", edgecolor="0.5", zorder=0, label="fit window")
    ax.set_xlabel("time / τ")
    ax.set_ylabel("router norm |w|")
    ax.set_ylim(init_scale / 10, 10)
    ax.legend(loc="lower right")
    return fig


def rates_figure(taus, rate, p_fit, c_fit, pred_pop: float):
    """Fitted growth rates (``(B,)``) against τ on log–log axes, with the power-law fit
    :math:`c\\,\\tau^p` (when there are several temperatures) and the prediction
    :math:`2/(\\sqrt\\pi\\,\\tau)`: a slope of −1 is the claim's :math:`1/\\tau`."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    ax.loglog(taus, rate, "o", ms=8, label="simulated growth rate")
    tg = np.geomspace(taus.min(), taus.max(), 50)
    if p_fit is not None:
        ax.loglog(tg, c_fit * tg**p_fit, "-",
                  label=rf"fit ${c_fit:.3f}\,\tau^{{{p_fit:.3f}}}$")
    ax.loglog(tg, pred_pop / tg, "k:",
              label=r"$\lambda_{\max}(M)/(\sqrt{2}\,\tau)=2/(\sqrt{\pi}\,\tau)$")
    ax.set_xlabel("temperature τ")
    ax.set_ylabel("growth rate of |w| (1 / time)")
    ax.legend()
    return fig


def alignment(flow, taus, u, window):
    """``(cos_path, cos_end_window)``: :math:`|\\cos(w,u)|` along the flow (``(steps+1, B)``)
    and at the step where each temperature's :math:`|w|` first reaches the top of the fit window
    (``(B,)``), where the linear regime ends and the direction is set."""
    cos_path = np.abs(flow.w_path @ u) / np.linalg.norm(flow.w_path, axis=2)  # (steps+1, B)
    in_window = [int((flow.w_norm[:, b] >= window[1]).argmax()) for b in range(len(taus))]
    cos_end_window = np.array([cos_path[i, b] for b, i in enumerate(in_window)])
    return cos_path, cos_end_window


def general_alignment(flow_g, vg, u, window):
    """The general teacher's single flow (``flow_g.w_path``: ``(steps_g+1, 1, d)``) against its
    top eigenvector ``vg`` and the separator ``u``: ``(cos_v, cos_u)`` where :math:`|w|` first
    reaches the top of the fit window (the last step if never), and the two cosines along the
    whole path (``(steps_g+1,)`` each)."""
    ig = int((flow_g.w_norm[:, 0] >= window[1]).argmax()) or -1
    wg = flow_g.w_path[ig, 0]
    cos_g_v = float(abs(wg @ vg) / np.linalg.norm(wg))
    cos_g_u = float(abs(wg @ u) / np.linalg.norm(wg))
    path_g = flow_g.w_path[:, 0]
    cos_g_path_u = np.abs(path_g @ u) / np.linalg.norm(path_g, axis=1)
    cos_g_path_v = np.abs(path_g @ vg) / np.linalg.norm(path_g, axis=1)
    return cos_g_v, cos_g_u, cos_g_path_u, cos_g_path_v


def alignment_table(taus, window, cos_end_window, cos_path) -> pd.DataFrame:
    """:math:`|\\cos(w,u)|` per temperature at the top of the fit window and at the end."""
    return pd.DataFrame({
        "τ": taus,
        f"|cos(w,u)| at |w| = {window[1]:g}": cos_end_window,
        "|cos(w,u)| at the end": cos_path[-1],
    })


def alignment_figure(flow, cos_path, taus, flow_g, cos_g_path_u, cos_g_path_v):
    """:math:`|\\cos(w,u)|` along the flow of the teacher :math:`|u\\cdot X|` at every
    temperature (``cos_path``: ``(steps+1, B)``), and for the general teacher (``(steps_g+1,)``
    each) its cosines with ``u`` and with :math:`v_{\\max}(M_n)`: the router follows the top
    eigenvector, which is the separator only for the first teacher."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    for b, (t, ls) in enumerate(zip(taus, LINE_STYLES)):
        ax.plot(flow.t_over_tau, cos_path[:, b], ls=ls, lw=1.6,
                label=f"|u·X| teacher, τ = {t:g}")
    ax.plot(flow_g.t_over_tau, cos_g_path_u, "-", color="#000000", lw=2.2,
            label=f"general teacher, |cos(w, u)|, τ = {taus[0]:g}")
    ax.plot(flow_g.t_over_tau, cos_g_path_v, "-", color="#8C564B", lw=1.2, marker="o",
            markevery=25, ms=5, label=r"general teacher, $|\cos(w,v_{\max}(M_n))|$")
    ax.set_xlabel("time / τ")
    ax.set_ylabel("alignment |cos|")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right")
    return fig


def speed_table(taus, speed, speed_pred: float) -> pd.DataFrame:
    """Router speed at :math:`w=0` under a frozen contrast :math:`\\delta_0` (``speed``:
    ``(B,)``): speed × τ must equal :math:`|M_n\\delta_0|/2` at every temperature."""
    return pd.DataFrame({
        "τ": taus,
        "router speed |ẇ| at w = 0": speed,
        "speed × τ": speed * taus,
        "|Mₙ δ₀| / 2": speed_pred,
    })


def unstable_measured(mc_abs, d: int, init_scale: float, rate_tau, pred_sample: float,
                      rel_err) -> str:
    """The ledger's line for B-symmetry-unstable: the eigenvalues of :math:`M` (closed form and
    Monte Carlo, ``mc_abs = (M, M_n, se)``) and the fitted rate·τ against the prediction."""
    ev_abs = np.linalg.eigvalsh(mc_abs[0])
    return (
        f"eigenvalues of M (|u·X|, d = {d}): closed form {ev_abs.round(4).tolist()}, "
        f"Monte Carlo {np.linalg.eigvalsh(mc_abs[1]).round(4).tolist()}; "
        f"growth from |w| = |δ| = {init_scale:g}: rate·τ = "
        f"{np.round(rate_tau, 4).tolist()} "
        f"vs max|λ(Mₙ)|/√2 = {pred_sample:.4f} (max rel. error {rel_err.max():.2%})"
    )


def direction_measured(window, cos_end_window, tau0: float, cos_g_v: float, cos_g_u: float,
                       cos_vu: float) -> str:
    """The ledger's line for B-symmetry-direction: the router's alignment with ``u`` (teacher
    :math:`|u\\cdot X|`) and with :math:`v_{\\max}` against ``u`` (general teacher)."""
    return (
        f"|u·X| teacher: |cos(w,u)| at |w| = {window[1]:g}: "
        f"{np.round(cos_end_window, 4).tolist()}; general teacher (τ = {tau0:g}): "
        f"|cos(w, vₘₐₓ(M))| = {cos_g_v:.4f}, |cos(w, u)| = {cos_g_u:.4f}, "
        f"|cos(vₘₐₓ(M), u)| = {cos_vu:.4f}"
    )


def inverse_tau_measured(fit_txt: str, taus, rate_tau, pred_sample: float, pred_pop: float,
                         speed) -> str:
    """The ledger's line for B-symmetry-inverse-tau: the power-law fit, the spread of rate·τ
    and the frozen-contrast speed × τ."""
    return (
        f"fitted growth rate = {fit_txt} over τ ∈ {taus.tolist()}; rate·τ ∈ "
        f"[{rate_tau.min():.4f}, {rate_tau.max():.4f}] vs max|λ(Mₙ)|/√2 = "
        f"{pred_sample:.4f} (population 2/√π = {pred_pop:.4f}); frozen-contrast router "
        f"speed × τ = {np.round(speed * taus, 6).tolist()}"
    )


def exact_measured(grad_at_symmetry: float, taus, router_moved: float,
                   fixed_growth: float) -> str:
    """The ledger's line for B-symmetry-exact: the three fixed-point checks."""
    return (
        f"identical experts: max |∇_w L_τ| = {grad_at_symmetry:.1e} for random w at "
        f"τ ∈ {taus.tolist()}; router-only flow moved w by {router_moved:.1e}; joint "
        "flow "
        f"from (δ, w) = (0, 0): max norm {fixed_growth:.1e}"
    )
