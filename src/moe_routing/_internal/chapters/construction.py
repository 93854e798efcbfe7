"""The tables, figures and ledger lines of the construction chapter (A-Thm 4.1, 4.2).

The chapter builds the mixture of :mod:`moe_routing.construction` on a dataset of
:mod:`moe_routing.knowledge` and verifies it; what is here lays the results out: the constants
and accuracy tables, the routing and attention heatmaps, the expert-size sweep and its two
scatter plots, the margins of candidate word codes and the sentences the ledger keeps. Keeping
them out of the chapter leaves the reader the calls that build, verify and measure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.colors import BoundaryNorm
from matplotlib.ticker import MaxNLocator

from ...construction import build_moe
from ...construction.build import beta_for
from ...construction.sizes import expert_table
from ...knowledge import build_dataset
from ..plots import column_figsize, heatmap
from ..progress import Progress


def constants_table(rep, model) -> pd.DataFrame:
    """The constants of one built model (``rep``: its build report): the attention decay and
    leak, the unembedding scale, the entity-code dimension and coherence, the gate spread, the
    logit bounds, the router's fitted margin and the sizes -- what the proof's bounds are made
    of, to be read against the verification that follows."""
    lay = rep.layout
    return pd.DataFrame([
        ("ρ (head-1 decay)", rep.rho), ("η (head-2 leak bound)", rep.eta),
        ("λ = log(2/η)", rep.lam), ("β₂ = λT + log(2T/η)", rep.beta2),
        ("entity code dimension d_c", rep.d_code), ("coherence bound μ", rep.mu),
        ("measured coherence", rep.mu_measured),
        ("max gate spread s_k", max(rep.gate_spread)),
        ("v_min", rep.v_min), ("i_max", rep.i_max),
        ("router margin of the fit", rep.router_margin_fit),
        ("d_model", lay.d_model), ("experts", model.config.n_experts)],
        columns=["constant", "value"])


def accuracy_rows(ver, rep, ds, eps_list) -> list[dict]:
    """Per target ε: the unembedding scale β that the proof prescribes, the largest invalid
    mass over every distinct prefix, and whether it stays below ε (A-Thm 4.2's accuracy)."""
    return [dict(eps=e, beta=beta_for(rep, e, ds.vocab_size),
                 max_invalid=ver.max_invalid_by_eps[e],
                 min_valid_mass=1.0 - ver.max_invalid_by_eps[e],
                 holds=ver.max_invalid_by_eps[e] < e)
            for e in eps_list]


def accuracy_measured(rows, ver, ds) -> str:
    """The ledger's line for A-thm42-accuracy: the worst invalid mass at every ε."""
    return ("; ".join(f"ε={r['eps']:.0e}: max over {ver.n_prefixes} prefixes of "
                      f"P(invalid) = {r['max_invalid']:.2e}" for r in rows)
            + f" ({ds.n_tasks} tasks)")


def routing_figure(route_matrix):
    """The router's decisions as a heatmap: ``route_matrix`` (``(K+1, K+1)`` counts, row: the
    routing label -- task, last row shared prefixes --, column: the chosen expert, last the
    junction expert) normalised per row, so that routing by task is a bright diagonal."""
    R = route_matrix.astype(float)
    Rn = R / np.maximum(R.sum(1, keepdims=True), 1)
    fig, ax = plt.subplots(figsize=column_figsize(0.8))
    im = heatmap(ax, Rn, cmap="viridis", vmin=0, vmax=1)
    ax.set_xlabel("expert chosen by the router (last = junction)")
    ax.set_ylabel("routing label (task; last = shared)")
    fig.colorbar(im, ax=ax, label="share of distinct prefixes")
    return fig


def routing_counts(route, n_tasks: int) -> tuple[int, int, int, int]:
    """``(routed, determined, to_junction, shared)`` from the route matrix (``(K+1, K+1)``):
    task-determined prefixes sent to their task's expert out of all of them, and shared
    prefixes sent to the junction expert out of all of them."""
    K = n_tasks
    n_routed, n_det = int(np.trace(route[:K, :K])), int(route[:K].sum())
    n_junc, n_shared = int(route[K, -1]), int(route[K].sum())
    return n_routed, n_det, n_junc, n_shared


def reads_only_router_block(model, layout) -> bool:
    """Whether the router's input mask is zero outside the structural block
    ``layout.router_block``: a router that cannot see the entities cannot route by them."""
    mask = model.router.input_mask.numpy()
    rb = layout.router_block
    return bool((mask[:rb[0]] == 0).all() and (mask[rb[1]:] == 0).all())


def attention_figure(model, ds):
    """The two heads' attention on the first sentence of task 0, one heatmap per head (row:
    query position, column: key position, ticks: the tokens): head 1 spreads geometrically
    whatever the tokens, head 2 locks onto the subject -- the disentanglement of A-Thm 4.2."""
    i0 = int(np.nonzero(ds.task == 0)[0][0])
    n = int(ds.lengths[i0]) - 1
    with torch.no_grad():
        att = model(torch.as_tensor(ds.seqs[[i0], :n]),
                    return_internals=True).attn_weights[0]               # (heads, n, n)
    labels = [ds.tokenizer.vocab[t] for t in ds.seqs[i0, :n]]
    fig, axes = plt.subplots(2, 1, figsize=column_figsize(0.62, rows=2))
    for h, ax in enumerate(axes):
        im = heatmap(ax, att[h].numpy(), cmap="magma", vmin=0, vmax=1)
        ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=9)
        ax.set_yticks(range(n), labels, fontsize=9)
        ax.set_xlabel("attended position (key)")
        ax.set_ylabel("current position (query)")
        ax.set_title(f"head {h + 1}: "
                     + ("structure, $\\alpha_j \\propto \\rho^j$" if h == 0 else "subject"))
    fig.tight_layout()
    fig.colorbar(im, ax=axes, label="attention weight", shrink=0.6)
    return fig


def disentangle_measured(ver, rep) -> str:
    """The ledger's line for A-disentangle: each head's largest deviation against η."""
    return (f"head 1: max deviation across subjects at the same (template, position) = "
            f"{ver.head1_dev:.1e}; head 2: max deviation across templates for the same "
            f"subject = {ver.head2_dev_before_object:.1e} before the object and "
            f"{ver.head2_dev:.1e} after it (bound η = {rep.eta})")


def expert_size_sweep(sweep_relations: int, sweep_templates, sweep_pairs,
                      seed: int) -> pd.DataFrame:
    """Build the mixture (ε = 1e-4) on one sub-dataset of ``sweep_relations`` tasks per
    (templates, pairs) setting and return every task expert's sizes (one row each, with the
    setting): the expert-size bound is a statement per task, so it is checked across tasks of
    different shapes, not only on the main dataset."""
    sweep = []
    bar = Progress("expert-size sweep: sub-dataset",
                   len(sweep_templates) * len(sweep_pairs), every=0.0)
    for nt in sweep_templates:
        for npairs in sweep_pairs:
            sub = build_dataset(n_relations=sweep_relations, n_pairs=npairs,
                                n_templates=nt, seed=seed)
            _, r = build_moe(sub, eps=1e-4)
            for row in expert_table(r, sub):
                sweep.append(dict(row, n_templates_set=nt, n_pairs_set=npairs))
            bar(len(sweep_pairs) * sweep_templates.index(nt) + sweep_pairs.index(npairs) + 1,
                note=f"|T(k)| = {nt}, N = {npairs}")
    return pd.DataFrame(sweep)


def bound_figure(sw):
    """Neurons of each swept task expert against its own bound :math:`L_k|T(k)|+|\\Delta_k|`
    (``sw``: the sweep's frame), one discrete colour per template count: every point on or
    below the diagonal is an expert within its bound."""
    # |T(k)| is a count: one colour per integer, not a continuous scale
    counts = np.arange(sw.n_templates.min(), sw.n_templates.max() + 1)
    cmap = plt.get_cmap("viridis", len(counts))
    norm = BoundaryNorm(np.append(counts, counts[-1] + 1) - 0.5, cmap.N)
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    sc = ax.scatter(sw.bound_own, sw.neurons, c=sw.n_templates, cmap=cmap, norm=norm, s=30)
    lim = [0, sw.bound_own.max() * 1.05]
    ax.plot(lim, lim, "k--", lw=1, label="neurons = bound")
    ax.set_xlabel("task bound $L_k\\cdot|T(k)| + |\\Delta_k|$ (neurons)")
    ax.set_ylabel("neurons of the task's expert")
    cb = fig.colorbar(sc, ax=ax, label="templates of the task $|T(k)|$")
    if len(counts) <= 12:
        cb.set_ticks(counts)
    else:
        cb.locator = MaxNLocator(integer=True)
    cb.minorticks_off()
    ax.legend(loc="upper left")
    return fig


def additive_figure(sw):
    """The two kinds of neurons of each swept expert against what they count: syntactic
    neurons against the template tokens, semantic ones against the dictionary size -- the
    bound is additive because the two kinds are built separately."""
    fig, ax = plt.subplots(figsize=column_figsize(0.6))
    ax.scatter(sw.template_tokens, sw.syntactic, s=30, facecolors="none", edgecolors="C0",
               label="syntactic neurons vs $\\Sigma_\\tau |\\tau|$")
    ax.scatter(sw.n_pairs, sw.semantic, s=30, marker="x", color="C1",
               label="semantic neurons vs $|\\Delta_k|$")
    m = max(sw.template_tokens.max(), sw.n_pairs.max())
    ax.plot([0, m], [0, m], "k--", lw=1, label="$y = x$")
    ax.set_xlabel("$\\Sigma_\\tau |\\tau|$ (syntactic) or $|\\Delta_k|$ (semantic)")
    ax.set_ylabel("neurons")
    ax.legend(loc="upper left")
    return fig


def nested_text(nested) -> str:
    """What the nested datasets show, in words: the same tasks, the vocabulary and junction
    expert growing, and whether any task expert changed."""
    sizes = nested.sizes
    return (f"tasks identical across the nested datasets: {nested.same_tasks}\nvocabulary "
            + " → ".join(str(s.V) for s in sizes) + "\njunction expert "
            + " → ".join(str(s.junction) for s in sizes) + " neurons\n"
            f"semantic neurons unchanged: {nested.semantic_unchanged}\n"
            f"syntactic neurons never grow: {nested.syntactic_never_grows}\n"
            f"experts of identical size in every dataset: {nested.n_unchanged} of "
            f"{len(nested.common)}")


def memory_frame(nested):
    """``(mem, growth)``: the nested datasets' sizes with the live weights per
    :math:`V\\cdot d_\\text{model}` and in MB, and the exponent of the weights' growth in
    :math:`V` (a log-log fit; NaN with one dataset) -- nothing grows as :math:`V^2`."""
    mem = nested.size_frame()
    mem["params / (V·d_model)"] = mem.live_params / (mem.V * mem.d_model)
    mem["MB (float32)"] = mem.live_params * 4 / 2**20
    growth = (np.polyfit(np.log(mem.V), np.log(mem.live_params), 1)[0] if len(mem) > 1
              else float("nan"))
    return mem, growth


def valid_words_per_prefix(trie, n_words: int):
    """How many word (or special) tokens are valid next tokens at each prefix of the trie
    (``(n_nodes,)``): the :math:`k` of the coherence condition :math:`\\mu<1/(2k-1)`."""
    owner = np.repeat(np.arange(trie.n_nodes), np.diff(trie.next_indptr))
    return np.bincount(owner[trie.next_ids < n_words], minlength=trie.n_nodes)


def valid_word_sets(trie, n_words: int) -> list:
    """The distinct sets of valid next words over the prefixes (each an index array), the
    empty and the full set left out: the sets a word code's sum read-out must separate."""
    word_sets = set()
    for a, b in zip(trie.next_indptr[:-1], trie.next_indptr[1:]):
        ids = trie.next_ids[a:b]
        word_sets.add(tuple(sorted(ids[ids < n_words])))
    return [np.array(t) for t in word_sets if 0 < len(t) < n_words]


def code_row(code: str, C, word_sets) -> dict:
    """Smallest sum-read-out margin of unit codes C (n_words, d) over the valid sets, with
    the code's coherence and the factor 1/margin by which it scales β (inf: no margin)."""
    G = C @ C.T
    margin = min(float(G[t].sum(0)[t].min() - np.delete(G[t].sum(0), t).max())
                 for t in word_sets)
    coh = float(np.abs(G - np.eye(len(C))).max())
    return dict(code=code, d=C.shape[1], coherence=coh, min_margin=margin,
                beta_factor=1 / margin if margin > 0 else float("inf"))


def expert_size_measured(tab, sw, sweep_templates, sweep_pairs, nested, sizes_n) -> str:
    """The ledger's line for A-thm42-expert-size: the main experts against the bound, the
    sweep's additivity and the nested datasets' unchanged experts."""
    sem_same = nested.semantic_unchanged
    return (f"all {len(tab)} task experts within L·|T(k)| + N (max neurons "
            f"{tab.neurons.max()} vs bound {tab.bound.max()}); over {len(sw)} experts "
            f"of {len(sweep_templates)}×{len(sweep_pairs)} sub-datasets: semantic = "
            f"|Δ_k| {'always' if sem_same else 'not always'}, syntactic ≤ Σ|τ|; nested "
            f"datasets of {', '.join(map(str, sizes_n))} tasks: {nested.n_unchanged} of "
            f"{len(nested.common)} shared task experts identical, "
            + ("none larger" if nested.syntactic_never_grows else "some larger"))


def dense_text(drep, dtab, dver, dbuild_s: float) -> str:
    """The dense layer's build and certificate in words: its neurons as circuits plus a
    shared part, the neurons left uncertified at a node, and the work the certificate
    saved against evaluating the full layer at every prefix."""
    cs = dver.certificate
    return (f"dense FFN: {drep.expert_sizes[0]} neurons = Σ circuits "
            f"{int(dtab.neurons.sum())} + shared {drep.junction_neurons}\n"
            f"built in {dbuild_s:.1f} s, verified in {dver.seconds:.1f} s\n"
            f"neurons left uncertified at a structural node: at most {cs.max_candidates}, "
            f"mean {cs.mean_candidates:.1f} (of {cs.n_units})\n"
            f"… of them outside the node's own circuit: {cs.foreign_candidates}\n"
            f"syntactic block deviation: {cs.max_syntactic_deviation:.1e} "
            f"(tolerance {cs.tol:.0e})\n"
            f"neuron evaluations done: {100 * cs.evaluated_fraction:.1f} % of prefixes × "
            f"neurons; the full layer at every prefix would be "
            f"{2 * dver.n_prefixes * cs.n_units * (cs.n_inputs + cs.n_outputs):.1e} flops")


def dense_rows(dver, eps_list) -> list[dict]:
    """Per target ε: the dense layer's largest invalid mass and whether it is below ε."""
    return [dict(eps=e, max_invalid=dver.max_invalid_by_eps[e],
                 holds=dver.max_invalid_by_eps[e] < e) for e in eps_list]


def moe_vs_dense(ds, rep, pc, dsd, drep, pcd) -> pd.DataFrame:
    """The mixture (A-Thm 4.2) beside the dense layer (A-Thm 4.1): neurons stored and run per
    token, parameters in all and active per token (``pc``, ``pcd``: their parameter counts)."""
    return pd.DataFrame([
        dict(layer="MoE (A-Thm 4.2)", tasks=ds.n_tasks, ffn_neurons=sum(rep.expert_sizes),
             neurons_run_per_token=max(rep.expert_sizes), params_total=pc["total"],
             params_active_per_token=pc["active_max"]),
        dict(layer="dense (A-Thm 4.1)", tasks=dsd.n_tasks, ffn_neurons=drep.expert_sizes[0],
             neurons_run_per_token=drep.expert_sizes[0], params_total=pcd["total"],
             params_active_per_token=pcd["active_max"])])


def dense_measured(dsd, drep, dtab, dver, drows) -> str:
    """The ledger's line for A-thm41-dense: circuits against their bounds, the silence
    certificate's exceptions and the worst invalid mass at every ε."""
    cs = dver.certificate
    return (f"{dsd.n_tasks} tasks, one FFN of {drep.expert_sizes[0]} neurons: circuits "
            f"of {dtab.neurons.min()}–{dtab.neurons.max()} neurons (bounds "
            f"{dtab.bound.min()}–{dtab.bound.max()}); at every one of the "
            f"{dver.n_prefixes} prefixes every neuron outside the prefix's circuit is "
            f"certified silent "
            f"({cs.foreign_candidates} exceptions); max P(invalid) "
            + ", ".join(f"{r['max_invalid']:.2e} (ε = {r['eps']:.0e})" for r in drows))
