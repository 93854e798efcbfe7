"""What the MoE and the dense builds share: codes, structural codes, node detectors, attention.

:class:`ConstructionParts` derives, from the dataset and the constants ρ, η and the coherence
bound, everything that does not depend on how the feed-forward layer is organised (steps 1, 2
and 4 of :mod:`.build`): the entity codes and key indicators, the residual :class:`.Layout`,
the structural code z = [TOK | POS | H1] of every structural node, the detectors ℓ_u of every
node (hypothesis (H-code)), head 2's constants λ and β₂, and the embedding, attention and
unembedding weights.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..knowledge import OBJECT_SLOT, SUBJECT_SLOT

from .codes import coherence, polynomial_code, structural_code
from .layout import Layout
from .refusals import HypothesisFails, HypothesisUndecided
from .separators import (
    DETECTOR_FIT,
    LP_TIME_LIMIT,
    FitDidNotConverge,
    NotSeparable,
    fit_point_detectors,
)
from .structure import check_hypotheses, token_types


class ConstructionParts:
    """Everything shared by the MoE and dense builds (codes, detectors, attention).

    Raises :class:`.refusals.HypothesisFails` when (H-obj) or (H-code) fails."""

    def __init__(self, dataset, rho: float, eta: float, max_coherence: float,
                 detector_fit=DETECTOR_FIT, lp_time_limit: float = LP_TIME_LIMIT):
        self.ds = dataset
        self.nodes = nodes = check_hypotheses(dataset)
        tok = dataset.tokenizer
        self.type_of, n_types, self.ent = token_types(tok)
        K = dataset.n_tasks
        self.max_len = T = dataset.seq_len
        self.codes, self.mu = polynomial_code(tok.n_entity, max_coherence)
        self.mu_measured = coherence(self.codes) if tok.n_entity > 1 else 0.0
        self.layout = Layout(n_types, T, self.codes.shape[1], K, tok.n_special + tok.n_syntactic)
        self.rho, self.eta = rho, eta
        # structural codes z = [TOK | POS | H1] of every node
        self.Z = np.stack([structural_code(ty, n_types, T, rho) for ty in nodes.types])  # (U, 2n+T)
        self.H1 = self.Z[:, n_types + T:]                                                # (U, n)
        self.detector_fits = self._fit_detectors(detector_fit, lp_time_limit)
        # key indicators of each entity
        e0 = int(tok.entity_ids[0]) if tok.n_entity else 0
        self.e0 = e0
        self.keyind = np.zeros((tok.n_entity, K))                                        # (E, K)
        for k in range(K):
            self.keyind[dataset.dictionary_ids(k)[:, 0] - e0, k] = 1.0
        self.lam = math.log(2.0 / eta)
        self.beta2 = self.lam * T + math.log(2.0 * T / eta)

    def _fit_detectors(self, settings, lp_time_limit) -> list:
        """Detectors ℓ_u = 2σ_u(h1) − 1 − G_u(1 − z_pos[t_u]) − G_u(1 − z_tok[s_u]) within each
        group (depth, last type): σ_u(h1(u)) = 1, σ_u ≤ 0 at the other nodes of the group
        (dual basis when the group's codes are independent, else fitted).  Hypothesis (H-code):
        every node's code is a vertex of its group's codes.  Returns the outcome of every
        group that needed a fit."""
        nodes, tok = self.nodes, self.ds.tokenizer
        last = np.array([ty[-1] for ty in nodes.types])
        groups: dict[tuple, list] = {}
        for u in range(nodes.n_nodes):
            groups.setdefault((int(nodes.depth[u]), int(last[u])), []).append(u)
        self.det_w = np.zeros_like(self.H1)          # (U, n_types)
        self.det_c = np.zeros(nodes.n_nodes)
        fits = []
        for members in groups.values():
            if len(members) == 1:
                self.det_c[members[0]] = 1.0          # σ ≡ 1: position and token gates suffice
                continue
            try:
                w, c, outcome = fit_point_detectors(self.H1[members], settings,
                                                    lp_time_limit=lp_time_limit)
            except NotSeparable as err:       # certificate rows → structural nodes
                cert = dataclasses.replace(err.certificate,
                                           rows=np.asarray(members)[err.certificate.rows])
                rows = [int(v) for v in cert.rows]
                u = rows[0]
                raise HypothesisFails(
                    "H-code", [nodes.task_names[k] for k in nodes.tasks[u]],
                    [nodes.text(v, tok) for v in rows], cert,
                    f"the head-1 code of '{nodes.text(u, tok)}' is the convex combination "
                    + " + ".join(f"{wt:.3g}·'{nodes.text(v, tok)}'" for v, wt in
                                 zip(rows[1:], cert.weights[1:], strict=True))
                    + f" of codes of its group ({err})") from None
            except FitDidNotConverge as err:
                bad = [members[r] for r in err.worst_rows]
                raise HypothesisUndecided(
                    "H-code", sorted({nodes.task_names[k] for v in bad for k in nodes.tasks[v]}),
                    [nodes.text(v, tok) for v in bad], err) from None
            if outcome.method != "dual basis":
                fits.append(outcome)
            self.det_w[members] = w
            self.det_c[members] = c
        # |σ_u(h1)| ≤ ‖w_u‖ + |c_u| because ‖h1‖ ≤ 1 (a convex combination of unit vectors)
        self.det_G = 2.0 * (np.linalg.norm(self.det_w, axis=1) + np.abs(self.det_c)) + 1.0
        return fits

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

    def embeddings_attention(self, beta: float) -> dict:
        """Token/position embeddings, both heads and the unembedding scaled by ``beta``, as
        the state-dict entries of :class:`MoETransformer` (steps 1, 2 and 7 of :mod:`.build`)."""
        lay, tok = self.layout, self.ds.tokenizer
        V, d, T, c = len(tok), lay.d_model, self.max_len, lay.d_head
        K, dc = lay.n_tasks, lay.d_code
        W = {}
        te = torch.zeros(V, d)
        te[torch.arange(V), torch.as_tensor(self.type_of)] = 1.0                     # TOK
        ent = torch.as_tensor(tok.entity_ids)
        ec = lay.block("ENTC").start
        te[ent[:, None], ec + torch.arange(dc)[None, :]] = torch.as_tensor(self.codes, dtype=torch.float32)
        te[ent[:, None], ec + dc + torch.arange(K)[None, :]] = torch.as_tensor(self.keyind,
                                                                               dtype=torch.float32)
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
