"""The tables, figures and ledger lines of the boundary-mass chapter (paper B's coarea estimate).

The chapter measures the boundary mass :math:`\\mathrm{BM}(w)` of routers and input laws with
:mod:`moe_routing.boundary` and fits it; what is here lays the fits out: the tables of slopes,
prefactors and constants with their intervals, the figures of the slab and of
:math:`\\mathrm{BM}(w)` against its prediction, and the sentences the ledger keeps. Keeping them
out of the chapter leaves the reader the cases and the calls that measure them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import ticker

from ...boundary import LinearRouter, PowerRouter, SphereRouter, top_two_margin
from ..plots import PALETTE, column_figsize

COLOURS = [PALETTE[i] for i in (0, 3, 2, 4, 1, 7)]   # no light yellow on white
MARKERS = ["o", "s", "^", "D", "v", "P"]
TEX_NAMES = {   # the exponent cases' names in mathtext, for the legend
    "g = x1², Gaussian (α = 1/2)": r"$g = x_1^2$, Gaussian ($\alpha = 1/2$)",
    "g = x1³ signed, Gaussian (α = 1/3)":
        r"$g = x_1^3$ signed, Gaussian ($\alpha = 1/3$)",
    "g = x1, density ∝ |x1| (α = 2)":
        r"$g = x_1$, density $\propto |x_1|$ ($\alpha = 2$)",
    "g = x1, density ∝ |x1|² (α = 3)":
        r"$g = x_1$, density $\propto |x_1|^2$ ($\alpha = 3$)",
}


def log_axis(axis):
    """Log scale with a few plain tick labels (no crowded minor labels)."""
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(ticker.NullFormatter())


def interfaces_figure(w_pic: float = 0.25):
    """Routing regions and the slab :math:`\\{\\Delta\\le w\\}` at ``w_pic`` on a grid of the
    plane for three routers: a linear one with four experts, a circle and the non-transversal
    :math:`g=x_1^2` -- thin slabs around transversal interfaces, a thick one where
    :math:`\\nabla g` vanishes, which is why the exponent changes there."""
    grid = np.linspace(-2.5, 2.5, 301)
    X1, X2 = np.meshgrid(grid, grid)
    pts = np.stack([X1.ravel(), X2.ravel()], 1)                          # (n, 2)
    pic_routers = {
        "linear, K = 4": LinearRouter(np.array([[1.0, 0.2], [-0.6, 1.0], [-0.8, -0.9],
                                                [0.7, -1.1]])),
        "circle, K = 2": SphereRouter([0.2, -0.1], 1.3),
        "$g = x_1^2$": PowerRouter(2, power=2.0),
    }
    fig, axes = plt.subplots(1, 3, figsize=column_figsize(0.36), sharey=True)
    for ax, (name, r) in zip(axes, pic_routers.items()):
        a = r.logits(pts)                                                # (n, K)
        region = a.argmax(1).reshape(X1.shape)
        slab = (top_two_margin(a) <= w_pic).reshape(X1.shape)
        ax.contourf(X1, X2, region, levels=np.arange(-0.5, r.n_experts), cmap="Pastel1")
        ax.contourf(X1, X2, slab.astype(float), levels=[0.5, 1.5], colors=["0.3"], alpha=0.7)
        ax.set_title(name)
        ax.set_xlabel("$x_1$")
        ax.set_aspect("equal")
        ax.set_xticks([-2, 0, 2])
        ax.grid(False)
    axes[0].set_ylabel("$x_2$")
    return fig


def binary_table(binary: dict) -> pd.DataFrame:
    """One row per binary interface (``binary``: name -> (coarea constant S, power-law
    check)): the free slope and the prefactor at slope 1 with their intervals, against 2S."""
    return pd.DataFrame([
        {"interface": name, "S from": S.method, "2S": 2 * S.value, "slope": c.free.slope,
         "slope CI": "[{:.3f}, {:.3f}]".format(*c.free.slope_ci),
         "prefactor (slope 1)": c.fixed.prefactor,
         "prefactor CI": "[{:.4f}, {:.4f}]".format(*c.fixed.prefactor_ci),
         "prefactor / 2S − 1": c.relative_error}
        for name, (S, c) in binary.items()])


def binary_figure(binary: dict):
    """Monte Carlo :math:`\\mathrm{BM}(w)` over the prediction :math:`2wS` at each width (with
    the simultaneous intervals), one series per binary interface, the series nudged apart in
    :math:`w`: a ratio of one at every width is linearity with the predicted constant."""
    fig, ax = plt.subplots(figsize=column_figsize(0.5))
    for i, (name, (S, c)) in enumerate(binary.items()):
        pred = 2 * S.value * c.widths
        lo, hi = c.bm.lower / pred, c.bm.upper / pred
        r = c.bm.estimate / pred
        ax.errorbar(c.widths * (1 + 0.03 * (i - 1)), r, yerr=[r - lo, hi - r],
                    fmt=MARKERS[i], ms=5, color=COLOURS[i], capsize=2, label=name)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="prediction $2wS$ (ratio 1)")
    ax.set_xscale("log")
    log_axis(ax.xaxis)
    ax.set_xlabel("slab width $w$ (logit units)")
    ax.set_ylabel("$\\mathrm{BM}(w)\\,/\\,(2wS)$")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


def binary_measured(binary: dict, n_mc: int) -> str:
    """The ledger's line for B-bm-binary: slope and prefactor with intervals per interface."""
    return ("; ".join(f"{name}: slope {c.free.slope:.3f} "
                      "[{:.3f}, {:.3f}], ".format(*c.free.slope_ci)
                      + f"prefactor {c.fixed.prefactor:.4f} "
                      "[{:.4f}, {:.4f}] vs 2S = ".format(*c.fixed.prefactor_ci)
                      + f"{2 * S.value:.4f}" for name, (S, c) in binary.items())
            + f" (n = {n_mc:,} per curve, simultaneous 95% bootstrap intervals)")


def alpha_table(exponents: dict) -> pd.DataFrame:
    """One row per non-transversal case (``exponents``: name -> power-law check): the
    predicted exponent against the fitted slope and its interval."""
    return pd.DataFrame([
        {"case": name, "predicted α": c.alpha, "fitted slope": c.free.slope,
         "slope CI": "[{:.3f}, {:.3f}]".format(*c.free.slope_ci), "α in CI": c.slope_covers}
        for name, c in exponents.items()])


def exponents_figure(exponents: dict):
    """:math:`\\mathrm{BM}(w)` of each non-transversal case on log–log axes (points with the
    simultaneous intervals) with its leading-order prediction :math:`C\\,w^\\alpha` (line):
    the slopes are the predicted exponents, not 1."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    for i, (name, c) in enumerate(exponents.items()):
        ax.errorbar(c.widths, c.bm.estimate, yerr=[c.bm.estimate - c.bm.lower,
                                                   c.bm.upper - c.bm.estimate],
                    fmt=MARKERS[i], ms=5, color=COLOURS[i], label=TEX_NAMES.get(name, name))
        ax.plot(c.widths, c.prefactor * c.widths ** c.alpha, "-", color=COLOURS[i], lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("slab width $w$ (logit units)")
    ax.set_ylabel("boundary mass $\\mathrm{BM}(w)$")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2)
    return fig


def exponents_measured(exponents: dict, n_mc: int) -> str:
    """The ledger's line for X-bm-exponents: the fitted slope and interval per case."""
    return ("; ".join(f"{name}: slope {c.free.slope:.3f} "
                      "[{:.3f}, {:.3f}]".format(*c.free.slope_ci)
                      for name, c in exponents.items())
            + f" (n = {n_mc:,}, simultaneous 95% intervals)")


def multi_table(multi: dict) -> pd.DataFrame:
    """One row per (d, K) random linear router (``multi``: (d, K) -> junction check): the
    sharp junction-free constant against the Monte Carlo :math:`\\lim\\mathrm{BM}/2w`, the
    slope and the pairwise union bound's constant."""
    return pd.DataFrame([
        {"d": d, "K": K, "sharp constant": c.constants.sharp_total,
         "sharp se": c.constants.sharp_total_se, "Monte Carlo lim BM/2w": c.constant.constant,
         "MC CI": "[{:.4f}, {:.4f}]".format(*c.constant.constant_ci),
         "MC / sharp − 1": c.constant.constant / c.constants.sharp_total - 1,
         "slope": c.slope.slope, "union constant": c.constants.union_total}
        for (d, K), c in multi.items()])


def multi_figure(multi: dict, experts_list):
    """:math:`\\mathrm{BM}(w)/2w` over the sharp constant at the fit widths, one panel per
    dimension (2, 3) and one series per number of experts: the ratio tends to 1 as
    :math:`w\\to0` when the sharp constant is the slope (the junctions tilt it by
    :math:`O(w)`)."""
    fig, axes = plt.subplots(2, 1, figsize=column_figsize(0.4, rows=2), sharex=True)
    for ax, d in zip(axes, (2, 3)):
        for i, K in enumerate(experts_list):
            c = multi[(d, K)]
            scale = 2 * c.bm.widths * c.constants.sharp_total
            r, lo, hi = c.bm.estimate / scale, c.bm.lower / scale, c.bm.upper / scale
            ax.errorbar(c.bm.widths * (1 + 0.04 * i), r, yerr=[r - lo, hi - r],
                        fmt=MARKERS[i], ms=5, color=COLOURS[i], capsize=2,
                        label=f"$K = {K}$")
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_ylabel("$\\mathrm{BM}(w)\\,/\\,(2w\\cdot$sharp$)$")
        ax.set_title(f"$d = {d}$", loc="left")
    axes[1].set_xscale("log")
    log_axis(axes[1].xaxis)
    axes[1].set_xlabel("slab width $w$ (logit units)")
    axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=len(experts_list))
    return fig


def union_figure(multi: dict, experts_list):
    """The pairwise union bound's constant over the sharp one against K, per dimension: how
    much the valid bound over-counts by counting whole tie hyperplanes."""
    fig, ax = plt.subplots(figsize=column_figsize(0.45))
    for i, d in enumerate((2, 3)):
        over = [multi[(d, K)].constants.union_total / multi[(d, K)].constants.sharp_total
                for K in experts_list]
        ax.plot(np.array(experts_list) + 0.08 * (2 * i - 1), over, MARKERS[i], ms=7,
                color=COLOURS[i], label=f"$d = {d}$")
    ax.set_xticks(experts_list)
    ax.set_xlabel("number of experts $K$")
    ax.set_ylabel("union constant / sharp constant")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    return fig


def multi_measured(multi: dict, bound_ratio, n_mc: int) -> str:
    """The ledger's line for B-bm-multi: slope with interval and the largest ratio of the
    boundary mass's lower end to the pairwise bound, per (d, K)."""
    return ("; ".join(f"d = {d}, K = {K}: slope {c.slope.slope:.3f} "
                      "[{:.3f}, {:.3f}], ".format(*c.slope.slope_ci)
                      + f"max BM lower end / pairwise bound {r:.3f}"
                      for ((d, K), c), r in zip(multi.items(), bound_ratio))
            + f" (n = {n_mc:,}, simultaneous 95% intervals; the pairwise bound "
            "Σ P(|g_jk(X)| ≤ w) in closed form at the same widths)")


def sharp_measured(multi: dict, over, n_mc: int) -> str:
    """The ledger's line for X-bm-sharp: the Monte Carlo limit against the sharp constant per
    (d, K), and how far above it the union bound's constant lies."""
    return ("; ".join(f"d = {d}, K = {K}: MC lim BM/2w = {c.constant.constant:.4f} "
                      "[{:.4f}, {:.4f}], ".format(*c.constant.constant_ci)
                      + f"sharp {c.constants.sharp_total:.4f}"
                      for (d, K), c in multi.items())
            + f" (n = {n_mc:,}, simultaneous 95% intervals). The union bound's "
            f"constant is {min(over):.2f}–{max(over):.2f} × the sharp one")
