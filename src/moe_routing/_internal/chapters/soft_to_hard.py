"""The tables, figures and ledger lines of the soft-to-hard chapter (paper B's risk bound).

The chapter measures the gap :math:`L_\\tau-L_0` between soft and hard routing with
:mod:`moe_routing.boundary` (quadrature, layer quadrature, Monte Carlo) and fits its rate; what
is here lays the results out: the first-order tables, the log–log figures of the gap against
its bound, the figures of the "layer, not dimension" experiment and the sentences the ledger
keeps. Keeping them out of the chapter leaves the reader the cases and the calls that measure
them.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import integrate, special

from ...boundary import GaussianLaw, LinearRouter, boundary_mass_linear_gaussian
from ...boundary.risk import JUMP_SQ, SOFTPLUS, SOFTPLUS_SQ
from ..plots import PALETTE, column_figsize

COLOURS = [PALETTE[i] for i in (0, 3, 2, 4, 1, 7)]   # no light yellow on white
MARKERS = ["o", "s", "^", "D", "v", "P"]
# the tables' headers in Unicode (the keys are the library's names)
HEADERS = {"C_m": "Cₘ", "(L_τ − L_0)/τ": "gap / τ", "B_star": "B*"}


def softplus_integrals() -> pd.DataFrame:
    """The three integrals of the logistic gate's tail that the first-order constants are made
    of, by quadrature beside their closed forms (``ln 2 − 1/2``, ``ln 2``, ``2 ln 2 − 1``)."""
    i_sq = integrate.quad(lambda s: special.expit(-s) ** 2, 0, np.inf)[0]
    i_lin = integrate.quad(lambda s: special.expit(-s), 0, np.inf)[0]
    return pd.DataFrame({
        "integral": ["∫₀^∞ σ(−s)² ds", "∫₀^∞ σ(−s) ds", "∫_R (σ(s) − 1{s>0})² ds"],
        "quadrature": [i_sq, i_lin, 2 * i_sq],
        "closed form": [SOFTPLUS_SQ, SOFTPLUS, JUMP_SQ],
        "formula": ["ln 2 − 1/2", "ln 2", "2 ln 2 − 1"]})


def sign_table(rows: dict, first_1d: dict, taus_9) -> pd.DataFrame:
    """:math:`(L_\\tau-L_0)/\\tau` per temperature (``rows``: teacher -> ``(len(taus_9),)``)
    with the first-order prediction as a last row: the gap over τ settles on the constant."""
    table = pd.DataFrame(rows, index=pd.Index(taus_9, name="τ"))
    table.loc["first-order prediction"] = [first_1d[k] for k in table.columns]
    return table


def gap_figure(rates: dict, selected):
    """:math:`|L_\\tau-L_0|` against τ on log–log axes for the ``selected`` cases of
    ``rates`` (name -> rate fit), markers with two standard errors and each case's bound
    dashed in its colour, the fitted slope in the legend: a slope of α and markers under
    their line are the rate and the bound."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    for i, name in enumerate(selected):
        c = rates[name]
        g = c.case.gap
        head, _, power = name.partition("|x|^")  # the density's exponent, as mathtext
        label = f"{head}$|x|^{{{power}}}$" if power else name
        ax.errorbar(g.taus, np.abs(g.gap), yerr=2 * g.se, fmt=MARKERS[i] + "-", ms=5,
                    lw=1, color=COLOURS[i], label=f"{label} (slope {c.fit.slope:.3f})")
        ax.plot(g.taus, c.bound, "--", lw=1, color=COLOURS[i])
    ax.plot([], [], "--", color="0.4", lw=1, label="bound (dashed, colour of its case)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"temperature $\tau$")
    ax.set_ylabel(r"$|L_\tau-L_0|$")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    return fig


def first_order_table(rates: dict, first_1d: dict, sign_table, taus_9) -> pd.DataFrame:
    """The gap over τ at the smallest temperature of the circle, the 8-dimensional layer and
    the two one-dimensional teachers, beside the first-order constant of each."""
    first_rows = []
    for name in ("α = 1: circle, d = 2", "α = 1: linear, d = 8"):
        c = rates[name].case
        g = c.gap
        first_rows.append({"case": name, "τ": g.taus[0],
                           "(L_τ − L_0)/τ": g.gap[0] / g.taus[0],
                           "± 2 se": 2 * g.se[0] / g.taus[0],
                           "first-order prediction": c.first})
    for name, val in first_1d.items():
        first_rows.append({"case": f"d = 1, {name}", "τ": taus_9[-1],
                           "(L_τ − L_0)/τ": sign_table.loc[taus_9[-1], name], "± 2 se": 0.0,
                           "first-order prediction": val})
    return pd.DataFrame(first_rows)


def rate_measured(selected: dict) -> str:
    """The ledger's line of a rate claim: fitted slope, interval, α and the worst ratio of
    gap to bound for each case of ``selected`` (name -> rate fit)."""
    return "; ".join(f"{n}: slope {c.fit.slope:.4f} "
                     "[{:.4f}, {:.4f}]".format(*c.fit.slope_ci)
                     + f" vs α = {c.case.alpha:g}, max gap/bound {c.ratio:.3f}"
                     for n, c in selected.items())


def rate_columns(selected: dict):
    """``(slopes, slope intervals, exponents α, gap/bound ratios)`` of the cases of
    ``selected`` (name -> rate fit), in order: what the rate verdict weighs."""
    fits = list(selected.values())
    return ([c.fit.slope for c in fits], [c.fit.slope_ci for c in fits],
            [c.case.alpha for c in fits], [c.ratio for c in fits])


def rate_key(selected: dict) -> str:
    """The ledger's key of a rate claim: the largest distance of a slope from its α."""
    return "max |slope − α| = {:.4f}".format(max(abs(c.fit.slope - c.case.alpha)
                                                 for c in selected.values()))


def losses_table(taus, gap, first: float, bound) -> pd.DataFrame:
    """The mixture of losses (not of predictions): gap over τ per temperature beside its
    first-order constant :math:`4\\ln2` and the bound over τ."""
    return pd.DataFrame({"τ": taus, "gap / τ": gap.gap / taus,
                         "first order 4 ln 2": first,
                         "bound (K−1)(B+B*)²Cₘτ / τ": bound / taus})


def bm_over_w(b: float, w_grid):
    """:math:`\\mathrm{BM}(w)/w` of the binary router :math:`g=x-b` under a standard normal
    input, at every width of ``w_grid``: for an off-centre interface it grows with w, so the
    margin-tail constant is its maximum, not its limit 2S."""
    off_router = LinearRouter.binary([1.0], b=-b)
    return boundary_mass_linear_gaussian(off_router, GaussianLaw.standard(1),
                                         w_grid).estimate / w_grid


def layer_mass_figure(layer_table, dims):
    """The layer experiment's gap over τ against the interface constant 2S, one open marker
    shape and colour per input dimension (dark for the smallest): columns that move with 2S
    and do not spread with d are a gap set by the layer, not by the dimension."""
    fig, ax = plt.subplots(figsize=column_figsize(0.5))
    # one colour per dimension, ordered (viridis, without its light-yellow end), and one
    # shape each, open, at the measured 2S: no sideways offset on a quantitative axis
    dim_colours = plt.cm.viridis(np.linspace(0.0, 0.8, len(dims)))
    dim_markers = ["o", "s", "^", "D", "v", "P", "X", "h", "<", ">"]
    for i, d in enumerate(dims):
        sub = layer_table[layer_table.d == d]
        ax.errorbar(sub["2S"], sub["(L_τ − L_0)/τ"], yerr=2 * sub["se"],
                    fmt=dim_markers[i % len(dim_markers)],
                    ms=5 + 6 * (len(dims) - i) / len(dims),
                    mfc="none", mew=1.3, color=dim_colours[i], label=f"d = {d}")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel(r"interface constant $2S=\lim_{w\to0}\,\mathrm{BM}(w)/w$")
    ax.set_ylabel(r"$(L_\tau-L_0)/\tau$")
    ax.legend(loc="upper left", ncol=2)
    return fig


def layer_dim_figure(layer_table, dims, biases):
    """The same gaps against the input dimension, one line per interface offset, with the
    first-order interface integral as crosses beside each marker: flat lines are a gap
    that does not depend on d."""
    fig, ax = plt.subplots(figsize=column_figsize(0.5))
    for i, b in enumerate(biases):
        sub = layer_table[layer_table.b == b]
        ax.errorbar(sub.d, sub["(L_τ − L_0)/τ"], yerr=2 * sub["se"], fmt=MARKERS[i] + "-",
                    mfc="white", ms=7, color=COLOURS[i], label=f"b = {b:g}: measured")
        ax.plot(sub.d * 1.12, sub["first order"], "x", color=COLOURS[i], ms=6, mew=1.5)
    ax.plot([], [], "x", color="0.4", label="interface integral (crosses)")
    ax.set_xscale("log")
    ax.set_xticks(dims)
    ax.set_xticklabels([str(d) for d in dims])
    ax.minorticks_off()
    ax.set_xlabel("input dimension $d$")
    ax.set_ylabel(r"$(L_\tau-L_0)/\tau$")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    return fig


def circle_bm(w, r2: float):
    """Boundary mass :math:`\\mathrm{BM}(w)=\\mathbb P(|\\,|X|^2-r^2| \\le w)` of the circle
    router :math:`g=|x|^2-r^2` (``r2`` = :math:`r^2`) under a standard normal input in the
    plane, in closed form (:math:`|X|^2` is exponential with mean 2)."""
    return np.exp(-np.maximum(r2 - w, 0) / 2) - np.exp(-(r2 + w) / 2)


def limit_miss(lt) -> float:
    """The largest distance between the τ→0 limit of the gap over τ (Richardson extrapolation
    from τ and τ/4, which removes a term linear in τ) and the first-order interface integral,
    over the cells of the layer table ``lt``."""
    limit = (4 * lt["same at τ/4"] - lt["(L_τ − L_0)/τ"]) / 3
    return float((limit - lt["first order"]).abs().max())


def layer_cells(lt) -> list[str]:
    """The names of the layer table's cells, ``d = …, b = …``, for the verdict's messages."""
    return [f"d = {d}, b = {b:g}" for d, b in zip(lt.d, lt.b)]


def tail_envelope(layer, w_grid) -> float:
    """The largest :math:`\\mathrm{BM}(w)/(C_m w)` over ``w_grid`` and the layer experiment's
    offsets: at most 1 when the bound's :math:`C_m` envelopes the margin tail at every
    width, as the risk bound needs."""
    return max(float(np.max(boundary_mass_linear_gaussian(
        LinearRouter.binary([1.0], b=-b), GaussianLaw.standard(1), w_grid).estimate
        / (C_m * w_grid))) for b, S, C_m in layer.constants)


def layer_measured(tau_layer, dims, biases, layer, gap_tau, lt, layer_miss: float,
                   envelope: float, layer_ratio: float) -> str:
    """The ledger's line for B-layer-not-dimension: the gap's range per offset, the miss of
    the τ→0 limit against the interface integral, the envelope and the bound's ratio."""
    return (f"τ = {tau_layer} and τ/4, d ∈ {list(dims)}, b ∈ {list(biases)}: "
            + "; ".join(f"b = {b:g} (2S = {2 * S:.3f}, C_m = {C_m:.3f}): gap/τ "
                        f"{gap_tau[b].min():.4f} to {gap_tau[b].max():.4f}"
                        for b, S, C_m in layer.constants)
            + f". Largest |τ→0 limit of gap/τ − interface integral| over the "
            f"{len(lt)} cells {layer_miss:.4f}; max BM(w) / (C_m w) {envelope:.6f}; "
            f"max |gap| / dimension-free bound 4(K−1)B(B+B*)C_m τ = {layer_ratio:.3f}")
