"""What the training chapter (``notebooks/training.md``) draws and tabulates.

The chapter trains one-layer MoE transformers with three objectives and decides paper A's claims
on their runs; the numbers come from :mod:`moe_routing.experiments.task_routing` (its ``claims``
and ``power``) and from the benchmark tables in ``benchmarks/results/``.  This module only lays
them out: the frames the chapter shows, the strings it glues into its prose and the figures it
draws, so that each chapter cell is the call that makes its table or figure.  The verdicts, the
glued numbers and the ledger entries stay in the chapter.

A *run* below is a result dict of :func:`~moe_routing.experiments.task_routing.run_grid`.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import routing_metrics as rm
from ...experiments.task_routing import claims, power
from ..ledger import BADGES
from ..plots import PALETTE, column_figsize, heatmap

#: the three objectives, in the order of every table and figure, and their display names
OBJS = ["ce", "ce+lb", "ce+router"]
NAMES = {"ce": "CE", "ce+lb": "CE + LB", "ce+router": "CE + task router"}
#: objective -> (line style, marker), shared by the learning curves and the accuracy grid
STYLES = {"ce": ("-", "o"), "ce+lb": ("--", "s"), "ce+router": (":", "^")}


# ---------------------------------------------------------------------------------------------
# the profile and the set-up


def variant_words(codes_variant) -> str:
    """Our variant in words: the rank of its codes and the other fields of A-Fig. 2's
    configuration it changes (``codes_variant`` as the chapter's parameter)."""
    if codes_variant is None:
        return "none"
    other = {k: v for k, v in codes_variant.items() if k != "entity_codes"}
    names = {"n_pairs": "pairs per relation", "steps": "steps"}
    return (f"fixed random codes of rank {codes_variant['entity_codes']}"
            + "".join(f", {v} {names.get(k, k)}" for k, v in other.items()))


def profile_table(plan, profile: str) -> pd.DataFrame:
    """The profile against the paper: each quantity, the paper's value, where that value comes
    from, and this profile's -- read from the plan's configurations (``plan``: a
    :class:`~moe_routing.experiments.task_routing.TrainingPlan`), so the table cannot drift
    from what runs."""
    c, codes = plan.fig2[0], plan.codes_variant
    return pd.DataFrame([
        ("relations in the pool", "50", "secondary", c.n_relations),
        ("(subject, object) pairs per relation", "200", "secondary", f"≤ {c.n_pairs}"),
        ("templates per relation", "5", "secondary", c.n_templates),
        ("A-Fig. 2: tasks × experts", "20 × 7", "secondary", f"{c.n_tasks} × {c.n_experts}"),
        ("grid: numbers of tasks", "10, 20, 30, 40", "secondary",
         ", ".join(map(str, sorted({g.n_tasks for g in plan.grid})))),
        ("grid: numbers of experts", "1, 3, 5, 7, 9", "secondary",
         ", ".join(map(str, sorted({g.n_experts for g in plan.grid})))),
        ("entity embeddings", "learned (one row per entity)", "summary",
         "learned rows (the paper's claims)" + ("" if codes is None else
         f"; our variant: {variant_words(codes)} (the book's claims)")),
        ("training length", "not known", "—",
         "a fixed budget, the same for every run of an arm (whether the runs converged: "
         "see below)"),
        ("seeds per cell", "not known", "—", len(plan.seeds)),
        ("d_model / heads / expert width", "not known", "—",
         f"{c.d_model} / {c.n_heads} / {c.d_expert}"),
        ("training budget", "not known", "—",
         f"{c.steps} steps × {c.batch_size} sentences, peak lr {c.lr:g}"),
        ("distinct training runs", "—", "—", len(plan.distinct())),
    ], columns=["quantity", "paper", "source", f"this profile ({profile})"])


def setup_table(st: dict, plan, device: str) -> pd.DataFrame:
    """Our set-up, every row ours: A-Fig. 2's data (``st``: its dataset's ``statistics()``),
    the model, the training budget, the seeds (read from ``plan``'s A-Fig. 2 configuration)
    and the device."""
    c, codes = plan.fig2[0], plan.codes_variant
    return pd.DataFrame([
        ("A-Fig. 2 data: train / test sentences", f"{st['n_train']} / {st['n_test']}"),
        ("A-Fig. 2 data: vocabulary, longest sentence",
         f"{st['vocab_size']}, {st['L']} words"),
        ("test facts also seen in training (other template)",
         f"{100 * st['test_fact_seen_in_train']:.1f} %"),
        ("d_model / heads / expert width", f"{c.d_model} / {c.n_heads} / {c.d_expert}"),
        ("entity embeddings", "learned rows; our variant: " + variant_words(codes)
         + ("" if codes is None else " (see Why these sizes)")),
        ("steps, batch size, peak learning rate", f"{c.steps}, {c.batch_size}, {c.lr:g}"),
        ("seeds", ", ".join(map(str, plan.seeds))),
        ("device", device),
    ], columns=["quantity", "value (ours)"])


# ---------------------------------------------------------------------------------------------
# the benchmark tables the chapter cites (benchmarks/results/)


def planned_runs(profile_file: Path) -> int:
    """The number of distinct runs the chapter trains under a profile file's parameters: its
    training block with the groups it takes from ``shared:`` (as the book's pipeline reads it),
    the knobs of :func:`~moe_routing.experiments.task_routing.training_plan` only
    (:func:`~moe_routing.experiments.task_routing.plan_knobs`)."""
    import yaml

    from ...experiments.task_routing import plan_knobs, training_plan

    raw = yaml.safe_load(Path(profile_file).read_text(encoding="utf-8"))
    block = dict(raw["training"])
    for group in block.pop("use", []):
        block = {**raw["shared"][group], **block}
    return len(training_plan(**plan_knobs(block)).distinct())


def find_up(rel: str) -> Path | None:
    """The repository's file ``rel``, found from the working directory upwards (the chapter
    runs from the repository, from ``notebooks/`` or from a build folder), or None."""
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / rel).is_file():
            return folder / rel
    return None


def read_json(rel: str) -> dict | None:
    """The JSON table a benchmark script wrote at ``rel`` (see :func:`find_up`), or None where
    the repository has none."""
    path = find_up(rel)
    return json.loads(path.read_text()) if path else None


#: the models of the codes calibration (``benchmarks/calibrate_codes.py``), by short name
CALIBRATION_MODELS = {
    "e1": "1 expert of 8", "e7": "7 experts of 8, CE",
    "lb": "7 experts of 8, CE + LB", "rt": "7 experts of 8, CE + task router",
    "rt01": "7 experts of 8, CE + 0.1 task router", "dense": "dense, 56 neurons (same total)"}
#: its entity embeddings (codes None: learned rows), by the tag of their glue names
CALIBRATION_CODES = [(None, "rows"), (8, "c8"), (6, "c6"), (4, "c4")]


def _calibration_rows(calib: dict) -> dict:
    """(codes, model) -> the calibration's row (codes None: learned rows)."""
    return {(r["codes"], r["model"]): r for r in calib["rows"]}


def calibration_numbers(calib: dict) -> dict[str, object]:
    """The numbers the *Why these sizes* prose quotes from the codes calibration, by glue
    name: every model's test, experts-off and train accuracy (%) at every embedding kind,
    then the commit, the largest late accuracy change, the lowest train accuracy and the
    number of facts."""
    cal = pd.DataFrame(calib["rows"])
    by = _calibration_rows(calib)
    out: dict[str, object] = {}
    for codes, tag in CALIBRATION_CODES:
        for name, model in CALIBRATION_MODELS.items():
            r = by[codes, model]
            out[f"training-cal-{tag}-{name}"] = 100 * r["accuracy"]
            out[f"training-cal-{tag}-{name}-off"] = 100 * r["accuracy_experts_off"]
            out[f"training-cal-{tag}-{name}-train"] = 100 * r["train_accuracy"]
    out["training-cal-commit"] = calib["commit"]
    out["training-cal-moving"] = 100 * float(cal.acc_change_last_quarter.max())
    out["training-cal-min-train"] = 100 * float(cal.train_accuracy.min())
    common = calib["common"]
    out["training-cal-facts"] = int(common["n_tasks"] * common["n_pairs"])
    return out


def _accuracy_columns(frame: pd.DataFrame, accuracy: str) -> dict[str, object]:
    """The accuracy columns shared by the benchmark tables: test exact match with its 95 %
    interval (column name ``accuracy``), train accuracy, accuracy with the experts switched
    off and the change over the last quarter of training, in % or pp."""
    return {
        accuracy: [f"{100 * r.accuracy:.1f} [{100 * r.accuracy_low:.1f}, "
                   f"{100 * r.accuracy_high:.1f}]" for r in frame.itertuples()],
        "train, %": (100 * frame.train_accuracy).round(1),
        "experts off, %": (100 * frame.accuracy_experts_off).round(1),
        "still moving, pp": (100 * frame.acc_change_last_quarter).round(1)}


def calibration_table(calib: dict) -> pd.DataFrame:
    """The codes calibration as the chapter shows it: one row per embedding kind and model."""
    cal = pd.DataFrame(calib["rows"])
    return pd.DataFrame({
        "entities": ["learned rows" if r["codes"] is None else f"codes, rank {r['codes']}"
                     for r in calib["rows"]],
        "model": cal.model,
        **_accuracy_columns(cal, "test exact match, % [95 % interval]")})


def router_price(calib: dict):
    """The calibration's best evidence, as the embedding memory is taken away (learned rows,
    then codes of rank 8, 6, 4): the task router's test exact match minus CE's, seven experts
    of 8 neurons, with a 95 % interval from the two cells' half-widths added in quadrature
    (the calibration's seeds were not paired); on a right axis, grey, CE's accuracy with every
    expert switched off -- how much the experts hold.  Returns the figure."""
    by = _calibration_rows(calib)
    kinds = [(None, "learned\nrows"), (8, "codes,\nrank 8"), (6, "codes,\nrank 6"),
             (4, "codes,\nrank 4")]
    gap, half, off = [], [], []                       # (kinds,) each, in pp or %
    for codes, _ in kinds:
        rt, ce = by[codes, CALIBRATION_MODELS["rt"]], by[codes, CALIBRATION_MODELS["e7"]]
        gap.append(100 * (rt["accuracy"] - ce["accuracy"]))
        half.append(100 * np.hypot(rt["accuracy_high"] - rt["accuracy"],
                                   ce["accuracy_high"] - ce["accuracy"]))
        off.append(100 * ce["accuracy_experts_off"])
    fig, ax = plt.subplots(figsize=column_figsize(0.42))
    x = np.arange(len(kinds))
    ax.axhline(0, color="0.5", lw=1)
    ax.axhspan(-3, 3, color="0.9", zorder=0, label="within ±3 pp")
    ax.errorbar(x, gap, yerr=half, ls="none", marker="o", ms=7, capsize=4,
                color=PALETTE[2], label="task router − CE")
    ax.set_xticks(x, [k[1] for k in kinds])
    ax.set_ylabel("difference in test exact match (pp)")
    twin = ax.twinx()
    twin.plot(x + 0.18, off, "s", color="0.55", ms=6, label="CE, experts off (right)")
    twin.set_ylabel("accuracy, experts off (%)")
    twin.set_ylim(0, 100)
    twin.grid(False)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=8)
    return fig


def capacity_verdict(search: dict) -> str:
    """Where, with learned entity rows, the experts' capacity binds
    (``benchmarks/search_learned_capacity.py``): in a regime where both witnesses agree --
    seven experts of 8 beat one expert of 8 resolvably (the intervals apart) and switching
    every expert off costs the CE model at least 10 points.  Names the regimes where it binds,
    or else each regime's three accuracies."""
    srch = pd.DataFrame(search["rows"])
    found = []
    for regime, rows in srch.groupby("regime", sort=False):
        one = rows[rows.model == "1 expert of 8"].iloc[0]
        ce7 = rows[rows.model == "7 experts of 8, CE"].iloc[0]
        matter = ce7.accuracy_low > one.accuracy_high
        hold = ce7.accuracy - ce7.accuracy_experts_off >= 0.10
        found.append((regime, matter and hold, ce7, one))
    binds = [f for f in found if f[1]]
    return ("capacity binds at " + "; ".join(r for r, *_ in binds) if binds else
            "in no regime searched does the experts' capacity bind: "
            + "; ".join(f"{r}: one expert {100 * o.accuracy:.1f} %, seven "
                        f"{100 * c.accuracy:.1f} %, seven with the experts off "
                        f"{100 * c.accuracy_experts_off:.1f} %" for r, _, c, o in found))


def capacity_table(search: dict) -> pd.DataFrame:
    """The capacity search as the chapter shows it: one row per regime and model."""
    srch = pd.DataFrame(search["rows"])
    return pd.DataFrame({"regime": srch.regime, "model": srch.model,
                         **_accuracy_columns(srch, "test exact match, % [95 %]")})


# ---------------------------------------------------------------------------------------------
# A-Fig. 2: where the tokens of each task go


def routing_heatmaps(fig2: list[dict], n_tasks: int, n_experts: int):
    """Our A-Fig. 2: for each objective's run (``fig2``, one per objective), the (tasks,
    experts) matrix P(expert | task) over every predicted position of the test sentences, a
    dot on each task's designated expert k mod E -- under the task-router loss the mass should
    sit on the dots.  Cells are sized in inches so that the figure fits a phone screen.
    Returns the figure."""
    K, E = n_tasks, n_experts
    cell_w, cell_h = 0.13, 0.17            # inches per cell: narrow enough for a phone screen
    fig, axes = plt.subplots(1, 3, sharey=True, layout="constrained",
                             figsize=(3 * E * cell_w + 0.8, K * cell_h + 1.6))
    for ax, res in zip(axes, fig2):
        P = np.array(res["routing_all"]["p_expert_given_task"])      # (K, E)
        im = heatmap(ax, P, vmin=0, vmax=1, cmap="viridis", aspect="auto",
                     interpolation="none")
        ax.scatter(np.arange(K) % E, np.arange(K), s=9, c="white", edgecolors="black",
                   linewidths=0.5)
        ax.set_title({"ce": "CE", "ce+lb": "CE + LB", "ce+router": "task router"}[
            res["config"]["objective"]], fontsize=10)
        ax.set_xticks(range(E), [str(e) for e in range(E)], fontsize=9)
        ax.set_xlabel("expert", fontsize=9)
        ax.grid(False)
    axes[0].set_yticks(range(K), [str(k) for k in range(K)], fontsize=9)
    axes[0].set_ylabel("task k", fontsize=9)
    cb = fig.colorbar(im, ax=axes, location="bottom", aspect=30,
                      ticks=[0, 0.25, 0.5, 0.75, 1])
    cb.set_label("P(expert | task)", fontsize=9)
    cb.ax.tick_params(labelsize=9)
    return fig


def designated_mass(fig2: list[dict], n_tasks: int, n_experts: int) -> dict[str, np.ndarray]:
    """objective -> (tasks,) the fraction of each task's tokens that its run sends to the
    task's designated expert k mod E (every predicted position)."""
    K, E = n_tasks, n_experts
    return {r["config"]["objective"]: np.array(r["routing_all"]["p_expert_given_task"])[
        np.arange(K), np.arange(K) % E] for r in fig2}


def per_task_table(fig2: list[dict], diag_mass: dict[str, np.ndarray]) -> pd.DataFrame:
    """The rows of A-Fig. 2: task index, relation, designated expert and its mass under each
    objective (``diag_mass``: :func:`designated_mass`)."""
    K = len(fig2[0]["dataset"]["tasks"])
    E = fig2[0]["config"]["n_experts"]
    per_task = pd.DataFrame({"relation": fig2[0]["dataset"]["tasks"],
                             "label": fig2[0]["dataset"]["labels"],
                             "designated expert": np.arange(K) % E,
                             **{f"P(designated), {NAMES[o]}": diag_mass[o].round(2)
                                for o in OBJS}})
    per_task.index.name = "k"
    return per_task


def _routing_row(summary: dict, accuracy: float = np.nan) -> dict[str, float]:
    """The routing measures of one count matrix (``summary["counts"]``, tasks × experts)."""
    c = np.array(summary["counts"], dtype=float)
    return {"NMI": rm.normalized_mutual_info(c), "diagonal mass": rm.diagonal_accuracy(c),
            "purity": rm.purity(c), "load entropy": rm.load_entropy(c.sum(0)),
            "max utilisation": c.sum(0).max() / c.sum(), "accuracy": accuracy}


def routing_tables(fig2: list[dict], n_experts: int):
    """A-Fig. 2's routing measures, one row per objective's run: over every predicted position
    (with two reference rows -- routing independent of the task, from CE's task sizes and
    expert loads, and perfect designated routing, the ceiling), at the object-prediction
    position only, and the designated expert's share at the task-determined positions against
    all positions and the share a router reading the prefix can reach.

    Returns ``(all positions, object position, by position, ceiling)``: three frames and the
    ceiling's (tasks, experts) count matrix."""
    rows, rows_obj, rows_det = {}, {}, {}
    for r in fig2:
        name = NAMES[r["config"]["objective"]]
        rows[name] = _routing_row(r["routing_all"], r["accuracy"])
        rows[name]["entropy / log E"] = r["routing_all"]["router_entropy_normalised"]
        rows_obj[name] = _routing_row(r["routing_object"], r["accuracy"])
        ra = r["routing_all"]
        rows_det[name] = {"diagonal mass, task-determined positions":
                          claims.determined_diagonal(r),
                          "diagonal mass, all positions": ra["diagonal_accuracy"],
                          "reachable over all positions": ra["achievable_diagonal"]}
    c_ce = np.array(fig2[0]["routing_all"]["counts"])
    rows["independent of the task"] = _routing_row({"counts": rm.independent_counts(c_ce, 0)})
    ceiling = rm.designated_counts(c_ce.sum(1), n_experts)
    rows["designated (ceiling)"] = _routing_row({"counts": ceiling})
    return pd.DataFrame(rows).T, pd.DataFrame(rows_obj).T, pd.DataFrame(rows_det).T, ceiling


# ---------------------------------------------------------------------------------------------
# all the runs, and whether they converged


def _curves(runs: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """objective -> (seeds, evals) arrays of step, test exact match, training CE."""
    out = {}
    for o in OBJS:
        lc = [claims.learning_curve(r) for r in runs if r["config"]["objective"] == o]
        if lc:
            out[o] = {k: np.array([c[k] for c in lc]) for k in lc[0]}
    return out


def learning_curves(fig2_all: list[dict], variant: list[dict]):
    """Learning curves at A-Fig. 2's configuration, one column per arm (the paper's setting,
    ``fig2_all``; our variant, ``variant``, when it ran).  Top: test exact match against the
    step, mean over seeds with the seeds' range as a band, the last quarter of training (where
    the convergence rule measures the change) shaded.  Bottom: every evaluation against the
    training CE at that step, so that the objectives are compared at matched training loss --
    one that only learns more slowly sits on the same curve.  Returns the figure."""
    codes = variant[0]["config"]["entity_codes"] if variant else None
    arms = [("paper's setting (learned rows)", fig2_all)] + (
        [(f"our variant (codes, rank {codes})", variant)] if variant else [])
    fig, axes = plt.subplots(2, len(arms), squeeze=False, layout="constrained",
                             figsize=column_figsize(0.75 if len(arms) > 1 else 1.0))
    for col, (title, runs_arm) in enumerate(arms):
        top, bottom = axes[0][col], axes[1][col]
        for j, (o, c) in enumerate(_curves(runs_arm).items()):
            ls, mk = STYLES[o]
            acc = 100 * c["test_accuracy"]                       # (seeds, evals)
            top.fill_between(c["step"][0], acc.min(0), acc.max(0), color=PALETTE[j],
                             alpha=0.18, lw=0)
            top.plot(c["step"][0], acc.mean(0), ls=ls, marker=mk, ms=5, color=PALETTE[j],
                     label=NAMES[o])
            bottom.plot(c["train_ce"].ravel(), acc.ravel(), ls="none", marker=mk, ms=4,
                        color=PALETTE[j], alpha=0.7, label=NAMES[o])
        steps = runs_arm[0]["config"]["steps"]               # each arm's own length
        top.axvspan(0.75 * steps, steps, color="0.88", zorder=0)
        top.set(title=title, xlabel="training step")
        top.title.set_fontsize(9)
        bottom.set(xlabel="training cross-entropy (nats)", xscale="log")
        bottom.xaxis.set_major_locator(plt.LogLocator(subs=(1, 2, 5), numticks=15))
        bottom.xaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
        bottom.xaxis.set_minor_formatter(plt.NullFormatter())
        bottom.invert_xaxis()                     # training proceeds to the right
    axes[0][0].set_ylabel("test exact match (%)")
    axes[1][0].set_ylabel("test exact match (%)")
    handles, texts = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="outside upper center", ncol=3, fontsize=8)
    return fig


def budgets(runs: list[dict]) -> str:
    """The training steps of each arm in words ("paper's setting 1000 steps, our variant
    3000"), each arm's distinct budgets in order."""
    arms = {"paper's setting": set(), "our variant": set()}
    for r in runs:
        c = r["config"]
        arms["our variant" if c.get("entity_codes") is not None else "paper's setting"].add(
            c["steps"])
    return ", ".join(f"{arm} {'/'.join(map(str, sorted(st)))} steps"
                     for arm, st in arms.items() if st)


def convergence_tables(runs: list[dict], d_expert: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Whether each distinct run had converged: one row per run (the CE drop over the last
    fifth of training, the test accuracy's change over the last quarter and its noise, the
    final test and train accuracy, the objective -- "dense" for a run whose experts are not
    ``d_expert`` wide -- and the arm), and the worst of each per arm and objective.
    Returns ``(per run, per arm and objective)``."""
    acc_by_key = {r["key"]: r for r in runs}
    conv = pd.DataFrame([
        {"run": label, "objective": label.split(", ")[3],
         "CE drop (last fifth)": drop, "accuracy change (last quarter)": change,
         "test noise of that change": noise}
        for label, (drop, change, noise) in claims.convergence_table(runs).items()]
    ).set_index("run")
    seen = list(dict.fromkeys(r["key"] for r in runs))       # the distinct runs, in order
    conv["final test accuracy"] = [acc_by_key[k]["accuracy"] for k in seen]
    conv["train accuracy"] = [acc_by_key[k]["train_accuracy"] for k in seen]
    conv.loc[[i for i, k in zip(conv.index, seen) if acc_by_key[k]["config"]["d_expert"]
              != d_expert], "objective"] = "dense"
    conv["arm"] = ["our variant" if acc_by_key[k]["config"].get("entity_codes") is not None
                   else "paper's setting" for k in seen]
    by_obj = conv.groupby(["arm", "objective"]).agg(**{
        "runs": ("final test accuracy", "size"),
        "largest CE drop (%)": ("CE drop (last fifth)", lambda s: 100 * s.max()),
        "largest |accuracy change| (pp)": ("accuracy change (last quarter)",
                                           lambda s: 100 * s.abs().max()),
        "lowest train accuracy (%)": ("train accuracy", lambda s: 100 * s.min())})
    return conv, by_obj


# ---------------------------------------------------------------------------------------------
# the accuracy grid


def _interval_text(m: float, a: float, b: float, sign: str = "") -> str:
    """``mean [low, high]`` of fractions, in % (or pp with ``sign="+"``), one decimal."""
    return f"{100 * m:{sign}.1f} [{100 * a:{sign}.1f}, {100 * b:{sign}.1f}]"


def cell_text(iv) -> str:
    """An accuracy interval as the tables show it: ``mean [low, high]`` in %."""
    return _interval_text(iv.mean, iv.low, iv.high)


def diff_text(d) -> str:
    """A paired difference as the tables show it: ``mean [low, high]`` in signed pp."""
    return _interval_text(d.mean, d.low, d.high, "+")


def cell_frame(cell_iv: dict) -> pd.DataFrame:
    """One row per grid cell (tasks, experts, objective): the mean accuracy over seeds, its
    95 % interval and which error set the interval's width (``cell_iv``: ``claims.cells``)."""
    return pd.DataFrame([dict(n_tasks=k, n_experts=e, objective=o, mean=iv.mean, low=iv.low,
                              high=iv.high, source=iv.source)
                         for (k, e, o), iv in cell_iv.items()])


def grid_table(agg: pd.DataFrame) -> pd.DataFrame:
    """The accuracy grid as the chapter shows it: one row per (tasks, experts), one column per
    objective, each cell ``mean [low, high]`` in % (``agg``: :func:`cell_frame`)."""
    show = agg.assign(cell=[_interval_text(m, a, b)
                            for m, a, b in zip(agg["mean"], agg["low"], agg["high"])])
    pivot = show.pivot(index=["n_tasks", "n_experts"], columns="objective",
                       values="cell")[OBJS]
    pivot.columns = [NAMES[o] for o in OBJS]
    return pivot


def accuracy_grid(agg: pd.DataFrame, grid_tasks, grid_experts):
    """Test exact match of every grid cell (``agg``: :func:`cell_frame`), one panel per number
    of tasks: the three objectives side by side at each number of experts, mean over seeds
    with the 95 % interval, over the grey band of the paper's reported 86-94 %.  The y axis
    starts at 84 % or lower where a cell's interval does.  Returns the figure."""
    ncol = len(grid_tasks)
    fig, axes = plt.subplots(1, ncol, sharey=True, squeeze=False,
                             figsize=column_figsize(0.55 if ncol == 1 else 0.42))
    xpos = {e: i for i, e in enumerate(grid_experts)}
    for ax, k in zip(axes[0], grid_tasks):
        ax.axhspan(86, 94, color="0.88", zorder=0, label="paper: 86–94 %")
        for j, o in enumerate(OBJS):
            a = agg[(agg.n_tasks == k) & (agg.objective == o)]
            x = np.array([xpos[e] for e in a.n_experts]) + (j - 1) * 0.15
            yerr = 100 * np.vstack([a["mean"] - a["low"], a["high"] - a["mean"]])  # (2, cells)
            ax.errorbar(x, 100 * a["mean"], yerr=yerr, ls="none", marker=STYLES[o][1], ms=6,
                        capsize=3, color=PALETTE[j], label=NAMES[o])
        ax.set(title=f"{k} tasks", xlabel="experts E")
        ax.set_xticks(range(len(grid_experts)), [str(e) for e in grid_experts])
    lo = min(84.0, 100 * agg["low"].min() - 2)
    axes[0][0].set(ylabel="test exact match (%)", ylim=(lo, 100.5))
    handles, texts = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="lower center", ncol=4, fontsize=9,
               bbox_to_anchor=(0.5, 1.0))
    return fig


def differences_table(paired: dict, state: dict) -> pd.DataFrame:
    """The task router's paired differences to CE and to CE + LB in every multi-expert cell,
    ``mean [low, high]`` in pp with the p-value of no difference, and what the comparability
    rule reads in the cell (``paired``: ``claims.differences``; ``state``: the rule's
    ``comparable_cells``)."""
    return pd.DataFrame([
        {"tasks": k, "experts": e,
         **{f"router − {ref} (pp)": diff_text(d) for ref, d in (("CE", dce), ("CE+LB", dlb))},
         "p (router = CE)": f"{dce.p_value:.2g}", "p (router = CE+LB)": f"{dlb.p_value:.2g}",
         "within 3 pp": state[k, e]}
        for (k, e), (dce, dlb, _) in paired.items()]).set_index(["tasks", "experts"])


def experts_off(grid: list[dict], n_tasks: int, n_experts: int) -> tuple[float, float]:
    """The witness of how much the experts hold in the paper's setting: CE's test exact match
    (%, mean over seeds) at the grid's (``n_tasks``, ``n_experts``) cell, with its experts and
    with every expert's output set to zero.  Returns ``(on, off)``."""
    ce_big = [r for r in grid if r["config"]["objective"] == "ce"
              and (r["config"]["n_tasks"], r["config"]["n_experts"]) == (n_tasks, n_experts)]
    on, off = (100 * np.mean([r[k] for r in ce_big])
               for k in ("accuracy", "accuracy_experts_off"))
    return on, off


def codes_note(n_seeds: int, n_tasks: int, n_experts: int, on: float, off: float) -> str:
    """The first half of every A-* ledger note: the claims are decided in the paper's setting
    (learned entity rows), with the experts-off witness of :func:`experts_off`."""
    return ("Decided in the paper's setting (learned entity embeddings; our fixed-code variant "
            f"decides only X-codes-router-cost) on {n_seeds} seed(s); with every expert "
            f"switched off, CE at {n_tasks} tasks × {n_experts} experts keeps {off:.1f} % of "
            f"its {on:.1f} % (the experts hold {on - off:.1f} pp of what it recalls); ")


def conv_note(converged: bool) -> str:
    """The second half of every A-* ledger note: whether the runs had converged, without which
    an accuracy verdict is inconclusive either way."""
    return ("the runs had converged." if converged else
            "the runs had not converged (X-training-converged), which makes the verdict "
            "inconclusive either way.")


# ---------------------------------------------------------------------------------------------
# against the paper's figures; active parameters


def paper_table(agg: pd.DataFrame, df: pd.DataFrame, nmi_ce: float, nmi_lb: float,
                router_mass: np.ndarray, profile: str) -> pd.DataFrame:
    """Our numbers beside the paper's (from the secondary digest): the accuracy range of every
    grid cell and the lowest task-router cell (``agg``: :func:`cell_frame`), the mean test and
    train accuracy per objective over the grid's runs (``df``: ``results_frame``), A-Fig. 2's
    NMI of CE and CE + LB and the range of the task router's per-task designated mass
    (``router_mass``, (tasks,))."""
    router_means = agg[agg.objective == "ce+router"]["mean"]
    lo_all, hi_all = 100 * agg["mean"].min(), 100 * agg["mean"].max()
    train_by_obj = {o: 100 * df[df.objective == o].train_accuracy.mean() for o in OBJS}
    return pd.DataFrame([
        ("exact match, every cell (mean over seeds)", "86–94 %",
         f"{lo_all:.1f}–{hi_all:.1f} %"),
        ("exact match, lowest task-router cell", "> 88 %",
         f"{100 * router_means.min():.1f} %"),
        *[(f"mean over cells, {NAMES[o]}", "—",
           f"{100 * df[df.objective == o].accuracy.mean():.1f} % "
           f"(training sentences {train_by_obj[o]:.1f} %)") for o in OBJS],
        ("A-Fig. 2 routing, CE / CE + LB", "rows spread ≈ 0.1–0.4",
         f"NMI {nmi_ce:.2f} / {nmi_lb:.2f}"),
        ("A-Fig. 2 routing, task router", "0.77, 0.90, 0.86 quoted",
         f"designated mass {router_mass.min():.2f}–{router_mass.max():.2f}"),
    ], columns=["quantity", "paper (secondary)", f"ours ({profile})"])


def mean_param(runs: list[dict], kind: str) -> float:
    """The mean over ``runs`` of one parameter count (``kind``: ``active``, ``total``,
    ``experts_active`` or ``experts_total``)."""
    return float(np.mean([r["params"][kind] for r in runs]))


def expert_share(runs: list[dict]) -> float:
    """The mean share of one expert in a token's active parameters (the attention, the
    embeddings and the unembedding are the rest): what bounds the active-parameter saving."""
    return float(np.mean([r["params"]["experts_active"] / r["params"]["active"]
                          for r in runs]))


def active_parameters(sel: list[dict], dense: list[dict], grid_experts, d_expert: int,
                      n_experts_max: int):
    """Accuracy and parameters of the models at the grid's largest number of tasks (``sel``)
    and of the dense runs: one row per model, from the one-expert model (its three objectives
    are one run) through each MoE and objective to the dense model.  Left: test exact match
    with its 95 % interval; right: the experts' parameters in thousands, active per token
    (filled) inside stored (outline) -- the MoE stores about as many as the dense model and
    activates one expert's worth.  Returns the figure."""
    model_rows = []
    for e in grid_experts:
        for o in (OBJS if e > 1 else ["ce"]):      # the three one-expert runs are one run
            rs = [r for r in sel if r["config"]["n_experts"] == e
                  and r["config"]["objective"] == o]
            label = f"1 expert (width {d_expert})" if e == 1 else f"E={e}, {NAMES[o]}"
            model_rows.append((label, rs))
    model_rows.append((f"dense (width {d_expert * n_experts_max})", dense))
    labels = [m[0] for m in model_rows]
    ivs = [claims.cell_interval(rs) for _, rs in model_rows]
    acc = np.array([100 * iv.mean for iv in ivs])                    # (models,)
    lo_e = acc - np.array([100 * iv.low for iv in ivs])
    hi_e = np.array([100 * iv.high for iv in ivs]) - acc
    active, total = (np.array([np.mean([r["params"][kind] for r in rs]) / 1e3
                               for _, rs in model_rows])
                     for kind in ("experts_active", "experts_total"))
    y = np.arange(len(labels))[::-1]
    fig, (ax_a, ax_p) = plt.subplots(1, 2, sharey=True, gridspec_kw={"wspace": 0.08},
                                     figsize=column_figsize(0.07 * len(y) + 0.2))
    ax_a.errorbar(acc, y, xerr=[lo_e, hi_e], ls="none", marker="o", ms=6, capsize=3,
                  color=PALETTE[0])
    ax_a.set_yticks(y, labels, fontsize=9)
    ax_a.set(xlabel="test exact match (%)", xlim=(min(acc - lo_e) - 2.5, 100.3))
    ax_p.barh(y, total, height=0.6, facecolor="white", edgecolor=PALETTE[3], label="stored")
    ax_p.barh(y, active, height=0.36, color=PALETTE[3], label="active per token")
    ax_p.set_xlabel("expert parameters (thousands)")
    ax_p.legend(loc="lower center", ncol=2, fontsize=9, bbox_to_anchor=(0.5, 1.0))
    ax_p.set_xlim(0, 1.05 * total.max())
    return fig


# ---------------------------------------------------------------------------------------------
# our variant, its controls, and the rules fed broken models


def variant_table(variant: list[dict], fig2_all: list[dict]) -> pd.DataFrame:
    """Test exact match at A-Fig. 2's cell per objective, ``mean [low, high]`` in %, in the
    paper's setting (``fig2_all``, every seed) beside our variant (``variant``)."""
    var_iv = claims.cells(variant)
    same_cell = claims.cells(fig2_all)
    return pd.DataFrame([
        {"objective": NAMES[k[2]], "paper's setting, %": cell_text(same_cell[k]),
         "our variant, %": cell_text(iv)} for k, iv in var_iv.items()]
    ).set_index("objective")


#: the variant's controls of the task-router loss (``ExperimentConfig.control``), by name; the
#: fourth control, a tenth of the loss's weight, is named by its weight
CONTROL_LABELS = {"router_loss_detached": "gradient stopped at the router's input",
                  "router_loss_determined": "loss only at task-determined positions",
                  "task_routed": "routed by the task (oracle), no router loss"}


def control_groups(ctrl_runs: list[dict]) -> dict[str, list[dict]]:
    """The control runs grouped by control (name -> its runs over the seeds), in the order
    they ran; a control that changes only the router loss's weight is named by the weight."""
    groups: dict[str, list[dict]] = {}
    for r in ctrl_runs:
        c = r["config"]
        name = CONTROL_LABELS.get(c.get("control", "none"),
                                  f"weight λ = {c['router_alpha']:g}")
        groups.setdefault(name, []).append(r)
    return groups


def control_table(groups: dict[str, list[dict]], diffs: dict, effects: dict[str, str]
                  ) -> pd.DataFrame:
    """One row per control (``groups``: :func:`control_groups`): its test exact match, its
    paired differences to the task-router run and to CE (``diffs``: name -> the two
    differences) and what they say of the task router's cost (``effects``: name ->
    ``claims.control_effect``)."""
    return pd.DataFrame([
        {"control": name, "test exact match, %": cell_text(claims.cell_interval(rs)),
         "− task router (pp)": diff_text(diffs[name][0]),
         "− CE (pp)": diff_text(diffs[name][1]), "effect on the cost": effects[name]}
        for name, rs in groups.items()]).set_index("control")


def control_glues(effects: dict[str, str]) -> dict[str, str]:
    """The glue key of each control (``detached``, ``determined``, ``oracle``, ``weight``) ->
    what it does to the router's cost (``effects``: control name -> ``claims.control_effect``);
    "not run in this profile" for a control that has none."""
    names = dict(zip(("detached", "determined", "oracle"), CONTROL_LABELS.values()))
    weight = [v for k, v in effects.items() if "λ" in k]
    out = {key: effects.get(name, "not run in this profile") for key, name in names.items()}
    out["weight"] = weight[0] if weight else "not run in this profile"
    return out


def oracle_accuracy(groups: dict[str, list[dict]] | None, recorded: dict | None) -> float:
    """The task-routed oracle's mean test exact match over seeds: from the control runs
    (``groups``: :func:`control_groups`) or from the record of benchmarks/variant_controls.py;
    NaN when neither has it."""
    name = CONTROL_LABELS["task_routed"]
    if groups and name in groups:
        return float(claims.cell_interval(groups[name]).mean)
    rows = [r for r in (recorded or {}).get("rows", []) if r["control"] == name]
    return float(rows[0]["accuracy"]["mean"]) if rows else float("nan")


def recorded_controls(recorded: dict | None, codes_variant, seeds, fig2) -> dict | None:
    """``benchmarks/variant_controls.py``'s record if it was measured on this variant (the same
    ``codes_variant``, seeds and A-Fig. 2 cell), else None: a table of another size is never
    shown as this profile's."""
    if recorded is None or codes_variant is None:
        return None
    same = (recorded.get("codes_variant") == dict(codes_variant)
            and list(recorded.get("seeds", [])) == list(seeds)
            and list(recorded.get("fig2", [])) == list(fig2))
    return recorded if same else None


def recorded_control_table(recorded: dict) -> pd.DataFrame:
    """:func:`control_table`'s columns from the record of ``benchmarks/variant_controls.py``."""
    def pp(d):
        return _interval_text(d["mean"], d["low"], d["high"], "+")

    return pd.DataFrame([
        {"control": r["control"],
         "test exact match, %": _interval_text(r["accuracy"]["mean"], r["accuracy"]["low"],
                                               r["accuracy"]["high"]),
         "− task router (pp)": pp(r["vs_router"]), "− CE (pp)": pp(r["vs_ce"]),
         "effect on the cost": r["effect"]} for r in recorded["rows"]]).set_index("control")


#: the power table's short column names of the verdict rules
RULE_NAMES = {"routing_diffuse": "diffuse", "routing_aligned": "aligned",
              "accuracy_comparable": "comparable", "accuracy_in_band": "in band",
              "active_parameters": "active params", "runs_converged": "converged"}


def power_pivot(table: list) -> pd.DataFrame:
    """What each rule says of each model (``table``: ``power.power_table``): rows the working
    model then each broken variant, columns the rules, each cell the verdict's badge and
    " (!)" where a rule that should have failed or abstained did not."""
    glyph = {**BADGES, "refused": "refused"}
    pt = pd.DataFrame([{"rule": RULE_NAMES[r.rule], "model": r.variant,
                        "verdict": glyph[r.verdict] + ("" if r.ok else " (!)")}
                       for r in table]).pivot(index="model", columns="rule",
                                              values="verdict")
    pt = pt.loc[["working model", *power.VARIANT_NAMES],
                [RULE_NAMES[r] for r in power.RULES if RULE_NAMES[r] in pt.columns]]
    pt.index.name, pt.columns.name = None, None          # rows: models; columns: rules
    return pt


def power_reasons(table: list) -> pd.DataFrame:
    """Every verdict of the power table with whether it had to fail or abstain, and why."""
    return pd.DataFrame([{"rule": r.rule, "model": r.variant, "verdict": r.verdict,
                          "must fail": r.must_fail, "must abstain": r.must_abstain,
                          "reason": r.reason} for r in table])
