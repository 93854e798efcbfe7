"""From training runs to the verdicts of paper A's experimental claims: one path for all.

The training chapter's verdicts and the power table (:mod:`.power`) call these functions, so a
rule's power is measured on exactly the inputs the chapter gives it.  Each function takes run
results (dicts of :func:`~moe_routing.experiments.run_grid`) and returns the
:class:`~moe_routing.verdicts.Verdict` of one rule of :mod:`moe_routing.verdicts.training`;
what each rule is given is stated here once:

* routing (A-Fig. 2) from the runs of one configuration: NMI over the sentence and at the
  object position, the designated-routing NMI ceiling (from the CE run's task totals), the
  expert loads' normalised entropy and test accuracy (:func:`diffuse`); the router run's
  diagonal mass at the task-determined positions (:func:`aligned`);
* accuracies of grid cells as intervals (:func:`cell_interval`): mean over seeds with the larger
  of the seed spread and the binomial error of the test set (:func:`comparable`,
  :func:`in_band`, :func:`active`);
* convergence of every distinct run (:func:`converged`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .. import routing_metrics as rm
from ..validation import fail, require
from ..verdicts import Verdict
from ..verdicts import training as rules
from .accuracy import AccuracyInterval, accuracy_interval
from .task_routing import convergence


def _results(name: str, results) -> list[dict]:
    if isinstance(results, dict) or not isinstance(results, Sequence) or not results:
        fail(name, type(results).__name__, "a non-empty sequence of run results (run_grid)")
    for r in results:
        if not isinstance(r, dict) or "config" not in r or "accuracy" not in r:
            fail(name, type(r).__name__, "run results (dicts from run_grid)")
    return list(results)


def cell_interval(results: Sequence[dict]) -> AccuracyInterval:
    """Accuracy interval of the runs of one cell (its seeds)."""
    rs = _results("results", results)
    return accuracy_interval([r["accuracy"] for r in rs], [r["n_test"] for r in rs])


def _cell(r: dict) -> tuple[int, int, str]:
    c = r["config"]
    return int(c["n_tasks"]), int(c["n_experts"]), str(c["objective"])


def cells(results: Sequence[dict]) -> dict[tuple[int, int, str], AccuracyInterval]:
    """(n_tasks, n_experts, objective) -> accuracy interval over the cell's seeds."""
    groups: dict[tuple[int, int, str], list[dict]] = defaultdict(list)
    for r in _results("results", results):
        groups[_cell(r)].append(r)
    return {k: cell_interval(v) for k, v in sorted(groups.items())}


def ceiling_nmi(result: dict) -> float:
    """NMI of perfect routing to the designated experts, with this run's task totals."""
    counts = np.array(result["routing_all"]["counts"], dtype=float)
    return rm.normalized_mutual_info(rm.designated_counts(counts.sum(1), counts.shape[1]))


def diffuse(ce: dict, lb: dict, ceiling: float | None = None) -> Verdict:
    """``routing_diffuse`` of a CE run and a CE + LB run of one configuration."""
    ce, lb = (_results(n, [r])[0] for n, r in (("ce", ce), ("lb", lb)))
    ceiling = ceiling_nmi(ce) if ceiling is None else ceiling
    a, o = "routing_all", "routing_object"
    return rules.routing_diffuse(
        ce[a]["nmi"], lb[a]["nmi"], ce[o]["nmi"], lb[o]["nmi"], ceiling,
        ce[a]["load_entropy_normalised"], lb[a]["load_entropy_normalised"],
        ce["accuracy"], lb["accuracy"])


def determined_diagonal(result: dict) -> float:
    """Diagonal mass at the task-determined positions (0 when the run has none)."""
    det = result.get("routing_determined")
    return 0.0 if det is None else float(det["diagonal_accuracy"])


def aligned(router: dict, ce: dict, lb: dict) -> Verdict:
    """``routing_aligned`` of the router run against the CE and CE + LB runs."""
    router, ce, lb = (_results(n, [r])[0] for n, r in (("router", router), ("ce", ce),
                                                       ("lb", lb)))
    return rules.routing_aligned(determined_diagonal(router), router["routing_all"]["nmi"],
                                 ce["routing_all"]["nmi"], lb["routing_all"]["nmi"])


def comparable(results: Sequence[dict], converged: bool = True) -> Verdict:
    """``accuracy_comparable`` over every multi-expert cell of a grid."""
    iv = cells(results)
    keys = sorted({(k, e) for k, e, _ in iv if e > 1})
    require(bool(keys), "results", "no multi-expert cell", "runs with n_experts > 1")
    missing = [(k, e, o) for k, e in keys for o in ("ce+router", "ce", "ce+lb")
               if (k, e, o) not in iv]
    require(not missing, "results", f"cells without runs: {missing}",
            "every objective in every multi-expert cell")
    return rules.accuracy_comparable(
        {(k, e): (iv[k, e, "ce+router"], iv[k, e, "ce"], iv[k, e, "ce+lb"]) for k, e in keys},
        converged=converged)


def in_band(results: Sequence[dict], converged: bool = True) -> Verdict:
    """``accuracy_in_band`` over every cell of a grid (one-expert cells once)."""
    iv = {k: v for k, v in cells(results).items() if k[1] > 1 or k[2] == "ce"}
    router = [v for (_, e, o), v in iv.items() if o == "ce+router" or e == 1]
    return rules.accuracy_in_band(list(iv.values()), router, converged=converged)


def active(router: Sequence[dict], dense: Sequence[dict], standard: Sequence[dict],
           one_expert: Sequence[dict], converged: bool = True) -> Verdict:
    """``active_parameters``: the router runs of one cell, the dense runs of the same total
    parameters, the standard-objective runs of that cell (the better objective counts) and the
    one-expert runs of the same number of tasks (the MoE's active parameters alone)."""
    router, dense, standard, one_expert = (
        _results(n, v) for n, v in (("router", router), ("dense", dense),
                                    ("standard", standard), ("one_expert", one_expert)))
    by_obj: dict[str, list[dict]] = defaultdict(list)
    for r in standard:
        by_obj[r["config"]["objective"]].append(r)
    best = max((cell_interval(v) for v in by_obj.values()), key=lambda iv: iv.mean)
    ratio = (np.mean([r["params"]["active"] for r in router])
             / np.mean([r["params"]["active"] for r in dense]))
    return rules.active_parameters(cell_interval(router), cell_interval(dense), best,
                                   cell_interval(one_expert), float(ratio), converged=converged)


def convergence_table(results: Sequence[dict]) -> dict[str, tuple[float, float, float]]:
    """Run label -> (CE drop over the last fifth, accuracy change over the last quarter, the
    noise of that change on the run's test set), each distinct run once (a run shared by
    several cells is judged once).  The noise is ``1.96·√(2p(1 − p)/n)``: two evaluations of
    accuracy ``p`` on ``n`` test sentences, each with its binomial error."""
    out, seen = {}, set()
    for r in _results("results", results):
        if r["key"] in seen:
            continue
        seen.add(r["key"])
        c, cv = r["config"], convergence(r)
        kind = c["objective"] if c.get("variant", "none") == "none" else c["variant"]
        label = (f"K={c['n_tasks']}, E={c['n_experts']}, width {c['d_expert']}, {kind}, "
                 f"seed {c['seed']}")
        p = float(r["accuracy"])
        out[label] = (cv["ce_drop"], cv["acc_change"],
                      1.96 * float(np.sqrt(2 * p * (1 - p) / max(int(r["n_test"]), 1))))
    return out


def converged(results: Sequence[dict]) -> Verdict:
    """``runs_converged`` over every distinct run."""
    table = convergence_table(results)
    return rules.runs_converged({k: v[0] for k, v in table.items()},
                                {k: v[1] for k, v in table.items()},
                                {k: v[2] for k, v in table.items()})


__all__ = ["active", "aligned", "ceiling_nmi", "cell_interval", "cells", "comparable",
           "convergence_table", "converged", "determined_diagonal", "diffuse", "in_band"]
