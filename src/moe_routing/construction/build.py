"""Explicit weights for Theorems 4.1 (dense) and 4.2 (MoE) of paper A -- no training.

Everything below is **our construction** (the paper's proof is not available; its ingredients
are in ``task-routing.md`` §3 [S]); it is written into the same :class:`MoETransformer` that the
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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from moe_routing.knowledge import OBJECT_SLOT, SUBJECT_SLOT
from moe_routing.model import MoEConfig, MoETransformer

from .codes import coherence, polynomial_code, structural_code
from .layout import Layout
from .separators import fit_gate, fit_multiclass, fit_point_detectors
from .structure import StructuralNodes, check_hypotheses, token_types


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
    notes: list = field(default_factory=list)


def _check(eps, rho, eta, max_coherence, router_margin):
    if not (isinstance(eps, (int, float)) and 0.0 < eps < 1.0):
        raise ValueError(f"eps={eps!r} outside the accepted range (0, 1)")
    if not 0.0 < rho < 1.0:
        raise ValueError(f"rho={rho!r} outside the accepted range (0, 1)")
    if not 0.0 < eta < 0.1:
        raise ValueError(f"eta={eta!r} outside the accepted range (0, 0.1)")
    if not 0.0 < max_coherence < 0.5:
        raise ValueError(f"max_coherence={max_coherence!r} outside the accepted range (0, 0.5)")
    if not router_margin > 0:
        raise ValueError(f"router_margin={router_margin!r}; accepted: > 0")


class _Pieces:
    """Everything shared by the MoE and dense builds (codes, detectors, attention)."""

    def __init__(self, dataset, rho, eta, max_coherence):
        self.ds = dataset
        self.nodes = nodes = check_hypotheses(dataset)
        tok = dataset.tokenizer
        self.type_of, n_types, self.ent = token_types(tok)
        K = dataset.n_tasks
        self.max_len = T = dataset.seq_len
        self.codes, self.mu = polynomial_code(tok.n_entity, max_coherence)
        self.mu_measured = coherence(self.codes) if tok.n_entity > 1 else 0.0
        self.layout = lay = Layout(n_types, T, self.codes.shape[1], K,
                                   tok.n_special + tok.n_syntactic)
        self.rho, self.eta = rho, eta
        # structural codes z = [TOK | POS | H1] of every node
        self.Z = np.stack([structural_code(ty, n_types, T, rho) for ty in nodes.types])
        self.H1 = self.Z[:, n_types + T:]
        self._detectors()
        # key indicators of each entity
        e0 = int(tok.entity_ids[0]) if tok.n_entity else 0
        self.e0 = e0
        self.keyind = np.zeros((tok.n_entity, K))
        for k in range(K):
            self.keyind[dataset.dictionary_ids(k)[:, 0] - e0, k] = 1.0
        self.lam = math.log(2.0 / eta)
        self.beta2 = self.lam * T + math.log(2.0 * T / eta)

    def _detectors(self):
        """Detectors ℓ_u = 2σ_u(h1) − 1 − G_u(1 − z_pos[t_u]) − G_u(1 − z_tok[s_u]) within each
        group (depth, last type): σ_u(h1(u)) = 1, σ_u ≤ 0 at the other nodes of the group
        (dual basis when the group's codes are independent, else fitted).  Hypothesis (H-code):
        every node's code is a vertex of its group's codes."""
        nodes = self.nodes
        last = np.array([ty[-1] for ty in nodes.types])
        groups: dict[tuple, list] = {}
        for u in range(nodes.n_nodes):
            groups.setdefault((int(nodes.depth[u]), int(last[u])), []).append(u)
        self.det_w = np.zeros_like(self.H1)          # (U, n_types)
        self.det_c = np.zeros(nodes.n_nodes)
        self.n_fitted_groups = 0
        tok = self.ds.tokenizer
        for members in groups.values():
            if len(members) == 1:
                self.det_c[members[0]] = 1.0          # σ ≡ 1: position and token gates suffice
                continue
            try:
                w, c = fit_point_detectors(self.H1[members])
            except ValueError as err:
                raise ValueError(
                    "hypothesis (H-code) fails: among the prefixes of the same length ending "
                    "in the same token type, some head-1 code lies in the convex hull of the "
                    f"others ({err}); group: {[self.nodes.text(u, tok) for u in members[:8]]}"
                ) from None
            self.n_fitted_groups += int(np.any(c != 0))
            self.det_w[members] = w
            self.det_c[members] = c
        # |σ_u(h1)| ≤ ‖w_u‖ + |c_u| because ‖h1‖ ≤ 1 (a convex combination of unit vectors)
        self.det_G = 2.0 * (np.linalg.norm(self.det_w, axis=1) + np.abs(self.det_c)) + 1.0

    def detector(self, u: int) -> tuple[np.ndarray, float]:
        """(weights over the syntactic block [TOK|POS|H1], bias) of ℓ_u."""
        lay, nodes = self.layout, self.nodes
        w = np.zeros(lay.router_block[1])
        G = self.det_G[u]
        w[int(nodes.types[u][-1])] = G
        w[lay.n_types + int(nodes.depth[u])] = G
        w[lay.block("H1")] = 2.0 * self.det_w[u]
        return w, 2.0 * self.det_c[u] - 1.0 - 2.0 * G

    def output_of(self, k: int, symbols) -> list[int]:
        """OUT coordinates raised for task k's next symbols (⋆2 excluded: semantic neurons)."""
        lay = self.layout
        out = []
        for s in symbols:
            if s == SUBJECT_SLOT:
                out.append(lay.block("OUT_KEY").start + k)
            elif s != OBJECT_SLOT:
                out.append(lay.block("OUT_SYN").start + int(s))
        return out

    # ---- weights shared by both builds -----------------------------------------------------
    def embeddings_attention(self, beta: float):
        lay, tok = self.layout, self.ds.tokenizer
        V, d, T, c = len(tok), lay.d_model, self.max_len, lay.d_head
        K, dc = lay.n_tasks, lay.d_code
        W = {}
        te = torch.zeros(V, d)
        te[torch.arange(V), torch.as_tensor(self.type_of)] = 1.0                     # TOK
        ent = torch.as_tensor(tok.entity_ids)
        ec = lay.block("ENTC").start
        te[ent[:, None], ec + torch.arange(dc)[None, :]] = torch.as_tensor(self.codes, dtype=torch.float32)
        te[ent[:, None], ec + dc + torch.arange(K)[None, :]] = torch.as_tensor(self.keyind, dtype=torch.float32)
        W["tok_emb.weight"] = te
        pe = torch.zeros(T, d)
        pe[torch.arange(T), lay.block("POS").start + torch.arange(T)] = 1.0
        W["pos_emb.weight"] = pe
        sc = math.sqrt(c)
        wq, wk = torch.zeros(2, d, c), torch.zeros(2, d, c)
        wv, wo = torch.zeros(2, d, c), torch.zeros(2, c, d)
        pos = lay.block("POS")
        wq[:, pos, 0] = 1.0                                         # constant query (Σ pos = 1)
        j = torch.arange(T, dtype=torch.float64)
        wk[0, pos, 0] = (j * math.log(self.rho) * sc).float()       # head 1: α_j ∝ ρ^j
        wk[1, pos, 0] = (-self.lam * j * sc).float()                # head 2: −λ j
        wk[1, lay.block("TOK").start + self.ent, 0] = self.beta2 * sc   # + β₂ on entities
        nt = lay.n_types
        wv[0, lay.block("TOK"), :nt] = torch.eye(nt)
        wo[0, :nt, lay.block("H1")] = torch.eye(nt)
        ne = dc + K
        wv[1, lay.block("ENTC"), :ne] = torch.eye(ne)
        wo[1, :ne, lay.block("H2")] = torch.eye(ne)
        W.update({"attn.w_q": wq, "attn.w_k": wk, "attn.w_v": wv, "attn.w_o": wo})
        wu = torch.zeros(V, d)
        osyn = lay.block("OUT_SYN").start
        nsyn = lay.n_out_syn
        wu[torch.arange(nsyn), osyn + torch.arange(nsyn)] = beta
        wu[ent[:, None], lay.block("OUT_KEY").start + torch.arange(K)[None, :]] = \
            beta * torch.as_tensor(self.keyind, dtype=torch.float32)
        wu[ent[:, None], lay.block("OUT_VAL").start + torch.arange(dc)[None, :]] = \
            beta * torch.as_tensor(self.codes, dtype=torch.float32)
        W["unembed.weight"] = wu
        return W


def _neurons_task(P: _Pieces, k: int, members: np.ndarray, gate, dense: bool):
    """Neurons of task k's circuit: list of (w1 column dict, bias, w2 coords/vector)."""
    lay, nodes = P.layout, P.nodes
    rb = lay.router_block[1]
    syn, sem = [], []
    for u in members:
        outs = P.output_of(k, nodes.next[u][k])
        if outs:
            w, b = P.detector(u)
            syn.append((w, b, outs))
    gw, gc, spread = gate
    B = 2.0
    A = 2.0 * B * (0.5 + spread) / (1.0 - P.mu)
    C = -A - B / 2.0
    d = P.ds.dictionary_ids(k)
    for a, bb in d:
        sem.append((A, P.codes[a - P.e0], B * gw, C + B * gc, P.codes[bb - P.e0]))
    return syn, sem, A


def _write(W1, B1, W2, e, j, lay, neuron, kind):
    """Write one neuron into expert e, slot j."""
    rb = lay.router_block[1]
    if kind == "syn":
        w, b, outs = neuron
        W1[e, :rb, j] = torch.as_tensor(w, dtype=torch.float32)
        B1[e, j] = b
        W2[e, j, outs] = 1.0
    elif kind == "sem":
        A, ca, gw, gb, cb = neuron
        h2 = lay.block("H2").start
        W1[e, h2:h2 + lay.d_code, j] = torch.as_tensor(A * ca, dtype=torch.float32)
        W1[e, :rb, j] += torch.as_tensor(gw, dtype=torch.float32)
        B1[e, j] = gb
        ov = lay.block("OUT_VAL").start
        W2[e, j, ov:ov + lay.d_code] = torch.as_tensor(cb, dtype=torch.float32)
    else:  # junction neuron after the subject: ℓ_u + 2(h2[key_k] − 1)
        w, b, outs, k = neuron
        W1[e, :rb, j] = torch.as_tensor(w, dtype=torch.float32)
        W1[e, lay.block("H2").start + lay.d_code + k, j] = 2.0
        B1[e, j] = b - 2.0
        W2[e, j, outs] = 1.0


def _junction_neurons(P: _Pieces):
    nodes = P.nodes
    out = []
    for u in np.nonzero(nodes.junction)[0]:
        w, b = P.detector(u)
        if nodes.kind[u] == 0:     # before the subject: union of the next symbols
            outs = sorted({o for k in nodes.tasks[u] for o in P.output_of(k, nodes.next[u][k])})
            out.append(("syn", (w, b, outs)))
        else:                      # after the subject: per task, gated on "subject ∈ keys(Δ_k)"
            for k in nodes.tasks[u]:
                outs = P.output_of(k, nodes.next[u][k])
                out.append(("junc", (w, b, outs, k)))
    return out


def beta_for(report, eps: float, V: int) -> float:
    """β(ε) = (log((V−1)/ε) + log 2)/(v_min − i_max) for the constants of ``report``."""
    if not 0.0 < eps < 1.0:
        raise ValueError(f"eps={eps!r} outside the accepted range (0, 1)")
    return _beta(eps, V, report.v_min, report.i_max)


def _beta(eps, V, v_min, i_max):
    if not v_min - i_max > 0:
        raise ValueError(f"no logit margin: v_min={v_min:.3g} ≤ i_max={i_max:.3g} (entity code "
                         f"too coherent or gates too spread); lower max_coherence or eta")
    return (math.log((V - 1) / eps) + math.log(2.0)) / (v_min - i_max)


def _assemble(P, eps, expert_neurons, n_experts, router, kind, t0, extra):
    lay, ds = P.layout, P.ds
    V = ds.vocab_size
    sizes = [len(x) for x in expert_neurons]
    f = max(1, max(sizes))
    spreads = extra["spreads"]
    A_max = extra["A_max"]
    v_min = min(1.0, 1.0 - A_max * P.eta, 1.0 - 2.0 * P.eta)
    i_max = max((1.0 + 2.0 * s) * P.mu for s in spreads) if spreads else 0.0
    beta = _beta(eps, V, v_min, i_max)
    cfg = MoEConfig(vocab_size=V, max_len=P.max_len, d_model=lay.d_model, n_heads=2,
                    d_head=lay.d_head, n_experts=n_experts, d_expert=f,
                    expert_sizes=tuple(sizes), top_k=1, router_bias=True,
                    router_block=lay.router_block if n_experts > 1 else None,
                    gate="renormalised", activation="relu", layernorm=False,
                    unembed_bias=False)
    model = MoETransformer(cfg)
    W = P.embeddings_attention(beta)
    d = lay.d_model
    W1 = torch.zeros(n_experts, d, f)
    B1 = torch.zeros(n_experts, f)
    W2 = torch.zeros(n_experts, f, d)
    for e, neurons in enumerate(expert_neurons):
        for j, (kd, neuron) in enumerate(neurons):
            _write(W1, B1, W2, e, j, lay, neuron, kd)
    W.update({"experts.w1": W1, "experts.b1": B1, "experts.w2": W2,
              "experts.b2": torch.zeros(n_experts, d)})
    rw = torch.zeros(n_experts, d)
    rbias = torch.zeros(n_experts)
    if router is not None:
        rw[:, :lay.router_block[1]] = torch.as_tensor(router[0].T, dtype=torch.float32)
        rbias[:] = torch.as_tensor(router[1], dtype=torch.float32)
    W["router.weight"] = rw
    W["router.bias"] = rbias
    model.set_weights(W)
    model.eval()
    K = ds.n_tasks
    L, N = ds.max_template_length, ds.max_dictionary_size
    rep = ConstructionReport(
        kind=kind, eps=eps, beta=beta, rho=P.rho, eta=P.eta, lam=P.lam, beta2=P.beta2,
        mu=P.mu, mu_measured=P.mu_measured, d_code=lay.d_code, v_min=v_min, i_max=i_max,
        layout=lay, expert_sizes=sizes, syntactic_neurons=extra["n_syn"],
        semantic_neurons=extra["n_sem"], junction_neurons=extra["n_junc"],
        bounds=[L * t.n_templates + N for t in ds.tasks],
        router_margin_fit=extra.get("router_margin", float("nan")), gate_spread=spreads,
        detector_norm_max=float(np.linalg.norm(P.det_w, axis=1).max()), nodes=P.nodes,
        codes=P.codes, build_seconds=time.perf_counter() - t0,
        task_expert=list(range(K)) if kind == "moe" else [0] * K)
    return model, rep


def build_moe(dataset, eps: float = 1e-4, *, rho: float = 0.5, eta: float = 0.01,
              max_coherence: float = 0.3, router_margin: float = 20.0):
    """Theorem 4.2: ``(MoETransformer, ConstructionReport)`` with K task experts + 1 junction
    expert, valid-next-token mass > 1 − ε at every prefix (verify with :mod:`.verify`).

    Raises ValueError (before any heavy work) on bad parameters, and with the offending
    prefixes when the dataset violates a hypothesis: (H-obj) object slots task-determined,
    (H-code) detector codes independent, (H-route) routing labels linearly separable."""
    _check(eps, rho, eta, max_coherence, router_margin)
    t0 = time.perf_counter()
    P = _Pieces(dataset, rho, eta, max_coherence)
    nodes, K = P.nodes, dataset.n_tasks
    Wr, br, m = fit_multiclass(P.Z, nodes.label, K + 1)
    if not m.min() > 0:
        bad = np.nonzero(m <= 0)[0]
        tok = dataset.tokenizer
        raise ValueError("hypothesis (H-route) fails: no linear router on the structural "
                         f"block found for {len(bad)} prefixes, e.g. "
                         f"{[nodes.text(u, tok) for u in bad[:5]]}")
    scale = router_margin / m.min()
    experts, n_syn, n_sem, spreads, A_max = [], [], [], [], 0.0
    for k in range(K):
        members = np.nonzero(nodes.label == k)[0]
        obj = np.array([OBJECT_SLOT in nodes.next[u][k] for u in members])
        w, c, info = fit_gate(P.Z[members], obj)
        syn, sem, A = _neurons_task(P, k, members, (w, c, info["spread"]), dense=False)
        experts.append([("syn", x) for x in syn] + [("sem", x) for x in sem])
        n_syn.append(len(syn))
        n_sem.append(len(sem))
        spreads.append(info["spread"])
        A_max = max(A_max, A)
    junc = _junction_neurons(P)
    experts.append(junc)
    return _assemble(P, eps, experts, K + 1, (Wr * scale, br * scale), "moe", t0,
                     dict(spreads=spreads, A_max=A_max, n_syn=n_syn, n_sem=n_sem,
                          n_junc=len(junc), router_margin=float(m.min())))


def build_dense(dataset, eps: float = 1e-4, *, rho: float = 0.5, eta: float = 0.01,
                max_coherence: float = 0.3):
    """Theorem 4.1: one dense FFN holding pairwise-disjoint per-task circuits C(k) (syntactic
    detectors of the task's nodes + one semantic neuron per entry, gated by a *global* gate
    σ_k fitted against all nodes) plus the shared-prefix circuit C(J) (junction neurons).
    Off-task neurons are silent because their pre-activations are negative there (the biases
    of ℓ_u and of the gate), not because of a router."""
    _check(eps, rho, eta, max_coherence, 1.0)
    t0 = time.perf_counter()
    P = _Pieces(dataset, rho, eta, max_coherence)
    nodes, K = P.nodes, dataset.n_tasks
    neurons, n_syn, n_sem, spreads, A_max = [], [], [], [], 0.0
    for k in range(K):
        members = np.nonzero(nodes.label == k)[0]
        obj = np.array([k in nodes.next[u] and OBJECT_SLOT in nodes.next[u][k]
                        for u in range(nodes.n_nodes)])
        w, c, info = fit_gate(P.Z, obj)
        syn, sem, A = _neurons_task(P, k, members, (w, c, info["spread"]), dense=True)
        neurons += [("syn", x) for x in syn] + [("sem", x) for x in sem]
        n_syn.append(len(syn))
        n_sem.append(len(sem))
        spreads.append(info["spread"])
        A_max = max(A_max, A)
    junc = _junction_neurons(P)
    neurons += junc
    return _assemble(P, eps, [neurons], 1, None, "dense", t0,
                     dict(spreads=spreads, A_max=A_max, n_syn=n_syn, n_sem=n_sem,
                          n_junc=len(junc)))
