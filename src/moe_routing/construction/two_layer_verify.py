"""Verification of a two-layer construction on every distinct prefix and every fact.

:func:`verify_two_layer` runs the model's own forward pass in float64 and checks the invalid
mass at every prefix, the expert chosen in each layer, and greedy exact match at every object
slot (held-out compositions included); :class:`TwoLayerVerification` is its result.  It is
apart from the build (:mod:`.two_layer`) as :mod:`.verify` is apart from :mod:`.build`:
checking a model needs its :class:`.two_layer_parts.TwoLayerReport`, not the code that built
it.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..model import MoETransformer
from .._internal.validation import integer, probability, require

from .build import _check_dataset, logit_scale
from .two_layer_parts import TwoLayerReport
from .verify import first_occurrences, struct_of_trie


@dataclass
class TwoLayerVerification:
    """Every distinct prefix and every fact of the dataset, checked in float64.

    ``max_invalid`` / ``min_valid`` / ``argmin_prefix`` / ``max_invalid_by_eps`` mean what they
    mean in :class:`.verify.Verification`; ``failing`` lists the prefixes whose invalid mass
    exceeds ε (worst first), ``misrouted`` the prefixes sent to another expert than the
    construction's label in some layer, ``wrong_facts`` the sentences whose object is not the
    argmax at its slot."""

    n_prefixes: int
    eps: float
    max_invalid: float
    min_valid: float
    argmin_prefix: str
    invalid: np.ndarray
    failing: list
    routed_ok: tuple                # share of prefixes routed as labelled, per layer
    misrouted: list
    n_facts: int
    fact_accuracy: float            # greedy exact match at the object slot, every sentence
    n_held_out: int
    held_out_accuracy: float        # the same over the held-out compositions' sentences
    wrong_facts: list
    max_invalid_by_eps: dict
    seconds: float

    @property
    def passed(self) -> bool:
        return (self.max_invalid <= self.eps and not self.misrouted and not self.wrong_facts)


@torch.no_grad()
def verify_two_layer(model, report: TwoLayerReport, dataset, batch_size: int = 128,
                     eps_list=()) -> TwoLayerVerification:
    """Run the model's own forward pass in float64 on every sentence and check, at the first
    occurrence of every distinct prefix w (:func:`.verify.first_occurrences`): the invalid mass
    P(x ∉ V(w) | w) (log space) against ε, the expert chosen in each layer against the
    construction's label of w's structural node; and at every sentence's object slot that the
    object is the argmax (greedy exact match: every fact, held-out compositions included).

    ``eps_list``: also the max invalid mass of the same model with W_U rescaled to β(ε).
    (The restricted forward of :mod:`.fastpath` is one-layer; float64 makes the check
    independent of float32 rounding.)"""
    require(isinstance(report, TwoLayerReport), "report", type(report).__name__,
            "the TwoLayerReport of build_two_layer")
    require(isinstance(model, MoETransformer) and model.config.n_layers == 2, "model",
            type(model).__name__, "the two-layer MoETransformer of build_two_layer")
    dataset = _check_dataset(dataset)
    batch_size = integer("batch_size", batch_size, low=1)
    eps_list = [probability(f"eps_list[{i}]", e) for i, e in enumerate(eps_list)]
    t0 = time.perf_counter()
    m64 = copy.deepcopy(model).double().eval()
    V = dataset.vocab_size
    ratios = {e: logit_scale(e, V, report.v_min, report.i_max) / report.beta for e in eps_list}
    trie, tok = dataset.trie, dataset.tokenizer
    s_of_t = struct_of_trie(dataset, report.nodes)
    pn = dataset.prefix_node
    M, n = pn.shape
    is_first = np.zeros(M * n, dtype=bool)
    is_first[first_occurrences(dataset)] = True
    is_first = is_first.reshape(M, n)
    seqs = torch.as_tensor(dataset.seqs)
    invalid = np.zeros(trie.n_nodes)
    inv_eps = {e: 0.0 for e in ratios}
    route_ok = np.zeros(trie.n_nodes, dtype=bool)
    route_ok2 = np.zeros(trie.n_nodes, dtype=bool)
    correct = np.zeros(M, dtype=bool)
    indptr, ids = trie.next_indptr, trie.next_ids
    order = np.argsort(dataset.lengths, kind="stable")
    for s in range(0, M, batch_size):
        rows = order[s:s + batch_size]
        T = int(dataset.lengths[rows].max()) - 1
        out = m64(seqs[rows, :T])
        sel = torch.as_tensor(is_first[rows, :T])
        nd = pn[rows, :T][is_first[rows, :T]]
        lg = out.logits[sel]                                       # (r, V) float64
        valid = torch.zeros(lg.shape, dtype=torch.bool)
        for i, u in enumerate(nd):
            valid[i, ids[indptr[u]:indptr[u + 1]]] = True
        for e, r in [(None, 1.0), *ratios.items()]:
            z = lg * r
            lse_inv = torch.logsumexp(z.masked_fill(valid, float("-inf")), -1)
            inv = (lse_inv - torch.logsumexp(z, -1)).exp().numpy()
            if e is None:
                invalid[nd] = inv
            else:
                inv_eps[e] = max(inv_eps[e], float(inv.max()) if len(inv) else 0.0)
        struct = s_of_t[nd]
        route_ok[nd] = out.layers[0].expert_index[..., 0][sel].numpy() == report.route1[struct]
        route_ok2[nd] = out.layers[1].expert_index[..., 0][sel].numpy() == report.route2[struct]
        op = torch.as_tensor(dataset.object_pos[rows])
        at = out.logits[torch.arange(len(rows)), op - 1]            # (b, V) at the object slot
        correct[rows] = (at.argmax(-1) == seqs[rows, op]).numpy()
    worst = int(np.argmax(invalid))
    prefix = lambda u: tok.decode(trie.prefix(int(u))) or "(empty prefix)"  # noqa: E731
    bad = np.nonzero(invalid > report.eps)[0]
    bad = bad[np.argsort(-invalid[bad], kind="stable")]
    misrouted = np.nonzero(~(route_ok & route_ok2))[0]
    held = []
    if hasattr(dataset, "held_out_compositions"):
        held = sorted({i for h in dataset.held_out_compositions() for i in h.test_sentences})
    wrong = np.nonzero(~correct)[0]
    mx = float(invalid.max())
    return TwoLayerVerification(
        n_prefixes=int(trie.n_nodes), eps=report.eps, max_invalid=mx, min_valid=1.0 - mx,
        argmin_prefix=prefix(worst), invalid=invalid,
        failing=[(prefix(u), float(invalid[u])) for u in bad[:20]],
        routed_ok=(float(route_ok.mean()), float(route_ok2.mean())),
        misrouted=[prefix(u) for u in misrouted[:20]], n_facts=M,
        fact_accuracy=float(correct.mean()), n_held_out=len(held),
        held_out_accuracy=float(correct[held].mean()) if held else float("nan"),
        wrong_facts=[tok.decode(dataset.seqs[i, :dataset.lengths[i]]) for i in wrong[:20]],
        max_invalid_by_eps=inv_eps, seconds=time.perf_counter() - t0)
