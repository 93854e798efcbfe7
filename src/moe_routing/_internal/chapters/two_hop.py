"""What the two-hop chapter (``notebooks/two_hop.md``) draws and tabulates.

The chapter composes two facts (``Δ₂ ∘ Δ₁``), builds and verifies a two-layer construction
that answers the compositions with experts additive in the single-hop tasks, and trains the
library's model with one and two layers on the same data.  The numbers come from
:mod:`moe_routing.knowledge.two_hop`, :mod:`moe_routing.construction` and
:mod:`moe_routing.experiments.two_hop`; this module only lays them out: the frames the chapter
shows, the strings it puts into its ledger and the figure it draws, so that each chapter cell
is the call that makes its table or figure.  The verdicts, the glued numbers and the ledger
entries stay in the chapter.

A *run* below is a result dict of :func:`~moe_routing.experiments.two_hop.run_two_hop_grid`;
``cells`` is the frame of :func:`~moe_routing.experiments.two_hop.two_hop_cells` (one row per
number of layers and objective, seeds pooled).
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...knowledge.two_hop import TwoHopTask
from ...knowledge.two_hop_dataset import MixedKnowledgeDataset
from ..display import share_interval
from ..plots import column_figsize, heatmap
from ..verdicts.two_hop import hop_blind_reuse

#: objective -> its name in the figure
NAMES = {"ce": "CE", "ce+lb": "CE + LB", "ce+router": "CE + task router"}


# ---------------------------------------------------------------------------------------------
# the tasks and the split


def chain_table(chains) -> pd.DataFrame:
    """One row per real chain of the knowledge base: the kinds of its subject, middle entity
    and object, its composed facts, how many send a subject to itself (``identity``) and how
    many answer with their middle entity (``o = middle``): the compositions a copy answers."""
    return pd.DataFrame([dict(chain=c.name, subject=c.kinds[0], middle=c.kinds[1],
                              object=c.kinds[2], compositions=c.n_compositions,
                              identity=c.n_identity, **{"o = middle": c.n_middle})
                         for c in chains])


def task_table(ds, held) -> pd.DataFrame:
    """The dataset's tasks: kind (single- or two-hop), templates, facts, and how many of the
    held-out compositions ``held`` each task holds."""
    return pd.DataFrame([dict(task=t.name,
                              kind="two-hop" if isinstance(t, TwoHopTask) else "single-hop",
                              templates=len(t.templates), facts=t.n_pairs,
                              held_out=sum(h.task == t.name for h in held))
                         for t in ds.tasks])


def shortcut_table(ds, held, parts) -> pd.DataFrame:
    """Each two-hop task's held-out compositions read against both shortcuts: its majority
    answer (the most frequent object among the task's sentences in ``parts.train``) and
    copying the middle entity, as the share of held-out compositions each answers."""
    rows = []
    for k_, t_ in enumerate(ds.tasks):
        if not isinstance(t_, TwoHopTask):
            continue
        subjects_ = list(t_.dictionary)
        trained = [t_.dictionary[subjects_[ds.pair[i]]] for i in parts.train
                   if ds.task[i] == k_]
        major = pd.Series(trained).value_counts().index[0]
        mine = [h for h in held if h.task == t_.name]
        rows.append({"task": t_.name, "held-out compositions": len(mine),
                     "majority answer": major,
                     "answered by the majority (%)":
                         round(100 * np.mean([h.object == major for h in mine])),
                     "answered by the middle entity (%)":
                         round(100 * np.mean([h.object == h.middle for h in mine]))})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# the construction


def invalid_mass_table(ver) -> pd.DataFrame:
    """Per ε, largest first: the largest invalid mass over every prefix against ε/2."""
    return pd.DataFrame([dict(eps=f"{e:.0e}", **{"max P(invalid) over all prefixes": f"{m:.2e}",
                                                 "bound ε/2": f"{e / 2:.0e}"})
                         for e, m in sorted(ver.max_invalid_by_eps.items(), reverse=True)])


def construction_measured(ver) -> str:
    """What the construction's ledger entry measured: prefixes, largest invalid mass per ε,
    facts and held-out sentences answered, and the share routed as built in each layer."""
    return (f"{ver.n_prefixes} prefixes, max P(invalid) "
            + ", ".join(f"{m:.1e} (ε={e:.0e})" for e, m in ver.max_invalid_by_eps.items())
            + f"; facts {100 * ver.fact_accuracy:.0f} %, held-out sentences "
            f"{100 * ver.held_out_accuracy:.0f} % of {ver.n_held_out}; routes "
            + "/".join(f"{100 * r:.0f} %" for r in ver.routed_ok))


def without_second_hop_fact(ds) -> list:
    """The tasks of ``ds`` with one composed fact's second hop deleted: the fact of the middle
    entity of the first two-hop task's first subject goes from that task's second hop, so
    (H-hop) fails."""
    two = next(t for t in ds.tasks if isinstance(t, TwoHopTask))
    s0 = next(iter(two.dictionary))
    middle0 = two.middle(s0)
    return [dataclasses.replace(t, dictionary={k: v for k, v in t.dictionary.items()
                                               if k != middle0})
            if t.name == two.second.name else t for t in ds.tasks]


def size_table(rep) -> pd.DataFrame:
    """Each expert's neurons against the theorem's formula: layer 1 = syntactic neurons +
    facts, layer 2 = facts if the task is a second hop (else none), both checked per row."""
    sizes = pd.DataFrame(rep.size_table())
    sizes["layer 1 = syntactic + facts"] = sizes.layer1 == sizes.syntactic + sizes.n_pairs
    sizes["layer 2 = facts if second hop"] = (
        sizes.layer2 == np.where(sizes.second_hop, sizes.n_pairs, 0))
    return sizes.rename(columns={"n_pairs": "facts |Δₖ|", "syntactic": "syntactic neurons",
                                 "layer1": "layer 1 neurons", "layer2": "layer 2 neurons",
                                 "first_hop": "a first hop", "second_hop": "a second hop"})


def cut_compositions(ds, cut_to: int, seed: int) -> MixedKnowledgeDataset:
    """``ds`` with each composed dictionary cut to its first ``cut_to`` facts, the same hops:
    additive experts must not change."""
    cut_tasks = [dataclasses.replace(t, dictionary=dict(list(t.dictionary.items())[:cut_to]))
                 if isinstance(t, TwoHopTask) else t for t in ds.tasks]
    return MixedKnowledgeDataset(cut_tasks, seed=seed)


def n_composed(ds) -> int:
    """The composed facts of ``ds``: the facts of its two-hop tasks."""
    return sum(t.n_pairs for t in ds.tasks if isinstance(t, TwoHopTask))


def one_layer_table(cmp: dict, ds) -> pd.DataFrame:
    """Per two-hop task: its composed facts, the distinct middle entities they use, and the
    neurons of the expert the one-layer construction needs for it (``cmp`` of
    ``compare_sizes``)."""
    middles = {t.name: len({t.middle(s) for s in t.dictionary}) for t in ds.tasks
               if isinstance(t, TwoHopTask)}
    return pd.DataFrame([dict(task=name, **{"composed facts": v["composed"],
                                            "distinct middle entities": middles[name],
                                            "one-layer expert (neurons)": v["one_layer_expert"]})
                         for name, v in cmp["per_two_hop"].items()])


# ---------------------------------------------------------------------------------------------
# training


def _pm(cells, name: str) -> list[str]:
    return [share_interval(m, h, 1) for m, h in zip(cells[name], cells[f"{name}_half_width"])]


def score_table(cells) -> pd.DataFrame:
    """Exact match (%) per cell, mean ± 95 % half-width: single-hop test facts, seen
    compositions in an unseen template, held-out compositions, and the held-out score on the
    queries whose answer is not the majority one."""
    return pd.DataFrame({"layers": cells.n_layers, "objective": cells.objective,
                         "single-hop": _pm(cells, "single_hop"),
                         "seen compositions": _pm(cells, "two_hop_seen"),
                         "held-out": _pm(cells, "held_out"),
                         "held-out, other answers": [f"{100 * v:.1f}"
                                                     for v in cells.held_out_non_majority]})


def witness_table(cells) -> pd.DataFrame:
    """Per cell: training exact match on the single-hop facts, with the experts and with
    every expert's output set to zero (routing unchanged) -- the experts hold the facts where
    the second falls far below the first."""
    return pd.DataFrame({"layers": cells.n_layers, "objective": cells.objective,
                         "single-hop training facts (%)": _pct(cells.train_single_hop),
                         "experts off (%)": _pct(cells.train_single_hop_experts_off),
                         "held by the experts (points)": _pct(
                             cells.train_single_hop - cells.train_single_hop_experts_off)})


def routing_control_table(chapter, control, verdicts: dict) -> pd.DataFrame:
    """The routing of CE's two-layer cell on the chapter's two-hop templates (``chapter``) and
    on the word-disjoint ones (``control``), rows of :func:`with_hop_blind`'s frame, with each
    one's verdict (``verdicts``: templates' name -> its rule's Verdict, in that order)."""
    rows = []
    for (name, verdict), c in zip(verdicts.items(), (chapter, control)):
        rows.append({"two-hop templates": name,
                     "layer 1 → hop-1 expert (%)": share_interval(
                         c.l1_hop1_reuse, c.l1_hop1_reuse_half_width),
                     "hop-blind (%)": f"{100 * c.l1_blind:.0f}",
                     "layer 2 → hop-2 expert (%)": share_interval(
                         c.l2_hop2_reuse, c.l2_hop2_reuse_half_width),
                     "hop-blind (%) ": f"{100 * c.l2_blind:.0f}",
                     "seeds": int(c.n_seeds), "verdict": verdict.verdict})
    return pd.DataFrame(rows)


def _blind_reuse(r_, layer: int, ds) -> float:
    """What a router blind to the hop would reuse at this layer of run r_."""
    at = r_["routing"][layer - 1]
    dominant = [at["dominant_expert"].get(t.name, 0) for t in ds.tasks]
    return hop_blind_reuse(at[f"hop{layer}"]["summary"]["counts"], dominant)


def _cell_blind(results, ds, n_layers: int, objective: str, layer: int) -> float:
    runs = [r_ for r_ in results if r_["config"]["model"]["n_layers"] == n_layers
            and r_["config"]["objective"] == objective]
    return (float(np.mean([_blind_reuse(r_, layer, ds) for r_ in runs]))
            if layer <= n_layers else float("nan"))


def with_hop_blind(cells, results, ds) -> pd.DataFrame:
    """``cells`` with the reuse a router blind to the hop reaches at layers 1 and 2
    (``l1_blind``, ``l2_blind``; mean over the cell's runs, NaN for a layer the model lacks):
    the level reuse must beat to count as routing by hop, not 1/E."""
    return cells.assign(
        l1_blind=[_cell_blind(results, ds, n, o, 1)
                  for n, o in zip(cells.n_layers, cells.objective)],
        l2_blind=[_cell_blind(results, ds, n, o, 2)
                  for n, o in zip(cells.n_layers, cells.objective)])


def _pct(values) -> list[str]:
    return ["–" if np.isnan(v) else f"{100 * v:.0f}" for v in values]


def _pct_pm(values, halves) -> list[str]:
    return [share_interval(v, h) for v, h in zip(values, halves)]


def reuse_table(cells) -> pd.DataFrame:
    """Per cell and layer: the share of two-hop queries sent to the expert the hop's own
    single-hop queries use most (± 95 % half-width), beside the hop-blind level."""
    return pd.DataFrame({"layers": cells.n_layers, "objective": cells.objective,
                         "layer 1 → hop-1 expert (%)": _pct_pm(cells.l1_hop1_reuse,
                                                               cells.l1_hop1_reuse_half_width),
                         "layer 1, hop-blind (%)": _pct(cells.l1_blind),
                         "layer 2 → hop-2 expert (%)": _pct_pm(cells.l2_hop2_reuse,
                                                               cells.l2_hop2_reuse_half_width),
                         "layer 2, hop-blind (%)": _pct(cells.l2_blind)})


#: what the held-out verdict means for composition, in a sentence of the chapter's text
_COMPOSITION_READING = {
    "our extension": "Above the control and both shortcuts: training composes held-out "
                     "facts here.",
    "not supported": "Resolvably no better than a control or a shortcut: where these models "
                     "score on held-out queries they give what the shortcut gives. That two "
                     "layers *can* compose is the construction's result; that training finds "
                     "such a solution from these data is not borne out.",
    "inconclusive": "The runs cannot tell composition from the shortcuts here.",
}


def composition_reading(verdict: str) -> str:
    """The chapter's sentence for the held-out verdict (one of three; a rule's other words
    are refused, not read as one of these)."""
    if verdict not in _COMPOSITION_READING:
        raise ValueError(f"verdict = {verdict!r} is not allowed; accepted: "
                         + ", ".join(map(repr, _COMPOSITION_READING)))
    return _COMPOSITION_READING[verdict]


def paired(d) -> str:
    """A paired difference of exact match as '+x.x pp [low, high]'."""
    return f"{100 * d.mean:+.1f} pp [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def difference_table(diffs: dict) -> pd.DataFrame:
    """The two-layer task-router model's held-out exact match against the one-layer control
    and both shortcuts: paired difference (95 % interval) and p-value."""
    return pd.DataFrame([{"2 layers, CE + task router against": name,
                          "difference of held-out exact match": paired(diffs[key]),
                          "p-value": f"{diffs[key].p_value:.2g}"}
                         for name, key in (("1 layer, CE + task router", "control"),
                                           ("the majority answer", "majority"),
                                           ("copying the middle entity", "copy_middle"))])


def routing_heatmaps(results, seed: int, ds):
    """Where the two-layer models of ``seed`` send the two-hop queries at the position that
    predicts the object: per objective (row: CE, CE + task router) and layer (column), the
    share of each hop task's queries (row of a heatmap: the layer's hop) sent to each expert
    (column), on one colour scale from 0 to 1.  The designated expert of each row (its hop
    task's, ``task mod E`` as the task-router loss supervises) is outlined, so that routing by
    hop reads as outlined cells lit.  Laid out by matplotlib's constrained layout at the
    heatmaps' own aspect, so that no band of white separates the rows and each column's task
    names keep clear of the panel to their left."""
    from matplotlib.patches import Rectangle

    first = {}
    for r_ in results:
        c_ = r_["config"]
        if c_["model"]["n_layers"] == 2 and c_["seed"] == seed:
            first[c_["objective"]] = r_
    fig, axes = plt.subplots(2, 2, figsize=column_figsize(0.48), sharex=True,
                             layout="constrained")
    for row, obj in enumerate(("ce", "ce+router")):
        for layer in (1, 2):
            ax = axes[row, layer - 1]
            summary = first[obj]["routing"][layer - 1][f"hop{layer}"]["summary"]
            counts = np.asarray(summary["counts"], float)            # (hop task, expert)
            hop = np.flatnonzero(counts.sum(1) > 0)                  # (rows,) task ids
            share = counts[hop] / counts[hop].sum(1, keepdims=True)  # (rows, expert)
            im = heatmap(ax, share, cmap="viridis", vmin=0, vmax=1)
            for i, k in enumerate(hop):                              # the designated expert
                ax.add_patch(Rectangle((k % counts.shape[1] - 0.5, i - 0.5), 1, 1,
                                       fill=False, ec="white", lw=1.6))
                ax.add_patch(Rectangle((k % counts.shape[1] - 0.5, i - 0.5), 1, 1,
                                       fill=False, ec="black", lw=0.6, ls=(0, (2, 2))))
            ax.set_title(f"{NAMES[obj]}, layer {layer}", fontsize=8)
            ax.set_yticks(range(len(hop)), [f"hop {layer}: {ds.tasks[k].name}" for k in hop],
                          fontsize=7)
            ax.set_xlabel("expert" if row == 1 else "")
    fig.colorbar(im, ax=axes, label="share of the two-hop queries", shrink=0.8)
    return fig


def reuse_measured(c, templates: str) -> str:
    """What the routing ledger entry measured for one cell ``c`` (a row of ``cells``) on the
    two-hop ``templates`` it names: the reuse of the hop's expert per layer with its
    half-width, beside the hop-blind level."""
    return (f"CE, 2 layers, {templates}: reuse of the hop's expert "
            f"{share_interval(c.l1_hop1_reuse, c.l1_hop1_reuse_half_width)} % (layer 1; "
            f"hop-blind {100 * c.l1_blind:.0f} %), "
            f"{share_interval(c.l2_hop2_reuse, c.l2_hop2_reuse_half_width)} % (layer 2; "
            f"hop-blind {100 * c.l2_blind:.0f} %), {int(c.n_seeds)} seeds")
