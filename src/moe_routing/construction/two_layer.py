"""Two-hop knowledge in two MoE layers, without storing any composed dictionary (ours).

A two-hop task t asks for Δ₂(Δ₁(s)) (:mod:`moe_routing.knowledge.two_hop`).  The one-layer
construction (:func:`.build.build_moe`) can answer it only by treating Δ₂ ∘ Δ₁ as a dictionary
of its own: one semantic neuron per composed fact.  Two layers can *compose* instead: layer 1
looks up the middle entity m = Δ₁(s), layer 2 looks up Δ₂(m).  Every lookup neuron then
belongs to one single-hop fact, so expert sizes are additive in the single-hop tasks.

The construction (step numbers as in :mod:`.build`, whose parts are reused unchanged):

**Layer 1** is the one-layer construction of the mixed dataset with two changes.

* *Routing* (step 3): every node of a two-hop template goes to the expert of the task's
  **first hop**; single-hop nodes to their task's expert; shared nodes to the junction expert.
  There is one expert per single-hop task (none per two-hop task) plus the junction expert.
* *Gate and lookup* (steps 4-5): expert k holds the syntactic neurons of every node routed to
  it (its own templates' and those of the two-hop templates whose first hop is k: they are
  template words, no facts), and one semantic neuron per (a, b) ∈ Δ_k, gated by σ_k ≥ 1 at
  the object slots of k *and* of the two-hop tasks with first hop k, ≤ 0 at the other nodes
  routed to k.  When k is the first hop of some two-hop task, the neuron writes c(b) into the
  reserved block ``MID`` as well as into ``OUT_VAL``.  At the object slot of a two-hop query
  with subject s the residual therefore holds ``MID = v₁·c(m)``, m = Δ₁(s), with
  v₁ ∈ [v_lo, v_hi] = [1 − A_k η, 1 + 2 s_k] (A_k, s_k: scale and spread of step 5), and 0 in
  ``MID`` at every other prefix.

**Layer 2** has no attention (all weights 0: its heads write exactly 0) and a router that reads
the same structural block: the object slots of a two-hop task go to the layer-2 expert of the
task's **second hop**, every other prefix to the *no-op* expert (no neurons: the residual,
hence layer 1's answer, passes unchanged).  The layer-2 expert of task k₂ holds one neuron per
(m, o) ∈ Δ_{k₂}: ``A₂⟨c(m), MID⟩ + C₂`` with threshold θ = (v_lo + μ v_hi)/2,
A₂ = 1/(v_lo − θ), C₂ = −A₂θ.  With MID = v₁c(m) the neuron of m has activation
v₂ ∈ [1, v₂_hi], v₂_hi = (v_hi − θ)/(v_lo − θ), every other one ≤ −1 (⟨c(m'), c(m)⟩ ≤ μ);
it writes γ·c(o) into ``OUT_VAL``.  No gate is needed: the router sends nothing else there.

**Unembedding** (step 7, unchanged, reads OUT only).  At a two-hop object slot
OUT_VAL = v₁c(m) + γv₂c(o): the object's logit is ≥ βγ (codes are non-negative), every other
entity's ≤ β(v_hi + γ v₂_hi μ).  Choosing ``γ = (D₁ + v_hi)/(1 − μ v₂_hi)`` makes this margin
equal to the one-layer margin D₁ = v_min − i_max of every other prefix, so the one β of
:func:`.build.logit_scale` gives P(invalid | w) ≤ (V − 1)e^{−βD₁} = ε/2 at *every* prefix.

Sizes (neurons): layer-1 expert k: syntactic neurons of the nodes routed to it + |Δ_k|;
layer-2 expert k: |Δ_k| if k is the second hop of some two-hop task, else 0; junction: as in
the one-layer build; no-op: 0.  No neuron depends on a two-hop task's dictionary: the composed
facts, held-out ones included, are answered by composition.  (What a two-hop task does add is
what any task adds outside the experts: its templates' syntactic neurons, in its first hop's
expert, and its subject set keys(Δ₂ ∘ Δ₁) as one key-indicator column of the embedding, which
the ⋆1 prediction of step 4 needs -- a set of subjects, not a dictionary.)  The residual stream
is d_c wider than the one-layer one (``MID``).

**Hypotheses** (refusals name them, with witness prefixes, :class:`TwoLayerHypothesisFails`):
(H-obj) and (H-code) of the one-layer construction on the mixed dataset; (H-hop) the hops of
every two-hop task are single-hop tasks of the dataset and each composed fact (s, o) is
(s, m) ∈ Δ₁, (m, o) ∈ Δ₂ there; (H-route1), (H-gate1), (H-route2): the routing labels and gates
above are linearly separable in the structural block (decided by the fits and LPs of
:mod:`.separators`, with certificates); (H-margin) the constants above leave their margins,
v_lo > μ·v_hi, μ·v₂_hi < 1 and D₁ > 0 (together: v_lo(1 + μ) > μ·v_hi(3 − μ) and
v_min > i_max).  (H-margin) depends on the gates' spreads s_k -- the least possible when an LP
found the gate, so a property of the dataset's structural codes -- and on η and μ: a first
hop's gate must be ≥ 1 at the object slots of its two-hop tasks too, and a large spread makes
A_k·η reach 1 (v_lo ≤ 0); its refusal names the task and the object slots where the gate is
largest and smallest, and says below which ``eta`` the margins hold (the gates do not depend
on η), or that ``max_coherence`` must come down first.  An entity that is the middle entity of
chains with different second hops is fine (the layer-2 route, not the middle entity, picks the
hop); a prefix shared by templates with different first hops is fine before the object slot
(junction expert) and refused at it by (H-obj).

Where the code is: this module builds the model (:func:`build_two_layer`) and compares it with
the one-layer construction (:func:`compare_sizes`); the routes of both layers and the
hypotheses are in :mod:`.two_layer_routing`, the layout, neurons and report in
:mod:`.two_layer_parts`, the verification (:func:`verify_two_layer`) in
:mod:`.two_layer_verify`.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from ..knowledge import OBJECT_SLOT
from ..knowledge.two_hop import TwoHopTask
from ..model import MoEConfig, MoETransformer
from .._internal.validation import positive, require

from .build import (ConstructionReport, _check_dataset, build_moe, check_parameters,
                    logit_scale)
from .circuits import SemanticNeuron, SyntacticNeuron, junction_circuit
from .parts import ConstructionParts
from .refusals import HypothesisUndecided
from .separators import (DETECTOR_FIT, GATE_FIT, LP_TIME_LIMIT, ROUTER_FIT, FitDidNotConverge,
                         FitSettings, NotSeparable, fit_gate)
from .two_layer_parts import HopNeuron, MiddleNeuron, TwoLayerLayout, TwoLayerReport
from .two_layer_routing import TwoLayerHypothesisFails, _fit_router, _kind_of, _labels


def _layer1_expert(parts, k, rows, writes_middle, settings, lp_time_limit):
    """Gate σ_k over the nodes ``rows`` routed to task k's expert (hypothesis (H-gate1)), then its syntactic
    neurons and one semantic neuron per entry of Δ_k (a :class:`MiddleNeuron` for a first hop)."""
    nodes, tok = parts.nodes, parts.ds.tokenizer
    obj = np.array([any(OBJECT_SLOT in nx for nx in nodes.next[u].values()) for u in rows])
    try:
        gate = fit_gate(parts.Z[rows], obj, settings, lp_time_limit=lp_time_limit)
    except NotSeparable as err:
        cert = dataclasses.replace(err.certificate, rows=rows[err.certificate.rows])
        names = sorted({nodes.task_names[int(nodes.label[u])] for u in cert.rows})
        raise TwoLayerHypothesisFails(
            "H-gate1", names, [nodes.text(int(u), tok) for u in cert.rows], cert,
            f"no gate of expert {parts.ds.tasks[k].name} ({err})") from None
    except FitDidNotConverge as err:
        raise HypothesisUndecided("H-gate1", [parts.ds.tasks[k].name],
                                  [nodes.text(int(rows[r]), tok) for r in err.worst_rows],
                                  err) from None
    syn = []
    for u in rows:
        j = int(nodes.label[u])
        outs = parts.output_of(j, nodes.next[u][j])
        if outs:
            syn.append(SyntacticNeuron(*parts.detector(u), tuple(outs)))
    B = 2.0
    A = 2.0 * B * (0.5 + gate.spread) / (1.0 - parts.mu)
    C = -A - B / 2.0
    cls = MiddleNeuron if writes_middle else SemanticNeuron
    sem = [cls(A, parts.codes[a - parts.e0], B * gate.w, C + B * gate.c, parts.codes[b - parts.e0])
           for a, b in parts.ds.dictionary_ids(k)]
    return syn, sem, gate, A


def _below(x: float) -> float:
    """``x`` > 0 rounded *down* to 3 significant digits (a value printed as a bound that
    stays strictly below it)."""
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    y = math.floor(x / step) * step
    return y - step if y >= x else y


def _v2_hi(v_lo: float, v_hi: float, mu: float) -> float:
    """v₂_hi = (v_hi − θ)/(v_lo − θ), θ = (v_lo + μ·v_hi)/2: the largest layer-2 activation."""
    theta = (v_lo + mu * v_hi) / 2.0
    return (v_hi - theta) / (v_lo - theta)


def _check_margins(parts, single, gates, hop1, first_hops, spreads, scales, eta,
                   max_coherence) -> None:
    """Hypothesis (H-margin) (module docstring): the margins the constants of the layer-1
    gates must leave, checked in this order -- (i) v_lo > μ·v_hi, (ii) μ·v₂_hi < 1, (iii)
    D₁ = v_min − i_max > 0.  (i) and (ii) together read v_lo > q = μ·v_hi·(3 − μ)/(1 + μ).

    Every term is set by the first hop (or task) whose gate has the largest spread s (A_k and
    1 + 2s_k grow with s_k), so the refusal names that task, with the object slots where its
    gate is largest (σ = 1 + s) and smallest (σ = 1), and the remedy: the gates, A_k and μ do
    not depend on η, so every condition holds for η < min((1 − q)/A_hop, (1 − i_max)/max(A,
    2)) when q < 1 and i_max < 1; otherwise μ must come down first."""
    mu = parts.mu
    nodes, tok = parts.nodes, parts.ds.tokenizer
    v_min = min(1.0, 1.0 - max(scales, default=0.0) * eta, 1.0 - 2.0 * eta)
    i_max = max(((1.0 + 2.0 * s) * mu for s in spreads), default=0.0)
    D1 = v_min - i_max
    h = max(hop1, key=lambda e: scales[e])            # the first hop of the largest spread
    v_lo = min(1.0 - scales[e] * eta for e in hop1)
    v_hi = max(1.0 + 2.0 * spreads[e] for e in hop1)
    q = mu * v_hi * (3.0 - mu) / (1.0 + mu)
    if v_lo <= mu * v_hi:
        e = h
        what = (f"(i) v_lo = 1 − A·η = {v_lo:.3g} ≤ μ·v_hi = {mu * v_hi:.3g}: MID = v₁·c(m) "
                f"cannot tell the middle entity m from another entity in layer 2")
    elif not mu * _v2_hi(v_lo, v_hi, mu) < 1.0:          # ⇔ v_lo ≤ q, up to rounding
        e = h
        v2_hi = _v2_hi(v_lo, v_hi, mu)
        what = (f"(ii) μ·v₂_hi = {mu * v2_hi:.3g} ≥ 1 (v_lo = {v_lo:.3g} ≤ μ·v_hi·(3 − μ)/"
                f"(1 + μ) = {q:.3g}): no layer-2 output scale γ lifts the object above the "
                f"leaked logits")
    elif not D1 > 0:
        e = max(range(len(single)), key=lambda x: scales[x])
        what = (f"(iii) D₁ = v_min − i_max = {v_min:.3g} − {i_max:.3g} = {D1:.3g} ≤ 0: no "
                f"logit margin even for the one-layer lookups")
    else:
        return
    rows, gate = gates[e]
    obj = np.array([any(OBJECT_SLOT in nx for nx in nodes.next[u].values()) for u in rows])
    slots = rows[obj]
    sigma = parts.Z[slots] @ gate.w + gate.c
    witnesses = list(dict.fromkeys(nodes.text(int(slots[int(i)]), tok)
                                   for i in ((np.argmax(sigma), np.argmin(sigma))
                                             if slots.size else ())))
    name = parts.ds.tasks[single[e]].name
    how = "the least spread of any gate (LP)" if gate.outcome.method == "LP" else "as fitted"
    a_max = max(max(scales, default=0.0), 2.0)
    eta_max = min((1.0 - q) / scales[h], (1.0 - i_max) / a_max)
    fix = (f"every margin holds with eta ≤ {_below(eta_max):.3g} (here eta = {eta:g}; the gates, "
           f"A and μ do not depend on eta)" if q < 1.0 and i_max < 1.0 and eta_max > 0 else
           f"no eta meets them: μ = {mu:.3g} is too large for the spreads (μ·v_hi·(3 − μ)/"
           f"(1 + μ) = {q:.3g} and μ·(1 + 2·max s) = {i_max:.3g} must be < 1): lower "
           f"max_coherence (here {max_coherence:g}) first")
    raise TwoLayerHypothesisFails(
        "H-margin", [name], witnesses, None,
        f"{what}.  The gate of expert {name} is ≥ 1 at its object slots"
        + (" and at those of the two-hop tasks whose first hop it is" if e in first_hops else "")
        + f"; its spread s = {spreads[e]:.4g} ({how}: σ = "
        f"{1 + spreads[e]:.4g} at the first witness, 1 at the second) makes A = 4(1/2 + s)/"
        f"(1 − μ) = {scales[e]:.4g}, A·η = {scales[e] * eta:.3g} (μ = {mu:.3g}); {fix}")


def _pad(W: dict, d: int, D: int) -> dict:
    """The one-layer embedding/attention/unembedding tensors, widened from d to D (zeros)."""
    dims = {"tok_emb.weight": 1, "pos_emb.weight": 1, "attn.w_q": 1, "attn.w_k": 1,
            "attn.w_v": 1, "attn.w_o": 2, "unembed.weight": 1}
    out = {}
    for name, t in W.items():
        shape = list(t.shape)
        shape[dims[name]] = D
        z = torch.zeros(shape, dtype=t.dtype)
        z.narrow(dims[name], 0, d).copy_(t)
        out[name] = z
    return out


def build_two_layer(dataset, eps: float = 1e-4, *, rho: float = 0.5, eta: float = 0.01,
                    max_coherence: float = 0.3, router_margin: float = 20.0,
                    router_fit: FitSettings = ROUTER_FIT, gate_fit: FitSettings = GATE_FIT,
                    detector_fit: FitSettings = DETECTOR_FIT,
                    lp_time_limit: float = LP_TIME_LIMIT):
    """``(MoETransformer with n_layers=2, TwoLayerReport)`` for a dataset of single-hop and
    two-hop tasks (a :class:`~moe_routing.knowledge.two_hop_dataset.MixedKnowledgeDataset`, or any
    :class:`~moe_routing.knowledge.KnowledgeDataset` whose two-hop tasks' hops are among its
    tasks): valid-next-token mass ≥ 1 − ε/2 at every prefix, every fact (held-out compositions
    included) answered by composition -- see the module docstring; check with
    :func:`verify_two_layer`.  Parameters as :func:`.build.build_moe`.  Raises ValueError on bad
    parameters, :class:`.refusals.HypothesisFails` (with witness prefixes and, for the
    separability hypotheses, the LP certificate) when a hypothesis fails."""
    eps, rho, eta, max_coherence, lp_time_limit = check_parameters(
        eps, rho, eta, max_coherence, lp_time_limit, router_fit=router_fit, gate_fit=gate_fit,
        detector_fit=detector_fit)
    router_margin = positive("router_margin", router_margin)
    dataset = _check_dataset(dataset)
    t0 = time.perf_counter()
    single, expert, first, second = _kind_of(dataset)
    parts = ConstructionParts(dataset, rho, eta, max_coherence, detector_fit, lp_time_limit)
    nodes, lay0 = parts.nodes, parts.layout
    lay = TwoLayerLayout(lay0)
    J = len(single)
    names = [dataset.tasks[k].name for k in single] + ["junction / no-op"]
    lab1, lab2 = _labels(nodes, expert, first, second)
    r1 = _fit_router(parts, lab1, names, "H-route1", router_margin, router_fit, lp_time_limit)
    r2 = _fit_router(parts, lab2, names, "H-route2", router_margin, router_fit, lp_time_limit)
    first_hops, second_hops = set(first.values()), set(second.values())
    layer1, syn_n, sem_n, spreads, scales, gates = [], [], [], [], [], []
    for e, k in enumerate(single):
        rows = np.nonzero(lab1 == e)[0]
        syn, sem, gate, A = _layer1_expert(parts, k, rows, e in first_hops, gate_fit,
                                           lp_time_limit)
        gates.append((rows, gate))
        layer1.append(syn + sem)
        syn_n.append(len(syn))
        sem_n.append(len(sem))
        spreads.append(gate.spread)
        scales.append(A)
    junction = junction_circuit(parts)
    layer1.append(junction)
    syn_n.append(len(junction))
    # constants: the one-layer margin D₁ = v_min − i_max, the middle entity's activation range
    v_min = min(1.0, 1.0 - max(scales, default=0.0) * eta, 1.0 - 2.0 * eta)
    i_max = max(((1.0 + 2.0 * s) * parts.mu for s in spreads), default=0.0)
    D1 = v_min - i_max
    hop1 = sorted(first_hops) or list(range(J))
    v_lo = min(1.0 - scales[e] * eta for e in hop1)
    v_hi = max(1.0 + 2.0 * spreads[e] for e in hop1)
    mu = parts.mu
    _check_margins(parts, single, gates, hop1, first_hops, spreads, scales, eta, max_coherence)
    theta = (v_lo + mu * v_hi) / 2.0
    A2 = 1.0 / (v_lo - theta)
    v2_hi = (v_hi - theta) / (v_lo - theta)
    gamma = (D1 + v_hi) / (1.0 - mu * v2_hi)
    beta = logit_scale(eps, dataset.vocab_size, v_min, i_max)
    layer2 = []
    for e, k in enumerate(single):
        if e not in second_hops:
            layer2.append([])
            continue
        layer2.append([HopNeuron(A2, -A2 * theta, parts.codes[m - parts.e0],
                                 gamma * parts.codes[o - parts.e0])
                       for m, o in dataset.dictionary_ids(k)])
    layer2.append([])                                              # no-op expert
    s1, s2 = [len(x) for x in layer1], [len(x) for x in layer2]
    f = max(1, max(s1 + s2))
    d, D = lay0.d_model, lay.d_model
    cfg = MoEConfig(vocab_size=dataset.vocab_size, max_len=parts.max_len, d_model=D,
                    n_heads=2, d_head=lay0.d_head, n_experts=J + 1, d_expert=f,
                    expert_sizes=tuple(max(a, b) for a, b in zip(s1, s2)), top_k=1,
                    router_bias=True, router_block=lay0.router_block, gate="renormalised",
                    activation="relu", layernorm=False, unembed_bias=False, n_layers=2)
    model = MoETransformer(cfg)
    W = _pad(parts.embeddings_attention(beta), d, D)
    rb = lay0.router_block[1]
    for prefix, experts, (Wr, br, _) in (("", layer1, r1), ("extra_layers.0.", layer2, r2)):
        W1, B1 = torch.zeros(J + 1, D, f), torch.zeros(J + 1, f)
        W2 = torch.zeros(J + 1, f, D)
        for e, neurons in enumerate(experts):
            for j, neuron in enumerate(neurons):
                neuron.write(W1[e], B1[e], W2[e], j, lay)
        rw = torch.zeros(J + 1, D)
        rw[:, :rb] = torch.as_tensor(Wr.T, dtype=torch.float32)
        W.update({prefix + "experts.w1": W1, prefix + "experts.b1": B1,
                  prefix + "experts.w2": W2, prefix + "experts.b2": torch.zeros(J + 1, D),
                  prefix + "router.weight": rw,
                  prefix + "router.bias": torch.as_tensor(br, dtype=torch.float32)})
    for name in ("w_q", "w_k", "w_v"):                             # layer 2: no attention
        W[f"extra_layers.0.attn.{name}"] = torch.zeros(2, D, lay0.d_head)
    W["extra_layers.0.attn.w_o"] = torch.zeros(2, lay0.d_head, D)
    model.set_weights(W)
    model.eval()
    rep = TwoLayerReport(
        eps=eps, beta=beta, gamma=gamma, eta=eta, mu=mu, v_min=v_min, i_max=i_max, v_lo=v_lo,
        v_hi=v_hi, theta=theta, hop_scale=A2, v2_hi=v2_hi, layout=lay, single=single,
        expert_names=names, first_hop=first, second_hop=second, syntactic=syn_n,
        semantic=sem_n, writes_middle=[e in first_hops for e in range(J)],
        hop_neurons=s2[:J], layer1_sizes=s1, layer2_sizes=s2, gate_spread=spreads,
        route1=lab1, route2=lab2, nodes=nodes, codes=parts.codes,
        router_fits=[r1[2], r2[2]], build_seconds=time.perf_counter() - t0)
    return model, rep


# ---- against the one-layer alternative --------------------------------------------------------
def one_layer_alternative(dataset, eps: float = 1e-4, **kw) -> tuple[MoETransformer,
                                                                      ConstructionReport]:
    """Theorem 4.2's construction of the same dataset: every two-hop task memorised as a task
    of its own (its expert holds one semantic neuron per composed fact)."""
    return build_moe(dataset, eps, **kw)


def compare_sizes(report: TwoLayerReport, one_layer: ConstructionReport, dataset) -> dict:
    """Neurons of the two constructions: totals, the neurons that hold facts (semantic +
    layer 2 vs semantic of every task, composed ones included), and per two-hop task its
    one-layer expert against the layer-2 neurons its second hop adds."""
    require(isinstance(one_layer, ConstructionReport) and one_layer.kind == "moe", "one_layer",
            type(one_layer).__name__, "the ConstructionReport of build_moe on the same dataset")
    two = [k for k, t in enumerate(dataset.tasks) if isinstance(t, TwoHopTask)]
    return dict(
        two_layer_total=report.total_neurons, one_layer_total=int(sum(one_layer.expert_sizes)),
        two_layer_facts=int(sum(report.semantic) + sum(report.layer2_sizes)),
        one_layer_facts=int(sum(one_layer.semantic_neurons)),
        composed_facts=int(sum(dataset.tasks[k].n_pairs for k in two)),
        per_two_hop={dataset.tasks[k].name: dict(
            one_layer_expert=int(one_layer.expert_sizes[k]),
            composed=dataset.tasks[k].n_pairs) for k in two},
        two_layer_largest=int(max(report.layer1_sizes + report.layer2_sizes)),
        one_layer_largest=int(max(one_layer.expert_sizes)))


__all__ = ["build_two_layer", "one_layer_alternative", "compare_sizes"]
