"""Explicit weights for Theorems 4.1 (dense) and 4.2 (MoE) of paper A -- no training.

Everything below is **our construction** (the paper's proof is not available; only a secondary
summary of its ingredients is); it is written into the same :class:`MoETransformer` that the
experiments train, with ``layernorm=False``, two heads, ``W_O`` a block selection ("W_O = I"),
top-1 routing with the renormalised gate (the chosen expert's output is multiplied by exactly
1) and ReLU experts.  Residual layout: :mod:`.layout`.

Steps and the constants each one derives (η: head-2 attention leak, μ: entity-code coherence):

1. **Head 1 (structure).**  Constant query, keys from the position: score_j = j·log ρ, so
   α_j ∝ ρ^j exactly; value = the token type (entities → ENT).  Output
   ``h1 = Σ_j α_j e_{s_j}``: identical for all subjects/objects (disentanglement by design).
2. **Head 2 (subject).**  score_j = β₂·1[token j is an entity] − λ·j with
   ``λ = log(2/η)``, ``β₂ = λ·T + log(2T/η)`` (T = max_len): at least 1 − η of the attention
   sits on the first entity (the subject) once it is seen; the value is the entity block
   ``[c(e) | key indicators]``.  Before the subject, every value is 0, so the output is 0.
3. **Router** (reads ``[TOK | POS | H1]`` only): a linear multiclass separator of the routing
   labels of the structural nodes (task k if only task k has templates through the node, else
   the junction expert), fitted and then verified to classify every node with a positive
   margin; scaled so that the smallest logit margin is ``router_margin``.
4. **Syntactic neurons** (one per node of the expert's nodes that continues with a word, EOS or
   ⋆1): ``ℓ_u(z) = 2 w_u·h1 − 1 − G_u (1 − z_pos[t_u]) − G_u (1 − z_tok[s_u])`` with w_u the
   dual basis of the h1-codes of the nodes sharing u's depth and last token type and
   ``G_u = 2‖w_u‖ + 1``: ℓ_u = 1 at u, −1 at the other nodes of its group, ≤ −2 elsewhere, so
   ReLU(ℓ_u) is the exact indicator of node u.  It raises the next word (or EOS), or the
   "keys of Δ_k" direction when the next symbol is ⋆1.
5. **Semantic neurons** (one per (a, b) ∈ Δ_k): ``A·⟨c(a), h2⟩ + B·σ_k(z) + C`` with a gate σ_k
   (≥ 1 exactly at task k's object slots, ≤ 0 at its other nodes; spread s_k = max σ_k − 1 at
   object slots), B = 2, ``A = 2B(1/2 + s_k)/(1 − μ)``, C = −A − B/2: fires (≥ 1 − Aη) iff the
   subject is a and the prefix is at an object slot of task k; raises c(b) in OUT_VAL.
6. **Junction expert** (ours: prefixes shared by several tasks): one ℓ_u-neuron per shared
   node before the subject (raises the union of the next symbols); after the subject, one
   neuron per (node, task) ``ℓ_u + 2(h2[key_k] − 1)`` that fires iff the subject is a key of
   Δ_k (the only subject-dependence allowed by hypothesis (H-obj)).
7. **Unembedding** (reads OUT only): ``W_U = β·[one-hot words | key indicators | c(e)]``.
   Every active output has activation in [v_min, v_max]; valid logits ≥ β·v_min, invalid
   logits ≤ β·i_max with ``i_max = max_k (1 + 2s_k)·μ`` (an entity sharing code overlap with
   the looked-up value).  With ``Δ = β(v_min − i_max) = log((V−1)/ε) + log 2``:

       P(invalid | w) ≤ (V − 1)·e^{−Δ} = ε/2 < ε      ⇒   β = (log((V−1)/ε) + log 2)/(v_min − i_max).

The dense variant (Theorem 4.1) puts every neuron in one FFN; the router's job is done by
global gates σ_k (fitted against *all* nodes) and the syntactic detectors, which are already
global.

Where each step lives: steps 1, 2, 4 and 7's weights in :class:`.parts.ConstructionParts`
(``embeddings_attention``, ``detector``), step 3 in :func:`.separators.fit_multiclass`, steps
5-6 in :mod:`.circuits` (:func:`~.circuits.task_circuit`, :func:`~.circuits.junction_circuit`),
β in :func:`logit_scale`.  Both builds run the same per-task loop (:func:`task_circuits`).

**Hypotheses and refusals.**  The construction needs (H-obj) (:mod:`.structure`), (H-code)
(step 4), (H-route) (step 3), (H-gate): the gate σ_k of step 5 exists, and (H-margin): the
value read at a valid next token exceeds every invalid one, ``v_min > i_max`` (step 7; checked
by :func:`logit_scale`, whose refusal names it).  (H-code), (H-route) and (H-gate) are
linear separability, found by iterative fits; a fit that stops short is *not* a refusal: a
linear program decides, and either supplies the separator (the build continues; the report's
``router_fit``/``gate_fits``/``detector_fits`` say so) or proves that none exists -- then
:class:`.refusals.HypothesisFails` names the hypothesis, the task(s) and witness prefixes and
carries the LP certificate (:mod:`.separability`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..knowledge import OBJECT_SLOT, KnowledgeDataset
from ..model import MoEConfig, MoETransformer
from .._internal.validation import fail, number, positive, probability

from .circuits import TaskCircuit, junction_circuit, task_circuit
from .layout import Layout
from .parts import ConstructionParts
from .refusals import HypothesisFails, HypothesisUndecided
from .separators import (
    DETECTOR_FIT,
    GATE_FIT,
    LP_TIME_LIMIT,
    ROUTER_FIT,
    FitDidNotConverge,
    FitOutcome,
    FitSettings,
    NotSeparable,
    check_settings,
    fit_gate,
    fit_multiclass,
)
from .structure import StructuralNodes


@dataclass
class ConstructionReport:
    """Constants, sizes and fitted quantities of one construction (all derived, none tuned)."""

    kind: str                       # "moe" | "dense"
    eps: float
    beta: float                     # W_U scale
    rho: float                      # head-1 decay
    eta: float                      # head-2 leak bound
    lam: float                      # head-2 position penalty λ
    beta2: float                    # head-2 entity bonus β₂
    mu: float                       # entity-code coherence (bound (m−1)/p)
    mu_measured: float
    d_code: int
    v_min: float
    i_max: float
    layout: Layout
    expert_sizes: list              # live neurons per expert (last = junction for "moe")
    syntactic_neurons: list         # per task
    semantic_neurons: list          # per task
    junction_neurons: int
    bounds: list                    # L·|T(k)| + N per task
    router_margin_fit: float        # min classification margin of the fitted router (before scaling)
    gate_spread: list               # s_k per task
    detector_norm_max: float
    nodes: StructuralNodes = field(repr=False)
    codes: np.ndarray = field(repr=False)
    build_seconds: float = 0.0
    task_expert: list = field(default_factory=list)   # expert of task k (moe)
    notes: list = field(default_factory=list)         # fits the LP had to finish
    router_fit: FitOutcome | None = None              # how the router was found (moe)
    gate_fits: list = field(default_factory=list)     # FitOutcome of each task's gate
    detector_fits: list = field(default_factory=list)  # FitOutcome of each fitted detector group


@dataclass(frozen=True, eq=False)
class LinearRouter:
    """The router of step 3, scaled so that its smallest logit margin is ``router_margin``."""

    weight: np.ndarray              # (router_block, E)
    bias: np.ndarray                # (E,)
    fit_margin: float               # smallest margin of the fitted separator before scaling
    fit: FitOutcome


def _check_dataset(dataset) -> KnowledgeDataset:
    """``dataset`` itself when it is a :class:`~moe_routing.knowledge.KnowledgeDataset`.

    Both builds read the dataset's tokenizer, tasks and templates; anything else -- an empty
    list of tasks above all, which has no templates to build circuits for -- is refused here,
    before any fit, instead of failing on a missing attribute deep inside the construction.
    """
    if isinstance(dataset, KnowledgeDataset):
        return dataset
    if isinstance(dataset, (list, tuple)) and not dataset:
        fail("dataset", dataset, "a KnowledgeDataset with at least one task (an empty dataset has "
             "no templates to build circuits for)")
    fail("dataset", dataset, "a KnowledgeDataset (moe_routing.knowledge.KnowledgeDataset(tasks), "
         "tasks a non-empty list of KnowledgeTask)")


def check_parameters(eps, rho, eta, max_coherence, lp_time_limit, **fits) -> tuple:
    """The build's scalar parameters as floats (ValueError naming the first bad one), and each
    ``FitSettings`` of ``fits`` checked; NumPy scalars are accepted."""
    out = (probability("eps", eps), probability("rho", rho),
           number("eta", eta, low=0, high=0.1, low_open=True, high_open=True),
           number("max_coherence", max_coherence, low=0, high=0.5, low_open=True, high_open=True),
           positive("lp_time_limit", lp_time_limit))
    for name, value in fits.items():
        check_settings(name, value)
    return out


def beta_for(report, eps: float, V: int) -> float:
    """β(ε) = (log((V−1)/ε) + log 2)/(v_min − i_max) for the constants of ``report``."""
    return logit_scale(probability("eps", eps), V, report.v_min, report.i_max)


def logit_scale(eps: float, V: int, v_min: float, i_max: float) -> float:
    """β of step 7: the W_U scale that puts P(invalid | w) ≤ (V − 1)e^{−β(v_min − i_max)} = ε/2."""
    if not v_min - i_max > 0:
        raise ValueError(f"hypothesis (H-margin) fails: the logit margin v_min − i_max = "
                         f"{v_min - i_max:.3g} ≤ 0 (v_min = {v_min:.3g}, i_max = {i_max:.3g}): "
                         "the entity codes are too coherent for the gates' spread; lower "
                         "max_coherence or eta")
    return (math.log((V - 1) / eps) + math.log(2.0)) / (v_min - i_max)


def _label_name(nodes: StructuralNodes, label: int) -> str:
    return nodes.task_names[label] if label < nodes.n_tasks else "junction (shared prefixes)"


def fit_router(parts: ConstructionParts, router_margin: float, settings: FitSettings,
               lp_time_limit: float) -> LinearRouter:
    """Step 3: a linear separator of the routing labels on the structural codes, verified on
    every node (hypothesis (H-route)), scaled to logit margin ``router_margin``."""
    nodes, K, tok = parts.nodes, parts.ds.n_tasks, parts.ds.tokenizer
    try:
        Wr, br, m, fit = fit_multiclass(parts.Z, nodes.label, K + 1, settings,
                                        lp_time_limit=lp_time_limit)
    except NotSeparable as err:
        cert = err.certificate
        rows = list(dict.fromkeys(int(u) for u in cert.rows))     # support, heaviest first
        raise HypothesisFails(
            "H-route", sorted({_label_name(nodes, int(nodes.label[u])) for u in rows}),
            [nodes.text(u, tok) for u in rows], cert,
            "no linear router on the structural block exists; Farkas weights α (prefix, its "
            "label, against class): " + ", ".join(
                f"{a:.3g}·('{nodes.text(int(u), tok)}', {_label_name(nodes, int(nodes.label[u]))}"
                f", {_label_name(nodes, int(c))})"
                for u, c, a in zip(cert.rows[:8], cert.tag[:8], cert.weights[:8], strict=True))
            + f" ({err})") from None
    except FitDidNotConverge as err:
        raise HypothesisUndecided(
            "H-route", sorted({_label_name(nodes, int(nodes.label[u])) for u in err.worst_rows}),
            [nodes.text(int(u), tok) for u in err.worst_rows], err) from None
    scale = router_margin / m.min()
    router = LinearRouter(Wr * scale, br * scale, float(m.min()), fit)
    # the model computes in float32: an LP vertex with large weights could lose the margin there
    S32 = parts.Z.astype(np.float32) @ router.weight.astype(np.float32) \
        + router.bias.astype(np.float32)                                   # (U, K + 1)
    wrong = np.nonzero(S32.argmax(1) != nodes.label)[0]
    if len(wrong):
        raise HypothesisUndecided(
            "H-route", sorted({_label_name(nodes, int(nodes.label[u])) for u in wrong}),
            [nodes.text(int(u), tok) for u in wrong],
            f"the separator found ({fit.describe()}; weights up to "
            f"{np.abs(router.weight).max():.1e}) misroutes {len(wrong)} nodes in float32")
    return router


def task_circuits(parts: ConstructionParts, *, global_gates: bool, settings: FitSettings,
                  lp_time_limit: float) -> list[TaskCircuit]:
    """The per-task loop of both builds: for each task k, the gate σ_k (≥ 1 at k's object
    slots, ≤ 0 at k's other nodes -- or at *every* other node with ``global_gates``, the dense
    layer having no router; hypothesis (H-gate)) and the circuit C(k) built on it."""
    nodes, tok = parts.nodes, parts.ds.tokenizer
    out = []
    for k in range(parts.ds.n_tasks):
        members = np.nonzero(nodes.label == k)[0]
        rows = np.arange(nodes.n_nodes) if global_gates else members
        obj = np.array([OBJECT_SLOT in nodes.next[u].get(k, ()) for u in rows])
        try:
            gate = fit_gate(parts.Z[rows], obj, settings, lp_time_limit=lp_time_limit)
        except NotSeparable as err:       # certificate rows → structural nodes
            cert = dataclasses.replace(err.certificate, rows=rows[err.certificate.rows])
            texts = [nodes.text(int(u), tok) for u in cert.rows]
            where = "other nodes" if global_gates else "the task's other nodes"
            slots = [t for t, side in zip(texts, cert.tag, strict=True) if side == 0]
            others = [t for t, side in zip(texts, cert.tag, strict=True) if side == 1]

            def combination(side: int, cert=cert, texts=texts) -> str:
                # Σ λ_u z(u) over one side of the certificate, u a structural node
                return " + ".join(f"{lam:.3g}·z[{int(u)}] ({text!r})" for u, lam, text, tag
                                  in zip(cert.rows, cert.weights, texts, cert.tag, strict=True)
                                  if tag == side)

            exact = ("exact: no gate of any size" if cert.residual == 0 else
                     f"any gate of margin 1 needs weights ≥ {cert.min_weight_norm:.1e}")
            raise HypothesisFails(
                "H-gate", [nodes.task_names[k]], slots + others, cert,
                f"a convex combination of the structural codes of object slots, "
                f"{combination(0)}, equals a convex combination of those of {where}, "
                f"{combination(1)} -- z[u] is the structural code of structural node u, the "
                f"numbering of certificate.rows (residual {cert.residual:.1e}, {exact}); so no "
                f"affine gate is ≥ 1 at those object slots and ≤ 0 at those nodes "
                f"(LP: {cert.primal})"
            ) from None
        except FitDidNotConverge as err:
            raise HypothesisUndecided("H-gate", [nodes.task_names[k]],
                                      [nodes.text(int(rows[r]), tok) for r in err.worst_rows],
                                      err) from None
        out.append(task_circuit(parts, k, members, gate))
    return out


def _assemble(parts: ConstructionParts, eps: float, experts: list[list],
              circuits: list[TaskCircuit], n_junction: int, router: LinearRouter | None,
              kind: str, t0: float):
    """Write the neurons of ``experts`` (one list per expert) and the router into a
    :class:`MoETransformer`, with β from the circuits' constants (step 7)."""
    lay, ds = parts.layout, parts.ds
    V = ds.vocab_size
    n_experts = len(experts)
    sizes = [len(x) for x in experts]
    f = max(1, max(sizes))
    spreads = [c.gate.spread for c in circuits]
    A_max = max([0.0] + [c.semantic_scale for c in circuits])
    v_min = min(1.0, 1.0 - A_max * parts.eta, 1.0 - 2.0 * parts.eta)
    i_max = max((1.0 + 2.0 * s) * parts.mu for s in spreads) if spreads else 0.0
    beta = logit_scale(eps, V, v_min, i_max)
    cfg = MoEConfig(vocab_size=V, max_len=parts.max_len, d_model=lay.d_model, n_heads=2,
                    d_head=lay.d_head, n_experts=n_experts, d_expert=f,
                    expert_sizes=tuple(sizes), top_k=1, router_bias=True,
                    router_block=lay.router_block if n_experts > 1 else None,
                    gate="renormalised", activation="relu", layernorm=False,
                    unembed_bias=False)
    model = MoETransformer(cfg)
    W = parts.embeddings_attention(beta)
    d = lay.d_model
    W1 = torch.zeros(n_experts, d, f)                      # (E, d, f)
    B1 = torch.zeros(n_experts, f)                         # (E, f)
    W2 = torch.zeros(n_experts, f, d)                      # (E, f, d)
    for e, neurons in enumerate(experts):
        for j, neuron in enumerate(neurons):
            neuron.write(W1[e], B1[e], W2[e], j, lay)
    W.update({"experts.w1": W1, "experts.b1": B1, "experts.w2": W2,
              "experts.b2": torch.zeros(n_experts, d)})
    rw = torch.zeros(n_experts, d)
    rbias = torch.zeros(n_experts)
    if router is not None:
        rw[:, :lay.router_block[1]] = torch.as_tensor(router.weight.T, dtype=torch.float32)
        rbias[:] = torch.as_tensor(router.bias, dtype=torch.float32)
    W["router.weight"] = rw
    W["router.bias"] = rbias
    model.set_weights(W)
    model.eval()
    K = ds.n_tasks
    L, N = ds.max_template_length, ds.max_dictionary_size
    gate_fits = [c.gate.outcome for c in circuits]
    notes = [f"{what}: {fit.describe()}" for what, fit in
             ([("router", router.fit)] if router is not None else [])
             + [(f"gate of task {ds.tasks[c.task].name}", c.gate.outcome) for c in circuits]
             + [("detector group", o) for o in parts.detector_fits]
             if fit.method == "LP"]
    rep = ConstructionReport(
        kind=kind, eps=eps, beta=beta, rho=parts.rho, eta=parts.eta, lam=parts.lam,
        beta2=parts.beta2, mu=parts.mu, mu_measured=parts.mu_measured, d_code=lay.d_code,
        v_min=v_min, i_max=i_max, layout=lay, expert_sizes=sizes,
        syntactic_neurons=[len(c.syntactic) for c in circuits],
        semantic_neurons=[len(c.semantic) for c in circuits], junction_neurons=n_junction,
        bounds=[L * t.n_templates + N for t in ds.tasks],
        router_margin_fit=router.fit_margin if router is not None else float("nan"),
        gate_spread=spreads,
        detector_norm_max=float(np.linalg.norm(parts.det_w, axis=1).max()), nodes=parts.nodes,
        codes=parts.codes, build_seconds=time.perf_counter() - t0,
        task_expert=list(range(K)) if kind == "moe" else [0] * K, notes=notes,
        router_fit=router.fit if router is not None else None, gate_fits=gate_fits,
        detector_fits=list(parts.detector_fits))
    return model, rep


def build_moe(dataset, eps: float = 1e-4, *, rho: float = 0.5, eta: float = 0.01,
              max_coherence: float = 0.3, router_margin: float = 20.0,
              router_fit: FitSettings = ROUTER_FIT, gate_fit: FitSettings = GATE_FIT,
              detector_fit: FitSettings = DETECTOR_FIT, lp_time_limit: float = LP_TIME_LIMIT):
    """Theorem 4.2: ``(MoETransformer, ConstructionReport)`` with K task experts + 1 junction
    expert, valid-next-token mass > 1 − ε at every prefix (verify with :mod:`.verify`).

    ``router_fit``, ``gate_fit``, ``detector_fit``: knobs of the three iterative fits;
    ``lp_time_limit``: seconds HiGHS may spend on one LP when a fit stops short.  Raises
    ValueError (before any heavy work) on bad parameters, and
    :class:`.refusals.HypothesisFails` (a ValueError, with the proof) when the dataset violates
    a hypothesis: (H-obj) object slots task-determined, (H-code) detector codes in convex
    position, (H-route) routing labels linearly separable, (H-gate) gates exist."""
    eps, rho, eta, max_coherence, lp_time_limit = check_parameters(
        eps, rho, eta, max_coherence, lp_time_limit, router_fit=router_fit, gate_fit=gate_fit,
        detector_fit=detector_fit)
    router_margin = positive("router_margin", router_margin)
    dataset = _check_dataset(dataset)      # after the parameters: each refusal names one argument
    t0 = time.perf_counter()
    parts = ConstructionParts(dataset, rho, eta, max_coherence, detector_fit, lp_time_limit)
    router = fit_router(parts, router_margin, router_fit, lp_time_limit)
    circuits = task_circuits(parts, global_gates=False, settings=gate_fit,
                             lp_time_limit=lp_time_limit)
    junction = junction_circuit(parts)
    experts = [c.neurons for c in circuits] + [junction]
    return _assemble(parts, eps, experts, circuits, len(junction), router, "moe", t0)


def build_dense(dataset, eps: float = 1e-4, *, rho: float = 0.5, eta: float = 0.01,
                max_coherence: float = 0.3, gate_fit: FitSettings = GATE_FIT,
                detector_fit: FitSettings = DETECTOR_FIT, lp_time_limit: float = LP_TIME_LIMIT):
    """Theorem 4.1: one dense FFN holding pairwise-disjoint per-task circuits C(k) (syntactic
    detectors of the task's nodes + one semantic neuron per entry, gated by a *global* gate
    σ_k fitted against all nodes) plus the shared-prefix circuit C(J) (junction neurons).
    Off-task neurons are silent because their pre-activations are negative there (the biases
    of ℓ_u and of the gate), not because of a router.  Parameters and refusals as
    :func:`build_moe` (no router)."""
    eps, rho, eta, max_coherence, lp_time_limit = check_parameters(
        eps, rho, eta, max_coherence, lp_time_limit, gate_fit=gate_fit,
        detector_fit=detector_fit)
    dataset = _check_dataset(dataset)
    t0 = time.perf_counter()
    parts = ConstructionParts(dataset, rho, eta, max_coherence, detector_fit, lp_time_limit)
    circuits = task_circuits(parts, global_gates=True, settings=gate_fit,
                             lp_time_limit=lp_time_limit)
    junction = junction_circuit(parts)
    neurons = [n for c in circuits for n in c.neurons] + junction
    return _assemble(parts, eps, [neurons], circuits, len(junction), None, "dense", t0)
