"""From training runs to the verdicts of paper A's experimental claims: one path for all.

The training chapter's verdicts and the power table (:mod:`.power`) call these functions, so a
rule's power is measured on exactly the inputs the chapter gives it.  Each function takes run
results (dicts of :func:`~moe_routing.experiments.task_routing.run_grid`) and returns the
:class:`~moe_routing._internal.verdicts.Verdict` of one rule of
:mod:`moe_routing._internal.verdicts.training`; what each rule is given is stated here once:

* routing (A-Fig. 2) from the runs of one configuration: NMI over the sentence and at the
  object position, the designated-routing NMI ceiling (from the CE run's task totals), the
  expert loads' normalised entropy and test accuracy (:func:`diffuse`); the router run's
  diagonal mass at the task-determined positions (:func:`aligned`);
* accuracies of grid cells as intervals (:func:`cell_interval`): mean over seeds, the seed
  spread and the test set's error clustered by fact (:func:`in_band`), and two cells compared by
  their per-seed **paired differences** (:func:`cell_difference`; :func:`comparable`,
  :func:`active`);
* convergence of every distinct run (:func:`converged`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ... import routing_metrics as rm
from ..._internal.validation import fail, integer, number, require
from ..._internal.verdicts import Verdict
from ..._internal.verdicts import codes_variant
from ..._internal.verdicts import training as rules
from ..accuracy import (AccuracyInterval, PairedDifference, accuracy_interval, paired_difference,
                        shared_sampling_error)
from .runs import convergence


def _results(name: str, results) -> list[dict]:
    if isinstance(results, dict) or not isinstance(results, Sequence) or not results:
        fail(name, type(results).__name__, "a non-empty sequence of run results (run_grid)")
    for r in results:
        if not isinstance(r, dict) or "config" not in r or "accuracy" not in r:
            fail(name, type(r).__name__, "run results (dicts from run_grid)")
    return list(results)


def _sentences(rs: list[dict]) -> tuple[np.ndarray, np.ndarray] | None:
    """(S, n) per-sentence correctness and (n,) facts of runs scored on one test set, or None
    when a run did not record them or the test sets differ."""
    if not all("test_correct" in r and "test_fact" in r for r in rs):
        return None
    facts = np.asarray(rs[0]["test_fact"])
    if any(not np.array_equal(np.asarray(r["test_fact"]), facts) for r in rs[1:]):
        return None
    return np.array([r["test_correct"] for r in rs], dtype=float), facts


def _by_seed(name: str, results: Sequence[dict]) -> dict[int, dict]:
    """Seed -> run.  One run listed twice (a one-expert run shared by the three objectives'
    cells: the same key) counts once; two different runs with one seed are refused."""
    out: dict[int, dict] = {}
    for r in _results(name, results):
        seed = int(r["config"]["seed"])
        if seed in out and out[seed].get("key", id(out[seed])) != r.get("key", id(r)):
            fail(f"{name} seeds", seed, "one run per seed (two different runs share this seed)")
        out[seed] = r
    return out


def cell_interval(results: Sequence[dict]) -> AccuracyInterval:
    """Accuracy interval of the runs of one cell (one per seed): the seed spread and the test
    set's error clustered by fact (binomial where the runs did not record their sentences)."""
    rs = list(_by_seed("results", results).values())      # a shared run counts once
    accs = [r["accuracy"] for r in rs]
    sent = _sentences(rs)
    if sent is None:
        return accuracy_interval(accs, [r["n_test"] for r in rs])
    return accuracy_interval(accs, test=shared_sampling_error(*sent))


def cell_difference(a: Sequence[dict], b: Sequence[dict]) -> PairedDifference:
    """Paired difference of test exact match ``a − b`` over the seeds both cells ran (seed ``s``
    fixes initialisation and data order in both), with the test set's error of the per-sentence
    differences clustered by fact.  With one common seed, the test set's error alone."""
    ra, rb = _by_seed("a", a), _by_seed("b", b)
    seeds = sorted(set(ra) & set(rb))
    require(len(seeds) >= 1, "seeds", f"a {sorted(ra)}, b {sorted(rb)}", "a seed in common")
    pa, pb = [ra[s] for s in seeds], [rb[s] for s in seeds]
    sa, sb = _sentences(pa), _sentences(pb)
    test = None
    if sa is not None and sb is not None and np.array_equal(sa[1], sb[1]):
        test = shared_sampling_error(sa[0] - sb[0], sa[1])
    xa, xb = [r["accuracy"] for r in pa], [r["accuracy"] for r in pb]
    return paired_difference(xa, xb, test=test)


def _cell(r: dict) -> tuple[int, int, str]:
    c = r["config"]
    return int(c["n_tasks"]), int(c["n_experts"]), str(c["objective"])


def cells(results: Sequence[dict]) -> dict[tuple[int, int, str], AccuracyInterval]:
    """(n_tasks, n_experts, objective) -> accuracy interval over the cell's seeds."""
    return {k: cell_interval(v) for k, v in _groups(results).items()}


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
                                 ce["routing_all"]["nmi"], lb["routing_all"]["nmi"],
                                 router["accuracy"])


def _groups(results: Sequence[dict]) -> dict[tuple[int, int, str], list[dict]]:
    groups: dict[tuple[int, int, str], list[dict]] = defaultdict(list)
    for r in _results("results", results):
        groups[_cell(r)].append(r)
    return dict(sorted(groups.items()))


def differences(results: Sequence[dict]
                ) -> dict[tuple[int, int], tuple[PairedDifference, PairedDifference, float]]:
    """Every multi-expert cell ``(n_tasks, n_experts)`` of a grid -> (router − CE, router −
    CE + LB, the lower of the CE and CE + LB mean accuracies): what
    :func:`~moe_routing._internal.verdicts.training.accuracy_comparable` decides on."""
    g = _groups(results)
    keys = sorted({(k, e) for k, e, _ in g if e > 1})
    require(bool(keys), "results", "no multi-expert cell", "runs with n_experts > 1")
    missing = [(k, e, o) for k, e in keys for o in ("ce+router", "ce", "ce+lb")
               if (k, e, o) not in g]
    require(not missing, "results", f"cells without runs: {missing}",
            "every objective in every multi-expert cell")
    out = {}
    for k, e in keys:
        rt, ce, lb = g[k, e, "ce+router"], g[k, e, "ce"], g[k, e, "ce+lb"]
        std = min(float(np.mean([r["accuracy"] for r in x])) for x in (ce, lb))
        out[k, e] = (cell_difference(rt, ce), cell_difference(rt, lb), std)
    return out


def comparable(results: Sequence[dict], converged: bool = True) -> Verdict:
    """``accuracy_comparable`` over every multi-expert cell of a grid (paired differences)."""
    return rules.accuracy_comparable(differences(results), converged=converged)


def in_band(results: Sequence[dict], converged: bool = True) -> Verdict:
    """``accuracy_in_band``: the standard cells (CE, CE + LB; one-expert cells once, as CE) and
    the task-router cells of a grid."""
    iv = {k: v for k, v in cells(results).items() if k[1] > 1 or k[2] == "ce"}
    router = [v for (_, e, o), v in iv.items() if o == "ce+router"]
    standard = [v for (_, e, o), v in iv.items() if o != "ce+router"]
    if not router:                       # one-expert grids only: the one run is every objective
        router = standard
    return rules.accuracy_in_band(standard, router, converged=converged)


def active(router: Sequence[dict], dense: Sequence[dict], standard: Sequence[dict],
           one_expert: Sequence[dict], converged: bool = True) -> Verdict:
    """``active_parameters``: the router runs of one cell, the dense runs of the same total
    parameters, the standard-objective runs of that cell (the better objective counts) and the
    one-expert runs of the same number of tasks (the MoE's active parameters alone), compared
    by paired differences over their common seeds."""
    router, dense, standard, one_expert = (
        _results(n, v) for n, v in (("router", router), ("dense", dense),
                                    ("standard", standard), ("one_expert", one_expert)))
    by_obj: dict[str, list[dict]] = defaultdict(list)
    for r in standard:
        by_obj[r["config"]["objective"]].append(r)
    best = max(by_obj.values(), key=lambda v: float(np.mean([r["accuracy"] for r in v])))
    mean = lambda rs: float(np.mean([r["accuracy"] for r in rs]))   # noqa: E731
    ratio = (np.mean([r["params"]["active"] for r in router])
             / np.mean([r["params"]["active"] for r in dense]))
    share = float(np.mean([r["params"]["experts_active"] / r["params"]["active"]
                           for r in router]))
    return rules.active_parameters(
        cell_difference(router, dense), cell_difference(router, best),
        cell_difference(one_expert, dense), (mean(router), mean(dense), mean(best)),
        float(ratio), share, int(router[0]["config"]["n_experts"]), converged=converged)


def variant_cost(results: Sequence[dict], converged: bool = True) -> Verdict:
    """``codes_variant.router_cost`` of the variant's runs at one configuration (the three
    objectives, paired by seed)."""
    g = _groups(results)
    require(len({(k, e) for k, e, _ in g}) == 1, "results", sorted(g),
            "the runs of one configuration (n_tasks, n_experts)")
    by = {o: rs for (_, _, o), rs in g.items()}
    require({"ce", "ce+lb", "ce+router"} <= set(by), "results objectives", sorted(by),
            "runs of 'ce', 'ce+lb' and 'ce+router'")
    return codes_variant.router_cost(cell_difference(by["ce+router"], by["ce"]),
                                     cell_difference(by["ce+router"], by["ce+lb"]),
                                     converged=converged)


def control_effect(vs_router, vs_ce, margin: float = 0.03) -> str:
    """What a control of the task-router loss does to the router's cost, from two paired
    differences (``control − router`` and ``control − CE``, objects with ``low``/``high``):
    ``"recovers the cost"`` (resolvably better than the router, and within ``margin`` of CE),
    ``"recovers part of it"`` (resolvably better, not back to CE), ``"costs more"``
    (resolvably worse) or ``"changes nothing resolvable"``."""
    margin = number("margin", margin, low=0, high=1)
    for name, d in (("vs_router", vs_router), ("vs_ce", vs_ce)):
        if not (hasattr(d, "low") and hasattr(d, "high")):
            fail(name, d, "a paired difference (cell_difference)")
    if vs_router.low > 0:
        return "recovers the cost" if vs_ce.low >= -margin else "recovers part of it"
    if vs_router.high < 0:
        return "costs more"
    return "changes nothing resolvable"


def learning_curve(result: dict, window: int = 50) -> dict[str, np.ndarray]:
    """A run's test exact match at each evaluation beside its training cross-entropy there
    (the mean of the batch losses logged over the ``window`` steps before it): ``step``,
    ``test_accuracy``, ``train_ce``, each (n_evals,).  Plotting the first against the last
    compares objectives **at matched training loss** -- a router loss that slows the fit of
    the training sentences shows there as a shift along the loss axis, one that costs recall
    at equal fit as a shift down."""
    r = _results("result", [result])[0]
    window = integer("window", window, low=1)
    h = r["history"]
    steps, ce = np.asarray(h["step"], dtype=float), np.asarray(h["ce"], dtype=float)
    ev = h.get("evals") or []
    at = np.array([float(e["step"]) for e in ev])
    train_ce = np.array([float(ce[(steps > s - window) & (steps <= s)].mean())
                         if ((steps > s - window) & (steps <= s)).any() else np.nan
                         for s in at])
    return dict(step=at, test_accuracy=np.array([float(e["accuracy"]) for e in ev]),
                train_ce=train_ce)


def gap_along_training(treated: Sequence[dict], reference: Sequence[dict]) -> dict:
    """The paired gap of test exact match between two objectives' runs at every evaluation
    (treated − reference, runs paired by seed, mean over the pairs): ``step`` (n_evals,),
    ``gap`` (n_evals,), and the evaluation where the gap was largest in size (``largest``,
    ``largest_step``) beside the last one (``final``).  A loss that slows learning but not
    what is learned shows a large gap midway that closes by the end; one that limits what is
    learned keeps it."""
    a = {r["config"]["seed"]: learning_curve(r) for r in _results("treated", treated)}
    b = {r["config"]["seed"]: learning_curve(r) for r in _results("reference", reference)}
    seeds = sorted(set(a) & set(b))
    require(bool(seeds), "treated/reference seeds", sorted(a), f"some seed of {sorted(b)}")
    step = a[seeds[0]]["step"]
    require(all(np.array_equal(a[s]["step"], step) and np.array_equal(b[s]["step"], step)
                for s in seeds), "evaluation steps", step.tolist(),
            "the same evaluation steps in every run (the same schedule)")
    gap = np.mean([a[s]["test_accuracy"] - b[s]["test_accuracy"] for s in seeds], axis=0)
    k = int(np.argmax(np.abs(gap)))
    return dict(step=step, gap=gap, largest=float(gap[k]), largest_step=int(step[k]),
                final=float(gap[-1]), n_pairs=len(seeds))


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
        codes = f", codes {c['entity_codes']}" if c.get("entity_codes") is not None else ""
        label = (f"K={c['n_tasks']}, E={c['n_experts']}, width {c['d_expert']}, {kind}, "
                 f"seed {c['seed']}{codes}")
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


__all__ = ["active", "aligned", "ceiling_nmi", "cell_difference", "cell_interval", "cells",
           "comparable", "control_effect", "convergence_table", "converged",
           "determined_diagonal", "differences", "gap_along_training",
           "diffuse", "in_band", "learning_curve", "variant_cost"]
