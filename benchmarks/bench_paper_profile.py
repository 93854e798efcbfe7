"""Paper-profile cost of the theory chapters: the new estimators against the old, at equal error.

For each chapter (one function per chapter, registered in ``CHAPTERS``) this times the main
computations of its ``paper`` profile (knobs read from ``notebooks/params/paper.yaml``) with
the estimator the chapter uses now and with the one it used before, and prints side by side
the time, the statistical error (standard error, or the RMS error over seeds where the error
is a sample's distance to the population), and the ratio of times **at equal error**:

    ratio = (t_new / t_old) · (err_new / err_old)²,

the time the new estimator would need to reach the old one's error if its error fell like
1/√n (for quasi-Monte Carlo it falls faster, so the ratio is an upper bound).  The old
estimators are too slow to run at full size in a benchmark: they run on ``--old-fraction`` of
the paper's sample and are extrapolated linearly in time and as 1/√n in error (both exact
for i.i.d. Monte Carlo, whose cost is linear in n).  The last line of each chapter gives its
recorded paper-profile wall time (``build/paper/state/NAME.json``) when one exists.

Usage: python benchmarks/bench_paper_profile.py [--chapters symmetry_breaking soft_to_hard]
       [--old-fraction 0.05] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    """One computation of a chapter: old and new time (s) and error, and what they measure."""

    chapter: str
    computation: str
    t_old: float
    t_new: float
    err_old: float
    err_new: float
    error: str            # what the error column is

    @property
    def ratio(self) -> float:
        """t_new / t_old at equal error (errors ∝ 1/√n)."""
        return self.t_new / self.t_old * (self.err_new / self.err_old) ** 2


def paper_params(chapter: str) -> dict:
    return yaml.safe_load((ROOT / "notebooks/params/paper.yaml").read_text())[chapter]


def recorded_wall(chapter: str) -> str:
    f = ROOT / "build/paper/state" / f"{chapter}.json"
    if not f.exists():
        return "no recorded paper run"
    return f"recorded paper-profile wall time {json.loads(f.read_text()).get('wall_s')} s"


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# ------------------------------------------------------------------------ symmetry breaking

def bench_symmetry_breaking(old_fraction: float) -> list[Row]:
    """The old flow is timed on the full sample over a few steps (its cost per step is
    constant), so ``old_fraction`` is not needed here."""
    del old_fraction
    from moe_routing.landscape.symmetry import (TwoExpertGaussian, fastest_rate_times_tau,
                                                m_operator_mc)
    from moe_routing.landscape.symmetry_flow import gradient_flow, symmetric_start

    p = paper_params("symmetry_breaking")
    d, n_flow, n_mc, steps = p["d"], p["n_flow"], p["n_mc"], p["steps"]
    taus = np.array(sorted(map(float, p["taus"]), reverse=True))
    n_qmc = 2 ** math.ceil(math.log2(max(n_flow / 16, 1024)))       # as in the chapter
    u = np.random.default_rng(p["seed"]).standard_normal(d)
    model = TwoExpertGaussian.abs_teacher(d, u=u / np.linalg.norm(u))
    rows = []
    # 1. the flow's sample: |sample rate − population rate 2/√π| over seeds (RMS)
    pop = 2 / math.sqrt(math.pi)
    err_iid, err_qmc, t_iid, t_qmc = [], [], 0.0, 0.0
    for s in range(4):
        (X, Y), dt = timed(lambda s=s: model.sample(n_flow, seed=100 + s))
        t_iid += dt
        err_iid.append(fastest_rate_times_tau(m_operator_mc(X, Y)[0]) - pop)
        (X, Y), dt = timed(lambda s=s: model.sample(n_qmc, seed=100 + s, method="sobol"))
        t_qmc += dt
        err_qmc.append(fastest_rate_times_tau(m_operator_mc(X, Y)[0]) - pop)
    e_iid, e_qmc = float(np.sqrt(np.mean(np.square(err_iid)))), float(np.sqrt(np.mean(np.square(err_qmc))))
    # 2. the flow: RK4 steps on each sample (old: i.i.d. n_flow, unfused gradients), timed on
    # a few steps and scaled to the chapter's step count (B = 6: the main flow; B = 1: the
    # general teacher's ~260 steps; two 50-step flows of B = 6 for the exact symmetry)
    k = 6
    step_equiv = steps + 260 / len(taus) + 100
    cost = {}
    for name, n, method, ref in (("old", n_flow, "iid", True), ("new", n_qmc, "sobol", False)):
        X, Y = model.sample(n, seed=2, method=method)
        start = symmetric_start(X, Y, len(taus), scale_w=1e-8, scale_delta=1e-8, seed=3, tau=taus)
        def run(steps, X=X, Y=Y, start=start, ref=ref):
            return gradient_flow(X, Y, *start, taus, steps=steps, h=p["h"], reference=ref)

        run(1)                                                                  # warm-up
        _, dt = timed(lambda run=run: run(k))
        cost[name] = dt / k * step_equiv
    rows.append(Row("symmetry_breaking", f"gradient flows (i.i.d. {n_flow} → Sobol' {n_qmc}, "
                    "fused gradients)", cost["old"], cost["new"], e_iid, e_qmc,
                    "RMS |max|λ(M_n)|/√2 − 2/√π| over 4 seeds"))
    # 3. the Monte Carlo check of M: the same estimator, two products instead of (n, d, d)
    X, Y = model.sample(n_mc, seed=1)
    (M0, se0, _), t0 = timed(lambda: m_operator_mc(X, Y, reference=True))
    (M1, se1, _), t1 = timed(lambda: m_operator_mc(X, Y))
    rows.append(Row("symmetry_breaking", f"m_operator_mc, n = {n_mc} (x2 teachers)", 2 * t0,
                    2 * t1, float(se0.max()), float(se1.max()), "max standard error of M_n"))
    return rows


# ------------------------------------------------------------------------ soft to hard

def _sine_feature(d, g, float32: bool):
    """The chapter's random feature (old: float64; new: float32)."""
    om, ph = g.uniform(0.5, 2.0, d), g.uniform(0, 2 * np.pi, d)
    centre = np.sin(ph) * np.exp(-om ** 2 / 2)
    if not float32:
        return lambda x: np.tanh((np.sin(x * om + ph) - centre).sum(1) / np.sqrt(d))
    om, ph, centre = (a.astype(np.float32) for a in (om, ph, centre))
    return lambda x: np.tanh((np.sin(x.astype(np.float32) * om + ph) - centre)
                             .sum(1, dtype=np.float64) / np.sqrt(d))


def _layer_model(d, b, seed, float32):
    from moe_routing.boundary import FunctionExperts, LinearRouter, MoERegression, Teacher

    gd = np.random.default_rng([seed, d])
    vhat = gd.standard_normal(d)
    vhat /= np.linalg.norm(vhat)
    h1, h2, hs = (_sine_feature(d, gd, float32) for _ in range(3))
    experts = FunctionExperts(lambda x: np.stack([1 + 0.5 * h1(x), -1 + 0.5 * h2(x)], 1), 2, 1.5)
    teacher = Teacher(lambda x: np.sign(x @ vhat - b) + 0.5 * hs(x), 1.5)
    return MoERegression(LinearRouter.binary(vhat, b=-b), experts, teacher), gd


def bench_soft_to_hard(old_fraction: float) -> list[Row]:
    from moe_routing.boundary import (ConstantExperts, GaussianLaw, LinearRouter, MoERegression,
                                      TanhExperts, Teacher, first_order_constant, hard_gates,
                                      risk_layer_quadrature, risk_mc)

    p = paper_params("soft_to_hard")
    seed, n_perp, n_mc, tau_l = p["seed"], p["n_perp"], p["n_mc"], p["tau_layer"]
    n_lines = max(2, n_perp // 10)                                       # as in the chapter
    n_rqmc = 2 ** int(np.ceil(np.log2(max(n_mc / 5, 32))))
    f = 1 / old_fraction
    rows = []
    # 1. one cell of the layer experiment at the largest dimension (b = 0): gap at τ and τ/4
    #    and the interface integral; the error column is the worst relative standard error
    d = max(p["dims"])
    law = GaussianLaw.standard(d)
    taus = [tau_l, tau_l / 4]
    m_old, g_old = _layer_model(d, 0.0, seed, float32=False)
    n_old = max(2, int(n_perp * old_fraction))

    def old_cell():
        gap = risk_layer_quadrature(m_old, law, taus, n_perp=n_old, rng=g_old)
        fo = first_order_constant(m_old, law, n_cond=20 * n_old, rng=g_old)
        return gap, fo

    (gap0, fo0), t0 = timed(old_cell)
    m_new, g_new = _layer_model(d, 0.0, seed, float32=True)
    gap1, t1 = timed(lambda: risk_layer_quadrature(m_new, law, taus, n_perp=20 * n_perp,
                                                   n_lines=n_lines, n_gl=8, k_fine=0, rng=g_new))
    err0 = max(float((gap0.se / np.sqrt(f) / taus).max()), fo0[1] / np.sqrt(f))
    err1 = max(float((gap1.se / taus).max()), gap1.first_order_se)
    rows.append(Row("soft_to_hard", f"layer cell d = {d}, b = 0 (one of {len(p['dims'])}×"
                    f"{len(p['biases'])}; control variate, {n_lines} lines, float32)",
                    t0 * f, t1, err0, err1, "max se of gap/τ and of the interface integral"))
    # 2. the d = 8 case: 13 temperatures
    rng = np.random.default_rng(seed)
    taus8 = np.geomspace(p["tau_min"], p["tau_max"], p["n_tau"])
    v8 = rng.standard_normal(8)
    law8 = GaussianLaw.standard(8)
    exp8 = TanhExperts([1.0, -1.0], [0.5, 0.5], rng.standard_normal((2, 8)) / np.sqrt(8))
    th8 = rng.standard_normal(8) / np.sqrt(8)
    model8 = MoERegression(LinearRouter.binary(v8), exp8,
                           Teacher(lambda x: np.sign(x @ v8) + 0.5 * np.tanh(x @ th8), 1.5))
    g8_old, t0 = timed(lambda: risk_layer_quadrature(model8, law8, taus8, n_perp=n_old, rng=1))
    g8_new, t1 = timed(lambda: risk_layer_quadrature(model8, law8, taus8, n_perp=20 * n_perp,
                                                     n_lines=n_lines, n_gl=8, k_fine=0, rng=2))
    rows.append(Row("soft_to_hard", f"linear d = 8, {len(taus8)} temperatures (control variate)",
                    t0 * f, t1, float((g8_old.se / np.sqrt(f) / taus8).max()),
                    float((g8_new.se / taus8).max()), "max se of gap/τ"))
    # 3. the K = 3 Monte Carlo case
    law2 = GaussianLaw.standard(2)
    r3 = LinearRouter.random(3, 2, rng=np.random.default_rng([seed, 3]))
    e3 = ConstantExperts([1.0, -1.0, 0.3])
    model3 = MoERegression(r3, e3, Teacher(lambda x: (e3(x) * hard_gates(r3.logits(x))).sum(1), 1.0))
    taus3 = np.geomspace(p["tau_max"] / 30, p["tau_max"], 5)
    n0 = max(2, int(n_mc * old_fraction))
    mc, t0 = timed(lambda: risk_mc(model3, law2, taus3, n0, rng=1))
    rq, t1 = timed(lambda: risk_mc(model3, law2, taus3, n_rqmc, rng=2, method="rqmc"))
    rows.append(Row("soft_to_hard", f"K = 3 Monte Carlo ({n_mc} i.i.d. → {n_rqmc} RQMC)",
                    t0 * f, t1, float((mc.se / np.sqrt(f)).max()), float(rq.se.max()),
                    "max se of L_τ − L_0"))
    return rows


# ------------------------------------------------------------------------ landscape (K regions)

def bench_landscape_multi(_old_fraction: float) -> list[Row]:
    """A Newton batch (8 routers) of profiled Hessians per teacher at the paper's sample sizes:
    closed form (new) against autograd (old).  Both are exact: the error column is the
    relative difference of the two Hessians' spectra, the same in both columns (equal error).
    Both run at full size (no ``old_fraction``): one batch of autograd Hessians takes seconds.
    Then the search itself, one level against two (:func:`_two_level_row`)."""
    from moe_routing.landscape import multi_critical as mc
    from moe_routing.landscape import multi_region as mr
    from moe_routing.landscape.profiled import ProfiledObjective

    p = paper_params("landscape_multi")
    tau = float(min(p["taus"]))
    rows = []
    for name, make, n in (("K = 3, d = 2", mr.three_region_plane, p["n_d2"]),
                          ("K = 3, d = 3", mr.three_region_space, p["n_d3"]),
                          ("K = 4, d = 3", mr.four_region_space, p["n_d3"])):
        t = make()
        new, old = (ProfiledObjective(t, n, 0, derivatives=m) for m in ("closed_form", "autograd"))
        phi = mr.normalise(mc.start_routers(new, 8, 0, tau), t.K, t.d)
        (_, _, _, _, H_new), t_new = timed(lambda o=new, x=phi: o.grad_hess(x, tau))
        (_, _, _, _, H_old), t_old = timed(lambda o=old, x=phi: o.grad_hess(x, tau))
        e_new, e_old = np.linalg.eigvalsh(H_new), np.linalg.eigvalsh(H_old)
        err = float(np.abs(e_new - e_old).max() / np.abs(e_old).max())
        rows.append(Row("landscape_multi", f"{name}: 8 Hessians, n = {n}, τ = {tau:g}",
                        t_old, t_new, err, err, "relative difference of the spectra (both exact)"))
    rows.append(_two_level_row(p))
    return rows


def _two_level_row(p: dict, n: int = 2 ** 16) -> Row:
    """The critical-point search of the K = 3, d = 2 teacher at the paper's first two
    temperatures, starts and steps, on an ``n``-point objective (a quarter of the paper's, so
    that the one-level search runs in a benchmark): one level (old) against the two-level search
    with the paper's guide (new).  Every point either returns is a critical point of the same
    objective; the error column is the distance between the two searches' teacher minima (the
    points the recovery claims use), and the error text says which points each found."""
    from moe_routing.landscape import multi_critical as mc
    from moe_routing.landscape import multi_region as mr
    from moe_routing.landscape.charts import MultiRegionChart
    from moe_routing.landscape.common import sobol_normal
    from moe_routing.landscape.profiled import ProfiledObjective

    t, taus = mr.three_region_plane(), sorted(p["taus"], reverse=True)[:2]
    obj, guide = ProfiledObjective(t, n, 0), ProfiledObjective(t, p["n_guide"], 0)
    X = sobol_normal(2 ** 16, t.d, 1)
    starts = mc.start_routers(obj, p["n_starts"], 0, taus[0])
    kw = dict(descent_steps=p["descent_steps"], grad_norm_steps=p["grad_norm_steps"],
              newton_steps=p["newton_steps"])
    (one, _), t_old = timed(lambda: mc.critical_points(obj, taus, starts, X, **kw))
    (two, _), t_new = timed(lambda: mc.critical_points(obj, taus, starts, X, guide=guide, **kw))
    chart, dist, found = MultiRegionChart(t.K, t.d), 0.0, []
    for tau in taus:
        a, b = ([c for c in pts if c.tau == tau] for pts in (one, two))
        shared = sum(any(chart.distance(c.phi, q.phi) < 1e-5 for q in b) for c in a)
        found.append(f"τ = {tau:g}: {len(a)} / {len(b)}, {shared} shared")
        ta, tb = ([c.phi for c in x if c.teacher] for x in (a, b))
        dist = max(dist, chart.distance(ta[0], tb[0]) if ta and tb else math.inf)
    return Row("landscape_multi", f"K = 3, d = 2: search, n = {n}, 2 τ, guide {p['n_guide']}",
               t_old, t_new, max(dist, 1e-300), max(dist, 1e-300),
               "distance of the teacher minima; points found (one / two levels): "
               + "; ".join(found))


# ------------------------------------------------------------------------ construction

def bench_construction(old_fraction: float) -> list[Row]:
    """Circuit isolation at the paper's size (``isolation_experts`` knock-outs): every slot
    re-evaluated per knock-out (old, run on ``old_fraction`` of the experts and extrapolated
    linearly) against re-evaluating only the slots routed to the knocked-out expert (new).
    Both are exact; the error column is the largest difference of any reported number."""
    from moe_routing.construction import build_moe
    from moe_routing.construction.verify import isolation
    from moe_routing.knowledge import build_dataset

    p = paper_params("construction")
    ds = build_dataset(n_relations=p["n_relations"], seed=p["seed"])
    model, rep = build_moe(ds, eps=max(p["eps_list"]))           # as the chapter builds it
    experts = list(range(min(p["isolation_experts"], ds.n_tasks)))
    k_old = experts[:max(1, int(round(len(experts) * old_fraction)))]
    new, t_new = timed(lambda: isolation(model, rep, ds, experts))
    old, t_old = timed(lambda: isolation(model, rep, ds, k_old, method="full"))
    diff = max(abs(a[k] - b[k]) for a, b in zip(new, old) for k in a
               if isinstance(a[k], float))
    return [Row("construction", f"isolation of {len(experts)} experts ({len(k_old)} timed old)",
                t_old * len(experts) / len(k_old), t_new, max(diff, 1e-300), max(diff, 1e-300),
                "largest difference of a reported number (both exact)")]


CHAPTERS = {"symmetry_breaking": bench_symmetry_breaking, "soft_to_hard": bench_soft_to_hard,
            "landscape_multi": bench_landscape_multi, "construction": bench_construction}
#: theory chapters whose estimators did not change (their paper profiles already fit in minutes):
#: only their recorded paper-profile wall time is printed
UNCHANGED = ("intro", "knowledge", "boundary_mass", "gamma_convergence", "landscape")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapters", nargs="+", default=list(CHAPTERS), choices=list(CHAPTERS))
    ap.add_argument("--old-fraction", type=float, default=0.05,
                    help="share of the paper's sample the old estimators run on (extrapolated)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    if not 0 < args.old_fraction <= 1:
        ap.error(f"--old-fraction = {args.old_fraction}: accepted 0 < f ≤ 1")
    torch.set_num_threads(args.threads)
    head = (f"{'computation':<72} {'t_old s':>9} {'t_new s':>8} {'err_old':>10} {'err_new':>10} "
            f"{'ratio@eq.err':>12}")
    for ch in args.chapters:
        t0 = time.perf_counter()
        rows = CHAPTERS[ch](args.old_fraction)
        print(f"\n== {ch} (benchmark {time.perf_counter() - t0:.0f} s; {recorded_wall(ch)})")
        print(head)
        for r in rows:
            print(f"{r.computation:<72} {r.t_old:9.1f} {r.t_new:8.1f} {r.err_old:10.3g} "
                  f"{r.err_new:10.3g} {r.ratio:12.3g}")
            print(f"{'':<4}error: {r.error}")
        t_old, t_new = sum(r.t_old for r in rows), sum(r.t_new for r in rows)
        print(f"{'total of the main computations':<72} {t_old:9.1f} {t_new:8.1f}")
    for ch in UNCHANGED:
        print(f"\n== {ch} (estimator unchanged; {recorded_wall(ch)})")


if __name__ == "__main__":
    main()
