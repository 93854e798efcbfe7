"""What the chapter *Landscape transfer* (``notebooks/landscape.md``) draws and tabulates.

The chapter tests the conditional landscape transfer of paper B (B-Thm 5.17) on our two-region
teacher–student model.  The numbers come from :mod:`moe_routing.landscape` (quadratures,
critical-point searches, first-order laws); this module turns them into the chapter's tables
and figures, so that the chapter shows one call per table or figure.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ...landscape.common import sobol_normal
from ...landscape.critical_points import TWO_REGION, collect
from ...landscape.first_order import hessian_first_order
from ...landscape.hard_quadrature import cell_moments, hard_refit, hard_risk, profiled_hard
from ...landscape.saddles import track_hard_points
from ...landscape.shape_derivative import boundary_integral_gradient, finite_difference_gradient
from ...landscape.soft_quadrature import soft_refit_quad, soft_risk_quad
from ...landscape.teacher_student import soft_risk
from ...landscape.two_region import wrap_phi
from .. import plots
from ..plots import column_figsize

# how each kind of hard critical point is marked on the landscape pictures
HARD_MARK = {
    "strict saddle": "X",
    "local maximum": "^",
    "spurious local minimum": "o",
    "degenerate": "D",
}


def teacher_table(cfg) -> pd.DataFrame:
    """The teacher's line, experts, noise and the mass of its region 1: the values that make
    its specialisation gap large near the teacher (a jump across the interface)."""
    p_region1 = 1 - 0.5 * math.erfc(-cfg.teacher_offset / math.sqrt(2))
    return pd.DataFrame(
        {
            "teacher line (α*, b*)": [tuple(cfg.teacher_phi.round(3))],
            "β₁": [cfg.beta1],
            "β₂": [cfg.beta2],
            "σ": [cfg.noise_std],
            "P(region 1)": [round(p_region1, 4)],
        }
    )


def quadrature_errors(cfg, taus, seed: int) -> tuple[float, float, float]:
    """How far the deterministic quadratures are from exact, so the reader can trust every
    population number of the chapter: ``(hard, soft, vs_sobol)``, the largest change of the hard
    cell moments when the nodes double (96 → 192), of the soft risk when they double (48 → 96)
    at the temperatures ``taus``, and the largest gap between the soft quadrature and 2^18
    scrambled-Sobol points (random experts drawn from ``seed``)."""
    phi_chk = np.array([[0.4, 0.1], [1.3, -0.5], [2.5, 1.0]])
    q_err = max(
        np.abs(cell_moments(cfg, p, 96) - cell_moments(cfg, p, 192)).max() for p in phi_chk
    )
    gen = torch.Generator().manual_seed(seed)
    th_chk = torch.randn(3, 2, 3, dtype=torch.float64, generator=gen)
    P_chk = torch.tensor(phi_chk)
    Xmc = sobol_normal(2**18, 2, seed)
    fs_mc = cfg.fstar(Xmc)
    soft_err, mc_gap = 0.0, 0.0
    for t in taus:
        quad = soft_risk_quad(cfg, th_chk, P_chk, t)
        fine = soft_risk_quad(cfg, th_chk, P_chk, t, nodes=96)
        mc = soft_risk(th_chk, P_chk, t, Xmc, fs_mc, cfg.noise_std**2)
        soft_err = max(soft_err, float((quad - fine).abs().max()))
        mc_gap = max(mc_gap, float((quad - mc).abs().max()))
    return q_err, soft_err, mc_gap


def shape_derivative_table(cfg, seed: int) -> pd.DataFrame:
    """The boundary-integral router gradient of the hard risk (our proposition) against central
    finite differences of the quadrature (h = 1e-5), at four routers, for the refitted experts
    and for experts perturbed by draws from ``seed``: the proposition holds off the refit too."""
    rows = []
    rng = np.random.default_rng(seed)
    for p in [(0.4, 0.1), (1.3, -0.5), (2.5, 1.0), (0.05, 0.31)]:
        for label, th in (
            ("refit θ(φ)", hard_refit(cfg, p)),
            ("perturbed θ", hard_refit(cfg, p) + 0.2 * rng.standard_normal((2, 3))),
        ):
            bi = boundary_integral_gradient(cfg, th, p)
            fd = finite_difference_gradient(cfg, th, p, h=1e-5)
            rows.append(
                {
                    "φ = (α, b)": p,
                    "experts": label,
                    "boundary integral": bi.round(6),
                    "finite differences": fd.round(6),
                    "max |diff|": float(np.abs(bi - fd).max()),
                }
            )
    return pd.DataFrame(rows)


def teacher_radius() -> float:
    """The chart distance from the teacher within which the search counts a critical point as
    the teacher's (the default of :func:`~moe_routing.landscape.critical_points.collect`)."""
    return inspect.signature(collect).parameters["teacher_radius"].default


def track_radius() -> float:
    """The chart distance within which a soft critical point continues a hard one (the default
    of :func:`~moe_routing.landscape.saddles.track_hard_points`)."""
    return inspect.signature(track_hard_points).parameters["radius"].default


def refit_radii(cfg, taus, b_max: float, n_alpha: int, n_b: int) -> tuple[float, float]:
    """The radius R of the expert ball that holds every refit the descent can meet: the largest
    ``max_k |θ_k|`` of the hard refits and of the soft refits at every τ of ``taus``, over an
    ``n_alpha × n_b`` grid of the chart with ``|b| ≤ b_max``.  Returns ``(hard, soft)``."""
    chart = np.array([[a, b] for b in np.linspace(-b_max, b_max, n_b)
                      for a in np.linspace(0, math.pi, n_alpha)])   # (n_b * n_alpha, 2)
    r_hard = max(float(np.linalg.norm(hard_refit(cfg, p), axis=1).max()) for p in chart)
    with torch.no_grad():
        r_soft = max(float(soft_refit_quad(cfg, torch.tensor(chart), t)[0]
                           .norm(dim=-1).max()) for t in taus)
    return r_hard, r_soft


def constant_expert_gaps(cfg, tau: float, scales=(1, 10, 100)) -> list[tuple[int, float]]:
    """``L_τ − L_0`` at the teacher's router for the constant experts ``±s``, one pair per
    scale ``s``: without a ball on the experts the soft-to-hard gap has no uniform bound."""
    th_pm = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    phi_t = torch.tensor(cfg.teacher_phi)[None]
    return [
        (s, float(soft_risk_quad(cfg, torch.tensor(s * th_pm)[None], phi_t, tau))
         - hard_risk(cfg, s * th_pm, cfg.teacher_phi))
        for s in scales
    ]


@dataclass(frozen=True)
class ProfiledGrids:
    """The profiled risks on the picture grid: ``hard[i, j]`` = ``L̄₀(alpha[j], b[i])`` and
    ``soft[τ]`` the same for ``L̄_τ`` (arrays of shape ``(len(b), len(alpha))``)."""

    alpha: np.ndarray
    b: np.ndarray
    hard: np.ndarray
    soft: dict


def profiled_grids(cfg, n_alpha: int, n_b: int, taus) -> ProfiledGrids:
    """``L̄₀`` (exact quadrature) and ``L̄_τ`` at each τ of ``taus`` on an ``n_alpha × n_b`` grid of
    the chart, α ∈ [0, π] (α = 0 and α = π: the same lines, cells swapped), b ∈ [-2, 2]."""
    A = np.linspace(0, math.pi, n_alpha)
    B = np.linspace(-2.0, 2.0, n_b)
    L0_grid = np.array([[profiled_hard(cfg, (a, b)) for a in A] for b in B])
    grid_phi = torch.tensor([[a, b] for b in B for a in A], dtype=torch.float64)
    Lt_grids = {}
    with torch.no_grad():
        for t in taus:
            Lt = soft_refit_quad(cfg, grid_phi, float(t))[1].numpy()
            Lt_grids[t] = Lt.reshape(len(B), len(A))
    return ProfiledGrids(A, B, L0_grid, Lt_grids)


def hard_point_table(hard_cps) -> pd.DataFrame:
    """The critical points of ``L̄₀``, with their value, Hessian spectrum and kind."""
    return pd.DataFrame(
        [
            {
                "φ = (α, b)": c.phi.round(4),
                "L̄₀": round(c.value, 6),
                "Hessian eigenvalues": c.hess_eigs.round(4),
                "kind": c.kind,
            }
            for c in hard_cps
        ]
    )


def _teacher_marks(cfg) -> list:
    """The teacher partition in the chart: one point, two when it lies on the edge α = 0 (the
    same line appears again at α = π with the cells swapped)."""
    W_T = wrap_phi(cfg.teacher_phi)
    return [W_T] + ([np.array([W_T[0] + math.pi, -W_T[1]])] if W_T[0] < 1e-9 else [])


def _landscape_panel(ax, grids, Z, title, levels, hard_cps, teacher_marks, cmap="viridis"):
    """One contour picture of a profiled risk (or of a difference of two) over the chart
    (``Z``: shape ``(len(grids.b), len(grids.alpha))``), with the teacher partition and the hard
    critical points (one legend entry per kind)."""
    A, B = grids.alpha, grids.b
    cs = ax.contourf(A, B, Z, levels=levels, cmap=cmap)
    ax.contour(A, B, Z, levels=levels, colors="k", linewidths=0.25)
    for j, w in enumerate(teacher_marks):
        ax.plot(
            w[0],
            w[1],
            "*",
            color="white",
            ms=15,
            mec="k",
            clip_on=False,
            label="teacher partition" if j == 0 else None,
        )
    seen = set()
    for c in hard_cps:
        ax.plot(
            c.phi[0],
            c.phi[1],
            HARD_MARK[c.kind],
            color="#D55E00",
            ms=9,
            mec="k",
            label=None if c.kind in seen else f"hard {c.kind}",
        )
        seen.add(c.kind)
    ax.set_xlim(0, math.pi)
    ax.set_xlabel("router angle $\\alpha$ (rad)")
    ax.set_ylabel("router offset $b$")
    ax.set_title(title)
    return cs


def hard_landscape(cfg, grids: ProfiledGrids, hard_cps):
    """The hard profiled risk ``L̄₀`` over the chart, on 31 levels spanning the hard and every
    soft grid, with the teacher partition (a sharp minimum) and the hard critical points."""
    Zs = [grids.hard, *grids.soft.values()]
    levels = np.linspace(min(Z.min() for Z in Zs), max(Z.max() for Z in Zs), 31)
    fig, ax = plt.subplots(figsize=column_figsize(0.62))
    cs = _landscape_panel(ax, grids, grids.hard, "hard: $\\bar L_0$", levels, hard_cps,
                          _teacher_marks(cfg))
    fig.colorbar(cs, ax=ax, label="profiled risk")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    return fig


def soft_differences(cfg, grids: ProfiledGrids, hard_cps, taus):
    """``L̄_τ − L̄₀`` over the chart, one stacked panel per τ of ``taus``, on one diverging colour
    scale centred at 0 shared by the panels (so their depth of colour compares temperatures)."""
    rows = len(taus)
    diffs = {t: grids.soft[t] - grids.hard for t in taus}
    top = max(float(np.nanmax(np.abs(d))) for d in diffs.values()) or 1.0
    diff_levels = np.linspace(-top, top, 21)
    marks = _teacher_marks(cfg)
    fig, axes = plt.subplots(
        rows, 1, figsize=column_figsize(0.55, rows), squeeze=False, sharex=True
    )
    for ax, t in zip(axes[:, 0], taus):
        cs = _landscape_panel(ax, grids, diffs[t],
                              f"$\\bar L_\\tau - \\bar L_0$, $\\tau = {t:g}$",
                              diff_levels, hard_cps, marks, cmap="RdBu_r")
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
    fig.colorbar(cs, ax=axes[:, 0].tolist(), label="soft minus hard profiled risk",
                 ticks=np.linspace(-top, top, 5), format="%.2f")
    return fig


def soft_point_table(soft_cps) -> pd.DataFrame:
    """Every critical point of ``L̄_τ`` found, per temperature: coordinates, kind, value, the
    extreme eigenvalues of the profiled and joint Hessians, and the recovery errors."""
    return pd.DataFrame(
        [
            {
                "τ": r.tau,
                "φ = (α, b)": r.point.phi.round(4),
                "kind": r.point.kind,
                "soft objective L̄": round(r.point.value, 6),
                "profiled λₘᵢₙ": round(r.point.hess_eigs[0], 4),
                "profiled λₘₐₓ": round(r.point.hess_eigs[1], 3),
                "joint λₘᵢₙ": round(r.joint_eigs[0], 4),
                "partition error": float(f"{r.partition_error:.3g}"),
                "expert error": round(r.expert_error, 4),
            }
            for r in soft_cps
        ]
    )


def _curvature(curve) -> np.ndarray:
    """The measured profiled Hessian eigenvalues at the global minimiser, shape ``(τ, 2)``:
    columns λ_min, λ_max."""
    return np.stack([curve.lam_min, curve.lam_max], 1)


def _law_eigenvalues(consts, taus) -> np.ndarray:
    """Eigenvalues of the first-order Hessian law at each τ, shape ``(len(taus), 2)``."""
    return np.array([np.linalg.eigvalsh(hessian_first_order(consts, t)) for t in taus])


def curvature_ratios(curve, consts) -> tuple[np.ndarray, float]:
    """The measured Hessian eigenvalues at the smallest τ over those of the first-order
    specialisation-gap law (shape ``(2,)``: λ_min, λ_max), and the one farthest from 1."""
    law_eigs = _law_eigenvalues(consts, np.array(curve.taus))
    curv_ratio = _curvature(curve)[-1] / law_eigs[-1]
    return curv_ratio, float(curv_ratio[np.argmax(np.abs(curv_ratio - 1))])


def global_minimisers(soft_cps, taus) -> dict:
    """The lowest critical point found at each τ (the global minimiser, as far as the search
    knows), keyed by τ."""
    return {
        t: min((r for r in soft_cps if r.tau == t), key=lambda r: r.point.value) for t in taus
    }


def curvature_at_teacher(curve, consts):
    """The profiled Hessian's eigenvalues at the global minimiser against τ (markers) and the
    first-order law ``(1/2τ) ∫ D² ∇g ∇gᵀ p`` on a fine τ grid (dashed): the gap-weighted
    interface integral sets the curvature, which grows like 1/τ."""
    tt = np.array(curve.taus)
    lam = _curvature(curve)
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    tg = np.geomspace(tt.min(), tt.max(), 50)
    law_g = _law_eigenvalues(consts, tg)
    EIG_NAMES = (("$\\lambda_{\\min}$", "o"), ("$\\lambda_{\\max}$", "s"))
    for j, (name, mk) in enumerate(EIG_NAMES):
        ax.loglog(tt, lam[:, j], mk, color=plots.PALETTE[j], ms=7, label=f"measured {name}")
        ax.loglog(
            tg,
            law_g[:, j],
            "--",
            color=plots.PALETTE[j],
            lw=1.2,
            label=f"first-order law, {name}",
        )
    ax.set_xlabel("temperature $\\tau$")
    ax.set_ylabel("eigenvalue of $\\nabla^2\\bar L_\\tau$ at the minimiser")
    ax.legend()
    return fig


def ridge_saddle(hard_cps, tracks, taus) -> tuple[list, float | None]:
    """The ridge saddle — the hard critical point with the most negative curvature — followed
    through the soft landscapes: ``(found, hard)``, ``found`` the ``(τ, λ_min)`` of its soft
    continuations where there is one, ``hard`` its own λ_min (``None`` with no hard point)."""
    if not hard_cps:
        return [], None
    i_ridge = int(np.argmin([c.hess_eigs[0] for c in hard_cps]))
    found = [
        (t, float(r.point.hess_eigs[0]))
        for t, r in zip(taus, tracks[i_ridge])
        if r is not None
    ]
    return found, float(hard_cps[i_ridge].hess_eigs[0])


def ridge_text(found, hard) -> str:
    """What the text says about the ridge saddle: its λ_min at the largest and smallest τ
    against the hard value, or that the search did not follow it."""
    if not found:
        return "was not found by this run's search, so nothing is measured there"
    rel = abs(found[-1][1] / hard - 1)
    return (
        f"has λₘᵢₙ = {found[0][1]:.3f} at τ = {found[0][0]:g} and "
        f"{found[-1][1]:.3f} at τ = {found[-1][0]:g}, against the hard value "
        f"{hard:.3f} (relative difference {rel:.1e})"
    )


def ridge_summary(found, hard) -> str:
    """The ridge saddle in the ledger's words: its λ_min from the first to the last τ, and the
    hard value."""
    if not found:
        return "no ridge saddle followed"
    return (
        f"ridge saddle λₘᵢₙ {found[0][1]:.3f} (τ = {found[0][0]:g}) → "
        f"{found[-1][1]:.3f} (τ = {found[-1][0]:g}), hard value "
        f"{hard:.3f}"
    )


def saddle_curvatures(hard_cps, tracks, taus):
    """λ_min of the soft critical points that continue each hard critical point, against τ (one
    colour and marker per hard point), each with its hard value dotted; symmetric-log axis."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    for i, (c, mk) in enumerate(zip(hard_cps, "osD^v<>")):
        col = plots.PALETTE[i % len(plots.PALETTE)]
        pts = [(t, r.point.hess_eigs[0]) for t, r in zip(taus, tracks[i]) if r is not None]
        if pts:
            ax.semilogx(
                *zip(*pts),
                mk + "-",
                color=col,
                ms=7,
                label=f"{c.kind} at ({c.phi[0]:.2f}, {c.phi[1]:.2f})",
            )
        ax.axhline(c.hess_eigs[0], color=col, ls=":", lw=1.2)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=0.1, linscale=0.5)
    ax.margins(y=0.08)
    ax.set_xlabel("temperature $\\tau$")
    ax.set_ylabel("$\\lambda_{\\min}(\\nabla^2\\bar L_\\tau)$")
    ax.legend(
        title="continues the hard", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1
    )
    return fig


def recovery_bound_table(cfg, glob: dict, eps0: dict, kappa: float, taus) -> pd.DataFrame:
    """At each picture temperature of ``taus`` where a global minimiser was found: the grid
    estimate of ε₀, the theorem's bound 2ε₀/κ (q = 1) and the minimiser's distance from 𝒯."""
    rows = []
    for t in taus:
        if t in glob:
            d = min(TWO_REGION.distance(glob[t].point.phi, p)
                    for p in cfg.teacher_equivalents())
            rows.append(
                {
                    "τ": t,
                    "ε₀ on the grid": eps0[t],
                    "bound 2ε₀/κ": 2 * eps0[t] / kappa,
                    "distance of the minimiser from 𝒯": d,
                }
            )
    return pd.DataFrame(rows)


def partition_text(p_exp) -> str:
    """How the partition error falls: its fitted exponent, or why there is none."""
    if p_exp is None:
        return "is not resolved at two temperatures or more, so no exponent is fitted"
    return f"falls like τ^p with p = {p_exp:.2f}"


def recovery_table(tt, bm, curve, law) -> pd.DataFrame:
    """The recovery errors of the global minimiser per τ, beside the teacher's boundary mass
    ``bm`` and the first-order law ``law`` of the expert error (arrays of shape ``(τ,)``)."""
    return pd.DataFrame(
        {
            "τ": tt,
            "BM_T(τ)": bm,
            "expert error": curve.expert_error,
            "first-order law": law,
            "ratio": np.array(curve.expert_error) / law,
            "partition error": curve.partition_error,
        }
    )


def recovery_errors(bm, law, curve):
    """The expert error of the global minimiser (circles) against the teacher's boundary mass
    ``bm`` (shape ``(τ,)``), on its first-order law ``law`` (dashed), and the partition error
    (squares) where it is nonzero; each expert marker labelled with its τ."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    ax.loglog(
        bm,
        curve.expert_error,
        "o",
        ms=7,
        color=plots.PALETTE[0],
        label="expert error $\\min_\\pi\\max_k|\\theta_k-\\beta_{\\pi(k)}|$",
    )
    ax.loglog(bm, law, "--", color=plots.PALETTE[0], lw=1.2, label="first-order law")
    pe = np.array(curve.partition_error)
    ax.loglog(
        bm[pe > 0],
        pe[pe > 0],
        "s",
        ms=7,
        color=plots.PALETTE[3],
        label="partition error $P(C\\,\\triangle\\,T)$",
    )
    for b_, e_, t_ in zip(bm, curve.expert_error, np.array(curve.taus)):
        ax.annotate(
            f"τ = {t_:g}", (b_, e_), textcoords="offset points", xytext=(6, -12), fontsize=9
        )
    ax.set_xlabel("boundary mass of the teacher's interface $\\mathrm{BM}_T(\\tau)$")
    ax.set_ylabel("recovery error of the global minimiser")
    ax.legend(loc="upper left")
    return fig
