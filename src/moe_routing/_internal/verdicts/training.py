"""Rules of the training chapter: Figure 2's routing, the accuracy grid, active parameters,
and whether the training runs behind them had converged.

Accuracies are fractions in [0, 1].  An accuracy of a cell enters as an *interval*
``(mean, low, high)`` -- :func:`moe_routing.experiments.accuracy.accuracy_interval`: the mean over seeds
with the seed spread and the test set's error clustered by fact -- and the accuracy rules
decide on intervals and on paired differences (:func:`moe_routing.experiments.accuracy.
paired_difference`), not on a flat tolerance.  Every rule that judges accuracies takes
``converged`` (the verdict of :func:`runs_converged`): a comparison of runs that were still
improving can neither reproduce nor refute a claim, so it reads *inconclusive* then, in both
directions, and the reason says so.  Each rule also reads *inconclusive* where its question
cannot be decided (intervals that straddle its threshold, a quantity the model cannot test at
its size, a model that learned too little).

Each rule's power -- its negative word for deliberately broken models (constant router
logits, routing collapsed onto one expert, shuffled task labels, a run stopped early), and
*inconclusive* for undecidable ones (untrained, stopped early) -- is measured on real runs
(:mod:`moe_routing.experiments.task_routing.power`, ``tests/test_rule_power.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..validation import fail, flag, integer, number, require
from . import rule


def _fraction(name: str, value) -> float:
    return number(name, value, low=0.0, high=1.0)


def _pp(x: float) -> str:
    return f"{100 * x:.1f} %"


def _interval(name: str, value, low: float = 0.0,
              what: str = "an accuracy interval") -> tuple[float, float, float]:
    """``(mean, low, high)`` from an object with those attributes (an AccuracyInterval, a
    PairedDifference) or a triple, each in [``low``, 1], with low ≤ mean ≤ high."""
    if hasattr(value, "mean") and hasattr(value, "low") and hasattr(value, "high"):
        value = (value.mean, value.low, value.high)
    try:
        m, lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        fail(name, value, f"{what} (mean, low, high)")
    for part, v in (("mean", m), ("low", lo), ("high", hi)):
        number(f"{name}.{part}", v, low=low, high=1.0)
    require(lo <= m <= hi, name, (m, lo, hi), "(mean, low, high) with low ≤ mean ≤ high")
    return m, lo, hi


def _iv(t: tuple[float, float, float]) -> str:                    # an accuracy interval
    return f"{100 * t[0]:.1f} % [{100 * t[1]:.1f}, {100 * t[2]:.1f}]"


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
    return "not supported", (f"{len(bad)} of {len(drops)} runs still improving (CE drop ≥ "
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
    model was trained (test accuracy ≥ ``min_accuracy`` = 0.5: otherwise *inconclusive*, the
    routing of an untrained model says nothing either way).  *reproduced* when both
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

    untrained = [o for o in ("ce", "lb") if vals[f"accuracy_{o}"] < a_min]
    if untrained:
        return "inconclusive", ("untrained (" + ", ".join(
            f"{'CE' if o == 'ce' else 'CE + LB'} {_pp(vals[f'accuracy_{o}'])}" for o in untrained)
            + f" < {_pp(a_min)}): the routing of a model that has not learned the task says "
            "nothing about what training does to a router")
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
def routing_aligned(diagonal: float, nmi_router: float, nmi_ce: float, nmi_lb: float,
                    accuracy: float = 1.0, *, min_diagonal: float = 0.75,
                    min_nmi_ratio: float = 2.0, partly_diagonal: float = 0.5,
                    min_accuracy: float = 0.5) -> tuple[str, str]:
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
    otherwise.  ``accuracy`` is the router run's test exact match: below ``min_accuracy`` = 50 %
    the model has not learned the task and the rule reads *inconclusive*.
    """
    diagonal = _fraction("diagonal", diagonal)
    nmi_router, nmi_ce, nmi_lb = (_fraction(n, v) for n, v in (
        ("nmi_router", nmi_router), ("nmi_ce", nmi_ce), ("nmi_lb", nmi_lb)))
    min_diagonal = _fraction("min_diagonal", min_diagonal)
    partly_diagonal = _fraction("partly_diagonal", partly_diagonal)
    ratio_min = number("min_nmi_ratio", min_nmi_ratio, low=1)
    accuracy, min_accuracy = _fraction("accuracy", accuracy), _fraction("min_accuracy",
                                                                        min_accuracy)
    best = max(nmi_ce, nmi_lb)
    ratio = nmi_router / best if best > 0 else float("inf")
    if accuracy < min_accuracy:
        return "inconclusive", (f"untrained router run (accuracy {_pp(accuracy)} < "
                                f"{_pp(min_accuracy)}): its routing says nothing")
    numbers = (f"diagonal mass {diagonal:.3f} at the task-determined positions, NMI "
               f"{nmi_router:.3f} = {ratio:.1f} × the best standard objective's {best:.3f}")
    if diagonal >= min_diagonal and ratio >= ratio_min:
        return "reproduced", (f"{numbers} (need ≥ {min_diagonal:g} and ≥ {ratio_min:g} ×)")
    if diagonal >= partly_diagonal and ratio > 1:
        return "partly", (f"{numbers}: a majority at the designated expert, short of "
                          f"{min_diagonal:g} and {ratio_min:g} ×")
    return "not reproduced", (f"{numbers} (need ≥ {partly_diagonal:g} and more NMI than "
                              "CE / CE + LB)")


def _difference(name: str, value) -> tuple[float, float, float]:
    """``(mean, low, high)`` of a paired difference (a PairedDifference or a triple)."""
    return _interval(name, value, low=-2.0, what="a paired difference")


def _dv(t: tuple[float, float, float]) -> str:
    return f"{100 * t[0]:+.1f} pp [{100 * t[1]:+.1f}, {100 * t[2]:+.1f}]"


def _equivalence(d: tuple[float, float, float], margin: float) -> str:
    """Two one-sided tests of "no worse by more than ``margin``": ``"holds"`` (the interval
    above −margin), ``"loses"`` (entirely below), ``"undecided"`` (it straddles −margin)."""
    if d[1] >= -margin:
        return "holds"
    if d[2] < -margin:
        return "loses"
    return "undecided"


def comparable_cells(cells: Mapping[tuple[int, int], Sequence], *, margin: float = 0.03,
                     min_standard: float = 0.5) -> dict[tuple[int, int], str]:
    """Each cell of :func:`accuracy_comparable` -> ``"holds"``, ``"loses"``, ``"undecided"``
    or ``"uninformative"`` (that rule's docstring): what the rule read, for tables."""
    margin = number("margin", margin, low=0, high=1)
    min_standard = _fraction("min_standard", min_standard)
    if not isinstance(cells, Mapping) or not cells:
        fail("cells", cells, "a non-empty mapping (n_tasks, n_experts) → "
                             "(router − CE, router − CE+LB, standard accuracy)")
    state = {}
    for key, v in cells.items():
        require(isinstance(key, tuple) and len(key) == 2, "cells key", key,
                "(n_tasks, n_experts)")
        if not isinstance(v, (tuple, list)) or len(v) != 3:
            fail(f"cells[{key}]", v, "(router − CE, router − CE+LB, standard accuracy)")
        d_ce, d_lb = (_difference(f"cells[{key}][{i}]", x) for i, x in enumerate(v[:2]))
        if _fraction(f"cells[{key}][2]", v[2]) < min_standard:
            state[key] = "uninformative"
            continue
        tests = {_equivalence(d_ce, margin), _equivalence(d_lb, margin)}
        state[key] = ("loses" if "loses" in tests else
                      "undecided" if "undecided" in tests else "holds")
    return state


@rule
def accuracy_comparable(cells: Mapping[tuple[int, int], Sequence], *,
                        margin: float = 0.03, min_standard: float = 0.5,
                        min_expert_counts: int = 2, converged: bool = True
                        ) -> tuple[str, str]:
    """A-accuracy-comparable: across numbers of tasks and experts, task routing is as accurate
    as CE and CE + LB.

    ``cells`` maps each multi-expert cell ``(n_tasks, n_experts)`` to ``(router − CE, router −
    CE + LB, standard)``: the two **paired differences** of test exact match over the cell's
    seeds (:func:`moe_routing.experiments.accuracy.paired_difference`: one seed fixes the
    initialisation and the data order of every objective) and the lower of the CE and CE + LB
    mean accuracies.  "As accurate" is read as an equivalence within ``margin`` = 3 pp, decided by
    two one-sided tests: a cell **holds** when both differences' intervals lie above −3 pp,
    **loses** when one lies entirely below −3 pp, and is **undecided** when an interval straddles
    −3 pp (identical cells with wide intervals are undecided, not worse).  A cell whose standard
    objectives are below ``min_standard`` = 50 % is **uninformative** (equal accuracies of models
    that learned little say nothing).

    *inconclusive* when the runs had not converged (in either direction: a gap between models
    still learning measures speed as much as capacity), when no cell is informative, or when the
    undecided cells are at least half of the informative ones; *not reproduced* when more than
    half of the informative cells lose; *reproduced* when every cell holds and they span at least
    ``min_expert_counts`` = 2 numbers of experts (the claim is *across* expert counts);
    *partly* otherwise, the reason saying which cells hold and which lose.
    """
    converged = flag("converged", converged)
    min_expert_counts = integer("min_expert_counts", min_expert_counts, low=1)
    state = comparable_cells(cells, margin=margin, min_standard=min_standard)
    margin, min_standard = float(margin), float(min_standard)
    # the cell and difference with the lowest mean: the reason names it
    worst = min(((k, _difference("d", d)) for k, v in cells.items() for d in v[:2]),
                key=lambda kd: kd[1][0])
    count = {w: sum(x == w for x in state.values())
             for w in ("holds", "loses", "undecided", "uninformative")}
    informative = len(state) - count["uninformative"]
    experts = sorted({int(e) for _, e in cells})
    head = (f"{count['holds']} of {len(state)} cells hold within {100 * margin:g} pp, "
            f"{count['loses']} lose, {count['undecided']} undecided, {count['uninformative']} "
            f"uninformative (E ∈ {experts}); worst cell {worst[0][0]} tasks × E={worst[0][1]}: "
            f"router − best standard {_dv(worst[1])}")
    if not converged:
        return "inconclusive", f"{head}; the runs had not converged (either direction)"
    if informative == 0:
        return "inconclusive", (f"{head}; no cell informative (standard accuracy < "
                                f"{_pp(min_standard)})")
    if 2 * count["loses"] > informative:
        return "not reproduced", head
    if count["holds"] == len(state) and len(experts) >= min_expert_counts:
        return "reproduced", head
    if 2 * count["undecided"] >= informative:
        return "inconclusive", f"{head}; the intervals cannot decide most cells"
    extra = ("" if len(experts) >= min_expert_counts else
             f"; fewer than {min_expert_counts} multi-expert counts measured")
    return "partly", head + extra


@rule
def accuracy_in_band(standard: Sequence, router: Sequence, *,
                     band: tuple[float, float] = (0.86, 0.94), router_floor: float = 0.88,
                     converged: bool = True) -> tuple[str, str]:
    """A-accuracy-range: every objective reaches 86–94 % exact match, task routing above 88 %.

    ``standard``: the accuracy intervals of the CE and CE + LB cells; ``router``: the
    task-router cells'; band and floor: the secondary digest's figures.  Absolute accuracies of
    the paper's data and model, neither of which we have: a shortfall of *every* objective says
    nothing about the paper, so the rule reads the testable part -- does task routing keep the
    level **where the standard objectives reach it** on the same data?  *inconclusive* when
    the runs had not converged, when a standard cell lies entirely below the band, or when no
    router cell lies entirely below the floor but some mean does; *reproduced* when every
    router cell's mean reaches the floor; *not reproduced* when more than half of the router
    cells lie entirely below it; *partly* when some (not most) do.  Cells above 94 % are
    reported, not held against the claim (the upper end is a property of the paper's data).
    """
    converged = flag("converged", converged)
    if isinstance(standard, Mapping) or isinstance(router, Mapping):
        fail("standard", type(standard).__name__, "sequences of accuracy intervals")
    std = [_interval(f"standard[{i}]", v) for i, v in enumerate(standard)]
    rt = [_interval(f"router[{i}]", v) for i, v in enumerate(router)]
    require(len(std) > 0 and len(rt) > 0, "standard", len(std),
            "at least one standard cell and one router cell")
    lo, hi = (_fraction("band[0]", band[0]), _fraction("band[1]", band[1]))
    require(lo < hi, "band", band, "(low, high) with low < high")
    floor = _fraction("router_floor", router_floor)
    means = np.array([a[0] for a in std + rt])
    numbers = (f"cells {_pp(means.min())}–{_pp(means.max())}, lowest standard cell "
               f"{_iv(min(std))}, lowest router cell {_iv(min(rt))} vs band {_pp(lo)}–"
               f"{_pp(hi)}, router floor {_pp(floor)}")
    above = int((means > hi).sum())
    if above:
        numbers += f"; {above} cell(s) above the band"
    if not converged:
        return "inconclusive", f"{numbers}: the runs had not converged"
    short = sum(a[2] < lo for a in std)
    if short:
        return "inconclusive", (f"{numbers}: {short} standard cell(s) entirely below the band "
                                "(our data and model do not reach the paper's level: a "
                                "shortfall is not a refutation)")
    under = sum(r[2] < floor for r in rt)
    if 2 * under > len(rt):
        return "not reproduced", (f"{numbers}: {under} of {len(rt)} router cells entirely "
                                  "below the floor where the standard objectives reach the band")
    if under:
        return "partly", f"{numbers}: {under} of {len(rt)} router cells entirely below the floor"
    if any(r[0] < floor for r in rt):
        return "inconclusive", (f"{numbers}: a router cell's mean is below the floor, its "
                                "interval reaches it")
    return "reproduced", f"{numbers}: the standard cells reach the band, the router cells the floor"


@rule
def active_parameters(router_vs_dense, router_vs_standard, one_vs_dense, accuracies,
                      active_ratio: float, expert_share: float, n_experts: int, *,
                      margin: float = 0.03, max_active_ratio: float = 0.9,
                      min_accuracy: float = 0.5, converged: bool = True) -> tuple[str, str]:
    """A-active-params: task routing can reduce the active parameters without losing accuracy.

    ``active_ratio`` = active parameters per token of the task-routed MoE / those of a dense
    model with the same total parameters (one expert as wide as all experts together).  The
    differences are paired by seed (:func:`moe_routing.experiments.accuracy.paired_difference`):
    the router run against that dense model and against the better of CE and CE + LB at the
    MoE's own active count, and a one-expert model of the MoE's expert width (its active
    parameters alone) against the dense model.  ``accuracies`` = (router, dense, standard) mean
    accuracies; ``expert_share`` = one expert's share of a token's active parameters in the MoE.

    The claim is testable only where it could fail:

    * **a reduction**: ``active_ratio ≤ max_active_ratio`` = 0.9.  With top-1 routing the ratio is
      ``1 / (1 + (E − 1)·share)``, so a tenth fewer active parameters needs an expert share of at
      least ``(1/0.9 − 1)/(E − 1)``; below it (a small model whose attention and unembedding are
      most of a token's parameters) the rule reads *inconclusive (untestable at this size)*;
    * **capacity binds**: the one-expert model is worse than the dense one by more than
      ``margin`` = 3 pp, resolved (the whole interval below −3 pp); otherwise fewer active
      parameters cost nothing whatever the routing, and the claim is true of any model:
      *inconclusive*;
    * **trained, converged**: every model ≥ ``min_accuracy`` = 50 % and the runs converged;
      otherwise *inconclusive*.

    Then "without losing accuracy" is an equivalence within ``margin`` against each reference:
    *reproduced* when both hold, *not reproduced* when both lose, *partly* when one loses,
    *inconclusive* when an interval straddles −3 pp.
    """
    converged = flag("converged", converged)
    d_dense, d_std, d_one = (_difference(n, v) for n, v in (
        ("router_vs_dense", router_vs_dense), ("router_vs_standard", router_vs_standard),
        ("one_vs_dense", one_vs_dense)))
    if isinstance(accuracies, Mapping) or not isinstance(accuracies, (tuple, list)) \
            or len(accuracies) != 3:
        fail("accuracies", accuracies, "(router, dense, standard) mean accuracies")
    accs = [_fraction(f"accuracies[{i}]", a) for i, a in enumerate(accuracies)]
    ratio = number("active_ratio", active_ratio, low=0, low_open=True)
    share = _fraction("expert_share", expert_share)
    e = integer("n_experts", n_experts, low=2)
    cap = number("max_active_ratio", max_active_ratio, low=0, high=1, low_open=True)
    margin = number("margin", margin, low=0, high=1)
    a_min = _fraction("min_accuracy", min_accuracy)
    need = (1 / cap - 1) / (e - 1)
    numbers = (f"active ratio MoE/dense {ratio:.2f} (one expert is {100 * share:.1f} % of a "
               f"token's active parameters); router − dense {_dv(d_dense)}, router − CE/CE+LB "
               f"{_dv(d_std)}, one expert − dense {_dv(d_one)}")
    if ratio > cap:
        return "inconclusive", (f"{numbers}: untestable at this size (a reduction to ≤ {cap:g} "
                                f"needs an expert share ≥ {100 * need:.1f} % at E = {e})")
    if min(accs) < a_min:
        return "inconclusive", (f"{numbers}: a model below {_pp(a_min)} (untrained: equal "
                                "accuracies say nothing)")
    if not converged:
        return "inconclusive", f"{numbers}: the runs had not converged"
    binds = _equivalence(d_one, margin)
    if binds != "loses":
        return "inconclusive", (f"{numbers}: capacity does not bind (the one-expert model is "
                                f"not resolvably more than {100 * margin:g} pp below the dense "
                                "one): the claim would hold for any routing")
    tests = (_equivalence(d_dense, margin), _equivalence(d_std, margin))
    if tests == ("holds", "holds"):
        return "reproduced", f"{numbers}: no loss beyond {100 * margin:g} pp, capacity binds"
    if tests == ("loses", "loses"):
        return "not reproduced", f"{numbers}: loses beyond {100 * margin:g} pp to both"
    if "loses" in tests:
        which = "the dense model" if tests[0] == "loses" else "CE/CE+LB"
        return "partly", f"{numbers}: loses beyond {100 * margin:g} pp to {which} only"
    return "inconclusive", f"{numbers}: an interval straddles −{100 * margin:g} pp"


__all__ = ["accuracy_comparable", "accuracy_in_band", "active_parameters", "comparable_cells",
           "routing_aligned", "routing_diffuse", "runs_converged"]
