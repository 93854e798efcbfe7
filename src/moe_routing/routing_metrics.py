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

Two reference count matrices put a measured routing between its floor and its ceiling:
:func:`independent_counts` (the same task sizes and expert loads, no task–expert dependence:
what "no specialisation" measures, NMI ≈ 0 up to sampling noise) and
:func:`designated_counts` (every token at its designated expert: the best a router trained
towards ``task mod E`` can do; when K > E experts are shared, so its purity and NMI are below 1).

Inputs are checked before anything is computed (the library's idiom,
:mod:`moe_routing._internal.validation`): ids must be integer arrays of one size, in range and non-empty;
a count matrix must be a finite, non-negative (K, E) array holding at least one token; router
probabilities must be finite rows of a distribution.  A metric of zero tokens is refused rather
than returned as NaN.  Parameter counts live with the model
(:func:`moe_routing.model.parameter_count`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment

from ._internal.validation import fail, finite_array, generator, integer, require

EPS64 = float(np.finfo(np.float64).eps)


def _ids(name: str, values) -> np.ndarray:
    """Flat int64 ids from an integer array or tensor (non-empty)."""
    raw = values.detach().cpu().numpy() if hasattr(values, "detach") else values
    try:
        a = np.asarray(raw)
    except (TypeError, ValueError):
        fail(name, type(values).__name__, "an integer array")
    require(a.size > 0, f"{name}.size", a.size, "a non-empty array")
    require(np.issubdtype(a.dtype, np.integer), f"{name}.dtype", a.dtype, "an integer dtype")
    a = a.reshape(-1).astype(np.int64)
    return a


def _in_range(name: str, ids: np.ndarray, n: int) -> None:
    lo, hi = int(ids.min()), int(ids.max())
    require(lo >= 0 and hi < n, f"{name} range", f"{lo}..{hi}", f"ids in 0..{n - 1}")


def _counts(counts) -> np.ndarray:
    """A (K, E) finite non-negative count matrix holding at least one token, as float64."""
    c = finite_array("counts", counts, ndim=2, low=0)
    require(c.sum() > 0, "counts.sum()", float(c.sum()), "at least one token (a positive total)")
    return c


def task_expert_counts(task_ids, expert_ids, n_tasks: int, n_experts: int) -> np.ndarray:
    """(K, E) integer counts of tokens per (task, expert)."""
    n_tasks = integer("n_tasks", n_tasks, low=1)
    n_experts = integer("n_experts", n_experts, low=1)
    t = _ids("task_ids", task_ids)
    e = _ids("expert_ids", expert_ids)
    require(t.size == e.size, "expert_ids.size", e.size, f"one id per task id ({t.size})")
    _in_range("task_ids", t, n_tasks)
    _in_range("expert_ids", e, n_experts)
    counts = np.zeros((n_tasks, n_experts), dtype=np.int64)
    np.add.at(counts, (t, e), 1)
    return counts


def expert_given_task(counts) -> np.ndarray:
    """P(E|T): (K, E) rows summing to 1 (zero rows for tasks without tokens)."""
    c = _counts(counts)
    rows = c.sum(1, keepdims=True)
    return np.divide(c, rows, out=np.zeros_like(c), where=rows > 0)


def purity(counts) -> float:
    c = _counts(counts)
    return float(c.max(0).sum() / c.sum())


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def normalized_mutual_info(counts) -> float:
    """I(T;E) / mean(H(T), H(E)) from the count matrix (1 when both entropies vanish)."""
    c = _counts(counts)
    pj = c / c.sum()
    pt, pe = pj.sum(1), pj.sum(0)
    ht, he = _entropy(pt), _entropy(pe)
    if ht + he == 0:
        return 1.0
    nz = pj > 0
    mi = float((pj[nz] * np.log(pj[nz] / np.outer(pt, pe)[nz])).sum())
    return max(0.0, mi / ((ht + he) / 2))


def diagonal_accuracy(counts) -> float:
    """Fraction of tokens routed to the designated expert ``task mod E``."""
    c = _counts(counts)
    k, e = c.shape
    return float(c[np.arange(k), np.arange(k) % e].sum() / c.sum())


def matched_accuracy(counts) -> float:
    """Best one-to-one task↔expert matching (Hungarian), as a fraction of all tokens."""
    c = _counts(counts)
    rows, cols = linear_sum_assignment(c, maximize=True)
    return float(c[rows, cols].sum() / c.sum())


def many_to_one_accuracy(counts) -> float:
    """Each task sent to its most used expert: ``Σ_k max_e C[k, e] / N``."""
    c = _counts(counts)
    return float(c.max(1).sum() / c.sum())


def _rounding_eps(values) -> float:
    """Machine epsilon of the dtype ``values`` were computed in (float64 for Python lists)."""
    dtype = getattr(values, "dtype", None)
    if hasattr(dtype, "is_floating_point"):                      # a torch dtype
        import torch

        return float(torch.finfo(dtype).eps) if dtype.is_floating_point else EPS64
    if dtype is not None and np.issubdtype(dtype, np.floating):
        return float(np.finfo(dtype).eps)
    return EPS64


def router_entropy(router_probs, normalise: bool = False) -> float:
    """Mean per-token entropy of the routing distribution (nats; / log E if ``normalise``).

    router_probs (..., E): finite rows of a distribution (entries ≥ 0 summing to 1 up to the
    rounding of their own dtype: E·8 ulps)."""
    if not isinstance(normalise, (bool, np.bool_)):
        fail("normalise", normalise, "True or False")
    p = finite_array("router_probs", router_probs, ndim=tuple(range(1, 8)), low=0)
    p = p.reshape(-1, p.shape[-1])
    dev = np.abs(p.sum(1) - 1.0)
    worst = int(dev.argmax())
    require(dev[worst] <= 8 * p.shape[1] * _rounding_eps(router_probs),
            f"router_probs[{worst}].sum()",
            float(p[worst].sum()), "rows summing to 1 (a routing distribution)")
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1).mean()
    if normalise:
        return float(h / math.log(p.shape[1])) if p.shape[1] > 1 else 0.0
    return float(h)


def expert_utilisation(expert_ids, n_experts: int) -> np.ndarray:
    """(E,) fraction of routing assignments per expert."""
    n_experts = integer("n_experts", n_experts, low=1)
    e = _ids("expert_ids", expert_ids)
    _in_range("expert_ids", e, n_experts)
    counts = np.bincount(e, minlength=n_experts).astype(float)
    return counts / counts.sum()


def independent_counts(counts, seed=0) -> np.ndarray:
    """(K, E) counts with the row totals of ``counts`` and its expert marginal, but experts
    drawn independently of tasks (each task's tokens multinomial over the marginal): the
    routing metrics of this matrix are what "no task–expert dependence" scores."""
    c = _counts(counts)
    rng = generator("seed", seed)
    totals = c.sum(1)
    require(np.allclose(totals, np.round(totals)), "counts", "non-integer row totals",
            "token counts (integer row totals)")
    marginal = c.sum(0) / c.sum()                                          # (E,)
    return np.stack([rng.multinomial(int(round(n)), marginal) for n in totals])


def designated_counts(task_totals, n_experts: int) -> np.ndarray:
    """(K, E) counts of perfect routing to the designated experts: task k's ``task_totals[k]``
    tokens all at expert ``k mod E``.  Its purity and NMI are the ceilings of a router trained
    towards that map (both below 1 when K > E: experts are shared)."""
    n_experts = integer("n_experts", n_experts, low=1)
    t = finite_array("task_totals", task_totals, ndim=1, low=0)
    require(t.sum() > 0, "task_totals.sum()", float(t.sum()), "at least one token")
    out = np.zeros((t.size, n_experts))
    out[np.arange(t.size), np.arange(t.size) % n_experts] = t
    return out


def load_entropy(loads) -> float:
    """Entropy of the expert loads (counts or fractions, (E,)) divided by log E: 1 when every
    expert gets the same share, 0 when one expert gets everything (1 for a single expert,
    which is trivially balanced).  The measure of "the load is shared" that NMI is not: a
    router sending every token to one expert has NMI 0 as well."""
    w = finite_array("loads", loads, ndim=1, low=0)
    require(w.sum() > 0, "loads.sum()", float(w.sum()), "a positive total load")
    if w.size == 1:
        return 1.0
    return float(_entropy(w / w.sum()) / np.log(w.size))


def achievable_diagonal(groups, designated) -> float:
    """The largest diagonal mass a router can reach when it sees only ``groups``.

    groups : (m,) integer ids of what the router's input is at each of m positions (for a
        one-layer causal model, the prefix read so far: a trie node); designated : (m,) the
        designated expert of each position's task.  Positions of one group get the same router
        input, so at best all of them go to the group's most frequent designated expert:
        ``Σ_g max_e #{x ∈ g : m(x) = e} / m``.  It is 1 when every group holds one task (or
        tasks with one designated expert), and below 1 where prefixes shared by several tasks
        (BOS, a template word common to several relations) are counted -- the ceiling a
        diagonal mass over those positions must be compared with.
    """
    g, d = _ids("groups", groups), _ids("designated", designated)
    require(g.size == d.size, "designated.size", d.size, f"{g.size} (one per position)")
    require(g.size > 0, "groups.size", 0, "at least one position")
    _, gi = np.unique(g, return_inverse=True)
    _, di = np.unique(d, return_inverse=True)
    table = np.zeros((gi.max() + 1, di.max() + 1))
    np.add.at(table, (gi, di), 1.0)
    return float(table.max(1).sum() / g.size)


def routing_summary(task_ids, expert_ids, n_tasks: int, n_experts: int,
                    router_probs=None) -> dict:
    """All the scalar metrics above in one JSON-ready dict (plus the count matrix ``counts``
    and P(E|T), from which the reference matrices above can be built)."""
    c = task_expert_counts(task_ids, expert_ids, n_tasks, n_experts)
    out = {
        "counts": c.tolist(),
        "p_expert_given_task": expert_given_task(c).tolist(),
        "purity": purity(c),
        "nmi": normalized_mutual_info(c),
        "diagonal_accuracy": diagonal_accuracy(c),
        "matched_accuracy": matched_accuracy(c),
        "many_to_one_accuracy": many_to_one_accuracy(c),
        "utilisation": expert_utilisation(expert_ids, n_experts).tolist(),
        "load_entropy_normalised": load_entropy(c.sum(0)),
    }
    if router_probs is not None:
        shape = tuple(getattr(router_probs, "shape", None) or np.shape(router_probs))
        require(len(shape) >= 1 and shape[-1] == c.shape[1], "router_probs.shape", shape,
                f"(..., n_experts={c.shape[1]})")
        out["router_entropy"] = router_entropy(router_probs)
        out["router_entropy_normalised"] = router_entropy(router_probs, normalise=True)
    return out
