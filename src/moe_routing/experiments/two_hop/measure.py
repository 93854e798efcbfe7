"""What a two-hop run is trained on and what is measured on it (ours, beyond paper A): the
mixed dataset of a configuration, the hops of every task, the run's split (train, single-hop
test, seen compositions in an unseen template, held-out compositions), each layer's router
targets, and :func:`evaluate_two_hop` -- every measurement :mod:`.runs`'s docstring lists.

Separate from the run (:mod:`.runs`) so that the measurement can be read, and called on a
trained model, without the caching and the grid.  Part of the two-hop cache key
(:data:`~moe_routing.experiments.two_hop.config.TWO_HOP_CODE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..._internal.validation import instance, integer, require
from ..task_routing.data import experts_knocked_out
from .config import TwoHopConfig, TwoHopData, _config


# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def _dataset(data: TwoHopData):
    from ...knowledge.two_hop_dataset import build_mixed_dataset

    return build_mixed_dataset(dict(zip(data.chains, (list(t) for t in data.chain_templates))),
                               n_pairs=data.n_pairs, n_templates=data.n_templates,
                               seed=data.data_seed, test_fraction=data.test_fraction)


def two_hop_dataset(cfg: TwoHopConfig):
    """The run's :class:`~moe_routing.knowledge.two_hop_dataset.MixedKnowledgeDataset`."""
    return _dataset(_config(cfg).data)


def shared_hop_words(ds) -> dict[str, tuple[str, ...]]:
    """Per two-hop task of ``ds``, the words (punctuation included) its templates have before
    the object slot -- what the object-predicting position reads -- that occur in any
    template of its two hops, sorted.  What a router could key on to send a two-hop query to
    a hop's expert without knowing the hop: :data:`~.config.DEFAULT_TEMPLATES` share some
    ("capital", "written"), :data:`~.config.WORD_DISJOINT_TEMPLATES` none."""
    from ...knowledge.templates import WILDCARDS

    hops = hop_tasks(ds)
    out = {}
    for k, task in enumerate(ds.tasks):
        if hops[k, 0] == k:                          # a single-hop task
            continue
        mine = {w for tp in task.templates for w in tp.tokens[:tp.object_pos]
                if w not in WILDCARDS}
        theirs = {w for h in hops[k] for tp in ds.tasks[int(h)].templates for w in tp.words}
        out[task.name] = tuple(sorted(mine & theirs))
    return out


def hop_tasks(ds) -> np.ndarray:
    """(K, 2) int: the (hop-1, hop-2) task of every task of ``ds`` — the indices of a two-hop
    task's first and second single-hop tasks, (k, k) for a single-hop task k."""
    from ...knowledge.two_hop import TwoHopTask

    names = {t.name: k for k, t in enumerate(ds.tasks)}
    return np.array([(names[t.first.name], names[t.second.name]) if isinstance(t, TwoHopTask)
                     else (k, k) for k, t in enumerate(ds.tasks)], dtype=np.int64)


@dataclass(frozen=True)
class TwoHopSplit:
    """Sentence indices (into the dataset) of each part of a run (module docstring).

    train : what the model is trained on (the dataset's training split, less ``seen``)
    single_test : single-hop test sentences;  seen : the asked template of every composition
    in training;  held_out : the sentences of the held-out compositions (the two-hop test
    split);  single_all, two_hop_all : every sentence of each kind (routing)
    """

    train: np.ndarray
    single_test: np.ndarray
    seen: np.ndarray
    held_out: np.ndarray
    single_all: np.ndarray
    two_hop_all: np.ndarray


def two_hop_split(ds) -> TwoHopSplit:
    """The run's parts of ``ds``: the dataset's split, with the sentence of template
    ``p mod T_k`` of every training composition p of two-hop task k moved to ``seen``."""
    two = hop_tasks(ds)
    is_two = two[ds.task, 0] != ds.task                                   # (M,)
    local = ds.template_local[ds.template]                                # (M,) template in task
    n_tpl = np.array([t.n_templates for t in ds.tasks])[ds.task]
    seen = is_two & ~ds.is_test & (local == ds.pair % n_tpl)
    return TwoHopSplit(train=np.nonzero(~ds.is_test & ~seen)[0],
                       single_test=np.nonzero(ds.is_test & ~is_two)[0],
                       seen=np.nonzero(seen)[0], held_out=np.nonzero(ds.is_test & is_two)[0],
                       single_all=np.nonzero(~is_two)[0], two_hop_all=np.nonzero(is_two)[0])


def _take(enc, idx: np.ndarray):
    """The rows ``idx`` of an ``EncodedSplit`` of the whole dataset (``encode_split("all")``,
    whose row i is sentence i)."""
    import dataclasses

    import torch

    rows = torch.from_numpy(np.asarray(idx, dtype=np.int64))
    return dataclasses.replace(enc, **{f.name: getattr(enc, f.name)[rows]
                                       for f in dataclasses.fields(enc)})


def layer_targets(split, hops: np.ndarray, n_layers: int):
    """(M, n_layers) long: the task whose designated expert supervises each layer of each
    sentence of ``split`` — layer l ↔ hop l (:func:`hop_tasks`), so (hop 1, hop 2) for a
    two-hop sentence and (k, k) for a single-hop one; one layer: hop 1."""
    import torch

    n_layers = integer("n_layers", n_layers, low=1, high=2)
    return torch.from_numpy(hops[split.task.numpy(), :n_layers].copy())


# ----------------------------------------------------------------------------- measurements
def _objects(split):
    import torch

    return split.tokens[torch.arange(len(split)), split.object_pos]        # (M,)


def _correct(model, split) -> np.ndarray:
    from ...model import exact_match

    return exact_match(model, split.tokens, split.object_pos, _objects(split)).correct.numpy()


def fact_ids(ds, split) -> np.ndarray:
    """(M,) int: the fact of every sentence of ``split`` -- ``task · (N + 1) + pair``, N the
    largest dictionary: a composition for a two-hop sentence.  The cluster of the intervals:
    the sentences of one fact (its templates) are not independent."""
    return split.task.numpy() * (ds.max_dictionary_size + 1) + split.pair.numpy()


def _scored(correct: np.ndarray, facts: np.ndarray) -> dict:
    """Accuracy, count, interval clustered by fact (one run: the test set's term alone,
    :func:`~moe_routing.experiments.accuracy.clustered_se`; binomial where fewer than two facts), and the
    per-sentence ``correct`` (0/1) with its ``facts``: what a cell's interval over seeds and
    a paired difference need."""
    from ..accuracy import accuracy_interval, clustered_se

    n = int(correct.size)
    acc = float(correct.mean()) if n else float("nan")
    if n >= 2 and np.unique(facts).size >= 2:
        iv = accuracy_interval([acc], test=clustered_se(correct.astype(float), facts)).as_dict()
    else:
        iv = accuracy_interval([acc], n).as_dict() if n else None
    return dict(accuracy=acc, n=n, interval=iv, correct=correct.astype(int).tolist(),
                facts=np.asarray(facts).astype(int).tolist())


def _se(values: np.ndarray, facts: np.ndarray) -> list | None:
    """[standard error, degrees of freedom] of ``values.mean()`` clustered by fact (None with
    fewer than two facts)."""
    from ..accuracy import clustered_se

    if values.size < 2 or np.unique(facts).size < 2:
        return None
    e = clustered_se(values.astype(float), facts)
    return [e.se, e.df]


def _position_mask(split):
    """(M, n−1) bool: the input position that predicts the object, one per sentence."""
    import torch

    mask = torch.zeros(split.inputs.shape, dtype=torch.bool)
    mask[torch.arange(len(split)), split.object_pos - 1] = True
    return mask


def _majority(values: np.ndarray, n: int) -> int:
    """The most frequent value of ``values`` (−1 when empty; ties: the smallest)."""
    return int(np.bincount(values, minlength=n).argmax()) if values.size else -1


def evaluate_two_hop(model, ds, parts: TwoHopSplit, n_experts: int) -> dict:
    """Every measurement of the module docstring, for a trained model (a
    :class:`~moe_routing.model.MoETransformer`); ``n_experts`` must be the model's expert count
    (``model.config.n_experts``: the routes are counted over that many experts)."""
    import torch

    from ... import routing_metrics as rm
    from ...model import MoETransformer, collect_routing

    instance("model", model, MoETransformer, "a MoETransformer (the trained two-hop model)")
    have = int(model.config.n_experts)
    n_experts = integer("n_experts", n_experts)
    require(n_experts == have, "n_experts", n_experts,
            f"the model's expert count, {have} (model.config.n_experts)")
    enc = ds.encode_split("all")
    hops = hop_tasks(ds)
    single, seen, held = (_take(enc, parts.single_test), _take(enc, parts.seen),
                          _take(enc, parts.held_out))
    tr = _take(enc, parts.train)
    n_tr = min(len(tr), 2000)
    tr_correct = _correct(model, _take(enc, parts.train[:n_tr]))
    tr_two = hops[tr.task[:n_tr].numpy(), 0] != tr.task[:n_tr].numpy()
    held_facts = fact_ids(ds, held)
    out = dict(single_hop=_scored(_correct(model, single), fact_ids(ds, single)),
               two_hop_seen=_scored(_correct(model, seen), fact_ids(ds, seen)))
    held_ok = _correct(model, held)
    out["held_out"] = _scored(held_ok, held_facts)
    out["train_single_hop"] = float(tr_correct[~tr_two].mean()) if (~tr_two).any() else None
    out["train_two_hop"] = float(tr_correct[tr_two].mean()) if tr_two.any() else None
    # the witness: what the model recalls with every expert's output zeroed (routing
    # unchanged) -- the experts hold the facts where this falls far below the scores above
    with experts_knocked_out(model):
        off_tr = _correct(model, _take(enc, parts.train[:n_tr]))
        out["experts_off"] = dict(
            train_single_hop=float(off_tr[~tr_two].mean()) if (~tr_two).any() else None,
            train_two_hop=float(off_tr[tr_two].mean()) if tr_two.any() else None,
            single_hop=float(_correct(model, single).mean()) if len(single) else None,
            held_out=float(_correct(model, held).mean()) if len(held) else None)

    # base rates of the held-out score
    obj_tr, obj_held = _objects(tr).numpy(), _objects(held).numpy()
    task_tr, task_held = tr.task.numpy(), held.task.numpy()
    majority = {k: _majority(obj_tr[task_tr == k], ds.vocab_size) for k in np.unique(task_held)}
    is_major = np.array([obj_held[i] == majority[task_held[i]] for i in range(len(held))],
                        dtype=bool)
    subj_held = held.tokens[torch.arange(len(held)), held.subject_pos].numpy()
    # copy the middle entity: answer with the first hop's object m, a training fact
    middle = np.array([ds.tokenizer.entity_id(ds.tasks[k].middle(
        list(ds.tasks[k].dictionary)[p])) for k, p in zip(task_held, held.pair.numpy())],
        dtype=np.int64)
    is_middle = middle == obj_held
    pair_key = held_facts
    comps = np.unique(pair_key)
    nan = float("nan")
    out.update(
        majority_baseline=float(is_major.mean()) if len(held) else nan,
        majority_correct=is_major.astype(int).tolist(),
        copy_middle_baseline=float(is_middle.mean()) if len(held) else nan,
        copy_middle_correct=is_middle.astype(int).tolist(),
        accuracy_non_majority=_scored(held_ok[~is_major], held_facts[~is_major]),
        identity_fraction=float((subj_held == obj_held).mean()) if len(held) else nan,
        copyable_fraction=float(((subj_held == obj_held) | is_middle).mean())
        if len(held) else nan,
        composition_accuracy=float(np.mean([held_ok[pair_key == c].all() for c in comps]))
        if comps.size else float("nan"),
        n_held_out_compositions=int(comps.size),
        held_out_per_task={ds.tasks[k].name: float(held_ok[task_held == k].mean())
                           for k in np.unique(task_held)})

    # routing at the object-predicting position
    s_all, t_all = _take(enc, parts.single_all), _take(enc, parts.two_hop_all)
    held_rows = np.isin(parts.two_hop_all, parts.held_out)                 # (M2,)
    t_facts = fact_ids(ds, t_all)
    two_tasks = [k for k in range(ds.n_tasks) if hops[k, 0] != k]
    layers = []
    for layer in range(model.config.n_layers):
        rs = collect_routing(model, s_all.inputs, s_all.task, _position_mask(s_all), layer=layer)
        e_single = rs.expert[:, 0].numpy()
        dominant = {k: _majority(e_single[rs.task.numpy() == k], n_experts)
                    for k in range(ds.n_tasks) if hops[k, 0] == k}
        entry = dict(layer=layer + 1, matched_hop=layer + 1,
                     single_hop=rm.routing_summary(rs.task, rs.expert[:, 0], ds.n_tasks,
                                                   n_experts, rs.probs),
                     dominant_expert={ds.tasks[k].name: e for k, e in dominant.items()})
        for h in (0, 1):
            labels = torch.from_numpy(hops[t_all.task.numpy(), h].copy())
            rt = collect_routing(model, t_all.inputs, labels, _position_mask(t_all), layer=layer)
            e = rt.expert[:, 0].numpy()                                    # (M2,) sentence order
            lab = rt.task.numpy()
            designated = e == lab % n_experts
            reuse = e == np.array([dominant[k] for k in lab])
            entry[f"hop{h + 1}"] = dict(
                designated_fraction=float(designated.mean()),
                reuse_fraction=float(reuse.mean()),
                # its standard error over compositions (the templates of one are not
                # independent draws of the router)
                reuse_se=_se(reuse, t_facts),
                held_out_designated_fraction=float(designated[held_rows].mean())
                if held_rows.any() else None,
                held_out_reuse_fraction=float(reuse[held_rows].mean())
                if held_rows.any() else None,
                summary=rm.routing_summary(rt.task, rt.expert[:, 0], ds.n_tasks, n_experts,
                                           rt.probs))
            if h == 0:
                e_two = e
        entry["reuse"] = [
            dict(task=ds.tasks[k].name, hop1=ds.tasks[int(hops[k, 0])].name,
                 hop2=ds.tasks[int(hops[k, 1])].name,
                 two_hop_expert=_majority(e_two[t_all.task.numpy() == k], n_experts),
                 hop1_single_expert=dominant[int(hops[k, 0])],
                 hop2_single_expert=dominant[int(hops[k, 1])])
            for k in two_tasks]
        layers.append(entry)
    out["routing"] = layers
    return out


__all__ = ["TwoHopSplit", "evaluate_two_hop", "fact_ids", "hop_tasks", "layer_targets",
           "two_hop_dataset", "two_hop_split"]
