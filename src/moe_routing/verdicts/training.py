"""Rules of the training chapter: Figure 2's routing, the accuracy grid, active parameters,
and whether the training runs behind them had converged.

Accuracies are fractions in [0, 1].  An accuracy of a cell enters as an *interval*
``(mean, low, high)`` -- :func:`moe_routing.experiments.accuracy_interval`: the mean over seeds
with the larger of the seed spread and the test set's binomial error -- and the accuracy rules
decide on intervals, not on a flat tolerance: a model is *worse* than another when its interval
lies entirely below the other's.  Every rule that judges accuracies takes ``converged`` (the
verdict of :func:`runs_converged`): a comparison of runs that were still improving cannot
reproduce a claim, so it is at most *partly* then, and the reason says so.

A routing rule judges only *trained* models (test accuracy ≥ ``min_accuracy``): the routing of a
model that has not learned the task says nothing about what training does to a router.  Each
rule's power -- that it reads *not reproduced* for deliberately broken models (a router with
constant logits, routing collapsed onto one expert, shuffled task labels, a dense model with
fewer active parameters, an untrained model, a run stopped early) -- is measured on real runs
(:mod:`moe_routing.experiments.power`, ``tests/test_rule_power.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..validation import fail, finite_array, flag, integer, number, require
from . import rule


def _fraction(name: str, value) -> float:
    return number(name, value, low=0.0, high=1.0)


def _fractions(name: str, values, size: int | None = None) -> np.ndarray:
    a = finite_array(name, values, ndim=1, low=0)
    require(size is None or a.size == size, f"{name}.size", a.size, f"{size}")
    require(a.max() <= 1, f"{name}.max()", float(a.max()), "fractions in [0, 1]")
    return a


def _pp(x: float) -> str:
    return f"{100 * x:.1f} %"


def _interval(name: str, value) -> tuple[float, float, float]:
    """``(mean, low, high)`` from an AccuracyInterval or a triple, with low ≤ mean ≤ high."""
    if hasattr(value, "mean") and hasattr(value, "low") and hasattr(value, "high"):
        value = (value.mean, value.low, value.high)
    try:
        m, lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        fail(name, value, "an accuracy interval (mean, low, high) or an AccuracyInterval")
    for part, v in (("mean", m), ("low", lo), ("high", hi)):
        _fraction(f"{name}.{part}", v)
    require(lo <= m <= hi, name, (m, lo, hi), "(mean, low, high) with low ≤ mean ≤ high")
    return m, lo, hi


def _iv(t: tuple[float, float, float]) -> str:
    return f"{100 * t[0]:.1f} % [{100 * t[1]:.1f}, {100 * t[2]:.1f}]"


def _worse(a, b) -> bool:
    """Interval ``a`` lies entirely below interval ``b``: a resolved loss."""
    return a[2] < b[1]


@rule
def runs_converged(ce_drops: Mapping[str, float], acc_changes: Mapping[str, float],
                   acc_noise: Mapping[str, float] | None = None, *,
                   max_ce_drop: float = 0.05, max_acc_change: float = 0.02
                   ) -> tuple[str, str]:
    """X-training-converged (the book's claim): every training run had stopped improving.

    Per run (same keys in every mapping): ``ce_drops`` the relative decrease of the training
    cross-entropy over the last fifth of training (window means of the logged batch losses),
    ``acc_changes`` the change of test exact match over the last quarter, ``acc_noise`` (optional)
    the noise of such a change on the run's test set, ``1.96·√(2p(1 − p)/n)`` for accuracy ``p``
    on ``n`` sentences (two evaluations, each with its binomial error).  A run has converged
    when the loss fell by less than ``max_ce_drop`` = 5 % (the window means carry about 1 % of
    batch noise, and a loss still falling by more would fall further) and the accuracy moved
    by at most the larger of ``max_acc_change`` = 2 pp and its noise (a change the test set
    cannot resolve is not a trend: on 500 sentences at 94 % it is 2.9 pp).  *our extension*
    when every run converged, *not reproduced* otherwise, naming the worst run.
    """
    max_ce_drop = number("max_ce_drop", max_ce_drop, low=0, high=1)
    max_acc_change = number("max_acc_change", max_acc_change, low=0, high=1)
    if not isinstance(ce_drops, Mapping) or not isinstance(acc_changes, Mapping):
        fail("ce_drops/acc_changes", type(ce_drops).__name__, "two mappings run → value")
    require(len(ce_drops) > 0 and set(ce_drops) == set(acc_changes), "acc_changes keys",
            sorted(acc_changes), f"the runs of ce_drops ({len(ce_drops)}, non-empty)")
    noise = {} if acc_noise is None else acc_noise
    if not isinstance(noise, Mapping) or (noise and set(noise) != set(ce_drops)):
        fail("acc_noise", type(noise).__name__, "None or a mapping with the runs of ce_drops")
    drops = {k: number(f"ce_drops[{k!r}]", v, low=-1, high=1) for k, v in ce_drops.items()}
    moves = {k: abs(number(f"acc_changes[{k!r}]", v, low=-1, high=1))
             for k, v in acc_changes.items()}
    tol = {k: max(max_acc_change, number(f"acc_noise[{k!r}]", noise[k], low=0, high=1)
                  if k in noise else 0.0) for k in drops}
    bad = [k for k in drops if drops[k] >= max_ce_drop or moves[k] > tol[k]]
    worst_drop = max(drops, key=drops.get)
    worst_move = max(moves, key=lambda k: moves[k] - tol[k])
    numbers = (f"largest CE drop {100 * drops[worst_drop]:.1f} % ({worst_drop}), closest "
               f"accuracy change {100 * moves[worst_move]:.1f} pp against its tolerance "
               f"{100 * tol[worst_move]:.1f} pp ({worst_move})")
    if not bad:
        return "our extension", (f"all {len(drops)} runs: CE drop < {100 * max_ce_drop:g} % and "
                                 f"accuracy change within max({100 * max_acc_change:g} pp, "
                                 f"test noise); {numbers}")
    return "not reproduced", (f"{len(bad)} of {len(drops)} runs still improving (CE drop ≥ "
                              f"{100 * max_ce_drop:g} % or accuracy change beyond max("
                              f"{100 * max_acc_change:g} pp, test noise)); {numbers}")


@rule
def routing_diffuse(nmi_ce: float, nmi_lb: float, nmi_ce_object: float, nmi_lb_object: float,
                    ceiling_nmi: float, load_entropy_ce: float, load_entropy_lb: float,
                    accuracy_ce: float, accuracy_lb: float, *, max_nmi: float = 0.2,
                    max_share_of_ceiling: float = 0.2, min_load_entropy: float = 0.8,
                    min_accuracy: float = 0.5) -> tuple[str, str]:
    """A-fig2-diffuse: CE and CE + LB route diffusely -- every expert used, none by task.

    NMI of the task × expert counts, over every predicted position (``nmi_ce``, ``nmi_lb``) and
    at the object-prediction position only (``*_object``); ``ceiling_nmi`` is the NMI of
    perfect routing to the designated experts (below 1 when tasks outnumber experts).  An
    objective's routing is *diffuse* when three things hold: (i) it carries less than a fifth
    of the task information perfect routing carries and at most 0.2 in absolute terms (NMI
    below ``t = min(max_nmi, max_share_of_ceiling · ceiling_nmi)``); (ii) the experts share the
    load -- the normalised entropy of the expert loads, ``load_entropy_*`` = H(load)/log E, is at
    least ``min_load_entropy`` = 0.8 (the paper's rows are spread over all experts; a router
    that sends everything to one expert, or a router bug with constant logits, also has NMI 0
    and would otherwise pass; 0.8 at E = 7 needs about five experts in real use); (iii) the
    model was trained (test accuracy ≥ ``min_accuracy`` = 0.5).  *reproduced* when both
    objectives are diffuse and also below ``t`` at the object position; *partly* when both are
    diffuse over the sentence but one is not at the object position, or when only one
    objective is diffuse; *not reproduced* when neither is.
    """
    vals = {n: _fraction(n, v) for n, v in (("nmi_ce", nmi_ce), ("nmi_lb", nmi_lb),
                                             ("nmi_ce_object", nmi_ce_object),
                                             ("nmi_lb_object", nmi_lb_object),
                                             ("ceiling_nmi", ceiling_nmi),
                                             ("load_entropy_ce", load_entropy_ce),
                                             ("load_entropy_lb", load_entropy_lb),
                                             ("accuracy_ce", accuracy_ce),
                                             ("accuracy_lb", accuracy_lb))}
    t = min(number("max_nmi", max_nmi, low=0, high=1),
            number("max_share_of_ceiling", max_share_of_ceiling, low=0, high=1)
            * vals["ceiling_nmi"])
    h_min = _fraction("min_load_entropy", min_load_entropy)
    a_min = _fraction("min_accuracy", min_accuracy)

    def why_not(o: str) -> str | None:
        if vals[f"accuracy_{o}"] < a_min:
            return f"untrained (accuracy {_pp(vals[f'accuracy_{o}'])} < {_pp(a_min)})"
        if vals[f"load_entropy_{o}"] < h_min:
            return (f"load not shared (H/log E {vals[f'load_entropy_{o}']:.2f} < {h_min:g})")
        if vals[f"nmi_{o}"] >= t:
            return f"NMI {vals[f'nmi_{o}']:.3f} ≥ {t:.3f}"
        return None

    bad = {o: why_not(o) for o in ("ce", "lb")}
    obj = vals["nmi_ce_object"] < t and vals["nmi_lb_object"] < t
    numbers = (f"NMI CE {vals['nmi_ce']:.3f}, CE+LB {vals['nmi_lb']:.3f} (object position "
               f"{vals['nmi_ce_object']:.3f}, {vals['nmi_lb_object']:.3f}) vs threshold "
               f"{t:.3f}; load entropy {vals['load_entropy_ce']:.2f}, "
               f"{vals['load_entropy_lb']:.2f}")
    fails = "; ".join(f"{'CE' if o == 'ce' else 'CE + LB'}: {w}" for o, w in bad.items() if w)
    if not fails and obj:
        return "reproduced", f"both diffuse at all positions: {numbers}"
    if not fails:
        return "partly", f"diffuse over the sentence, not at the object position: {numbers}"
    if bad["ce"] is None or bad["lb"] is None:
        return "partly", f"only one objective is diffuse ({fails}): {numbers}"
    return "not reproduced", f"neither objective is diffuse ({fails}): {numbers}"


@rule
def routing_aligned(diagonal: float, nmi_router: float, nmi_ce: float, nmi_lb: float, *,
                    min_diagonal: float = 0.75, min_nmi_ratio: float = 2.0,
                    partly_diagonal: float = 0.5) -> tuple[str, str]:
    """A-fig2-aligned: the task-router loss maps tasks near one-to-one onto experts.

    ``diagonal`` is the fraction of the router run's tokens at their designated expert,
    counted at the **task-determined positions** -- those whose prefix is continued by
    sentences of one task only (``routing_determined`` of a run).  There a router reading the
    prefix can reach 1; at the other positions (BOS, template words shared by several
    relations) the reachable diagonal is below 1 whatever the training (the chapter reports
    those positions separately, with the reachable ceiling).  *reproduced* when ``diagonal ≥
    min_diagonal`` = 0.75 (just below 0.77, the lowest designated-expert mass the secondary
    digest quotes from the paper's Figure 2) and the router run's NMI is at least
    ``min_nmi_ratio`` = 2 times that of both CE and CE + LB (clearly more specialised);
    *partly* when at least ``partly_diagonal`` = 0.5 of the tokens (a majority) reach their
    designated expert and the NMI exceeds both standard objectives'; *not reproduced*
    otherwise.
    """
    diagonal = _fraction("diagonal", diagonal)
    nmi_router, nmi_ce, nmi_lb = (_fraction(n, v) for n, v in (
        ("nmi_router", nmi_router), ("nmi_ce", nmi_ce), ("nmi_lb", nmi_lb)))
    min_diagonal = _fraction("min_diagonal", min_diagonal)
    partly_diagonal = _fraction("partly_diagonal", partly_diagonal)
    ratio_min = number("min_nmi_ratio", min_nmi_ratio, low=1)
    best = max(nmi_ce, nmi_lb)
    ratio = nmi_router / best if best > 0 else float("inf")
    numbers = (f"diagonal mass {diagonal:.3f} at the task-determined positions, NMI "
               f"{nmi_router:.3f} = {ratio:.1f} × the best standard objective's {best:.3f}")
    if diagonal >= min_diagonal and ratio >= ratio_min:
        return "reproduced", (f"{numbers} (need ≥ {min_diagonal:g} and ≥ {ratio_min:g} ×)")
    if diagonal >= partly_diagonal and ratio > 1:
        return "partly", (f"{numbers}: a majority at the designated expert, short of "
                          f"{min_diagonal:g} and {ratio_min:g} ×")
    return "not reproduced", (f"{numbers} (need ≥ {partly_diagonal:g} and more NMI than "
                              "CE / CE + LB)")


@rule
def accuracy_comparable(cells: Mapping[tuple[int, int], Sequence], *,
                        max_half_width: float = 0.03, min_standard: float = 0.5,
                        min_expert_counts: int = 2, converged: bool = True
                        ) -> tuple[str, str]:
    """A-accuracy-comparable: across numbers of tasks and experts, task routing is as accurate
    as CE and CE + LB.

    ``cells`` maps each multi-expert cell ``(n_tasks, n_experts)`` to three accuracy intervals
    ``(router, ce, lb)`` (module docstring).  A cell **fails** when the router's interval lies
    entirely below the interval of CE or of CE + LB (a loss resolved against the noise); it
    **supports** the claim when it does not fail, the standard objectives reach
    ``min_standard`` = 50 % (below that, equal accuracies say nothing) and every interval is
    narrow enough to resolve a loss of a few points (half-width ≤ ``max_half_width`` = 3 pp);
    otherwise it is **uninformative**.  *not reproduced* when most cells fail (more than half)
    or none supports the claim; *reproduced* when every cell supports it, the cells span at
    least ``min_expert_counts`` = 2 numbers of experts (the claim is *across* expert counts)
    and the runs converged; *partly* otherwise, the reason saying which condition failed.
    """
    converged = flag("converged", converged)
    half_max = number("max_half_width", max_half_width, low=0, low_open=True)
    min_standard = _fraction("min_standard", min_standard)
    min_expert_counts = integer("min_expert_counts", min_expert_counts, low=1)
    if not isinstance(cells, Mapping) or not cells:
        fail("cells", cells, "a non-empty mapping (n_tasks, n_experts) → (router, ce, lb)")
    support, failed, worst = [], [], None
    for key, ivs in cells.items():
        require(isinstance(key, tuple) and len(key) == 2, "cells key", key,
                "(n_tasks, n_experts)")
        if not isinstance(ivs, (tuple, list)) or len(ivs) != 3:
            fail(f"cells[{key}]", ivs, "three accuracy intervals (router, ce, lb)")
        r, c, lb = (_interval(f"cells[{key}][{i}]", v) for i, v in enumerate(ivs))
        gap = r[0] - max(c[0], lb[0])
        if worst is None or gap < worst[1]:
            worst = (key, gap, r, c if c[0] >= lb[0] else lb)
        if _worse(r, c) or _worse(r, lb):
            failed.append(key)
        elif min(c[0], lb[0]) >= min_standard and max(
                (t[2] - t[1]) / 2 for t in (r, c, lb)) <= half_max:
            support.append(key)
    experts = sorted({int(e) for _, e in cells})
    n = len(cells)
    worst_txt = (f"worst cell {worst[0][0]} tasks × E={worst[0][1]}: router {_iv(worst[2])} vs "
                 f"best standard {_iv(worst[3])} ({100 * worst[1]:+.1f} pp)")
    head = (f"{len(support)} of {n} cells support, {len(failed)} resolvably worse "
            f"(E ∈ {experts}); {worst_txt}")
    if 2 * len(failed) > n or not support:
        return "not reproduced", head
    problems = []
    if failed:
        problems.append(f"{len(failed)} cell(s) resolvably worse")
    if len(support) + len(failed) < n:
        problems.append(f"{n - len(support) - len(failed)} cell(s) uninformative (standard "
                        f"accuracy < {_pp(min_standard)} or interval half-width > "
                        f"{100 * half_max:g} pp)")
    if len(experts) < min_expert_counts:
        problems.append(f"fewer than {min_expert_counts} multi-expert counts measured")
    if not converged:
        problems.append("runs not converged")
    if problems:
        return "partly", f"{head}; " + "; ".join(problems)
    return "reproduced", head


@rule
def accuracy_in_band(accuracies: Sequence, router_accuracies: Sequence, *,
                     band: tuple[float, float] = (0.86, 0.94), router_floor: float = 0.88,
                     converged: bool = True) -> tuple[str, str]:
    """A-accuracy-range: every objective reaches 86–94 % exact match, task routing above 88 %.

    ``accuracies`` are the cells' accuracy intervals (every objective), ``router_accuracies``
    the task-router cells'; the band and the floor are the secondary digest's figures.  These
    are *absolute* accuracies of the paper's data and model, neither of which we have: a
    match could only be a coincidence, so this rule never says *reproduced*.  *not reproduced*
    when some cell's interval lies entirely below the band, or some router cell's entirely at
    or below the floor (our models then fail where the paper's succeed); *partly* otherwise,
    the reason saying whether the cells sit inside the band, above it, or the runs had not
    converged.  A mere overlap with the band is not enough for more.
    """
    converged = flag("converged", converged)
    if isinstance(accuracies, Mapping) or isinstance(router_accuracies, Mapping):
        fail("accuracies", type(accuracies).__name__, "sequences of accuracy intervals")
    acc = [_interval(f"accuracies[{i}]", v) for i, v in enumerate(accuracies)]
    rt = [_interval(f"router_accuracies[{i}]", v) for i, v in enumerate(router_accuracies)]
    require(len(acc) > 0 and len(rt) > 0, "accuracies", len(acc),
            "at least one cell and one router cell")
    lo, hi = (_fraction("band[0]", band[0]), _fraction("band[1]", band[1]))
    require(lo < hi, "band", band, "(low, high) with low < high")
    floor = _fraction("router_floor", router_floor)
    means = np.array([a[0] for a in acc])
    numbers = (f"cells {_pp(means.min())}–{_pp(means.max())}, lowest router cell "
               f"{_iv(min(rt))} vs band {_pp(lo)}–{_pp(hi)}, router floor {_pp(floor)}")
    below = sum(a[2] < lo for a in acc)
    under = sum(r[2] <= floor for r in rt)
    if below or under:
        return "not reproduced", (f"{numbers}: {below} cell(s) below the band, {under} router "
                                  "cell(s) at or below the floor")
    above = int((means > hi).sum())
    where = (f"{above} of {len(acc)} cells above the band" if above else
             "every cell inside the band or overlapping it")
    conv = "" if converged else "; the runs had not converged"
    return "partly", (f"{numbers}: lower limits hold, {where}{conv} (our data and model are "
                      "not the paper's: absolute accuracies can only match by coincidence)")


@rule
def active_parameters(router_acc, dense_acc, standard_acc, one_expert_acc, active_ratio: float,
                      *, max_active_ratio: float = 0.9, min_accuracy: float = 0.5,
                      converged: bool = True) -> tuple[str, str]:
    """A-active-params: task routing can reduce the active parameters without losing accuracy.

    ``active_ratio`` = active parameters per token of the task-routed MoE / those of a dense
    model with the same total parameters (one expert as wide as all experts together);
    ``dense_acc`` is that dense model's accuracy interval, ``standard_acc`` the best of CE and
    CE + LB at the MoE's own active count, ``router_acc`` the router run's, ``one_expert_acc``
    a model of one expert of the MoE's expert width (the MoE's active parameters, without the
    other experts).  The claim says "can reduce": a reduction counts when the ratio is at most
    ``max_active_ratio`` = 0.9 (a tenth fewer, well clear of rounding); "without losing
    accuracy" means that the router's interval does not lie entirely below the reference's (no
    loss resolved against the noise).  The comparison is **informative** only where capacity
    binds: if the one-expert model is not resolvably worse than the dense model, fewer active
    parameters cost nothing whatever the routing, and the claim is true of any model.  Equal
    accuracies of models that learned nothing say nothing either: the router and both
    references must reach ``min_accuracy`` = 50 %.  *reproduced* when the reduction counts,
    the router loses against neither reference, the comparison is informative and the runs
    converged; *partly* when all that holds but the
    comparison is uninformative or the runs had not converged, or when the router loses against
    one reference only; *not reproduced* otherwise.
    """
    converged = flag("converged", converged)
    r, d, s, one = (_interval(n, v) for n, v in (("router_acc", router_acc),
                                                  ("dense_acc", dense_acc),
                                                  ("standard_acc", standard_acc),
                                                  ("one_expert_acc", one_expert_acc)))
    ratio = number("active_ratio", active_ratio, low=0, low_open=True)
    cap = number("max_active_ratio", max_active_ratio, low=0, high=1, low_open=True)
    numbers = (f"active ratio MoE/dense {ratio:.2f}; router {_iv(r)} vs dense {_iv(d)} "
               f"({100 * (r[0] - d[0]):+.1f} pp), vs CE/CE+LB {_iv(s)} "
               f"({100 * (r[0] - s[0]):+.1f} pp); one expert {_iv(one)}")
    a_min = _fraction("min_accuracy", min_accuracy)
    saves = ratio <= cap
    vs_dense, vs_std = not _worse(r, d), not _worse(r, s)
    informative = _worse(one, d)
    if min(r[0], d[0], s[0]) < a_min:
        return "not reproduced", (f"{numbers}: a model below {_pp(a_min)} (untrained: equal "
                                  "accuracies say nothing)")
    if not saves:
        return "not reproduced", f"{numbers}: need ratio ≤ {cap:g}"
    if vs_dense and vs_std:
        if not informative:
            return "partly", (f"{numbers}: holds, but uninformative: the one-expert model "
                              "with the MoE's active parameters is not resolvably worse than "
                              "the dense model (capacity does not bind)")
        if not converged:
            return "partly", f"{numbers}: holds, but the runs had not converged"
        return "reproduced", f"{numbers}: ratio ≤ {cap:g}, no resolved loss, capacity binds"
    if vs_dense or vs_std:
        return "partly", (f"{numbers}: resolvably below the "
                          f"{'CE/CE+LB MoE' if vs_dense else 'dense model'}")
    return "not reproduced", f"{numbers}: resolvably below both references"


__all__ = ["accuracy_comparable", "accuracy_in_band", "active_parameters", "routing_aligned",
           "routing_diffuse", "runs_converged"]
