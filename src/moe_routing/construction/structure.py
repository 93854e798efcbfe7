"""Structural nodes: template prefixes with the wildcards kept abstract (our construction).

A *structural node* u is a prefix of some template over Σ ∪ {⋆1, ⋆2} -- what a prefix looks
like once the entity tokens are replaced by their slot.  Every concrete prefix w of a sentence
τ[a, b] sits at exactly one structural node (the first |w| − 1 tokens of τ); entities are read
as ⋆1 if first, ⋆2 if second, so the node depends on the token *types* only (entities
collapsed to one type ENT).  For each node we keep

* ``tasks(u)``: tasks with a template through u; u is **task-determined** when there is one;
* per task k, ``next_k(u)``: the symbols that follow u in k's templates (a word id, EOS, ⋆1 or ⋆2);
* its kind: ``pre`` (no ⋆1 yet), ``between`` (⋆1 seen, ⋆2 not), ``post`` (both seen).

Valid next tokens in terms of nodes (derived from the definition of V(w)): at a concrete prefix
w with node u and subject a (and object b),

    V(w) = ∪_{k ∈ tasks(u), (a, b) consistent with Δ_k}  next_k(u)   with ⋆1 ↦ keys(Δ_k),
                                                                     ⋆2 ↦ {Δ_k(a)}.

**Hypothesis (H-obj)** of our construction: every *object slot* -- a node followed by ⋆2 in some
template -- is task-determined.  Then every ``post`` node is task-determined too (it descends
from an object slot), the only subject-dependent validity at shared nodes is "a ∈ keys(Δ_k)"
(a linear test on the subject code) and no shared node needs a dictionary lookup.  Datasets
violating it are rejected by :func:`check_hypotheses` with the offending nodes and tasks;
:func:`admissible_tasks` finds a large sub-dataset that satisfies it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..knowledge import OBJECT_SLOT, SUBJECT_SLOT

from .refusals import HypothesisFails

KINDS = ("pre", "between", "post")


@dataclass
class StructuralNodes:
    """All structural nodes of a dataset.  U nodes, K tasks.

    keys : list[tuple]           node u as a tuple of template ids (−1 = ⋆1, −2 = ⋆2)
    depth : (U,) int             |u| = position t of the last token in the model's input
    types : list[np.ndarray]     token types s_0..s_t (BOS first, entities → ``ent_type``)
    tasks : list[tuple[int]]     tasks(u)
    next : list[dict]            task k -> sorted tuple of next symbols (EOS id, word ids, −1, −2)
    kind : (U,) int              index into KINDS
    label : (U,) int             routing label: the task if task-determined, else K (junction)
    node_at : list[list[int]]    node_at[g][i] = node of template g's first i tokens
    """

    keys: list
    depth: np.ndarray
    types: list
    tasks: list
    next: list
    kind: np.ndarray
    label: np.ndarray
    node_at: list
    n_tasks: int
    n_types: int
    ent_type: int
    task_names: list = field(default_factory=list)

    @property
    def n_nodes(self) -> int:
        return len(self.keys)

    @property
    def junction(self) -> np.ndarray:
        """(U,) bool: nodes shared by ≥ 2 tasks."""
        return self.label == self.n_tasks

    def object_slot_tasks(self, u: int) -> list[int]:
        return [k for k, nx in self.next[u].items() if OBJECT_SLOT in nx]

    def text(self, u: int, tokenizer) -> str:
        toks = ["⋆1" if x == SUBJECT_SLOT else "⋆2" if x == OBJECT_SLOT else tokenizer.vocab[x]
                for x in self.keys[u]]
        return " ".join(toks) if toks else "(empty prefix)"


def token_types(tokenizer) -> tuple[np.ndarray, int, int]:
    """Map token id -> type id: specials and words keep their id, every entity -> ENT.

    Returns ``(type_of (V,), n_types, ent_type)``."""
    n_syn = tokenizer.n_special + tokenizer.n_syntactic
    type_of = np.arange(len(tokenizer), dtype=np.int64)
    type_of[tokenizer.entity_ids] = n_syn
    return type_of, n_syn + 1, n_syn


def structural_nodes(dataset) -> StructuralNodes:
    """Enumerate the structural nodes of ``dataset`` (a few thousand: Σ_τ (|τ|+1) at most)."""
    tok = dataset.tokenizer
    type_of, n_types, ent = token_types(tok)
    index: dict[tuple, int] = {}
    keys, tasks, nxt = [], [], []
    node_at = []
    for g in range(len(dataset.template_task)):
        k = int(dataset.template_task[g])
        tids = dataset.template_ids(k)[int(dataset.template_local[g])].tolist()
        row = []
        for i in range(len(tids) + 1):
            key = tuple(tids[:i])
            u = index.get(key)
            if u is None:
                u = index[key] = len(keys)
                keys.append(key)
                tasks.append(set())
                nxt.append({})
            tasks[u].add(k)
            sym = tids[i] if i < len(tids) else tok.eos_id
            nxt[u].setdefault(k, set()).add(sym)
            row.append(u)
        node_at.append(row)
    K = dataset.n_tasks
    depth = np.array([len(x) for x in keys], dtype=np.int64)
    types = [np.array([tok.bos_id] + [ent if x < 0 else int(type_of[x]) for x in key],
                      dtype=np.int64) for key in keys]
    kind = np.array([2 if OBJECT_SLOT in key else 1 if SUBJECT_SLOT in key else 0
                     for key in keys], dtype=np.int64)
    tasks_t = [tuple(sorted(s)) for s in tasks]
    label = np.array([t[0] if len(t) == 1 else K for t in tasks_t], dtype=np.int64)
    nxt_t = [{k: tuple(sorted(v)) for k, v in d.items()} for d in nxt]
    return StructuralNodes(keys, depth, types, tasks_t, nxt_t, kind, label, node_at, K,
                           n_types, ent, [t.name for t in dataset.tasks])


def hypothesis_violations(nodes: StructuralNodes) -> list[dict]:
    """Nodes breaking (H-obj): shared by ≥ 2 tasks while some task continues with ⋆2 there."""
    out = []
    for u in range(nodes.n_nodes):
        if len(nodes.tasks[u]) > 1:
            obj = nodes.object_slot_tasks(u)
            if obj:
                out.append(dict(node=u, tasks=list(nodes.tasks[u]), object_tasks=obj))
    return out


def check_hypotheses(dataset, nodes: StructuralNodes | None = None) -> StructuralNodes:
    """Raise :class:`.refusals.HypothesisFails` (a ValueError) naming every violation of
    (H-obj) -- the offending nodes are the proof; return the nodes otherwise."""
    nodes = nodes or structural_nodes(dataset)
    bad = hypothesis_violations(nodes)
    if bad:
        tok = dataset.tokenizer
        lines = [f"  '{nodes.text(v['node'], tok)}' shared by tasks "
                 f"{[nodes.task_names[k] for k in v['tasks']]}, object slot for "
                 f"{[nodes.task_names[k] for k in v['object_tasks']]}" for v in bad]
        tasks = sorted({k for v in bad for k in v["tasks"]})
        raise HypothesisFails(
            "H-obj", [nodes.task_names[k] for k in tasks],
            [nodes.text(v["node"], tok) for v in bad], bad,
            "(no shared prefix may need a dictionary lookup); "
            f"{len(bad)} offending prefix(es):\n" + "\n".join(lines)
            + "\nuse construction.admissible_tasks(dataset) for a sub-dataset that satisfies it")
    return nodes


def admissible_tasks(dataset) -> tuple[list[int], list[dict]]:
    """A large set of tasks satisfying (H-obj): greedily, for each offending node, drop the
    cheaper of (a) the tasks with an object slot there or (b) all its tasks but one.

    Returns ``(kept task indices, dropped: list of {task, node text, reason})``.  Greedy, not
    guaranteed maximum (exact maximisation is a hitting-set problem); the chapter reports what
    it drops."""
    nodes = structural_nodes(dataset)
    kept = set(range(dataset.n_tasks))
    dropped = []
    tok = dataset.tokenizer
    for v in sorted(hypothesis_violations(nodes), key=lambda v: len(v["tasks"])):
        alive = [k for k in v["tasks"] if k in kept]
        obj = [k for k in v["object_tasks"] if k in kept]
        if len(alive) < 2 or not obj:
            continue
        # (b) keep one task: prefer one that is not an object task there (then nothing else
        # needs to go), else any
        keep_one = [k for k in alive if k not in obj][:1] or alive[:1]
        opt_b = [k for k in alive if k not in keep_one]
        drop = obj if len(obj) <= len(opt_b) else opt_b
        for k in drop:
            kept.discard(k)
            dropped.append(dict(task=nodes.task_names[k], node=nodes.text(v["node"], tok),
                                shared_with=[nodes.task_names[j] for j in alive if j != k]))
    return sorted(kept), dropped
