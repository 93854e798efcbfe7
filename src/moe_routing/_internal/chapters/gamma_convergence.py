"""The tables, figures and ledger line of the Γ-convergence chapter (B-Thm 4.7).

The chapter minimises the soft and hard risks of a one-dimensional threshold family
(:class:`moe_routing.boundary.ThresholdFamily`) at several temperatures, with and without
uniform margin control; what is here lays the minimisers out: the tables of minimisers and
rates, the profiled risks, the rate and counter-example figures and the sentence the ledger
keeps. Keeping them out of the chapter leaves the reader the family and the calls that
minimise it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...boundary import fit_loglog, risk_bound
from ..plots import PALETTE, column_figsize
from ..progress import Progress

COLOURS = [PALETTE[i] for i in (0, 3, 2, 4, 1, 5, 7)]   # no light yellow on white
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
# the tables' headers in words and Unicode (the tables' keys are the code's names)
HEADERS = {"b_τ": "b", "s_τ": "s", "c_τ": "c", "min L_τ": "min soft risk",
           "min L_τ − min L_0": "min soft − min hard risk",
           "|b_τ − b_0| + |c_τ − c_0|": "|b − b₀| + |c − c₀|",
           "sup |L_τ − L_0| (grid)": "sup |soft − hard risk| (grid)", "s_τ / τ": "s / τ",
           "min L_0": "min hard risk",
           "L_0 at the limit point s = 0": "hard risk at the limit point s = 0"}


def minimiser_table(fam, hard, taus, n_b: int, n_s: int, n_sup: int,
                    B_star: float) -> pd.DataFrame:
    """One row per temperature of the family ``fam`` with uniform margin control: the soft
    minimiser and minimum, their distances to the hard ones (``hard``), the largest gap
    :math:`|L_\\tau-L_0|` over a grid of ``n_sup`` points per parameter and the risk bound at
    that τ -- the three quantities Γ-convergence with a rate makes go to zero like τ."""
    rows = []
    bar = Progress("minimisers and sup |L_τ − L_0|: temperature", len(taus), every=0.0)
    for i, tau in enumerate(taus):
        m = fam.minimise(tau, n_b=n_b, n_s=n_s)
        sup = fam.sup_gap(tau, n_b=n_sup, n_s=n_sup, n_c=n_sup)
        bar(i + 1, note=f"τ = {tau:g}")
        rows.append({"τ": tau, "b_τ": m.b, "s_τ": m.s, "c_τ": np.round(m.c, 4),
                     "min L_τ": m.risk, "min L_τ − min L_0": m.risk - hard.risk,
                     "|b_τ − b_0| + |c_τ − c_0|": (abs(m.b - hard.b)
                                                   + np.abs(m.c - hard.c).sum()),
                     "sup |L_τ − L_0| (grid)": sup,
                     "bound": risk_bound(tau, 2, fam.c_bound, B_star, fam.margin_constant(),
                                         1.0)[0]})
    return pd.DataFrame(rows)


def profiles(fam, taus, s_min: float):
    """``(b_grid, prof0, prof)``: the hard profiled risk :math:`\\bar L_0(b)` on 91 thresholds
    (``(91,)``, at the scale ``s_min``, where it does not depend on s) and, per temperature,
    the soft one minimised over 9 scales (``{τ: (91,)}``)."""
    b_grid = np.linspace(*fam.b_range, 91)
    s_grid = np.geomspace(s_min, 1.0, 9)
    prof0 = np.array([fam.hard_profile(b, [s_min]).risk[0] for b in b_grid])
    prof = {tau: np.array([fam.soft_profile(b, s_grid, tau).risk.min() for b in b_grid])
            for tau in taus}
    return b_grid, prof0, prof


def profiles_figure(b_grid, prof0, prof, taus, hard_b: float):
    """Two stacked panels against the threshold: the hard profiled risk, and the soft minus
    the hard profile per temperature, the hard minimiser dotted in both -- the differences
    shrinking uniformly in b is the uniform convergence behind Γ-convergence."""
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=column_figsize(0.4, 2), sharex=True)
    ax0.plot(b_grid, prof0, "k-", lw=1.5)
    ax0.set_ylabel(r"$\bar L_0(b)$")
    for i, tau in enumerate(taus):
        ax1.plot(b_grid, prof[tau] - prof0, "-", marker=MARKERS[i], markevery=(2 * i, 15),
                 ms=5, lw=1, color=COLOURS[i], label=f"τ = {tau:g}")
    ax1.axhline(0.0, color="0.5", lw=0.8)
    for ax in (ax0, ax1):
        ax.axvline(hard_b, color="k", lw=0.8, ls=":")
    ax1.set_xlabel("router threshold $b$")
    ax1.set_ylabel(r"$\bar L_\tau(b)-\bar L_0(b)$")
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=4)
    return fig


def profile_gap_figure(b_grid, prof0, prof, taus):
    """The soft minus the hard profile divided by τ against the threshold, per temperature:
    curves that collapse onto one are profiles that differ by :math:`O(\\tau)` uniformly."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    for i, tau in enumerate(taus):
        ax.plot(b_grid, (prof[tau] - prof0) / tau, "-", marker=MARKERS[i],
                markevery=(2 * i, 15), ms=5, lw=1, color=COLOURS[i], label=f"τ = {tau:g}")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("router threshold $b$")
    ax.set_ylabel(r"$(\bar L_\tau-\bar L_0)/\tau$")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
    return fig


def rate_fits(asym) -> dict:
    """Log–log fits against τ of the three distances of the table ``asym`` (its rows in the
    asymptotic regime), keyed by what they measure."""
    return {q: fit_loglog(asym["τ"], asym[col].abs()) for q, col in [
        ("|min L_τ − min L_0|", "min L_τ − min L_0"),
        ("|b_τ − b_0| + |c_τ − c_0|", "|b_τ − b_0| + |c_τ − c_0|"),
        ("sup |L_τ − L_0|", "sup |L_τ − L_0| (grid)")]}


def rates_table(fits: dict) -> pd.DataFrame:
    """The fitted rates (slopes in τ) with their 95% intervals, one row per quantity."""
    return pd.DataFrame({"quantity": list(fits),
                         "fitted rate (slope in τ)": [f.slope for f in fits.values()],
                         "95% CI": ["[{:.3f}, {:.3f}]".format(*f.slope_ci)
                                    for f in fits.values()]})


def rates_figure(uniform_table):
    """The distance of the minimisers, the difference of the minima, the largest gap over the
    family and its bound (dashed) against τ on log–log axes: slope 1 is a rate τ."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    series = [(r"$|b_\tau-b_0|+|c_\tau-c_0|$", "|b_τ − b_0| + |c_τ − c_0|", "-"),
              (r"$|\min L_\tau-\min L_0|$", "min L_τ − min L_0", "-"),
              (r"$\sup|L_\tau-L_0|$ over the family (grid)", "sup |L_τ − L_0| (grid)", "-"),
              (r"bound $4(K-1)B(B+B^*)C_m\tau$", "bound", "--")]
    for i, (label, col, ls) in enumerate(series):
        ax.loglog(uniform_table["τ"], uniform_table[col].abs(), ls, marker=MARKERS[i], ms=6,
                  color=COLOURS[i], label=label)
    ax.set_xlabel(r"temperature $\tau$")
    ax.set_ylabel("distance or risk difference")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    return fig


def counter_table(fam0, hard0, taus, n_b: int, n_s: int) -> pd.DataFrame:
    """One row per temperature of the family ``fam0`` that lets the scale reach 0: the soft
    minimiser (on twice the scale grid), :math:`s_\\tau/\\tau`, the soft minimum beside the
    hard one, and the hard risk at the limit point s = 0 -- where the soft minima go when
    there is no uniform margin control."""
    rows = []
    for tau in taus:
        m = fam0.minimise(tau, n_b=n_b, n_s=2 * n_s)
        rows.append({"τ": tau, "b_τ": m.b, "s_τ": m.s, "s_τ / τ": m.s / tau,
                     "min L_τ": m.risk, "min L_0": hard0.risk,
                     "L_0 at the limit point s = 0": fam0.hard_profile(m.b, [0.0]).risk[0]})
    return pd.DataFrame(rows)


def counter_figure(uniform_table, counter_table, s_min: float, hard_risk: float):
    """The soft minimum against τ with uniform margin control (circles) and without
    (squares), beside the hard minimum (dashed): Γ-convergence brings the circles to the
    line, the counter-example keeps the squares below it."""
    fig, ax = plt.subplots(figsize=column_figsize(0.5))
    ax.semilogx(uniform_table["τ"], uniform_table["min L_τ"], "-", marker="o", ms=6,
                color=COLOURS[0],
                label=rf"$\min L_\tau$, $s\in[{s_min:g}, 1]$ (uniform control)")
    ax.semilogx(counter_table["τ"], counter_table["min L_τ"], "-", marker="s", ms=6,
                color=COLOURS[1], label=r"$\min L_\tau$, $s\in[0, 1]$ (no uniform control)")
    ax.axhline(hard_risk, color="k", ls="--", lw=1, label=r"$\min L_0$")
    ax.set_xlabel(r"temperature $\tau$")
    ax.set_ylabel("minimum of the soft risk")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    return fig


def gamma_measured(s_min: float, taus, dist, gaps, fits: dict, sup_ratio, counter_table,
                   hard0_risk: float) -> str:
    """The ledger's line for B-gamma: the distances and their rates with uniform control,
    and the soft minima stuck below the hard one without it."""
    return (f"uniform control (s ≥ {s_min}): as τ goes {taus[0]:g} → {taus[-1]:g}, "
            f"|b_τ − b_0| + |c_τ − c_0| {dist.iloc[0]:.4f} → {dist.iloc[-1]:.4f} (rate "
            f"τ^{fits['|b_τ − b_0| + |c_τ − c_0|'].slope:.2f}), |min L_τ − min L_0| "
            f"{gaps.iloc[0]:.4f} → {gaps.iloc[-1]:.5f} "
            f"(rate τ^{fits['|min L_τ − min L_0|'].slope:.2f}), max sup-gap/bound "
            f"{sup_ratio.max():.3f}"
            f". Without it (s ∈ [0, 1]): min L_τ range "
            f"{np.ptp(counter_table['min L_τ']):.1e}, "
            f"{hard0_risk - counter_table['min L_τ'].max():.4f} below min L_0; s_τ/τ = "
            f"{counter_table['s_τ / τ'].mean():.3f} (s_τ → 0)")
