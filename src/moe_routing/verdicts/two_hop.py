"""Rules of the two-hop chapter (ours, beyond paper A): composition in a two-layer MoE.

Every claim here is the book's own ("our extension" when it holds).  The construction's checks
are exhaustive -- every distinct prefix, every sentence -- so its rules compare exact counts and
the proven bound, not estimates; the training rules compare accuracy intervals, and routing
shares with what a router blind to the hop reaches (:func:`hop_blind_reuse`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..validation import integer, require
from . import rule
from .construction import check_eps, fmt_eps

OURS = "our extension"
NOT = "not supported"       # a claim of the book that the evidence does not support


@rule
def two_layer_construction(max_invalid_by_eps: Mapping[float, float], n_prefixes: int,
                           n_misrouted: int, n_wrong_facts: int, n_facts: int,
                           n_wrong_held_out: int, n_held_out: int):
    """X-two-hop-construction: the two-layer construction puts mass > 1 − ε on the valid next
    tokens at every prefix, routes every prefix as built in both layers, and answers every fact
    -- the held-out compositions included, which no expert stores.

    * our extension — P(invalid) < ε at every prefix for every ε tested, no prefix misrouted,
      every fact and every held-out composition the argmax at its slot;
    * partly — all of that, but the dataset holds no held-out composition (composition
      untested), or the bound holds for some ε only;
    * not reproduced — a prefix misrouted, a fact or a held-out composition wrong, or the bound
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
        return "partly", ("every prefix within ε and every fact right, but no composition is "
                          "held out: composition untested")
    return OURS, (f"max over {n_prefixes} prefixes of P(invalid) < ε for all {len(held)} ε "
                  f"({worst}); all {n_facts} facts and all {n_held_out} held-out sentences "
                  "answered, no prefix misrouted")


@rule
def additive_sizes(sizes: Sequence[int], sizes_cut: Sequence[int], composed: int,
                   composed_cut: int):
    """X-two-hop-sizes: no expert of the two-layer construction depends on a composed
    dictionary -- its sizes are additive in the single-hop tasks.

    ``sizes``: every expert's neurons (both layers) for the dataset; ``sizes_cut``: the same for
    the dataset whose two-hop dictionaries are cut to a subset (same hops, same templates);
    ``composed`` / ``composed_cut``: the composed facts of each.  Exact counts:

    * our extension — the composed facts differ and every expert has the same size;
    * partly — nothing was cut (``composed_cut == composed``): independence untested;
    * not reproduced — some expert changes size with the composed dictionaries.
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
        return "partly", f"the composed dictionaries were not cut ({composed} facts): untested"
    return OURS, (f"all {len(sizes)} experts keep their size ({sum(sizes)} neurons) when the "
                  f"composed facts go from {composed} to {composed_cut}")


@rule
def held_out_above_baseline(mean: float, low: float, baseline: float, n_held_out: int):
    """X-two-hop-held-out: a trained MoE transformer answers held-out compositions -- both hops
    seen, the composed fact never -- more often than the majority baseline (answering every
    query of a two-hop task with its most frequent training answer).

    ``mean`` and ``low``: the held-out exact match over seeds and its interval's lower end
    (:func:`moe_routing.experiments.accuracy_interval`); ``baseline``: the majority baseline.

    * our extension — the whole interval lies above the baseline;
    * partly — the mean is above the baseline but the interval reaches it;
    * not reproduced — the mean is at or below the baseline.
    """
    n_held_out = integer("n_held_out", n_held_out, low=1)
    for name, v in (("mean", mean), ("low", low), ("baseline", baseline)):
        require(0.0 <= float(v) <= 1.0, name, v, "an accuracy in [0, 1]")
    require(low <= mean, "low", low, f"at most the mean ({mean:.3f})")
    txt = (f"held-out exact match {100 * mean:.1f} % (interval from {100 * low:.1f} %) vs "
           f"majority baseline {100 * baseline:.1f} %, {n_held_out} held-out queries per run")
    if low > baseline:
        return OURS, txt + ": the interval lies above the baseline"
    if mean > baseline:
        return "partly", txt + ": above the baseline, not resolved"
    return NOT, txt + ": not above the baseline"


@rule
def depth_composes(two_mean: float, two_half: float, one_mean: float, one_half: float):
    """X-two-hop-generalise: with one layer per hop, a two-layer model answers held-out
    compositions better than a one-layer model trained with the same objective.

    Means over seeds with their half-widths (the larger of the seed spread and the binomial
    error, :func:`moe_routing.experiments.accuracy_interval`):

    * our extension — the two-layer interval lies entirely above the one-layer interval;
    * partly — the two-layer mean is higher but the intervals overlap (not resolved);
    * not reproduced — the two-layer mean is not higher.
    """
    for name, v in (("two_mean", two_mean), ("one_mean", one_mean)):
        require(0.0 <= float(v) <= 1.0, name, v, "an accuracy in [0, 1]")
    for name, v in (("two_half", two_half), ("one_half", one_half)):
        require(0.0 <= float(v) <= 1.0, name, v, "a half-width in [0, 1]")
    txt = (f"held-out exact match, 2 layers {100 * two_mean:.1f} ± {100 * two_half:.1f} % vs "
           f"1 layer {100 * one_mean:.1f} ± {100 * one_half:.1f} %")
    if two_mean - two_half > one_mean + one_half:
        return OURS, txt + ": resolved"
    if two_mean > one_mean:
        return "partly", txt + ": higher, but the intervals overlap"
    return NOT, txt + ": two layers are not better"


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
               l2_blind: float, strong: float = 0.9, margin: float = 0.1):
    """X-two-hop-routing: a two-layer model trained *without* router supervision routes hop by
    hop -- layer 1 sends a two-hop query to the expert its first hop's single-hop queries use,
    layer 2 to the expert of its second hop's.

    ``l1_reuse`` / ``l2_reuse``: those shares (mean over seeds) at the object-predicting
    position; ``l1_blind`` / ``l2_blind``: what a router blind to the hop reaches at each layer
    (:func:`hop_blind_reuse`, mean over seeds).  A layer's level of no evidence is the larger
    of that and 1/``n_experts``: reuse is high for a router that sends everything to one
    expert, hop or no hop, so chance alone would credit collapse with routing by hop.

    * our extension — both shares ≥ ``strong`` (0.9) and each at least ``margin`` (0.1)
      above its layer's level;
    * partly — both more than ``margin`` above their levels, not both ≥ ``strong``;
    * not reproduced — a layer within ``margin`` of its level (hop-blind routing explains it).
    """
    n_experts = integer("n_experts", n_experts, low=2)
    for name, v in (("l1_reuse", l1_reuse), ("l2_reuse", l2_reuse), ("l1_blind", l1_blind),
                    ("l2_blind", l2_blind), ("strong", strong), ("margin", margin)):
        require(0.0 <= float(v) <= 1.0, name, v, "a share in [0, 1]")
    chance = 1.0 / n_experts
    level = (max(chance, float(l1_blind)), max(chance, float(l2_blind)))
    txt = (f"reuse of the hop's expert: layer 1 {100 * l1_reuse:.0f} % (hop-blind "
           f"{100 * l1_blind:.0f} %), layer 2 {100 * l2_reuse:.0f} % (hop-blind "
           f"{100 * l2_blind:.0f} %); chance {100 * chance:.0f} %")
    above = [r - lv > margin for r, lv in zip((l1_reuse, l2_reuse), level)]
    if all(above) and l1_reuse >= strong and l2_reuse >= strong:
        return OURS, txt + f": both ≥ {100 * strong:.0f} % and above hop-blind routing"
    if all(above):
        return "partly", txt + ": above hop-blind routing, not hop by hop throughout"
    which = " and ".join(f"layer {i + 1}" for i, a in enumerate(above) if not a)
    return NOT, (txt + f": {which} within {100 * margin:.0f} points of what a "
                              "router blind to the hop reaches")
