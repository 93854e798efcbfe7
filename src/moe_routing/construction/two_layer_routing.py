"""The routes of the two-layer construction, and the hypotheses that make them exist.

The build (:func:`.two_layer.build_two_layer`) first decides which expert every structural
node goes to in each layer: the hops of every two-hop task
(hypothesis (H-hop): its composed facts decompose into facts of two single-hop tasks of the
dataset), the layer-1 and layer-2 routing labels, and the linear routers that realise them in
the structural block ((H-route1), (H-route2), decided with certificates by
:mod:`.separators`).  The hypotheses the one-layer construction does not have
(:data:`TWO_LAYER_HYPOTHESES`: (H-gate1) too, which the build checks on each layer-1 expert,
and (H-margin), which it checks on the gates' constants) and their refusal
(:class:`TwoLayerHypothesisFails`) are here too; the layout, neurons and report the build
writes are in :mod:`.two_layer_parts`.
"""

from __future__ import annotations

import numpy as np

from ..knowledge import OBJECT_SLOT
from ..knowledge.two_hop import TwoHopTask

from .refusals import HYPOTHESES, HypothesisFails, HypothesisUndecided, _listing
from .separators import FitDidNotConverge, NotSeparable, fit_multiclass


#: the hypotheses of the two-layer construction that the one-layer one does not have
TWO_LAYER_HYPOTHESES = {
    "H-hop": "the two hops of every two-hop task are single-hop tasks of the dataset, and each "
             "composed fact (s, o) is (s, m) of the first hop and (m, o) of the second there",
    "H-route1": "the layer-1 routing labels (a single-hop task's nodes: its expert; a two-hop "
                "task's nodes: its first hop's expert; shared nodes: the junction expert) are "
                "linearly separable in the structural block [TOK | POS | H1]",
    "H-gate1": "for each single-hop task k, the object slots of k and of the two-hop tasks whose "
               "first hop is k are linearly separable from the other nodes routed to k in "
               "layer 1",
    "H-route2": "the layer-2 routing labels (a two-hop object slot: its second hop's expert; "
                "every other node: the no-op expert) are linearly separable in the structural "
                "block",
    "H-margin": "the constants of the layer-1 gates leave every lookup a margin: "
                "v_lo > μ·v_hi (layer 2 tells the middle entity from the other entities), "
                "μ·v₂_hi < 1 (the object's logit beats the leaked ones) and D₁ = v_min − i_max "
                "> 0 (the one-layer logit margin), with v_lo = 1 − A_k·η, A_k = 4(1/2 + s_k)/"
                "(1 − μ) and v_hi = 1 + 2s_k over the first hops k, s_k the spread of k's gate "
                "(the least one when an LP found it), η = eta, μ the entity codes' coherence",
}


class TwoLayerHypothesisFails(HypothesisFails):
    """:class:`.refusals.HypothesisFails` for a hypothesis of the two-layer construction
    (:data:`TWO_LAYER_HYPOTHESES`, or one of :data:`.refusals.HYPOTHESES`): the same attributes
    (hypothesis, tasks, witnesses, certificate), the same message."""

    def __init__(self, hypothesis: str, tasks, witnesses, certificate, detail: str = ""):
        self.hypothesis = hypothesis
        self.tasks = tuple(tasks)
        self.witnesses = tuple(witnesses)
        self.certificate = certificate
        text = TWO_LAYER_HYPOTHESES.get(hypothesis, HYPOTHESES.get(hypothesis, ""))
        ValueError.__init__(
            self, f"hypothesis ({hypothesis}) fails for task(s) {list(self.tasks)}: {text}; "
                  f"witness prefix(es) {_listing(self.witnesses)}"
                  + (f"\n{detail}" if detail else ""))


def _kind_of(dataset) -> tuple[list, dict, dict, dict]:
    """(single-hop task indices, expert of each, first and second hop expert of each two-hop
    task); (H-hop) checked on the dataset's own tasks, witness = the object-slot prefix of a
    sentence of the two-hop task whose fact does not decompose."""
    tasks = dataset.tasks
    single = [k for k, t in enumerate(tasks) if not isinstance(t, TwoHopTask)]
    expert = {k: e for e, k in enumerate(single)}
    by_name = {tasks[k].name: k for k in single}
    first, second = {}, {}
    for t, task in enumerate(tasks):
        if not isinstance(task, TwoHopTask):
            continue
        hops = [by_name.get(h.name) for h in (task.first, task.second)]
        d1 = tasks[hops[0]].dictionary if hops[0] is not None else {}
        d2 = tasks[hops[1]].dictionary if hops[1] is not None else {}
        for p, (s, o) in enumerate(task.dictionary.items()):
            m = d1.get(s)
            if hops[0] is None or hops[1] is None or m is None or d2.get(m) != o:
                missing = [h.name for h, k in zip((task.first, task.second), hops) if k is None]
                why = (f"hop(s) {missing} not among the dataset's single-hop tasks" if missing
                       else f"{task.first.name} has no fact for {s!r}" if m is None
                       else f"{task.second.name} has no fact for the middle entity {m!r}" if m not in d2
                       else f"{task.second.name}({m!r}) is {d2[m]!r} in the dataset, not {o!r}")
                rows = np.nonzero((dataset.task == t) & (dataset.pair == p))[0]
                i = int(rows[0])
                prefix = dataset.tokenizer.decode(dataset.seqs[i, :dataset.object_pos[i]])
                raise TwoLayerHypothesisFails(
                    "H-hop", [task.name] + [h.name for h in (task.first, task.second)],
                    [prefix], None, f"the composed fact ({s!r}, {o!r}) of {task.name} does not "
                                    f"decompose: {why}")
        first[t], second[t] = expert[hops[0]], expert[hops[1]]
    return single, expert, first, second


def _labels(nodes, expert, first, second) -> tuple[np.ndarray, np.ndarray]:
    """Layer-1 and layer-2 routing labels of every structural node (the docstring of
    :mod:`.two_layer`)."""
    J = len(expert)
    K = nodes.n_tasks
    lab1 = np.full(nodes.n_nodes, J, dtype=np.int64)
    lab2 = np.full(nodes.n_nodes, J, dtype=np.int64)
    for u in range(nodes.n_nodes):
        k = int(nodes.label[u])
        if k == K:
            continue
        lab1[u] = expert[k] if k in expert else first[k]
        if k in second and OBJECT_SLOT in nodes.next[u][k]:
            lab2[u] = second[k]
    return lab1, lab2


def _fit_router(parts, labels, names, hypothesis, margin, settings, lp_time_limit):
    """A linear router of ``labels`` on the structural codes, scaled to logit margin
    ``margin`` and checked in float32 (as :func:`.build.fit_router`)."""
    nodes, tok = parts.nodes, parts.ds.tokenizer
    E = len(names)
    try:
        W, b, m, fit = fit_multiclass(parts.Z, labels, E, settings, lp_time_limit=lp_time_limit)
    except NotSeparable as err:
        rows = list(dict.fromkeys(int(u) for u in err.certificate.rows))
        raise TwoLayerHypothesisFails(
            hypothesis, sorted({names[int(labels[u])] for u in rows}),
            [nodes.text(u, tok) for u in rows], err.certificate, str(err)) from None
    except FitDidNotConverge as err:
        raise HypothesisUndecided(
            hypothesis, sorted({names[int(labels[u])] for u in err.worst_rows}),
            [nodes.text(int(u), tok) for u in err.worst_rows], err) from None
    scale = margin / m.min()
    W, b = W * scale, b * scale
    S32 = parts.Z.astype(np.float32) @ W.astype(np.float32) + b.astype(np.float32)
    wrong = np.nonzero(S32.argmax(1) != labels)[0]
    if len(wrong):
        raise HypothesisUndecided(
            hypothesis, sorted({names[int(labels[u])] for u in wrong}),
            [nodes.text(int(u), tok) for u in wrong],
            f"the separator found ({fit.describe()}) misroutes {len(wrong)} nodes in float32")
    return W, b, fit
