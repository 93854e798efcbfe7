"""What the bridge chapter (``notebooks/bridge.md``) draws and tabulates.

The chapter reads paper B's quantities (top-two margins, boundary mass, the soft-to-hard gap,
symmetry breaking under temperature) on the routers paper A trains, and compares the library's
model with a Mixtral-style one.  The numbers come from :mod:`moe_routing.experiments.bridge`
and :mod:`moe_routing.experiments.hf_routing`; this module only lays them out: the frames the
chapter shows, the sentences it glues into its prose and the figures it draws, so that each
chapter cell is the call that makes its table or figure.  The verdicts, the glued numbers and
the ledger entries stay in the chapter.

Objectives are keyed by their names in the runs (``"ce"``, ``"ce+lb"``, ``"ce+router"``);
:data:`NAMES` is how the tables and figures print them.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import routing_metrics as rm
from ...boundary.mass import boundary_mass_from_margins
from ...experiments.bridge import (bound_check, boundary_mass_of_router, power_law_check,
                                   resolving_taus, router_margins, soft_vs_hard)
from ...experiments.grid import GridSession
from ...experiments.task_routing import run_grid
from ..plots import PALETTE, column_figsize
from ..runtime import torch_threads

#: objective -> its name in the tables, figures and ledger entries
NAMES = {"ce": "CE", "ce+lb": "CE + LB", "ce+router": "CE + task router"}


# ---------------------------------------------------------------------------------------------
# the trained routers


def train_fig2(plan, artifacts_dir, profile: str, runs_from) -> list[dict]:
    """The training chapter's A-Fig. 2 runs of ``plan``, trained (or read back from
    ``runs_from`` and the artifacts) as that chapter trains them: one torch thread per run,
    as many runs at once as there are cores.  The same thread count gives the same models,
    whichever of the two chapters trains them; the kernel's own count is restored after."""
    with torch_threads(1), GridSession(runs_from=runs_from) as session:
        return session.run_with(run_grid, list(plan.fig2), artifacts_dir, profile=profile)


def accuracy_table(objectives, runs) -> pd.DataFrame:
    """Test exact match of each objective's run (``objectives`` in the order of ``runs``)."""
    return pd.DataFrame([{"objective": NAMES[o],
                          "test exact match (%)": f"{100 * r['accuracy']:.1f}"}
                         for o, r in zip(objectives, runs)])


# ---------------------------------------------------------------------------------------------
# margins and boundary mass


def _widths(d, n_w: int):
    """A log grid of ``n_w`` widths from the 0.2 % quantile of the margins d to their 90 %
    quantile: the power law is fitted where BM is small, so the grid follows each router's
    margins."""
    lo, hi = np.quantile(d, [0.002, 0.9])
    return np.geomspace(max(lo, 1e-9), max(hi, 2 * lo, 1e-8), n_w)


def _exponent(d, n_w: int):
    """α (95 % CI) of one population's BM, or why there is none: too few margins, or two
    exponents on the two halves of the widths (no single power law)."""
    try:
        bm = boundary_mass_of_router(d, _widths(d, n_w))
        pl = power_law_check(bm)
    except ValueError:
        return None, "– (too few distinct margins)"
    if not pl.power_law:
        return bm, (f"none: {pl.alpha_low:.2f} below, {pl.alpha_high:.2f} above "
                    "(not one power law)")
    return bm, f"{bm.alpha:.2f} ({bm.alpha_ci[0]:.2f}–{bm.alpha_ci[1]:.2f})"


def margin_table(margins: dict, n_w: int, bm_widths) -> tuple[dict, pd.DataFrame]:
    """Each objective's margins, one row per kind of position (template-determined, shared):
    their number, median, BM at ``bm_widths`` and the exponent α where one power law fits.

    The two kinds are two populations and are fitted apart (pooled, they give a curve no
    exponent describes).  Returns the boundary mass at the determined positions per
    objective (for the figure; fitted on a grid of ``n_w`` widths even where α is not shown)
    and the table.  ``margins``: objective -> :class:`RouterMargins` of every position."""
    bm_det, rows = {}, []
    for o, mg in margins.items():
        for kind in ("determined", "shared"):
            d = mg.of_kind(kind)
            if not d.size:
                continue
            bm, alpha_txt = _exponent(d, n_w)
            if kind == "determined":
                bm_det[o] = (bm if bm is not None
                             else boundary_mass_of_router(d, _widths(d, n_w)))
            rows.append({"objective": NAMES[o], "positions": f"{kind} ({d.size})",
                         "median Δ": f"{np.median(d):.3f}",
                         **{f"BM({w:g})": f"{np.mean(d <= w):.4f}" for w in bm_widths},
                         "α (95 % CI)": alpha_txt})
    return bm_det, pd.DataFrame(rows)


def boundary_mass_curves(bm_det: dict, w_star: float):
    """BM(w) per objective at the template-determined positions, log–log, with its Wilson
    band, and a dotted line at the comparison width ``w_star``: a curve lower and further
    right means larger margins.  Widths where BM is 0 are left out (no log of 0)."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    for i, (o, bm) in enumerate(bm_det.items()):
        keep = bm.estimate > 0
        ax.plot(bm.widths[keep], bm.estimate[keep], marker="os^"[i], ms=3,
                color=PALETTE[i], label=NAMES[o])
        ax.fill_between(bm.widths[keep], np.maximum(bm.lower[keep], 1e-4), bm.upper[keep],
                        color=PALETTE[i], alpha=0.2, lw=0)
    ax.axvline(w_star, color="0.4", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("width w")
    ax.set_ylabel("BM(w) = P(Δ ≤ w)")
    ax.legend(frameon=False)
    return fig


def mass_at(margins, w: float) -> tuple[float, float, float]:
    """BM(w) of the margins (an array of Δ) with its Wilson interval: (estimate, low, high)."""
    bm = boundary_mass_from_margins(margins, np.array([w]))
    return float(bm.estimate[0]), float(bm.lower[0]), float(bm.upper[0])


# ---------------------------------------------------------------------------------------------
# soft versus hard at inference


def soft_hard_tables(models: dict, ds, tau_levels):
    """Soft against hard routing at the object, per objective, on a τ grid set from each
    router's own margins (:func:`resolving_taus`: widths at the quantile ``tau_levels`` of
    its margins at the object, τ = width / α, so the rate is tested where α was measured).

    Returns the bound checks and τ grids per objective, the summary table (cross-entropies,
    τ range, fitted slope of E|ℓτ − ℓ0|, α there, largest gap/bound) and the table of every
    grid point with its mean absolute and absolute mean gap."""
    rows, checks, grids, gaps = [], {}, {}, []
    for o, m in models.items():
        obj_m = router_margins(m, ds, positions="object")
        grid = resolving_taus(obj_m, tau_levels)
        sh = soft_vs_hard(m, ds, grid.taus)
        chk = bound_check(sh, grid.bm.alpha, grid.bm.C_m,
                          {"n_experts": sh.n_experts, "loss_range": sh.loss_range})
        checks[o], grids[o] = chk, grid
        gaps += [{"objective": NAMES[o], "level": f"{q:g}", "width w": f"{w:.3g}",
                  "τ = w/α": f"{t:.3g}", "E|ℓτ − ℓ0|": f"{g:.2e}",
                  "|Lτ − L0|": f"{s:.2e}"}
                 for q, w, t, g, s in zip(grid.levels, grid.widths, grid.taus,
                                          sh.abs_gap_losses, sh.gap_losses)]
        rows.append({"objective": NAMES[o], "hard routing": f"{sh.ce_hard:.3f}",
                     "trained model": f"{sh.ce_switch:.3f}",
                     "τ range": f"{grid.taus[0]:.3g}–{grid.taus[-1]:.3g}",
                     "slope of E|ℓτ − ℓ0| (95 % CI)": (
                         f"{chk.slope:.2f} ({chk.slope_ci[0]:.2f}–{chk.slope_ci[1]:.2f})"),
                     "α there (95 % CI)": (f"{grid.bm.alpha:.2f} ({grid.bm.alpha_ci[0]:.2f}–"
                                           f"{grid.bm.alpha_ci[1]:.2f})"),
                     "gap/bound ≤": f"{np.nanmax(chk.ratio):.2g}"})
    return checks, grids, pd.DataFrame(rows), pd.DataFrame(gaps)


def rate_sentence(chk, grid, n_resolved: int, fitted: bool) -> str:
    """The prose's account of the rate: the fitted slope of E|ℓτ − ℓ0| against α, or, where
    too few temperatures give a gap above 0 in float64 (``fitted`` false), why none is."""
    if fitted:
        return (f"the slope of E|ℓτ − ℓ0| is {chk.slope:.2f} ({chk.slope_ci[0]:.2f}–"
                f"{chk.slope_ci[1]:.2f}) against α = {chk.alpha:.2f} "
                f"({grid.bm.alpha_ci[0]:.2f}–{grid.bm.alpha_ci[1]:.2f})")
    return (f"the gap is positive in float64 at {n_resolved} of the {len(grid.taus)} "
            "temperatures only, so no slope is fitted: the rate is untested")


def rate_measured(chk, grid, n_resolved: int, fitted: bool) -> str:
    """What the rate's ledger entry measured: slope (or why none), α and the τ range."""
    slope = (f"slope {chk.slope:.2f} ({chk.slope_ci[0]:.2f}–{chk.slope_ci[1]:.2f})"
             if fitted else f"no slope (gap positive at {n_resolved} of {len(chk.taus)} τ)")
    return (slope + f", α {chk.alpha:.2f} ({grid.bm.alpha_ci[0]:.2f}–{grid.bm.alpha_ci[1]:.2f})"
            + f", τ {grid.taus[0]:.3g}–{grid.taus[-1]:.3g}")


# ---------------------------------------------------------------------------------------------
# temperature in training


def separator_alignments(runs) -> np.ndarray:
    """(fraction, chance, best) of every run that has a fraction, shape (runs, 3): the
    between-task fraction of the router's logits at the end of its window, a random router's
    and the best separator's on the same inputs (``GrowthRun.separator_alignment``)."""
    rows = np.array([r.separator_alignment() for r in runs]).reshape(-1, 3)
    return rows[np.isfinite(rows).all(axis=1)]


def task_fractions(runs, taus, seeds) -> np.ndarray:
    """Between-task fraction of the centred logits' variance at the end of each run's
    window, shape (seeds, τ)."""
    run_at = {(r.seed, r.tau): r for r in runs}
    return np.array([[run_at[sd, t].task_fraction() for t in taus] for sd in seeds])


def _seed_stats(v) -> str:
    """'mean (min–max)' over seeds of one column, or '–' when no seed was fitted."""
    v = v[np.isfinite(v)]
    return "–" if not v.size else f"{v.mean():.3f} ({v.min():.3f}–{v.max():.3f})"


def growth_table(scale_w, scale_a, frac, n_seeds: int) -> pd.DataFrame:
    """Per temperature: the growth rate of |w| per SGD step and rate·τ (which B-Prop 6.3
    holds constant), over seeds; how many runs grew log-linearly for |w| and for the
    task-aligned component A; the median between-task fraction ``frac`` (seeds, τ)."""
    n_tau = len(scale_w.taus)
    return pd.DataFrame({
        "τ": [f"{t:g}" for t in scale_w.taus],
        "rate of |w| per step": [_seed_stats(scale_w.rates[:, j]) for j in range(n_tau)],
        "rate·τ": [_seed_stats(scale_w.rates[:, j] * t) for j, t in enumerate(scale_w.taus)],
        "log-linear |w| / A": [f"{np.isfinite(scale_w.rates[:, j]).sum()} / "
                               f"{np.isfinite(scale_a.rates[:, j]).sum()} of "
                               f"{n_seeds}" for j in range(n_tau)],
        "between-task fraction": [f"{np.nanmedian(frac[:, j]):.3f}" for j in range(n_tau)],
    })


def temperature_figure(scale_w, sgd_runs, adam_runs, seed: int):
    """Left: growth rate of |w| per SGD step against 1/τ, log–log, one point per seed and τ
    (runs not log-linear left out), with B-Prop 6.3's slope 1 (dashed, through the points'
    geometric mean) and the fitted slope (solid).  Right: |w| along training of ``seed``,
    SGD solid and AdamW dotted, one colour per τ, against step + 1 on a log axis (AdamW's
    few steps are not squeezed against SGD's many): coinciding dotted curves mean AdamW
    moves the router at the same pace for every τ."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=column_figsize(0.42))
    inv = np.broadcast_to(1 / scale_w.taus, scale_w.rates.shape)        # (seeds, τ)
    ok = np.isfinite(scale_w.rates)
    ax.plot(inv[ok], scale_w.rates[ok], "o", ms=4, color=PALETTE[0], label="SGD runs")
    if ok.sum() >= 2:
        xs = np.geomspace(inv.min(), inv.max(), 20)
        gx, gy = np.exp(np.log(inv[ok]).mean()), np.exp(np.log(scale_w.rates[ok]).mean())
        ax.plot(xs, gy * xs / gx, "--", color="0.4", lw=1, label="∝ 1/τ (B-Prop 6.3)")
        if np.isfinite(scale_w.slope):
            ax.plot(xs, gy * (xs / gx) ** scale_w.slope, "-", color=PALETTE[1], lw=1,
                    label=f"fit, slope {scale_w.slope:.2f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    bx.set_xscale("log")         # before the locators below: setting a scale resets them
    # one labelled tick per temperature, none in between (log minor labels collide)
    ax.set_xticks(1 / scale_w.taus, [f"{1 / t:g}" for t in scale_w.taus])
    ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    for axis in (ax.yaxis, bx.xaxis):      # plain labels at 1, 2, 5 × 10^k, no minor ones
        axis.set_major_locator(mpl.ticker.LogLocator(subs=(1, 2, 5)))
        axis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(mpl.ticker.NullFormatter())
    ax.set_xlabel("1/τ")
    ax.set_ylabel("growth rate of |w| per step")
    ax.legend(frameon=False, fontsize=8)
    for i, t in enumerate(scale_w.taus):
        for sweep, ls in ((sgd_runs, "-"), (adam_runs, ":")):
            r = next(r for r in sweep if r.tau == t and r.seed == seed)
            keep = r.router_contrast > 0
            bx.plot(1 + np.arange(r.router_contrast.size)[keep], r.router_contrast[keep], ls,
                    color=PALETTE[i % len(PALETTE)],
                    label=f"τ = {t:g}" if ls == "-" else None)
    bx.set_yscale("log")
    bx.set_xlabel("step + 1")
    bx.set_ylabel("router contrast |w|")
    bx.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def slope_reading(scale_w) -> str:
    """How the prose reads the fitted slope of the growth rate against 1/τ: too few runs for
    an interval, an interval that admits 1, or one that rejects the 1/τ law (above or
    below)."""
    lo_w, hi_w = scale_w.slope_ci
    return ("a slope of fewer than three runs, without an interval" if scale_w.n_fitted < 3
            else "consistent with 1" if lo_w <= 1 <= hi_w else
            ("above 1: at these τ the 1/τ law is rejected" if lo_w > 1 else
             "below 1: at these τ the 1/τ law is rejected"))


def temperature_measured(scale_w, frac, adam_step) -> str:
    """What the temperature ledger entry measured: the slope with its interval, the runs
    that grew log-linearly, rate·τ per τ, the between-task fraction and AdamW's slope."""
    lo_w, hi_w = scale_w.slope_ci
    return (f"slope {scale_w.slope:.2f} ({lo_w:.2f}–{hi_w:.2f}), "
            f"{scale_w.n_fitted}/{scale_w.n_runs} runs log-linear; rate·τ "
            + ", ".join(f"{v:.3f}" for v in scale_w.rate_tau)
            + f"; between-task fraction {np.nanmedian(frac):.3f}; AdamW slope at step "
            f"{adam_step.step}: {adam_step.slope:.2f}")


# ---------------------------------------------------------------------------------------------
# the Mixtral-style router


def routing_groups(library, mixtral) -> list[tuple]:
    """(label, result, layer) of each model-layer the comparison shows, in the order of the
    table's rows and the figure's bars: the library's model, then each Mixtral layer."""
    return [("library", library, 1)] + [(f"Mixtral layer {l}", mixtral, l)
                                        for l in range(1, mixtral.n_layers + 1)]


def _iv(x, digits: int = 2) -> str:
    """An Interval as 'mean [low, high]'."""
    return f"{x.mean:.{digits}f} [{x.low:.{digits}f}, {x.high:.{digits}f}]"


def routing_table(groups, objectives) -> pd.DataFrame:
    """Per objective and model-layer of ``groups``: NMI (interval) and purity of the top-1
    expert against the task at the determined positions, max load, BM(w*) and the model's
    test exact match (the same on each layer's row)."""
    rows = []
    for o in objectives:
        for label, res, layer in groups:
            c = res.cell(o, layer)
            rows.append({"objective": NAMES[o], "model": label, "NMI": _iv(c.nmi),
                         "purity": f"{c.purity.mean:.2f}",
                         "max load": f"{c.max_utilisation.mean:.2f}",
                         "BM(w*)": f"{c.bm.mean:.3f}",
                         "exact match (%)": f"{100 * res.accuracy(o).mean:.1f}"})
    return pd.DataFrame(rows)


def designated_ceiling(model, ds, n_experts: int) -> float:
    """NMI of perfect routing of task k to its designated expert k mod E at the determined
    positions of ``ds`` (those of ``model``'s test margins): the ceiling of the task-router
    loss, below 1 when experts are shared by several tasks."""
    det_tasks = router_margins(model, ds, positions="determined").task
    return rm.normalized_mutual_info(rm.designated_counts(
        np.bincount(det_tasks, minlength=ds.n_tasks), n_experts))


def nmi_bars(groups, objectives, ceiling: float):
    """Grouped bars of NMI(task; top-1 expert) per objective, one bar per model-layer of
    ``groups``, whiskers from each cell's interval, the model's exact match (%) printed above
    each bar, and the designated-routing ``ceiling`` dashed."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    x = np.arange(len(objectives))
    width = 0.8 / len(groups)
    for i, (label, res, layer) in enumerate(groups):
        cells = [res.cell(o, layer).nmi for o in objectives]
        mean = np.array([c.mean for c in cells])
        err = np.array([[c.mean - c.low for c in cells], [c.high - c.mean for c in cells]])
        xs = x + (i - (len(groups) - 1) / 2) * width
        ax.bar(xs, mean, width, yerr=err, capsize=2, color=PALETTE[i], label=label)
        for xi, c, o in zip(xs, cells, objectives):
            ax.text(xi, c.high + 0.02, f"{100 * res.accuracy(o).mean:.0f}", ha="center",
                    va="bottom", fontsize=6)
    ax.axhline(ceiling, color="0.4", ls="--", lw=1, label=f"ceiling {ceiling:.2f}")
    ax.set_xticks(x, [NAMES[o] for o in objectives])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("NMI(task; top-1 expert)")
    ax.legend(frameon=False, fontsize="small")
    return fig


def routing_measured(library, mixtral) -> str:
    """What the Mixtral ledger entry measured: each objective's NMI at the determined
    positions, for the library's model and for each Mixtral layer."""
    mix_txt = "; ".join(
        f"L{l} " + ", ".join(f"{NAMES[o]} {mixtral.cell(o, l).nmi.mean:.2f}"
                             for o in mixtral.objectives)
        for l in range(1, mixtral.n_layers + 1))
    return ("NMI at determined positions: library " + ", ".join(
        f"{NAMES[o]} {library.cell(o, 1).nmi.mean:.2f}" for o in library.objectives)
        + "; Mixtral " + mix_txt)


def install_table(extra, n: int = 6) -> pd.DataFrame:
    """The ``n`` largest packages the ``hf`` extra adds: name, version, MiB on disk."""
    return pd.DataFrame([{"package": p, "version": v, "MiB": f"{b / 2**20:.1f}"}
                         for p, v, b in extra.packages[:n]])
