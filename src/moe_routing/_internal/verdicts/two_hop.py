"""Rules of the two-hop chapter (ours, beyond paper A): composition in a two-layer MoE.

Every claim here is the book's own: "our extension" when it holds, "not supported" when the
evidence says it does not, "inconclusive" when the evidence cannot decide (nothing to test,
an interval that straddles the threshold), and "holds by definition" for the one statement
that the implementation makes true by construction (:func:`additive_sizes`).  The
construction's checks are exhaustive -- every distinct prefix, every sentence -- so its rules
compare exact counts and the proven bound, not estimates; the training rules compare paired
differences (:func:`moe_routing.experiments.two_hop.runs.held_out_differences`: clustered by
composition, paired by seed), and routing shares, with their intervals, with what a router
blind to the hop reaches (:func:`hop_blind_reuse`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..display import share_interval
from ..validation import flag, integer, number, require
from . import rule
from .construction import check_eps, fmt_eps
from .training import _difference, _dv

OURS = "our extension"
NOT = "not supported"       # a claim of the book that the evidence does not support
UNDECIDED = "inconclusive"  # the evidence cannot decide, in either direction


@rule
def two_layer_construction(max_invalid_by_eps: Mapping[float, float], n_prefixes: int,
                           n_misrouted: int, n_wrong_facts: int, n_facts: int,
                           n_wrong_held_out: int, n_held_out: int):
    """X-two-hop-construction: the two-layer construction puts mass > 1 − ε on the valid next
    tokens at every prefix, routes every prefix as built in both layers, and answers every fact
    -- every composed fact, which no expert stores.  The build never reads the split, so the
    held-out compositions are composed facts like any other: they are counted apart only to
    show that no held-out sentence is an exception.

    * our extension — P(invalid) < ε at every prefix for every ε tested, no prefix misrouted,
      every fact and every held-out composition the argmax at its slot;
    * partly — all of that, but the bound holds for some ε only;
    * inconclusive — every check passed, but the dataset holds no held-out composition: no
      composed fact was asked apart (composition untested);
    * not supported — a prefix misrouted, a fact or a held-out composition wrong, or the bound
      fails for every ε.
    """
    n_prefixes = integer("n_prefixes", n_prefixes, low=1)
    n_facts = integer("n_facts", n_facts, low=1)
    n_held_out = integer("n_held_out", n_held_out, low=0)
    n_misrouted = integer("n_misrouted", n_misrouted, low=0, high=n_prefixes)
    n_wrong_facts = integer("n_wrong_facts", n_wrong_facts, low=0, high=n_facts)
    n_wrong_held_out = integer("n_wrong_held_out", n_wrong_held_out, low=0, high=n_held_out)
    held, failed = check_eps(max_invalid_by_eps)
    worst = ", ".join(f"{m:.2e} (ε={e:.0e})" for e, m in max_invalid_by_eps.items())
    if n_misrouted or n_wrong_facts or n_wrong_held_out or not held:
        return NOT, (
            f"{n_misrouted} of {n_prefixes} prefixes misrouted, {n_wrong_facts} of {n_facts} "
            f"facts and {n_wrong_held_out} of {n_held_out} held-out sentences wrong; "
            f"max P(invalid): {worst}")
    if failed:
        return "partly", (f"every fact right, but P(invalid) < ε only for ε = {fmt_eps(held)}, "
                          f"not {fmt_eps(failed)}: {worst}")
    if n_held_out == 0:
        return UNDECIDED, ("every prefix within ε and every fact right, but no composition is "
                           "held out: composition untested")
    return OURS, (f"max over {n_prefixes} prefixes of P(invalid) < ε for all {len(held)} ε "
                  f"({worst}); all {n_facts} facts and all {n_held_out} held-out sentences "
                  "answered, no prefix misrouted")


@rule
def additive_sizes(sizes: Sequence[int], sizes_cut: Sequence[int], composed: int,
                   composed_cut: int):
    """X-two-hop-sizes: no expert of the two-layer construction depends on a composed
    dictionary -- its sizes are additive in the single-hop tasks.

    This holds by definition: the build counts a layer-2 expert's neurons from the second hop's
    dictionary and a layer-1 expert's from its task's dictionary and templates, and never reads
    a composed dictionary.  What is checked is that the implementation does what it says.

    ``sizes``: every expert's neurons (both layers) for the dataset; ``sizes_cut``: the same for
    the dataset whose two-hop dictionaries are cut to a subset (same hops, same templates);
    ``composed`` / ``composed_cut``: the composed facts of each.  Exact counts:

    * holds by definition — the composed facts differ and every expert has the same size;
    * inconclusive — nothing was cut (``composed_cut == composed``): the check did not run;
    * not supported — some expert changes size with the composed dictionaries (a bug: the
      implementation reads what its definition says it does not).
    """
    sizes = [integer("sizes", s, low=0) for s in sizes]
    sizes_cut = [integer("sizes_cut", s, low=0) for s in sizes_cut]
    require(len(sizes) == len(sizes_cut) and len(sizes) > 0, "sizes_cut", sizes_cut,
            f"one size per expert, as in sizes ({len(sizes)})")
    composed = integer("composed", composed, low=1)
    composed_cut = integer("composed_cut", composed_cut, low=0, high=composed)
    changed = [i for i, (a, b) in enumerate(zip(sizes, sizes_cut)) if a != b]
    if changed:
        i = changed[0]
        return NOT, (f"{len(changed)} experts change size with the composed "
                                  f"dictionaries ({composed} → {composed_cut} facts), e.g. "
                                  f"expert {i}: {sizes[i]} → {sizes_cut[i]} neurons")
    if composed_cut == composed:
        return UNDECIDED, (f"the composed dictionaries were not cut ({composed} facts): "
                           "untested")
    return "holds by definition", (
        f"layer-2 neurons are counted from the second hops' dictionaries, so no expert can "
        f"depend on a composed one; checked: all {len(sizes)} experts keep their size "
        f"({sum(sizes)} neurons) when the composed facts go from {composed} to {composed_cut}")


@rule
def held_out_composes(vs_control, vs_majority, vs_copy_middle, n_compositions: int,
                      hops_learned: float, *, min_learned: float = 0.5,
                      converged: bool = True):
    """X-two-hop-held-out: a two-layer MoE transformer trained with the task-router loss
    answers held-out compositions more often than its one-layer control and than both
    shortcuts a query allows -- the majority answer of its task and the first hop's object
    (copy the middle entity).

    Each of the first three arguments is a paired difference ``model − other`` of held-out
    exact match (a :class:`~moe_routing.experiments.accuracy.PairedDifference` or
    ``(mean, low, high)``, fractions; :func:`~moe_routing.experiments.two_hop.runs.
    held_out_differences`: clustered by composition, paired by seed); ``n_compositions``:
    the held-out compositions per run; ``hops_learned``: the lower of the two cells' training
    exact match on the single-hop sentences (the hops a composition needs).

    * inconclusive — first, when the runs had not ``converged`` (a held-out score still
      moving decides nothing), or when ``hops_learned`` < ``min_learned`` (0.5): models that
      did not learn the hops can neither show nor refute composing them;
    * our extension — all three intervals lie above 0 (the model beats each, resolved);
    * not supported — some interval lies at or below 0: the model is resolvably no better than
      the control or a shortcut (an exact tie, with no spread, counts: it is no better);
    * inconclusive — no interval at or below 0, but some straddles it (a difference the
      queries and seeds cannot resolve).
    """
    n_compositions = integer("n_compositions", n_compositions, low=1)
    hops_learned = number("hops_learned", hops_learned, low=0.0, high=1.0)
    min_learned = number("min_learned", min_learned, low=0.0, high=1.0)
    d = {name: _difference(name, v) for name, v in (
        ("vs_control", vs_control), ("vs_majority", vs_majority),
        ("vs_copy_middle", vs_copy_middle))}
    label = {"vs_control": "the one-layer control", "vs_majority": "the majority answer",
             "vs_copy_middle": "copying the middle entity"}
    short = {"vs_control": "control", "vs_majority": "majority", "vs_copy_middle": "middle"}
    txt = ("held-out exact match, model − " + ", − ".join(f"{short[k]} {_dv(v)}"
                                                         for k, v in d.items())
           + f" ({n_compositions} held-out compositions)")
    if not flag("converged", converged):
        return UNDECIDED, txt + ": the runs had not converged (X-two-hop-converged)"
    if hops_learned < min_learned:
        return UNDECIDED, txt + (f": the models learned too little (single-hop training exact "
                                 f"match {100 * hops_learned:.0f} % < "
                                 f"{100 * min_learned:.0f} %)")
    worse = [k for k, v in d.items() if v[2] <= 0]
    if worse:
        return NOT, txt + ": resolvably no better than " + " and ".join(label[k] for k in worse)
    if all(v[1] > 0 for v in d.values()):
        return OURS, txt + ": above the control and both shortcuts, resolved"
    open_ = [k for k, v in d.items() if v[1] <= 0]
    return UNDECIDED, txt + ": not resolved against " + " and ".join(label[k] for k in open_)


@rule
def depth_composes(two_minus_one, hops_learned: float, *, min_learned: float = 0.5,
                   converged: bool = True):
    """X-two-hop-generalise: with one layer per hop, a two-layer model answers held-out
    compositions better than a one-layer model trained with the same objective.

    ``two_minus_one``: the paired difference (2 layers − 1 layer) of held-out exact match
    (a PairedDifference or ``(mean, low, high)``, clustered by composition, paired by seed);
    ``hops_learned`` as in :func:`held_out_composes`.

    * inconclusive — first, when the runs had not ``converged`` or ``hops_learned`` <
      ``min_learned`` (0.5);
    * our extension — the interval lies above 0;
    * not supported — it lies at or below 0 (two layers resolvably no better);
    * inconclusive — it straddles 0.
    """
    d = _difference("two_minus_one", two_minus_one)
    hops_learned = number("hops_learned", hops_learned, low=0.0, high=1.0)
    min_learned = number("min_learned", min_learned, low=0.0, high=1.0)
    txt = f"held-out exact match, 2 layers − 1 layer {_dv(d)}"
    if not flag("converged", converged):
        return UNDECIDED, txt + ": the runs had not converged (X-two-hop-converged)"
    if hops_learned < min_learned:
        return UNDECIDED, txt + (f": the models learned too little (single-hop training exact "
                                 f"match {100 * hops_learned:.0f} % < "
                                 f"{100 * min_learned:.0f} %)")
    if d[1] > 0:
        return OURS, txt + ": resolved above 0"
    if d[2] <= 0:
        return NOT, txt + ": two layers are resolvably no better"
    return UNDECIDED, txt + ": the interval straddles 0"


def hop_blind_reuse(counts, dominant) -> float:
    """The reuse that a router blind to the hop reaches: what :func:`hop_by_hop` must beat.

    ``counts``: (hop task × expert) routing counts of the two-hop queries at one layer, each
    query counted in the row of its hop's task; ``dominant``: per row, the expert that task's
    single-hop queries use most at that layer (any value for a row without queries).  A router
    that ignores the hop sends every two-hop query to expert e with the same share q(e), the
    share of all two-hop queries that e receives, so its reuse is Σ_k (n_k / N) q(dominant_k).
    This, not 1/E, is the level of no evidence: a collapsed router (every query to one expert,
    which then dominates every task) has reuse 1 and so does its hop-blind version.
    """
    c = np.asarray(counts, dtype=float)
    require(c.ndim == 2 and c.shape[0] >= 1 and c.shape[1] >= 1 and (c >= 0).all()
            and c.sum() > 0, "counts", c.shape if c.ndim else c,
            "a (hop task × expert) matrix of non-negative counts with at least one query")
    require(len(dominant) == c.shape[0], "dominant", dominant,
            f"one expert per row of counts ({c.shape[0]})")
    rows = np.flatnonzero(c.sum(1) > 0)
    for k in rows:
        integer(f"dominant[{k}]", dominant[k], low=0, high=c.shape[1] - 1)
    n = c.sum()
    share = c.sum(0) / n                                                    # q(e)
    return float(sum(c[k].sum() / n * share[int(dominant[k])] for k in rows))


@rule
def hop_by_hop(l1_reuse: float, l2_reuse: float, n_experts: int, l1_blind: float,
               l2_blind: float, l1_half: float, l2_half: float, hops_learned: float,
               strong: float = 0.9, margin: float = 0.1, min_learned: float = 0.5):
    """X-two-hop-routing: a two-layer model trained *without* router supervision routes hop by
    hop -- layer 1 sends a two-hop query to the expert its first hop's single-hop queries use,
    layer 2 to the expert of its second hop's.

    ``l1_reuse`` / ``l2_reuse``: those shares (mean over seeds) at the object-predicting
    position, ``l1_half`` / ``l2_half`` the half-widths of their intervals (seeds and
    compositions, :func:`~moe_routing.experiments.two_hop.runs.two_hop_cells`); ``l1_blind`` /
    ``l2_blind``: what a router blind to the hop reaches at each layer
    (:func:`hop_blind_reuse`, mean over seeds, taken as known).  A layer's level of no evidence
    is the larger of that and 1/``n_experts``: reuse is high for a router that sends
    everything to one expert, hop or no hop.  A layer is *above* when its whole interval lies
    more than ``margin`` (0.1) above its level, *within* when its whole interval lies no more
    than ``margin`` above it, and *undecidable* when its level leaves no room (level + margin
    ≥ 1: a hop-blind router already reaches it) or its interval straddles level + margin.

    * inconclusive — first, when ``hops_learned`` (the model's training exact match on the
      single-hop sentences) < ``min_learned`` (0.5): the routing of a model that has not
      learned the hops says nothing about how it would route them;
    * our extension — both layers above, both shares ≥ ``strong`` (0.9);
    * partly — both above, not both ≥ ``strong``;
    * not supported — a layer within (hop-blind routing explains it);
    * inconclusive — otherwise.

    What no share can tell: routing by the hop's *task* from routing by a word the hop's
    templates and the two-hop templates share (the reuse counts where a query goes, not why).
    """
    n_experts = integer("n_experts", n_experts, low=2)
    for name, v in (("l1_reuse", l1_reuse), ("l2_reuse", l2_reuse), ("l1_blind", l1_blind),
                    ("l2_blind", l2_blind), ("strong", strong), ("margin", margin),
                    ("hops_learned", hops_learned), ("min_learned", min_learned)):
        number(name, v, low=0.0, high=1.0)
    # a half-width may exceed 1: two seeds' t quantile is 12.7 (the interval then straddles)
    for name, v in (("l1_half", l1_half), ("l2_half", l2_half)):
        number(name, v, low=0.0)
    chance = 1.0 / n_experts
    reuse, half = (float(l1_reuse), float(l2_reuse)), (float(l1_half), float(l2_half))
    level = (max(chance, float(l1_blind)), max(chance, float(l2_blind)))
    # a share's interval cut at 0 % and 100 % (two seeds' Student quantile makes it wider)
    txt = (f"reuse of the hop's expert: layer 1 {share_interval(l1_reuse, l1_half)} % "
           f"(hop-blind {100 * l1_blind:.0f} %), layer 2 {share_interval(l2_reuse, l2_half)} % "
           f"(hop-blind {100 * l2_blind:.0f} %); chance {100 * chance:.0f} %")
    if hops_learned < min_learned:
        return UNDECIDED, txt + (f": the model learned too little (single-hop training exact "
                                 f"match {100 * hops_learned:.0f} % < "
                                 f"{100 * min_learned:.0f} %)")
    state = []
    for r, h, lv in zip(reuse, half, level):
        if lv + margin >= 1:
            state.append("no room")
        elif r - h - lv > margin:
            state.append("above")
        elif r + h - lv <= margin:
            state.append("within")
        else:
            state.append("straddles")
    if "within" in state:
        which = " and ".join(f"layer {i + 1}" for i, x in enumerate(state) if x == "within")
        return NOT, (txt + f": {which} within {100 * margin:.0f} points of what a router "
                           "blind to the hop reaches")
    if state == ["above", "above"]:
        if min(reuse) >= strong:
            return OURS, txt + f": both ≥ {100 * strong:.0f} % and above hop-blind routing"
        return "partly", txt + ": above hop-blind routing, not hop by hop throughout"
    why = "; ".join(f"layer {i + 1}: " + ("a router blind to the hop leaves no room above it"
                                         if x == "no room" else
                                         f"the interval straddles hop-blind + "
                                         f"{100 * margin:.0f} points")
                    for i, x in enumerate(state) if x in ("no room", "straddles"))
    return UNDECIDED, txt + ": " + why
