"""What a two-layer model is made of, and what its build reports.

The residual layout of the two-layer construction (:class:`TwoLayerLayout`: the one-layer
:class:`.layout.Layout` and the middle-entity block ``MID``), the two neuron kinds it adds to
those of :mod:`.circuits` (:class:`MiddleNeuron` in layer 1, :class:`HopNeuron` in layer 2), and
:class:`TwoLayerReport`, the constants, routes and sizes :func:`.two_layer.build_two_layer`
returns.  They are apart from the build so that the verification (:mod:`.two_layer_verify`)
reads the report without importing the build.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .circuits import SemanticNeuron
from .layout import Layout


@dataclass(frozen=True)
class TwoLayerLayout:
    """The one-layer :class:`.layout.Layout` followed by ``MID`` (d_c): the middle entity's code,
    written by layer 1 and read by layer 2 only (``W_U`` never reads it)."""

    base: Layout

    def block(self, name: str) -> slice:
        if name == "MID":
            return slice(self.base.d_model, self.base.d_model + self.base.d_code)
        return self.base.block(name)

    @property
    def d_model(self) -> int:
        return self.base.d_model + self.base.d_code

    def __getattr__(self, name):           # n_types, max_len, d_code, n_out_syn, router_block…
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def blocks(self) -> dict[str, tuple[int, int]]:
        mid = self.block("MID")
        return {**self.base.blocks(), "MID": (mid.start, mid.stop)}


@dataclass(frozen=True, eq=False)
class MiddleNeuron(SemanticNeuron):
    """A step-5 semantic neuron of a first-hop task: writes c(b) into ``MID`` as well as into
    ``OUT_VAL`` (same input side, so one neuron serves single-hop queries and hop 1)."""

    def write(self, w1, b1, w2, j, layout) -> None:
        super().write(w1, b1, w2, j, layout)
        mid = layout.block("MID")
        w2[j, mid] = torch.as_tensor(self.value_code, dtype=torch.float32)


@dataclass(frozen=True, eq=False)
class HopNeuron:
    """Layer 2, one per (m, o) of a second hop: ``A₂⟨c(m), MID⟩ + C₂``, raising γ·c(o)."""

    scale: float                      # A₂
    bias: float                       # C₂ = −A₂θ
    middle_code: np.ndarray           # (d_c,) c(m)
    value_code: np.ndarray            # (d_c,) γ·c(o)

    def write(self, w1, b1, w2, j, layout) -> None:
        w1[layout.block("MID"), j] = torch.as_tensor(self.scale * self.middle_code,
                                                     dtype=torch.float32)
        b1[j] = self.bias
        w2[j, layout.block("OUT_VAL")] = torch.as_tensor(self.value_code, dtype=torch.float32)


@dataclass
class TwoLayerReport:
    """Constants, routes and sizes of one two-layer construction (all derived, none tuned).

    Experts are indexed alike in both layers: e < len(single) is single-hop task
    ``single[e]``; the last is the junction expert in layer 1 and the no-op expert in layer 2.
    """

    eps: float
    beta: float
    gamma: float                    # layer-2 output scale
    eta: float
    mu: float
    v_min: float
    i_max: float
    v_lo: float                     # MID = v₁ c(m), v₁ ∈ [v_lo, v_hi]
    v_hi: float
    theta: float                    # layer-2 threshold
    hop_scale: float                # A₂
    v2_hi: float
    layout: TwoLayerLayout
    single: list                    # dataset task index of each single-hop expert
    expert_names: list
    first_hop: dict                 # two-hop task index -> its first hop's expert
    second_hop: dict                # two-hop task index -> its second hop's expert
    syntactic: list                 # per layer-1 expert (junction last)
    semantic: list                  # per single-hop expert: |Δ_k|
    writes_middle: list             # per single-hop expert: writes MID (k is a first hop)
    hop_neurons: list               # per single-hop expert: layer-2 neurons
    layer1_sizes: list
    layer2_sizes: list
    gate_spread: list
    route1: np.ndarray = field(repr=False)    # (U,) layer-1 expert of each structural node
    route2: np.ndarray = field(repr=False)    # (U,) layer-2 expert of each structural node
    nodes: object = field(repr=False, default=None)
    codes: np.ndarray = field(repr=False, default=None)
    router_fits: list = field(default_factory=list)
    build_seconds: float = 0.0

    @property
    def n_experts(self) -> int:
        return len(self.single) + 1

    def size_table(self) -> list[dict]:
        """Per single-hop task: |Δ_k| and the neurons of its expert in each layer, with the
        formula they follow (layer 1: syntactic + |Δ_k|; layer 2: |Δ_k| if a second hop)."""
        rows = []
        for e, name in enumerate(self.expert_names[:-1]):
            rows.append(dict(task=name, n_pairs=self.semantic[e], syntactic=self.syntactic[e],
                             layer1=self.layer1_sizes[e], layer2=self.layer2_sizes[e],
                             first_hop=self.writes_middle[e], second_hop=self.hop_neurons[e] > 0))
        return rows

    @property
    def total_neurons(self) -> int:
        return int(sum(self.layer1_sizes) + sum(self.layer2_sizes))
