"""How one router turns its logits into experts and gate weights (part of
:mod:`moe_routing.hf`): :class:`RoutingRule` -- the choice of experts, their gate weights, the
margin Δ_k of that choice and the scores it is measured on.

Separate because it is the arithmetic of routing, pure NumPy: :mod:`.measurements` applies it
to any (n, E) logits without transformers, and :mod:`.routers` reads one rule from each router
of a transformers model (its table lists which model routes by which rule).

The rules (logits a (n, E) = W x (+ c) of the router's linear map, E experts, k chosen):

* ``"softmax"`` -- p = softmax(a); the experts are the k largest p + b, where b is the
  router's *correction bias* (``correction_bias``; DeepSeek-V3-style load balancing, Ernie 4.5)
  or 0 without one; the gate weights are p at the chosen experts, divided by
  max(Σ of them, ``norm_min``) when ``renormalise`` (Mixtral's renormalised top-k, = softmax
  over the k chosen logits) and left as they are otherwise (OLMoE's and Qwen-MoE's default);
* ``"sigmoid"`` -- the same with p = σ(a) (MiniMax-M2): the bias steers the choice only, the
  weights are the unbiased σ(a) of the chosen experts;
* ``"sparsemixer"`` -- PhiMoE's router at inference (``sparsemixer`` of transformers, not in
  training mode): two experts whatever ``num_experts_per_tok`` says, the largest logit and the
  largest of the others; each one's weight is the softmax, at it, over the logits a_i within
  relative distance 2ε of it, (a_top − a_i) / max(|a_i|, a_top) ≤ 2ε (ε = ``jitter_eps``, the
  router's ``router_jitter_noise``), the others masked (for the second expert the first is
  masked as well).

Experts are listed most preferred first (by p + b; for the sparsemixer its first, then second
expert), ties to the lower index.  Exact ties are a null set for real inputs, but not for
degenerate ones (the all-zero logits of a padding token whose embedding is zero): there
``torch.topk`` in the model may pick other experts of equal score, with the same weights.

Which scores the margin is taken on.  A top-k router changes its set of experts exactly where
its k-th and (k+1)-th *selection scores* meet, so the margin is Δ_k = s_(k) − s_(k+1) of those
scores (s sorted in descending order; :func:`moe_routing.boundary.margin.top_two_margin`; k = 1
is paper B's Δ):

* without a correction bias s is an increasing function of the logits (softmax, σ; the
  sparsemixer chooses by the logits themselves), so the choice is the k largest logits and
  Δ_k is taken on the logits, a_(k) − a_(k+1): paper B's margin, in logit units, the units of a
  softmax temperature τ and of :data:`~moe_routing.hf.measurements.DEFAULT_WIDTHS`;
* with a correction bias the choice is the k largest of p + b, and the logits' own gap
  a_(k) − a_(k+1) vanishes elsewhere: a token can sit at a_(k) = a_(k+1) while the bias keeps
  its choice far from changing, and its choice can flip while the logits' gap is wide.  Δ_k is
  therefore taken on the selection scores s = p + b themselves -- the only scores whose Δ_k is 0
  exactly where the choice flips -- in the units of p (probabilities plus bias: at most
  1 + the spread of b), not logit units.  This holds for every router of a class that has a
  bias, even one whose bias is 0, so that two checkpoints of a model are read in the same units;
  :attr:`RoutingRule.margin_scores` says which scores a rule uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..boundary.margin import top_two_margin
from .._internal.validation import choice, fail, finite_array, flag, integer, number, require

#: the kinds of selection a rule can make (module docstring)
SELECTIONS = ("softmax", "sigmoid", "sparsemixer")


def _softmax(a: np.ndarray) -> np.ndarray:
    z = np.exp(a - a.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * a))             # σ without overflow for large |a|


def _sparsemixer_gate(a: np.ndarray, candidates: np.ndarray, eps: float):
    """One expert of PhiMoE's sparsemixer at inference: the largest of ``candidates`` (a with
    the experts already chosen at −∞) and its weight, the softmax over the candidates within
    relative distance 2ε of it (``(top − a_i) / max(|a_i|, top) ≤ 2ε``, a_i the unmasked
    logits as transformers computes it; 0/0 is not masked)."""
    rows = np.arange(a.shape[0])
    chosen = candidates.argmax(axis=1)                                      # (n,)
    top = candidates[rows, chosen][:, None]                                 # (n, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        far = (top - a) / np.maximum(np.abs(a), top) > 2 * eps              # (n, E); NaN: False
    kept = np.where(far, -np.inf, candidates)
    return chosen, _softmax(kept)[rows, chosen]


@dataclass(frozen=True, eq=False)
class RoutingRule:
    """What one router does with its logits (module docstring): ``selection`` (one of
    :data:`SELECTIONS`), ``top_k`` experts of ``n_experts`` (2 for the sparsemixer),
    ``renormalise`` the gate weights (dividing by max(their sum, ``norm_min``)), the
    ``correction_bias`` (E,) added to the scores for the choice only (None: no bias),
    ``jitter_eps`` (the sparsemixer's ε) and ``source`` (which router of which model, for
    messages).  :meth:`softmax_top_k` is Mixtral's rule for logits from anywhere."""

    n_experts: int
    top_k: int
    selection: str = "softmax"
    renormalise: bool = True
    correction_bias: np.ndarray | None = None
    norm_min: float = 0.0
    jitter_eps: float = 0.0
    source: str = field(default="router")

    def __post_init__(self):
        e = integer("n_experts", self.n_experts, low=2)
        sel = choice("selection", self.selection, SELECTIONS)
        k = integer("top_k", self.top_k, low=1, high=e)
        if sel == "sparsemixer":
            require(k == 2, "top_k", self.top_k, "2 for the sparsemixer (it always routes to "
                    "two experts)")
            require(self.correction_bias is None, "correction_bias", "an array",
                    "None for the sparsemixer (it has no bias)")
        bias = self.correction_bias
        if bias is not None:
            bias = finite_array("correction_bias", bias, shape=(e,))
            bias.setflags(write=False)
        object.__setattr__(self, "n_experts", e)
        object.__setattr__(self, "top_k", k)
        object.__setattr__(self, "renormalise", flag("renormalise", self.renormalise))
        object.__setattr__(self, "correction_bias", bias)
        object.__setattr__(self, "norm_min", number("norm_min", self.norm_min, low=0))
        object.__setattr__(self, "jitter_eps", number("jitter_eps", self.jitter_eps, low=0))
        require(isinstance(self.source, str), "source", self.source, "a string")

    @classmethod
    def softmax_top_k(cls, n_experts: int, top_k: int, source: str = "router") -> "RoutingRule":
        """Mixtral's rule: the k largest softmax(a), weights renormalised to sum to 1."""
        return cls(n_experts, top_k, "softmax", True, source=source)

    # ------------------------------------------------------------------------ the arithmetic
    @property
    def margin_scores(self) -> str:
        """The scores Δ_k is taken on: ``"logits"`` without a correction bias, the selection
        scores ``"softmax(a) + b"`` or ``"sigmoid(a) + b"`` with one (module docstring)."""
        if self.correction_bias is None:
            return "logits"
        return f"{self.selection}(a) + b"

    def _logits(self, logits) -> np.ndarray:
        a = finite_array("logits", logits, ndim=2)
        require(a.shape[1] == self.n_experts, "logits.shape", a.shape,
                f"(n, {self.n_experts}): one column per expert of {self.source}")
        return a

    def probabilities(self, logits) -> np.ndarray | None:
        """(n, E) the router's distribution over experts, softmax(a), for the softmax and
        sparsemixer rules (PhiMoE's sparsemixer masks and renormalises it); None for a sigmoid
        router, whose scores are no distribution."""
        a = self._logits(logits)
        return None if self.selection == "sigmoid" else _softmax(a)

    def selection_scores(self, logits) -> np.ndarray:
        """(n, E) the scores the choice ranks: p + b (p = softmax(a) or σ(a), b the correction
        bias or 0); the logits themselves for the sparsemixer."""
        a = self._logits(logits)
        if self.selection == "sparsemixer":
            return a
        p = _softmax(a) if self.selection == "softmax" else _sigmoid(a)
        return p if self.correction_bias is None else p + self.correction_bias

    def route(self, logits) -> tuple[np.ndarray, np.ndarray]:
        """(experts (n, k) int64, gate weights (n, k) float64): the experts the router sends
        each row of ``logits`` (n, E) to, most preferred first, and the weights it gives them."""
        a = self._logits(logits)
        if self.selection == "sparsemixer":
            first, w1 = _sparsemixer_gate(a, a, self.jitter_eps)
            rest = a.copy()
            rest[np.arange(a.shape[0]), first] = -np.inf
            second, w2 = _sparsemixer_gate(a, rest, self.jitter_eps)
            return np.stack([first, second], 1).astype(np.int64), np.stack([w1, w2], 1)
        p = _softmax(a) if self.selection == "softmax" else _sigmoid(a)          # (n, E)
        s = p if self.correction_bias is None else p + self.correction_bias
        experts = np.argsort(-s, axis=1, kind="stable")[:, :self.top_k]        # (n, k)
        weights = np.take_along_axis(p, experts, 1)                            # (n, k)
        if self.renormalise:
            weights = weights / np.maximum(weights.sum(1, keepdims=True), self.norm_min)
        return experts.astype(np.int64), weights

    def margins(self, logits) -> np.ndarray:
        """(n,) Δ_k = s_(k) − s_(k+1) on :attr:`margin_scores` (module docstring); needs
        k < E (with k = E every expert is chosen: no boundary, no margin)."""
        a = self._logits(logits)
        if self.top_k >= self.n_experts:
            fail(f"{self.source}: top_k", self.top_k, f"< n_experts = {self.n_experts} for a "
                 "margin (every expert is chosen: there is no routing boundary to be near)")
        scores = a if self.correction_bias is None else self.selection_scores(a)
        return top_two_margin(scores, self.top_k)
