"""Datasets that mix single-hop and two-hop tasks, with a split that holds out compositions
(ours, beyond paper A): :class:`MixedKnowledgeDataset` and :func:`build_mixed_dataset`.

The tasks and the chains they come from are :mod:`.two_hop`'s (its docstring says what a
held-out composition is and why it is the test of composition); this module is the dataset
and its split rule, kept apart so that the tasks can be read and built without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .._internal.validation import fail, flag, require, sequence, sequence_of
from .dataset import KnowledgeDataset, split_arguments
from .task import KnowledgeTask
from .two_hop import Fact, TwoHopTask, two_hop_task


def copyable(task: TwoHopTask, subject: str) -> bool:
    """Whether the composition of ``subject`` in ``task`` answers with an entity of its
    question or of its first hop: its object is the subject (o = s) or the middle entity
    (o = m)."""
    o = task.dictionary[subject]
    return o == subject or o == task.middle(subject)


# ---- datasets mixing single-hop and two-hop tasks ------------------------------------------
@dataclass(frozen=True)
class HeldOutComposition:
    """A composition (s, o) of a two-hop task held out of training, and what supports it.

    first, second      : the single-hop facts (s, m) and (m, o), both in training
    test_sentences     : indices of its sentences (one per template of the task), all test
    support_sentences  : indices of the training sentences that state ``first`` or ``second``
    """

    task: str
    subject: str
    middle: str
    object: str
    first: Fact
    second: Fact
    test_sentences: tuple[int, ...]
    support_sentences: tuple[int, ...]


class MixedKnowledgeDataset(KnowledgeDataset):
    """Single-hop and two-hop tasks in one dataset, with a split that holds out compositions.

    Everything but the split is :class:`KnowledgeDataset`'s (sentences, tokenizer, trie, V(w)
    over all sentences).  The split, seeded by ``seed``:

    1. each two-hop task holds out round(test_fraction · n) of its n *uncopyable*
       compositions, chosen by a permutation: *every* template's sentence of a held-out (s, o)
       is a test sentence and every sentence of the other compositions a training sentence
       (the unit is the composition whatever ``split_unit`` says, so that the test asks for
       facts never stated).  A composition is *copyable* (:meth:`copyable`) when its object
       is its subject (o = s) or its middle entity (o = m: an entity is its name, so the
       script "Arabic" is the language "Arabic"); copying the question or the first hop -- a
       training sentence -- answers it without composing, so it stays in training.
       ``hold_out_copyable=True`` draws from every composition (the selection before the
       leak was found: round(test_fraction · |Δ_k|) of them, the same permutation);
    2. the single-hop facts that support a held-out composition -- (s, m) of its first hop and
       (m, o) of its second -- are *pinned*: all their sentences are training sentences, so the
       model has seen both hops in every phrasing;
    3. every single-hop task is then split by ``split_unit`` as in :class:`KnowledgeDataset`
       (round(test_fraction · its sentences) or · its facts), drawn from its unpinned sentences
       or facts (fewer when the pins leave fewer).  The other direction is not closed: a
       single-hop test fact may be a hop of a *training* composition.

    With no two-hop task the split is exactly :class:`KnowledgeDataset`'s.  Every hop of a
    two-hop task must be one of ``tasks`` (by name) holding the facts it composes.  The
    two-hop templates must determine their object slot: no template of another task continues
    the prefix before ⋆2 differently (else V(w) at the object would hold other tokens than the
    composed object and a held-out sentence could coincide with another task's).
    """

    def __init__(self, tasks: Sequence[KnowledgeTask], *, seed: int = 0,
                 test_fraction: float = 0.2, split_unit: str = "sentence",
                 skipped_entities: Sequence[str] = (), hold_out_copyable: bool = False):
        tasks = sequence_of("tasks", tasks, KnowledgeTask)
        split_arguments(seed, test_fraction, split_unit)
        self.hold_out_copyable = flag("hold_out_copyable", hold_out_copyable)
        by_name = {t.name: t for t in tasks}
        for t in tasks:
            if not isinstance(t, TwoHopTask):
                continue
            for hop in (t.first, t.second):
                have = by_name.get(hop.name)
                require(have is not None and not isinstance(have, TwoHopTask), f"tasks ({t.name})",
                        hop.name, f"the hop {hop.name!r} of {t.name!r} among the tasks, as a "
                                  f"single-hop task (tasks given: {', '.join(by_name)})")
            for s in t.dictionary:
                for f in t.supports(s):
                    got = by_name[f.task].dictionary.get(f.subject)
                    require(got == f.object, f"tasks[{f.task!r}].dictionary[{f.subject!r}]", got,
                            f"{f.object!r}: the fact {t.name!r} composes (pass the hop tasks "
                            f"the two-hop task was built from)")
        self._check_object_slots(tasks)
        super().__init__(tasks, seed=seed, test_fraction=test_fraction, split_unit=split_unit,
                         skipped_entities=skipped_entities)

    @staticmethod
    def _check_object_slots(tasks):
        from .sources.templates_file import object_slot_conflicts

        flat = [(k, tp) for k, t in enumerate(tasks) for tp in t.templates]
        for (k1, i), (k2, j) in object_slot_conflicts(flat):
            if isinstance(tasks[k1], TwoHopTask) or isinstance(tasks[k2], TwoHopTask):
                fail(f"template {flat[i][1].text!r} ({tasks[k1].name})", flat[j][1].text,
                     f"no template of another task ({tasks[k2].name} here) that continues the "
                     f"prefix before ⋆2 of a two-hop template differently: the object slot of a "
                     f"two-hop sentence must be determined")

    # ---- the split ------------------------------------------------------------------------
    def _build_split(self):
        rng = np.random.default_rng(self.seed)
        is_test = np.zeros(len(self.seqs), dtype=bool)
        pinned = np.zeros(len(self.seqs), dtype=bool)
        names = {t.name: k for k, t in enumerate(self.tasks)}
        subject_index = [{s: i for i, s in enumerate(t.dictionary)} for t in self.tasks]
        held: list[tuple[int, str]] = []
        pinned_pairs: list[set[int]] = [set() for _ in self.tasks]
        for k, t in enumerate(self.tasks):
            if not isinstance(t, TwoHopTask):
                continue
            idx = np.nonzero(self.task == k)[0]
            free = np.array([p for p, s in enumerate(t.dictionary)
                             if self.hold_out_copyable or not copyable(t, s)], dtype=np.int64)
            n_test = int(round(self.test_fraction * len(free)))
            out = free[rng.permutation(len(free))[:n_test]]
            is_test[idx[np.isin(self.pair[idx], out)]] = True
            subjects = list(t.dictionary)
            for p in sorted(int(i) for i in out):
                held.append((k, subjects[p]))
                for f in t.supports(subjects[p]):
                    pinned_pairs[names[f.task]].add(subject_index[names[f.task]][f.subject])
        for k, t in enumerate(self.tasks):
            if isinstance(t, TwoHopTask):
                continue
            idx = np.nonzero(self.task == k)[0]
            pin = np.isin(self.pair[idx], sorted(pinned_pairs[k]))
            pinned[idx[pin]] = True
            if self.split_unit == "sentence":
                n_test = int(round(self.test_fraction * len(idx)))
                is_test[rng.permutation(idx[~pin])[:n_test]] = True
            else:
                n_test = int(round(self.test_fraction * t.n_pairs))
                free = np.setdiff1d(np.arange(t.n_pairs), sorted(pinned_pairs[k]))
                out = free[rng.permutation(len(free))[:n_test]] if len(free) else free
                is_test[idx[np.isin(self.pair[idx], out)]] = True
        self.is_test = is_test
        #: bool (M,): sentences kept in training because they state a hop of a held-out composition
        self.pinned = pinned
        self._held = held

    # ---- records ----------------------------------------------------------------------------
    def copyable(self, task: str | int) -> list[str]:
        """The subjects of the copyable compositions of a two-hop task (o = s or o = m, in
        dictionary order): the answers that copying the subject or the first hop gives."""
        k = self._k(task)
        require(isinstance(self.tasks[k], TwoHopTask), "task", task,
                "a two-hop task of the dataset: " + ", ".join(t.name for t in self.two_hop_tasks))
        return [s for s in self.tasks[k].dictionary if copyable(self.tasks[k], s)]

    @property
    def two_hop_tasks(self) -> list[TwoHopTask]:
        return [t for t in self.tasks if isinstance(t, TwoHopTask)]

    def _sentences_of(self, k: int, subject: str) -> np.ndarray:
        p = list(self.tasks[k].dictionary).index(subject)
        return np.nonzero((self.task == k) & (self.pair == p))[0]

    def _record(self, k: int, subject: str) -> HeldOutComposition:
        t = self.tasks[k]
        f1, f2 = t.supports(subject)
        names = {x.name: j for j, x in enumerate(self.tasks)}
        sup = np.concatenate([self._sentences_of(names[f.task], f.subject) for f in (f1, f2)])
        sup = np.unique(sup[~self.is_test[sup]])
        return HeldOutComposition(task=t.name, subject=subject, middle=f1.object,
                                  object=f2.object, first=f1, second=f2,
                                  test_sentences=tuple(self._sentences_of(k, subject).tolist()),
                                  support_sentences=tuple(sup.tolist()))

    def held_out_compositions(self, task: str | int | None = None) -> list[HeldOutComposition]:
        """Every held-out composition (of one two-hop task when ``task`` is given), in task
        order then dictionary order, with the single-hop facts that support it."""
        if task is None:
            return [self._record(k, s) for k, s in self._held]
        k = self._k(task)
        require(isinstance(self.tasks[k], TwoHopTask), "task", task,
                "a two-hop task of the dataset: " + ", ".join(t.name for t in self.two_hop_tasks))
        return [self._record(kk, s) for kk, s in self._held if kk == k]

    def supports(self, task: str | int, subject: str) -> HeldOutComposition:
        """The record of the held-out composition of ``subject`` in two-hop task ``task``: its
        two single-hop facts and the training sentences that state them."""
        k = self._k(task)
        held = [s for kk, s in self._held if kk == k]
        require(subject in held, "subject", subject,
                f"a subject of a held-out composition of {self.tasks[k].name!r} "
                f"({len(held)} held out)")
        return self._record(k, subject)

    def split_stats(self) -> dict:
        """:meth:`KnowledgeDataset.split_stats` plus the held-out compositions and pins."""
        return dict(super().split_stats(), n_held_out_compositions=len(self._held),
                    n_pinned_sentences=int(self.pinned.sum()),
                    n_copyable_compositions=sum(len(self.copyable(t.name))
                                                for t in self.two_hop_tasks),
                    n_copyable_held_out=sum(copyable(self.tasks[k], s) for k, s in self._held))

    def subset(self, tasks) -> "MixedKnowledgeDataset":
        """A mixed dataset of some tasks (names or indices; a two-hop task needs its hops)."""
        tasks = sequence("tasks", tasks, "task names or indices")
        return MixedKnowledgeDataset([self.tasks[self._k(k)] for k in tasks], seed=self.seed,
                                     test_fraction=self.test_fraction,
                                     split_unit=self.split_unit,
                                     skipped_entities=self.skipped_entities,
                                     hold_out_copyable=self.hold_out_copyable)

    def __repr__(self) -> str:
        return (f"MixedKnowledgeDataset({self.n_tasks} tasks ({len(self.two_hop_tasks)} two-hop), "
                f"{self.n_sentences} sentences, {len(self._held)} held-out compositions)")


def build_mixed_dataset(two_hop: Mapping[tuple[str, str], Sequence[str]], *,
                        relations: Sequence[str] = (), n_pairs: int = 200, n_templates: int = 5,
                        seed: int = 0, test_fraction: float = 0.2, split_unit: str = "sentence",
                        complete_middles: bool = True) -> MixedKnowledgeDataset:
    """A mixed dataset from the embedded knowledge base.

    Arguments::

        two_hop   : {(first, second): templates} -- each key a chain of relation ids (see
                    :func:`embedded_chains`), each value the two-hop task's templates
        relations : further single-hop relations to include; the hops are always included
        n_pairs, n_templates, seed : as in :func:`~moe_routing.knowledge.build_dataset` (the
                    single-hop tasks are the same ``embedded_tasks``), the seed also drives the split
        complete_middles : True (default) adds to the second hop of each chain, after its own
                    sample, the facts (m, Δ₂(m)) of the middle entities m of the first hop's
                    sample that the sample missed (so its dictionary can exceed ``n_pairs``;
                    ``meta["added_middles"]`` counts them).  Why: two independent samples of n
                    pairs share few middle entities when the second relation is large (80 of
                    243 countries' official languages meet 80 of 635 languages' scripts in a
                    handful of languages, often none), and the composition would be small or
                    empty.
                    False keeps the samples as they are (an empty composition is refused).
                    Chains are completed in the order of ``two_hop``.
    """
    import dataclasses

    from .sources.embedded import embedded_tasks, relation_ids, relation_pool

    require(isinstance(two_hop, Mapping) and len(two_hop) > 0, "two_hop", two_hop,
            "a non-empty mapping {(first relation, second relation): templates}")
    ids = relation_ids()
    for key in two_hop:
        require(isinstance(key, tuple) and len(key) == 2 and all(r in ids for r in key),
                "two_hop key", key, "a pair (first, second) of embedded relation ids")
    extra = sequence("relations", relations, "a sequence of embedded relation ids",
                     nonempty=False)
    seed, test_fraction, split_unit = split_arguments(seed, test_fraction, split_unit)
    complete_middles = flag("complete_middles", complete_middles)
    wanted = set(extra) | {r for key in two_hop for r in key}
    unknown = sorted(r for r in wanted if r not in ids)
    require(not unknown, "relations", unknown, "embedded relation ids: " + ", ".join(ids))
    single = embedded_tasks(n_pairs=n_pairs, seed=seed, n_templates=n_templates,
                            relations=[r for r in ids if r in wanted])
    by_name = {t.name: t for t in single}
    if complete_middles:
        for a, b in two_hop:
            second, pool = by_name[b], relation_pool(b)
            add = {m: pool[m] for m in by_name[a].dictionary.values()
                   if m in pool and m not in second.dictionary}
            if add:
                by_name[b] = dataclasses.replace(
                    second, dictionary={**second.dictionary, **add},
                    meta=dict(second.meta, added_middles=second.meta.get("added_middles", 0)
                              + len(add)))
        single = [by_name[t.name] for t in single]
    composed = [two_hop_task(by_name[a], by_name[b], tpls) for (a, b), tpls in two_hop.items()]
    return MixedKnowledgeDataset([*single, *composed], seed=seed, test_fraction=test_fraction,
                                 split_unit=split_unit)


__all__ = ["HeldOutComposition", "MixedKnowledgeDataset", "build_mixed_dataset",
           "copyable"]
