"""The dense layer of Theorem 4.1 evaluated through a certificate that its other circuits are off.

The dense FFN of :func:`~moe_routing.construction.build.build_dense` holds every task's circuit
in one layer: 11,098 neurons for the 50-task dataset, most of them reading the whole syntactic
block.  Evaluating all of them at each of the 255,208 distinct prefixes costs ≈ 4 TFLOP
(minutes on two cores).  The theorem's own mechanism says that at a prefix only the neurons of
that prefix's circuit can fire; this module *proves* it prefix by prefix instead of assuming
it, and evaluates exactly the neurons the proof cannot rule out.

Write a neuron's pre-activation as ``p_j(x) = x_S·W_S[:, j] + x_R·W_R[:, j] + b_j`` with
``x_S`` the syntactic block ``[TOK | POS | H1]`` and ``x_R`` the rest of what the FFN reads
(head 2's output: the subject's code and key indicators).

1. **Structure.**  At a prefix of structural node s, ``x_S`` is the code of s: we take the
   value ``x̂_S[s]`` observed at one prefix of s and check at *every* prefix that
   ``‖x_S − x̂_S[s]‖_∞ ≤ tol`` (the measured deviation is reported; it is 0 on the default
   dataset).
2. **Content.**  ``|x_R,i| ≤ r_i`` for every coordinate: ``x_R`` is a sum of the token and
   position embeddings and of attention outputs, each a convex combination of value vectors, so
   ``r_i`` = the largest embedding entry + the largest value entry (after ``W_O``) of each
   head, read off the weights.
3. **Bound.**  Hence ``p_j ≤ u[s, j] = x̂_S[s]·W_S[:, j] + tol‖W_S[:, j]‖₁ + Σ_i r_i|W_R[i, j]|
   + b_j``.  Where ``u[s, j] < −δ_j`` (``δ_j`` a rounding allowance of 1e-4 of the terms'
   magnitudes, far above float32 error) neuron j is *exactly* 0 after the ReLU at every
   prefix of s.

The certificate is sound by construction; it is useful because it is tight: the candidates of
s are its own detector, its task's semantic neurons at object slots, and its junction neurons.
Batches are formed task by task, and each batch evaluates the union of its prefixes'
candidates -- the same function as the full layer (in float32 the products over a subset of
the columns round differently: a detector sums terms as large as its gate constant, so its
pre-activation may differ by ~1e-4 between the two evaluations, as it may between two BLAS
kernels), a few hundred neurons instead of eleven thousand.  The report says how many
(prefix, neuron) pairs were certified silent and whether any neuron *outside* the prefix's own
circuit was left uncertified (and if so, its largest activation, computed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._internal.validation import number, require


@dataclass
class CertificateStats:
    n_units: int                    # neurons of the dense FFN
    n_inputs: int                   # coordinates the FFN reads
    n_outputs: int                  # coordinates it writes
    circuits: int                   # task circuits (+ 1 shared-prefix circuit)
    max_candidates: int             # largest number of uncertified neurons at one structural node
    mean_candidates: float          # … averaged over structural nodes
    foreign_candidates: int         # (node, neuron) pairs left uncertified outside the node's circuit
    foreign_max_activation: float   # the largest activation any of those reached (0.0 = silent)
    max_syntactic_deviation: float  # max ‖x_S − x̂_S[s]‖∞ over the prefixes evaluated
    tol: float
    evaluated_fraction: float       # neuron evaluations done / (prefixes × neurons)


def circuit_of_units(report) -> np.ndarray:
    """(U,) circuit of each slot of the dense FFN: task k for its syntactic and semantic
    neurons (written in that order by ``build_dense``), K for the shared-prefix circuit."""
    K = len(report.syntactic_neurons)
    sizes = [report.syntactic_neurons[k] + report.semantic_neurons[k] for k in range(K)]
    return np.concatenate([np.full(n, k) for k, n in enumerate(sizes)]
                          + [np.full(report.junction_neurons, K)]).astype(np.int64)


class SilenceCertificate:
    """Certificate and evaluator for a dense construction (one expert, no router).

    ``fast`` is the model's :class:`~.fastpath.RestrictedForward`; ``struct_rep`` the rows of
    ``fast.residual`` observed at one prefix of each structural node, (n_struct, |rin|)."""

    @torch.no_grad()
    def __init__(self, fast, report, struct_rep: torch.Tensor, node_label: np.ndarray,
                 tol: float = 1e-6):
        require(fast.m.config.n_experts == 1, "fast.m.config.n_experts",
                fast.m.config.n_experts, "1 (a silence certificate is for the dense construction)")
        self.tol = number("tol", tol, low=0)
        S = fast.expert_support[0]
        rb = report.layout.router_block[1]
        in_model = fast.rin[S["ins"]]                                # model coordinates read
        self.syn = torch.nonzero(in_model < rb).squeeze(1)           # positions within S["ins"]
        self.rest = torch.nonzero(in_model >= rb).squeeze(1)
        self.ins, self.outs = S["ins"], S["outs"]
        self.w1, self.b1, self.w2, self.b2 = S["w1"], S["b1"], S["w2"], S["b2"]
        require(not bool((self.b2 != 0).any()), "fast", fast,
                "a dense FFN without output bias (the certificate assumes none)")
        W1 = self.w1.double()
        W_S, W_R = W1[self.syn], W1[self.rest]                       # (|S|, U), (|R|, U)
        r = self._content_bounds(fast)[self.rest]                    # (|R|,)
        xs = struct_rep[:, S["ins"]][:, self.syn].double()           # (n_struct, |S|)
        self.xs_rep = xs.float()
        lin = xs @ W_S                                               # (n_struct, U)
        mag = xs.abs() @ W_S.abs() + self.b1.double().abs() + (r @ W_R.abs())
        ub = lin + self.tol * W_S.abs().sum(0) + (r @ W_R.abs()) + self.b1.double()
        self.cand = ub > -1e-4 * mag                                 # (n_struct, U) bool
        units = S["units"].numpy()
        circ = circuit_of_units(report)[units]
        K = int(circ.max()) if len(circ) else 0
        own = np.asarray(node_label)[:, None] == circ[None, :]       # (n_struct, U)
        foreign = self.cand.numpy() & ~own
        self.foreign = torch.as_tensor(foreign)
        n_c = self.cand.sum(1)
        self.stats = CertificateStats(
            n_units=len(units), n_inputs=len(self.ins), n_outputs=len(self.outs), circuits=K + 1,
            max_candidates=int(n_c.max()),
            mean_candidates=float(n_c.double().mean()), foreign_candidates=int(foreign.sum()),
            foreign_max_activation=0.0, max_syntactic_deviation=0.0, tol=self.tol,
            evaluated_fraction=0.0)
        self._evals = 0
        self._pairs = 0

    @staticmethod
    def _content_bounds(fast) -> torch.Tensor:
        """(|rin|,) bound on |coordinate| of what the FFN reads, from the weights alone."""
        r = fast.t_in.abs().amax(0).double() + fast.p_in.abs().amax(0).double()
        for H in fast.heads:
            if len(H["ir"]):
                v_tok = (H["tv"] @ H["wo"]).abs().amax(0).double()   # (|oc|,)
                v_pos = (H["pv"] @ H["wo"]).abs().amax(0).double()
                r[H["ir"]] += (v_tok + v_pos)[H["jr"]]
        return r

    @torch.no_grad()
    def ffn(self, flat: torch.Tensor, struct: torch.Tensor) -> torch.Tensor:
        """The dense FFN's output on rows ``flat`` (n, |rin|) at structural nodes ``struct``
        (n,): (n, |outs|) on ``self.outs``, evaluating only the union of the rows' candidates
        (every other neuron is certified 0 at these rows)."""
        x = flat[:, self.ins]                                        # (n, |ins|)
        dev = (x[:, self.syn] - self.xs_rep[struct]).abs()
        d = float(dev.max()) if len(dev) else 0.0
        self.stats.max_syntactic_deviation = max(self.stats.max_syntactic_deviation, d)
        if d > self.tol:               # the certificate does not apply: evaluate every neuron
            use = torch.ones(self.w1.shape[1], dtype=torch.bool)
        else:
            use = self.cand[torch.unique(struct)].any(0)
        u = torch.nonzero(use).squeeze(1)
        h = torch.relu(x @ self.w1[:, u] + self.b1[u])               # (n, |u|)
        self._evals += h.numel()
        self._pairs += len(x) * self.w1.shape[1]
        fu = self.foreign[struct][:, u]                              # (n, |u|) foreign pairs
        if fu.any():
            self.stats.foreign_max_activation = max(self.stats.foreign_max_activation,
                                                    float(h[fu].max()))
        self.stats.evaluated_fraction = self._evals / max(self._pairs, 1)
        return h @ self.w2[u]
