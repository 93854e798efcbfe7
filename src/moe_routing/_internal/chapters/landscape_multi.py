"""What the chapter *Landscape transfer beyond two regions* (``notebooks/landscape_multi.md``)
draws and tabulates.

The chapter repeats the landscape measurements of B-Thm 5.17 on our K-region teachers, whose
objectives are averages over a fixed sample.  The numbers come from
:mod:`moe_routing.landscape` (the searches, the first-order checks, the tallies, the index
checks); this module turns them into the chapter's tables and figures, so that the chapter shows
one call per table or figure.
"""

from __future__ import annotations

import math
import time

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ...landscape import multi_critical as mc
from ...landscape import multi_fit as mf
from ...landscape import multi_region as mr
from ...landscape.profiled import DERIVATIVES, ProfiledObjective
from .. import plots
from ..plots import column_figsize

LINESTYLES = ["-", "--", "-.", ":"]
# colour-blind-safe, no light yellow on white; black is the teacher's
FAMILY_COLOURS = [plots.PALETTE[i] for i in (0, 1, 2, 3, 4, 5)] + ["#8C564B", "#7F7F7F"]


def teacher_table(teachers: dict) -> pd.DataFrame:
    """One row per teacher (``teachers``: name → (teacher, sample size, searched for saddles)):
    K, d, the chart dimension, the region masses, the number of adjacent pairs of regions and
    the size of the sample that defines its objective."""
    return pd.DataFrame(
        [
            {
                "teacher": name,
                "K": t.K,
                "d": t.d,
                "chart dimension D": mr.chart_dim(t.K, t.d),
                "region masses": t.region_masses(2**16).round(3),
                "adjacent pairs": len(mr.adjacent_pairs(t.W, t.c)),
                "sample size n": n,
            }
            for name, (t, n, _) in teachers.items()
        ]
    )


def hessian_timing(teacher, n: int, seed: int, taus) -> tuple[float, float, float]:
    """Why the searches use the closed-form profiled Hessian: the Hessians of 8 starting routers
    of ``teacher``'s objective (``n`` points) at the smallest τ, by the closed form and by
    autograd.  Returns ``(closed-form seconds, autograd seconds, largest relative difference of
    the spectra)``."""
    closed, autograd = (ProfiledObjective(teacher, n, seed, derivatives=m) for m in DERIVATIVES)
    phi4 = mc.start_routers(closed, 8, seed, taus[0])
    secs = {}
    for o in (closed, autograd):
        t0 = time.perf_counter()
        phi4, _, _, _, H4 = o.grad_hess(phi4, taus[-1])
        secs[o.derivatives] = (time.perf_counter() - t0, H4)
    (t_c, H_c), (t_a, H_a) = secs["closed_form"], secs["autograd"]
    # spectra: a local Hessian depends on the tangent basis, which eigh may rotate by an ulp
    e_c, e_a = np.linalg.eigvalsh(H_c), np.linalg.eigvalsh(H_a)
    return t_c, t_a, float(np.abs(e_c - e_a).max() / np.abs(e_a).max())


def search_teachers(teachers: dict, seed: int, taus, *, eval_n, n_starts, n_starts_minima,
                    descent_steps, grad_norm_steps, newton_steps, n_guide) -> dict:
    """The critical-point search of every teacher, in order (name → result of
    :func:`~moe_routing.landscape.multi_critical.search_teacher`): ``n_starts`` random routers
    for the teachers searched for saddles, ``n_starts_minima`` for the others (minima only);
    the settings are the chapter's parameters, taken as integers."""
    return {
        name: mc.search_teacher(
            name,
            teacher,
            n,
            seed,
            taus,
            eval_n=int(eval_n),
            n_starts=int(n_starts) if saddles else int(n_starts_minima),
            saddles=saddles,
            descent_steps=int(descent_steps),
            grad_norm_steps=int(grad_norm_steps),
            newton_steps=int(newton_steps),
            n_guide=int(n_guide),
        )
        for name, (teacher, n, saddles) in teachers.items()
    }


def joint_table(multi: dict) -> pd.DataFrame:
    """The profiled and the joint Hessian's smallest eigenvalues at every critical point where
    the joint one was computed (the smallest τ): at a critical point they have the same sign."""
    return pd.DataFrame(
        [
            {
                "teacher": name,
                "τ": c.tau,
                "kind": c.kind,
                "profiled λₘᵢₙ": round(c.lam_min, 4),
                "joint λₘᵢₙ": round(float(c.joint_eigs[0]), 4),
            }
            for name, r in multi.items()
            for c in r.points
            if c.joint_eigs is not None
        ]
    )


def recovered_partition(search, picture_tau: float):
    """The plane teacher's regions (left) beside the soft gates of the global minimiser found
    at the temperature closest to ``picture_tau`` on a log scale (right), each student expert
    coloured as the teacher region it is matched to.  Returns ``(figure, τ, minimiser)``."""
    T3, pts3 = search.teacher, search.points
    taus_found3 = sorted({c.tau for c in pts3})
    if not taus_found3:
        raise RuntimeError("the K = 3 search found no critical point: raise n_starts")
    tau_pic = min(taus_found3, key=lambda t: abs(math.log(t / float(picture_tau))))
    best3 = min((c for c in pts3 if c.tau == tau_pic), key=lambda c: c.value)
    g1 = np.linspace(-3, 3, 301)
    XX = torch.tensor(np.array(np.meshgrid(g1, g1)).reshape(2, -1).T)
    cols = mcolors.to_rgba_array(plots.PALETTE[: T3.K])[:, :3]  # (K, 3) RGB
    perm = mf.best_permutation(mf.confusion(best3.phi, T3, search.X_eval))
    Pg = mf.gates(XX, torch.tensor(best3.phi)[None], tau_pic, T3.K)[0].numpy()  # (grid, K)
    A_t = XX.numpy() @ T3.W.T + T3.c
    fig, axes = plt.subplots(1, 2, figsize=column_figsize(0.5), sharey=True)
    plots.heatmap(
        axes[0],
        cols[T3.region(XX).numpy()].reshape(len(g1), len(g1), 3),
        origin="lower",
        extent=(-3, 3, -3, 3),
        alpha=0.85,
    )
    plots.interfaces(axes[0], g1, A_t, colors="k", linewidths=1.2)
    axes[0].set_title("teacher regions")
    plots.heatmap(
        axes[1],
        (Pg @ cols[perm]).reshape(len(g1), len(g1), 3),
        origin="lower",
        extent=(-3, 3, -3, 3),
        alpha=0.85,
    )
    plots.interfaces(axes[1], g1, A_t, colors="k", linewidths=1.0, linestyles="dashed")
    axes[1].set_title(f"student gates, τ = {tau_pic:g}")
    for ax in axes:
        ax.set_xlabel("input $x_1$")
        ax.set_aspect("equal")
    axes[0].set_ylabel("input $x_2$")
    return fig, tau_pic, best3


def exponent_text(p) -> str:
    """A fitted exponent, or why there is none (fewer than two resolved values)."""
    return "not resolved" if p is None else f"{p:.2f}"


def recovery_table(checks: dict) -> pd.DataFrame:
    """Per teacher (``checks``: name → first-order check): whether the global minimiser is the
    teacher's at every τ, its expert and partition errors from the largest to the smallest τ
    with their fitted exponents, their ratios to the first-order laws and the mean gap."""
    return pd.DataFrame(
        [
            {
                "teacher": name,
                "teacher-equivalent at every τ": all(cv.teacher),
                "expert error": f"{cv.expert_error[0]:.3g} → {cv.expert_error[-1]:.3g}",
                "exponent (experts)": exponent_text(cv.expert_exponent),
                "partition error": (
                    f"{cv.partition_error[0]:.2g} → {cv.partition_error[-1]:.2g}"
                ),
                "exponent (partition)": exponent_text(cv.partition_exponent),
                "experts / law": round(fo.expert_ratio, 3),
                "curvature / law": round(fo.curvature_ratio, 3),
                "mean gap on Σ": round(fo.constants.gap, 2),
            }
            for name, fo in checks.items()
            for cv in [fo.curve]
        ]
    )


def expert_errors(checks: dict):
    """The expert error of each teacher's global minimiser against the boundary mass of the
    teacher's interfaces (markers), with that teacher's first-order law (dashed, same colour)."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    curves = {name: fo.curve for name, fo in checks.items()}
    for (name, cv), mk, col in zip(curves.items(), "osD", plots.PALETTE):
        bm, law = checks[name].boundary_mass, checks[name].law
        ax.loglog(bm, cv.expert_error, mk, ms=7, color=col, label=f"{name}, measured")
        ax.loglog(bm, law, "--", color=col, lw=1.2, label=f"{name}, first-order law")
    ax.set_xlabel("boundary mass of the teacher's interfaces $\\mathrm{BM}_T(\\tau)$")
    ax.set_ylabel("expert error $\\max_k|\\theta_k-\\beta_{\\pi(k)}|$")
    ax.legend(ncol=1)
    return fig


def partition_errors(curves: dict):
    """The partition error of each teacher's global minimiser against τ, log–log; values not
    above the resolution floor of the evaluation sample are not drawn."""
    fig, ax = plt.subplots(figsize=column_figsize(0.55))
    for (name, cv), mk, col in zip(curves.items(), "osD", plots.PALETTE):
        t_, p_ = np.array(cv.taus), np.array(cv.partition_error)
        ok = p_ > cv.floor
        ax.loglog(t_[ok], p_[ok], mk + "-", ms=7, color=col, label=name)
    ax.set_xlabel("temperature τ")
    ax.set_ylabel("partition error $P(\\mathrm{cell}\\neq\\pi(\\mathrm{region}))$")
    ax.legend()
    return fig


def partition_text(pexp: dict) -> str:
    """The range of the fitted partition-error exponents (``pexp``: teacher → exponent or
    ``None``), or that none is resolved."""
    resolved = [p for p in pexp.values() if p is not None]
    if not resolved:
        return "it is not resolved at two temperatures or more for any teacher"
    return f"its fitted exponents range from {min(resolved):.2f} to {max(resolved):.2f}"


def saddle_curvatures(searched: dict, curves: dict):
    """λ_min of the profiled Hessian at every non-teacher critical point against τ, one panel
    per teacher searched for saddles, joined along continuation families; families whose member
    at the smallest τ has the same partition share a colour, marker, line style and legend entry;
    black stars: the global minimiser.  Symmetric-log vertical axis."""
    fig, axes = plt.subplots(len(searched), 1, figsize=column_figsize(0.75, len(searched)),
                             squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], searched.items()):
        fams = {}
        for c in r.points:
            if not c.teacher:
                fams.setdefault(c.family, []).append(c)
        # families whose member at the smallest temperature has the same partition are one
        # kind of critical point (symmetric images of each other): one colour, marker and
        # line style per kind, one legend entry per kind with its number of families
        kinds: dict[str, list] = {}
        for _, cs in sorted(fams.items()):
            cs = sorted(cs, key=lambda c: c.tau)
            kinds.setdefault(cs[0].partition, []).append(cs)
        for i, (partition, members) in enumerate(kinds.items()):
            for j, cs in enumerate(members):
                n = len(members)
                label = None if j > 0 else (
                    f"{partition} ({n} families)" if n > 1 else partition)
                ax.semilogx([c.tau for c in cs], [c.lam_min for c in cs],
                            marker="osD^v<>p"[i % 8], ls=LINESTYLES[i % 4], ms=6,
                            color=FAMILY_COLOURS[i % 8], label=label)
        cv = curves[name]
        ax.semilogx(cv.taus, cv.lam_min, "k*--", ms=10, label="global minimiser (teacher)")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_yscale("symlog", linthresh=0.1, linscale=0.5)
        ax.margins(y=0.08)
        ax.set_ylabel("$\\lambda_{\\min}(\\nabla^2\\bar L_\\tau)$")
        ax.set_xlabel("temperature τ")
        ax.set_title(name)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=9)
    fig.tight_layout(h_pad=1.0)
    return fig


def tally_table(tallies: dict) -> pd.DataFrame:
    """Per teacher searched for saddles (``tallies``: name → saddle tally at the smallest τ):
    the non-teacher points, how many have negative curvature, the τ with a point without it, and
    below which τ every point found is strict."""
    return pd.DataFrame(
        [
            {
                "teacher": n,
                "τ": t.tau,
                "non-teacher points at τ": t.n_points,
                "with λₘᵢₙ < 0": t.n_strict,
                "τ with a point without negative curvature": list(t.nonstrict_taus) or "none",
                "all strict for τ ≤": "no such τ"
                if t.strict_below is None
                else t.strict_below,
            }
            for n, t in tallies.items()
        ]
    )


def index_table(index_checks: dict) -> pd.DataFrame:
    """Each non-teacher point of the smallest τ re-solved on an independent, larger sample
    (``index_checks``: teacher → checks): whether Newton found it again, how far it moved, and
    whether it is strict there as on the search's sample."""
    return pd.DataFrame(
        [
            {
                "teacher": name,
                "τ": c.point.tau,
                "kind (search sample)": c.point.kind,
                "λₘᵢₙ (search sample)": round(c.point.lam_min, 4),
                "independent sample n": c.n,
                "found again": c.converged,
                "λₘᵢₙ there": round(c.lam_min, 4),
                "moved": float(f"{c.moved:.2g}"),
                "strict there": c.strict,
            }
            for name, checks in index_checks.items()
            for c in checks
        ]
    )
