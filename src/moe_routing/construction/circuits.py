"""Knowledge circuits C(k) of paper A, as neurons of three kinds (our construction).

A neuron is one hidden unit of an expert: a column of ``w1``, an entry of ``b1`` and a row of
``w2``.  The construction uses three kinds (steps 4-6 of :mod:`.build`), each a small frozen
dataclass that knows how to write itself into an expert's tensors:

* :class:`SyntacticNeuron` -- ReLU(ℓ_u), the exact indicator of structural node u, raising
  the symbols that follow u (next words, EOS, or "all keys of Δ_k" before ⋆1);
* :class:`SemanticNeuron` -- one per dictionary entry (a, b) of Δ_k: fires iff the subject is
  a at an object slot of task k, and raises the value code c(b);
* :class:`JunctionNeuron` -- at a node shared by several tasks, after the subject: ℓ_u gated
  on "the subject is a key of Δ_k", raising task k's next symbols.

:func:`task_circuit` builds C(k) (task k's syntactic and semantic neurons) from a fitted gate;
:func:`junction_circuit` the shared-prefix circuit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .layout import Layout
from .separators import GateFit


@dataclass(frozen=True, eq=False)
class SyntacticNeuron:
    """ReLU(ℓ_u): 1 at node u, 0 at every other node; raises ``outputs``."""

    weights: np.ndarray               # (router_block,) over [TOK | POS | H1]
    bias: float
    outputs: tuple                    # OUT coordinates raised

    def write(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, j: int,
              layout: Layout) -> None:
        """Into slot j of one expert: w1 (d, f), b1 (f,), w2 (f, d)."""
        rb = layout.router_block[1]
        w1[:rb, j] = torch.as_tensor(self.weights, dtype=torch.float32)
        b1[j] = self.bias
        w2[j, list(self.outputs)] = 1.0


@dataclass(frozen=True, eq=False)
class SemanticNeuron:
    """``A·⟨c(a), h2⟩ + B·σ_k(z) + C``: ≥ 1 − Aη iff the subject is a at an object slot of
    task k, < 0 otherwise; raises c(b) in OUT_VAL.  ``gate_weights``/``gate_bias`` are B·w and
    C + B·c of the gate σ_k = w·z + c."""

    scale: float                      # A
    subject_code: np.ndarray          # (d_c,) c(a)
    gate_weights: np.ndarray          # (router_block,) B·w
    gate_bias: float                  # C + B·c
    value_code: np.ndarray            # (d_c,) c(b)

    def write(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, j: int,
              layout: Layout) -> None:
        rb = layout.router_block[1]
        h2 = layout.block("H2").start
        w1[h2:h2 + layout.d_code, j] = torch.as_tensor(self.scale * self.subject_code,
                                                       dtype=torch.float32)
        w1[:rb, j] += torch.as_tensor(self.gate_weights, dtype=torch.float32)
        b1[j] = self.gate_bias
        ov = layout.block("OUT_VAL").start
        w2[j, ov:ov + layout.d_code] = torch.as_tensor(self.value_code, dtype=torch.float32)


@dataclass(frozen=True, eq=False)
class JunctionNeuron:
    """``ℓ_u + 2(h2[key_k] − 1)`` at a shared node u after the subject: fires iff the subject
    is a key of Δ_k (the only subject-dependence (H-obj) allows there); raises ``outputs``."""

    weights: np.ndarray               # (router_block,) ℓ_u's weights
    bias: float                       # ℓ_u's bias
    outputs: tuple
    task: int

    def write(self, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, j: int,
              layout: Layout) -> None:
        rb = layout.router_block[1]
        w1[:rb, j] = torch.as_tensor(self.weights, dtype=torch.float32)
        w1[layout.block("H2").start + layout.d_code + self.task, j] = 2.0
        b1[j] = self.bias - 2.0
        w2[j, list(self.outputs)] = 1.0


@dataclass(frozen=True, eq=False)
class TaskCircuit:
    """C(k): task k's syntactic neurons (one per node of ``members`` that continues with a
    word, EOS or ⋆1) and semantic neurons (one per entry of Δ_k), with the gate they share."""

    task: int
    syntactic: tuple
    semantic: tuple
    gate: GateFit
    semantic_scale: float             # A = 2B(1/2 + s_k)/(1 − μ)

    @property
    def neurons(self) -> list:
        return list(self.syntactic) + list(self.semantic)


def task_circuit(parts, k: int, members: np.ndarray, gate: GateFit) -> TaskCircuit:
    """Task k's circuit over its task-determined nodes ``members``, with gate σ_k (step 5 of
    :mod:`.build`: B = 2, A = 2B(1/2 + s_k)/(1 − μ), C = −A − B/2)."""
    nodes = parts.nodes
    syn = []
    for u in members:
        outs = parts.output_of(k, nodes.next[u][k])
        if outs:
            w, b = parts.detector(u)
            syn.append(SyntacticNeuron(w, b, tuple(outs)))
    B = 2.0
    A = 2.0 * B * (0.5 + gate.spread) / (1.0 - parts.mu)
    C = -A - B / 2.0
    sem = [SemanticNeuron(A, parts.codes[a - parts.e0], B * gate.w, C + B * gate.c,
                          parts.codes[b - parts.e0])
           for a, b in parts.ds.dictionary_ids(k)]
    return TaskCircuit(k, tuple(syn), tuple(sem), gate, A)


def junction_circuit(parts) -> list:
    """The shared-prefix circuit (step 6 of :mod:`.build`): before the subject one
    :class:`SyntacticNeuron` per shared node raising the union of the next symbols, after it
    one :class:`JunctionNeuron` per (node, task)."""
    nodes = parts.nodes
    out = []
    for u in np.nonzero(nodes.junction)[0]:
        w, b = parts.detector(u)
        if nodes.kind[u] == 0:     # before the subject: union of the next symbols
            outs = sorted({o for k in nodes.tasks[u] for o in parts.output_of(k, nodes.next[u][k])})
            out.append(SyntacticNeuron(w, b, tuple(outs)))
        else:                      # after the subject: per task, gated on "subject ∈ keys(Δ_k)"
            for k in nodes.tasks[u]:
                out.append(JunctionNeuron(w, b, tuple(parts.output_of(k, nodes.next[u][k])), k))
    return out
