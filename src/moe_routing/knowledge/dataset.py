"""The knowledge dataset D(K, T) = ∪_k D(k): sentences, split, tokenizer, valid next tokens.

Consumers
---------
* the hand-built transformer (Theorem 4.2) reads, per task, ``template_ids(k)`` (templates as
  token ids with slot markers), ``dictionary_ids(k)``, ``max_template_length``, the vocabulary
  split ``tokenizer.syntactic_ids`` / ``tokenizer.entity_ids``, and per prefix its task set and
  V(w) from ``trie`` (or the flat ``prefix_table()``);
* the training pipeline reads ``encode_split("train" | "test" | "all")`` (padded tensors, task of
  each sentence, object positions, trie node of each prefix) and ``valid_next_mask(nodes)``.

Split (our choice, the paper only says "80/20"): the unit is the **sentence**, stratified by task
(each task contributes round(20 %) of its sentences to test).  Why sentences and not facts: a
fact cannot be inferred from other facts (dictionaries are arbitrary), so exact-match completion
of a test sentence is only learnable if its (subject, object) pair was seen in training under
another template -- the paper's 86–94 % test accuracies presuppose that.  With 5 templates, a
test fact is absent from training with probability ≈ 0.2⁴ < 0.2 %; ``split_stats()`` reports the
exact share.  ``split_unit="fact"`` holds out whole facts (all templates of a pair) for the
control experiment where the test measures knowledge the model cannot have.

V(w) is computed over *all* sentences (train and test), as in the paper's definition over D(K,T).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._internal.validation import choice, integer, probability, require, sequence, sequence_of
from .task import KnowledgeTask
from .templates import OBJECT, SUBJECT
from .tokenizer import Tokenizer
from .trie import PrefixTrie

#: markers used in ``template_ids`` for the two wildcard slots (never valid token ids)
SUBJECT_SLOT, OBJECT_SLOT = -1, -2
SPLITS = ("train", "test", "all")
SPLIT_UNITS = ("sentence", "fact")

if TYPE_CHECKING:
    import torch


def split_arguments(seed, test_fraction, split_unit) -> tuple[int, float, str]:
    """The checked train/test split arguments ``(seed ≥ 0, test_fraction ∈ (0, 1), split_unit)``,
    as plain Python values (NumPy scalars accepted).  Called by :class:`KnowledgeDataset` and,
    before a long load, by ``build_dataset``."""
    return (integer("seed", seed, low=0), probability("test_fraction", test_fraction),
            choice("split_unit", split_unit, SPLIT_UNITS))


@dataclass(frozen=True)
class EncodedSplit:
    """Padded sentences of one split, ready for a model.  M sentences, n = L + 2 positions.

    Fields::

        tokens      : LongTensor (M, n)  [BOS, w1, …, w|τ|, EOS, PAD, …]
        lengths     : LongTensor (M,)    non-pad tokens (|τ| + 2)
        task        : LongTensor (M,)    task index k (position in ``dataset.tasks``)
        template    : LongTensor (M,)    global template index (``dataset.template_task[g] == task``)
        pair        : LongTensor (M,)    index of the (subject, object) pair in task k's dictionary
        subject_pos : LongTensor (M,)    position of the subject token in ``tokens``
        object_pos  : LongTensor (M,)    position of the object token; ``tokens[:, :object_pos]`` is
                                         the truncated prefix of exact-match completion
        prefix_node : LongTensor (M, n)  trie node of ``tokens[:, :i+1]`` (−1 where no next token is
                                         predicted); ``dataset.valid_next_mask(prefix_node)`` gives
                                         the V(w) masks, (M, n, V)
        index       : LongTensor (M,)    sentence index in the whole dataset
    """

    tokens: "torch.Tensor"
    lengths: "torch.Tensor"
    task: "torch.Tensor"
    template: "torch.Tensor"
    pair: "torch.Tensor"
    subject_pos: "torch.Tensor"
    object_pos: "torch.Tensor"
    prefix_node: "torch.Tensor"
    index: "torch.Tensor"

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def inputs(self):
        """(M, n−1) model inputs (next-token prediction)."""
        return self.tokens[:, :-1]

    @property
    def targets(self):
        """(M, n−1) next tokens."""
        return self.tokens[:, 1:]

    def targets_masked(self, ignore_index: int = -100):
        """(M, n−1) next tokens with ``ignore_index`` where nothing is predicted (padding and
        after EOS): the form ``torch.nn.functional.cross_entropy`` expects."""
        return self.targets.masked_fill(~self.loss_mask, integer("ignore_index", ignore_index))

    @property
    def loss_mask(self):
        """(M, n−1) bool: positions where a next token is predicted (inside the sentence)."""
        return self.prefix_node[:, :-1] >= 0

    def to(self, device) -> "EncodedSplit":
        return EncodedSplit(**{k: getattr(self, k).to(device) for k in self.__dataclass_fields__})


class KnowledgeDataset:
    """A set of knowledge tasks with everything derived from it (see module docstring).

    Parameters::

        tasks : sequence of KnowledgeTask, names unique
        seed : int ≥ 0        seed of the train/test split
        test_fraction : float in (0, 1)
        split_unit : "sentence" (default) or "fact"
        skipped_entities : ids of entities the source dropped (e.g. WikiData5M entities without an
                           alias, ``on_missing_alias="skip"``): kept so that a report can name them

    Attributes (NumPy, all sentences; M sentences, n = L + 2, G templates, P prefixes)::

        tokenizer : Tokenizer            vocabulary [PAD, BOS, EOS | syntactic | entities]
        seqs : int64 (M, n)              [BOS, w1…w|τ|, EOS, PAD…], task-major, then template, pair
        lengths, task, template, pair, subject_pos, object_pos : int64 (M,)   as in EncodedSplit
        is_test : bool (M,)
        template_task, template_local : int64 (G,)   task and index within the task of template g
        max_template_length (L), max_dictionary_size (N) : int
        trie : PrefixTrie                V(w), tasks and templates of every prefix (CSR arrays)
        prefix_node : int64 (M, n)       trie node of seqs[:, :i+1] (−1 where nothing is predicted)
    """

    def __init__(self, tasks: Sequence[KnowledgeTask], *, seed: int = 0,
                 test_fraction: float = 0.2, split_unit: str = "sentence",
                 skipped_entities: Sequence[str] = ()):
        tasks = sequence_of("tasks", tasks, KnowledgeTask)
        names = [t.name for t in tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        require(not dup, "task names", dup, "unique names (these are repeated)")
        self.seed, self.test_fraction, self.split_unit = split_arguments(seed, test_fraction,
                                                                         split_unit)
        self.skipped_entities: tuple[str, ...] = tuple(
            str(e) for e in sequence("skipped_entities", skipped_entities,
                                     "a sequence of entity ids", nonempty=False))
        self.tasks: list[KnowledgeTask] = tasks

        words = {w for t in tasks for tp in t.templates for w in tp.words}
        ents = {e for t in tasks for kv in t.dictionary.items() for e in kv}
        self.tokenizer = tok = Tokenizer(words, ents)

        # global template index g -> (task, local index)
        self.template_task = np.array([k for k, t in enumerate(tasks) for _ in t.templates])
        self.template_local = np.array([j for t in tasks for j in range(t.n_templates)])
        self._template_ids = [[self._tpl_ids(tp) for tp in t.templates] for t in tasks]
        self._dict_ids = []
        for t in tasks:
            arr = np.array([[tok.entity_id(a), tok.entity_id(b)] for a, b in t.dictionary.items()],
                           dtype=np.int64).reshape(-1, 2)
            self._dict_ids.append(arr)
        self.max_template_length = max(t.max_template_length for t in tasks)   # L
        self.max_dictionary_size = max(t.n_pairs for t in tasks)               # N

        self._build_sentences()
        self._build_split()
        self.trie = PrefixTrie(self.seqs, self.lengths, self.task, self.template, len(tok))
        self.prefix_node = self.trie.node_of

    # ---- construction helpers ---------------------------------------------------------
    def _tpl_ids(self, tp) -> np.ndarray:
        tok = self.tokenizer
        return np.array([SUBJECT_SLOT if t == SUBJECT else OBJECT_SLOT if t == OBJECT
                         else tok.word_id(t) for t in tp.tokens], dtype=np.int64)

    def _build_sentences(self):
        n = self.max_template_length + 2
        M = sum(t.n_templates * t.n_pairs for t in self.tasks)
        seqs = np.zeros((M, n), dtype=np.int64)
        seqs[:, 0] = self.tokenizer.bos_id
        cols = {k: np.zeros(M, dtype=np.int64) for k in
                ("lengths", "task", "template", "pair", "subject_pos", "object_pos")}
        row, g = 0, 0
        for k, _task in enumerate(self.tasks):
            d = self._dict_ids[k]
            N = len(d)
            for tids in self._template_ids[k]:
                sl = slice(row, row + N)
                L = len(tids)
                block = np.broadcast_to(tids, (N, L)).copy()
                sp = int(np.nonzero(tids == SUBJECT_SLOT)[0][0])
                op = int(np.nonzero(tids == OBJECT_SLOT)[0][0])
                block[:, sp], block[:, op] = d[:, 0], d[:, 1]
                seqs[sl, 1:L + 1] = block
                seqs[sl, L + 1] = self.tokenizer.eos_id
                cols["lengths"][sl] = L + 2
                cols["task"][sl] = k
                cols["template"][sl] = g
                cols["pair"][sl] = np.arange(N)
                cols["subject_pos"][sl] = sp + 1
                cols["object_pos"][sl] = op + 1
                row, g = row + N, g + 1
        self.seqs = seqs
        for key, v in cols.items():
            setattr(self, key, v)

    def _build_split(self):
        rng = np.random.default_rng(self.seed)
        is_test = np.zeros(len(self.seqs), dtype=bool)
        for k, t in enumerate(self.tasks):
            idx = np.nonzero(self.task == k)[0]
            if self.split_unit == "sentence":
                n_test = int(round(self.test_fraction * len(idx)))
                is_test[rng.permutation(idx)[:n_test]] = True
            else:
                n_test = int(round(self.test_fraction * t.n_pairs))
                test_pairs = rng.permutation(t.n_pairs)[:n_test]
                is_test[idx[np.isin(self.pair[idx], test_pairs)]] = True
        self.is_test = is_test

    # ---- sizes ---------------------------------------------------------------------------
    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def n_sentences(self) -> int:
        return len(self.seqs)

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def seq_len(self) -> int:
        """n = L + 2 (BOS and EOS around the longest template)."""
        return self.seqs.shape[1]

    # ---- per-task views (construction) -------------------------------------------------
    def template_ids(self, k: int) -> list[np.ndarray]:
        """Task k's templates as int64 id arrays of length |τ|, SUBJECT_SLOT (−1) and
        OBJECT_SLOT (−2) at the wildcards (no BOS/EOS)."""
        return [a.copy() for a in self._template_ids[self._k(k)]]

    def dictionary_ids(self, k: int) -> np.ndarray:
        """Δ_k as an int64 array (|Δ_k|, 2) of (subject id, object id), in dictionary order."""
        return self._dict_ids[self._k(k)].copy()

    def _k(self, k) -> int:
        if isinstance(k, str):
            names = [t.name for t in self.tasks]
            return names.index(choice("task", k, names))
        return integer("task", k, low=0, high=self.n_tasks - 1)

    # ---- sentences -------------------------------------------------------------------
    def split_indices(self, split: str) -> np.ndarray:
        choice("split", split, SPLITS)
        if split == "all":
            return np.arange(self.n_sentences)
        return np.nonzero(self.is_test if split == "test" else ~self.is_test)[0]

    def sentences(self, split: str = "all") -> list[str]:
        """Sentences as text (entity names quoted)."""
        return [self.tokenizer.decode(self.seqs[i]) for i in self.split_indices(split)]

    def encode_split(self, split: str = "train") -> EncodedSplit:
        """Tensors of one split (see :class:`EncodedSplit` for shapes)."""
        import torch

        idx = self.split_indices(split)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a[idx]))  # noqa: E731
        return EncodedSplit(tokens=t(self.seqs), lengths=t(self.lengths), task=t(self.task),
                            template=t(self.template), pair=t(self.pair),
                            subject_pos=t(self.subject_pos), object_pos=t(self.object_pos),
                            prefix_node=t(self.prefix_node), index=torch.from_numpy(idx))

    def valid_next_mask(self, prefix_node):
        """V(w) masks: node ids (...) -> BoolTensor (..., V).  −1 gives an all-False row."""
        return self.trie.valid_next_mask(prefix_node)

    def is_valid_next(self, prefix_node, tokens) -> np.ndarray:
        """``tokens ∈ V(w)`` elementwise for node ids ``prefix_node`` (same shapes, arrays or
        tensors): e.g. whether greedy predictions are valid next tokens."""
        to_np = lambda a: a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)  # noqa: E731
        return self.trie.is_valid_next(to_np(prefix_node), to_np(tokens))

    def valid_next(self, prefix_ids) -> list[int]:
        """V(w) of a prefix given as ids (BOS first)."""
        return self.trie.valid_next(self.trie.find(prefix_ids)).tolist()

    def valid_next_text(self, prefix_text: str) -> list[str]:
        """V(w) of a prefix given as text, as surface strings (entities quoted; EOS as <eos>)."""
        node = self.trie.find(self.tokenizer.encode(prefix_text, add_special=True)[:-1])
        tok = self.tokenizer
        return [f'"{tok.vocab[i]}"' if tok.is_entity[i] else tok.vocab[i]
                for i in self.trie.valid_next(node)]

    # ---- prefixes -----------------------------------------------------------------------
    def prefix_table(self) -> list[dict]:
        """One row per distinct prefix (trie node): ids, depth, tasks, templates, V(w).

        Meant for constructions and checks; the vectorised form is ``self.trie``."""
        tr = self.trie
        return [dict(node=p, ids=tr.prefix(p), depth=int(tr.depth[p]),
                     tasks=tr.tasks(p).tolist(), templates=tr.templates(p).tolist(),
                     valid_next=tr.valid_next(p).tolist()) for p in range(tr.n_nodes)]

    def prefix_stats(self) -> dict:
        """How many prefixes are shared between tasks.

        Concrete prefixes are trie nodes (token sequences).  Structural prefixes are template
        prefixes over Σ ∪ {⋆1, ⋆2} -- what a router that reads only template structure sees.
        "Occurrences" count (sentence, position) pairs where a next token is predicted.
        """
        tr = self.trie
        amb = tr.ambiguous
        occ = tr.node_of[tr.node_of >= 0]
        struct = self.structural_prefix_tasks()  # small: Σ|τ| nodes at most
        s_amb = sum(len(v) > 1 for v in struct.values())
        # templates that coincide between tasks; templates whose object slot is not determined
        # by the structure before it (another template continues that prefix differently)
        from .sources.templates_file import object_slot_conflicts

        full = {}
        for g, k in enumerate(self.template_task):
            tids = self._template_ids[k][self.template_local[g]].tolist()
            full.setdefault(tuple(tids), set()).add(int(k))
        conf = object_slot_conflicts([(int(self.template_task[g]),
                                       self.tasks[self.template_task[g]].templates[
                                           self.template_local[g]])
                                      for g in range(len(self.template_task))])
        return dict(n_prefixes=int(tr.n_nodes), n_ambiguous=int(amb.sum()),
                    share_ambiguous=float(amb.mean()),
                    n_occurrences=int(len(occ)), n_ambiguous_occurrences=int(amb[occ].sum()),
                    share_ambiguous_occurrences=float(amb[occ].mean()),
                    max_tasks_at_prefix=int(tr.n_tasks_at.max()),
                    n_structural_prefixes=len(struct), n_structural_ambiguous=int(s_amb),
                    n_templates_shared_between_tasks=sum(len(v) > 1 for v in full.values()),
                    n_templates_object_undetermined=len({i for (_, i), _ in conf}))

    def structural_prefix_tasks(self) -> dict[tuple, set]:
        """Structural prefix (tuple of word ids and SUBJECT_SLOT/OBJECT_SLOT markers) -> tasks
        having a template that starts with it.  This is all a router that reads template
        structure only can know."""
        struct: dict[tuple, set] = {}
        for g, k in enumerate(self.template_task):
            tids = self._template_ids[k][self.template_local[g]].tolist()
            for i in range(len(tids) + 1):
                struct.setdefault(tuple(tids[:i]), set()).add(int(k))
        return struct

    def identification_depth(self) -> np.ndarray:
        """(G,) for each global template, the shortest structural prefix length after which only
        its own task remains possible; −1 when even the full template is shared with another
        task."""
        struct = self.structural_prefix_tasks()
        out = np.full(len(self.template_task), -1, dtype=np.int64)
        for g, k in enumerate(self.template_task):
            tids = self._template_ids[k][self.template_local[g]].tolist()
            for i in range(len(tids) + 1):
                if struct[tuple(tids[:i])] == {int(k)}:
                    out[g] = i
                    break
        return out

    # ---- statistics -------------------------------------------------------------------
    def task_table(self) -> list[dict]:
        """Per task: |T(k)|, |Δ_k|, Σ|τ|, c(k), its own bound L_k|T(k)|+|Δ_k| and the uniform
        bound L·|T(k)| + N with the dataset's L and N."""
        L, N = self.max_template_length, self.max_dictionary_size
        return [dict(task=t.name, label=t.label, property_id=t.property_id or "ours",
                     n_templates=t.n_templates, n_pairs=t.n_pairs,
                     template_tokens=sum(len(x) for x in t.templates),
                     max_template_length=t.max_template_length, complexity=t.complexity,
                     bound_own=t.complexity_bound(), bound_uniform=t.complexity_bound(L, N))
                for t in self.tasks]

    def split_stats(self) -> dict:
        """Sizes of the split and how many test facts were seen in training (other templates)."""
        key = self.task * (self.max_dictionary_size + 1) + self.pair
        seen = np.isin(key[self.is_test], key[~self.is_test])
        return dict(n_train=int((~self.is_test).sum()), n_test=int(self.is_test.sum()),
                    test_fact_seen_in_train=float(seen.mean()) if len(seen) else float("nan"))

    def statistics(self) -> dict:
        lens = self.lengths - 2
        return dict(n_tasks=self.n_tasks, n_pairs=int(sum(t.n_pairs for t in self.tasks)),
                    n_templates=int(len(self.template_task)), n_sentences=self.n_sentences,
                    vocab_size=self.vocab_size, n_syntactic=self.tokenizer.n_syntactic,
                    n_entity=self.tokenizer.n_entity, L=self.max_template_length,
                    N=self.max_dictionary_size, sentence_len_min=int(lens.min()),
                    sentence_len_mean=float(lens.mean()), sentence_len_max=int(lens.max()),
                    **self.split_stats())

    def subset(self, tasks) -> "KnowledgeDataset":
        """A dataset of some tasks (names or indices), same seed and split rule."""
        tasks = sequence("tasks", tasks, "task names or indices")
        return KnowledgeDataset([self.tasks[self._k(k)] for k in tasks], seed=self.seed,
                                test_fraction=self.test_fraction, split_unit=self.split_unit,
                                skipped_entities=self.skipped_entities)

    def __repr__(self) -> str:
        return (f"KnowledgeDataset({self.n_tasks} tasks, {self.n_sentences} sentences, "
                f"V={self.vocab_size}, L={self.max_template_length})")
