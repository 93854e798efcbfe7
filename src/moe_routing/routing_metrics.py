"""How tokens of each task are routed: the measurements behind paper A's Figure 2.

Inputs are flat per-token ``task_ids`` and top-1 ``expert_ids`` (any integer arrays or tensors,
padding removed by the caller).  Everything is computed from the task × expert count matrix
``C[k, e]`` = number of tokens of task k routed to expert e.

Definitions (stated because codebases differ):

* ``P(E|T)`` — row-normalised counts (a task with no tokens gets a row of zeros).
* purity — clustering purity with experts as clusters: ``Σ_e max_k C[k, e] / N``, the fraction
  of tokens whose expert's majority task is their own task.  1 when every expert serves a
  single task.
* NMI — ``I(T; E) / ((H(T) + H(E)) / 2)`` (arithmetic normalisation, scikit-learn's default),
  in [0, 1]; 1 when T and E determine each other; defined as 1 when both entropies are 0.
* diagonal accuracy — fraction of tokens routed to their task's designated expert
  ``task mod E`` (the map the task-router loss trains towards).
* matched accuracy — the best *one-to-one* task↔expert matching (Hungarian algorithm,
  ``scipy.optimize.linear_sum_assignment``); with more tasks than experts only E tasks can be
  matched.  Best *many-to-one* accuracy: each task sent to its most used expert,
  ``Σ_k max_e C[k, e] / N``.
* router entropy — mean over tokens of ``H(p(·|x))`` in nats (optionally / log E).
* utilisation — fraction of tokens per expert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


def _as_np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def task_expert_counts(task_ids, expert_ids, n_tasks: int, n_experts: int) -> np.ndarray:
    """(K, E) integer counts of tokens per (task, expert)."""
    t = _as_np(task_ids).reshape(-1).astype(np.int64)
    e = _as_np(expert_ids).reshape(-1).astype(np.int64)
    if t.shape != e.shape:
        raise ValueError(f"{t.size} task ids for {e.size} expert ids")
    if t.size and (t.min() < 0 or t.max() >= n_tasks):
        raise ValueError(f"task ids span {t.min()}..{t.max()}; accepted 0..{n_tasks - 1}")
    if e.size and (e.min() < 0 or e.max() >= n_experts):
        raise ValueError(f"expert ids span {e.min()}..{e.max()}; accepted 0..{n_experts - 1}")
    counts = np.zeros((n_tasks, n_experts), dtype=np.int64)
    np.add.at(counts, (t, e), 1)
    return counts


def expert_given_task(counts) -> np.ndarray:
    """P(E|T): (K, E) rows summing to 1 (zero rows for tasks without tokens)."""
    c = np.asarray(counts, dtype=float)
    rows = c.sum(1, keepdims=True)
    return np.divide(c, rows, out=np.zeros_like(c), where=rows > 0)


def purity(counts) -> float:
    c = np.asarray(counts, dtype=float)
    n = c.sum()
    return float(c.max(0).sum() / n) if n else float("nan")


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def normalized_mutual_info(counts) -> float:
    """I(T;E) / mean(H(T), H(E)) from the count matrix (1 when both entropies vanish)."""
    c = np.asarray(counts, dtype=float)
    n = c.sum()
    if n == 0:
        return float("nan")
    pj = c / n
    pt, pe = pj.sum(1), pj.sum(0)
    ht, he = _entropy(pt), _entropy(pe)
    if ht + he == 0:
        return 1.0
    nz = pj > 0
    mi = float((pj[nz] * np.log(pj[nz] / np.outer(pt, pe)[nz])).sum())
    return max(0.0, mi / ((ht + he) / 2))


def diagonal_accuracy(counts) -> float:
    """Fraction of tokens routed to the designated expert ``task mod E``."""
    c = np.asarray(counts, dtype=float)
    n = c.sum()
    if n == 0:
        return float("nan")
    k, e = c.shape
    return float(c[np.arange(k), np.arange(k) % e].sum() / n)


def matched_accuracy(counts) -> float:
    """Best one-to-one task↔expert matching (Hungarian), as a fraction of all tokens."""
    c = np.asarray(counts, dtype=float)
    n = c.sum()
    if n == 0:
        return float("nan")
    rows, cols = linear_sum_assignment(c, maximize=True)
    return float(c[rows, cols].sum() / n)


def many_to_one_accuracy(counts) -> float:
    """Each task sent to its most used expert: ``Σ_k max_e C[k, e] / N``."""
    c = np.asarray(counts, dtype=float)
    n = c.sum()
    return float(c.max(1).sum() / n) if n else float("nan")


def router_entropy(router_probs, normalise: bool = False) -> float:
    """Mean per-token entropy of the routing distribution (nats; / log E if ``normalise``)."""
    p = _as_np(router_probs).astype(float)
    p = p.reshape(-1, p.shape[-1])
    if p.shape[0] == 0:
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(1).mean()
    if normalise:
        return float(h / math.log(p.shape[1])) if p.shape[1] > 1 else 0.0
    return float(h)


def expert_utilisation(expert_ids, n_experts: int) -> np.ndarray:
    """(E,) fraction of routing assignments per expert."""
    e = _as_np(expert_ids).reshape(-1).astype(np.int64)
    if e.size and (e.min() < 0 or e.max() >= n_experts):
        raise ValueError(f"expert ids span {e.min()}..{e.max()}; accepted 0..{n_experts - 1}")
    counts = np.bincount(e, minlength=n_experts).astype(float)
    return counts / counts.sum() if counts.sum() else counts


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a model, and those a token actually uses.

    ``active`` counts embeddings (one row each), attention, router, the ``top_k`` experts a
    token uses (live neurons only, averaged over ``expert_ids`` when given, else the largest
    experts) and the unembedding; ``total`` counts everything stored (live neurons only).
    """

    total: int
    active: float
    experts_total: int
    experts_active: float
    per_expert: tuple[int, ...]

    @property
    def active_fraction(self) -> float:
        return self.active / self.total


def active_parameters(model, expert_ids=None) -> ParameterCount:
    """Total vs active parameters per token of a :class:`~moe_routing.model.MoETransformer`."""
    cfg = model.config
    d, v = cfg.d_model, cfg.vocab_size
    per_expert = tuple(int(2 * n * d + n + d) for n in cfg.neurons_per_expert)   # W1,b1,W2,b2
    experts_total = sum(per_expert)
    other = sum(p.numel() for name, p in model.named_parameters()
                if not name.startswith("experts."))
    emb = model.tok_emb.weight.numel() + model.pos_emb.weight.numel()
    if expert_ids is not None:
        e = _as_np(expert_ids).reshape(-1).astype(np.int64)
        experts_active = float(np.asarray(per_expert)[e].sum() / max(1, e.size // cfg.top_k)) \
            if e.size else 0.0
        if e.size % cfg.top_k:
            raise ValueError(f"{e.size} expert ids is not a multiple of top_k={cfg.top_k}")
    else:
        experts_active = float(sum(sorted(per_expert, reverse=True)[:cfg.top_k]))
    active = other - emb + 2 * d + experts_active                          # one row of each table
    return ParameterCount(total=other + experts_total, active=active,
                          experts_total=experts_total, experts_active=experts_active,
                          per_expert=per_expert)


def routing_summary(task_ids, expert_ids, n_tasks: int, n_experts: int,
                    router_probs=None) -> dict:
    """All the scalar metrics above in one JSON-ready dict (plus the P(E|T) matrix)."""
    c = task_expert_counts(task_ids, expert_ids, n_tasks, n_experts)
    out = {
        "p_expert_given_task": expert_given_task(c).tolist(),
        "purity": purity(c),
        "nmi": normalized_mutual_info(c),
        "diagonal_accuracy": diagonal_accuracy(c),
        "matched_accuracy": matched_accuracy(c),
        "many_to_one_accuracy": many_to_one_accuracy(c),
        "utilisation": expert_utilisation(expert_ids, n_experts).tolist(),
    }
    if router_probs is not None:
        out["router_entropy"] = router_entropy(router_probs)
        out["router_entropy_normalised"] = router_entropy(router_probs, normalise=True)
    return out
