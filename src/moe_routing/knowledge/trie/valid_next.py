"""Valid next tokens V(w) for every prefix w of every sentence, through a prefix trie.

Paper A measures a model by the probability it puts on *valid* next tokens,
Σ_{x ∈ V(w)} P(x | w) with V(w) = {x : w·x is a prefix of some sentence of the dataset}.  The
set is the set of children of w's node in the prefix trie of all sentences: several tokens are
valid where templates share a prefix or at a subject slot (every key of the task is valid).

The trie is built level by level with ``np.unique`` instead of token-by-token insertion: the
node of prefix ``seq[:i+1]`` is the unique id of the pair (node of ``seq[:i]``, ``seq[i]``).
That makes building it for 50 000 sentences a handful of vectorised sorts (≈ 0.1 s).

Layout: sequences are ``[BOS, w1, …, wL, EOS, PAD…]``.  The root (node 0) is the prefix
``[BOS]``; ``node_of[s, i]`` is the node of ``seq_s[:i+1]`` for ``0 ≤ i ≤ len_s − 2`` (every
position where a next token is predicted) and −1 elsewhere.  V(node) contains EOS when some
sentence ends there.
"""

from __future__ import annotations

import numpy as np


def csr_groups(keys: np.ndarray, values: np.ndarray, n_keys: int):
    """Distinct (key, value) pairs grouped by key: ``(indptr (n_keys+1,), values ascending)``.

    Values must be non-negative.  One int64 sort of key·base + value (``np.unique`` with
    ``axis=0`` is ~20× slower)."""
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    base = int(values.max()) + 1 if len(values) else 1
    uniq = np.unique(keys * base + values)
    counts = np.bincount(uniq // base, minlength=n_keys)
    indptr = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, uniq % base


def _unique_pairs(a: np.ndarray, b: np.ndarray, base: int):
    """Unique ids of the pairs (a, b) with b < base (``np.unique`` on one int64 key: faster
    than ``axis=0``)."""
    key = a.astype(np.int64) * base + b
    uniq, inv = np.unique(key, return_inverse=True)
    return uniq // base, uniq % base, inv


class PrefixTrie:
    """The prefix trie of a set of id sequences, with per-node valid next tokens, task sets and
    template sets (all as CSR arrays).

    Shapes: M sequences, n padded length, P nodes, V vocabulary.

    node_of : (M, n) int64   node of the prefix ending at position i, −1 where nothing is predicted
    parent, token, depth, count : (P,)   parent node (−1 for the root), last token, position of
                                         the last token (root 0), sentences passing through
    next_indptr, next_ids : CSR of V(node)      (ids ascending)
    task_indptr, task_ids : CSR of tasks(node)  (sentences through the node come from these tasks)
    template_indptr, template_ids : CSR of the global template indices through the node
    """

    def __init__(self, seqs: np.ndarray, lengths: np.ndarray, task: np.ndarray,
                 template: np.ndarray, vocab_size: int, n_tasks: int, n_templates: int):
        seqs = np.asarray(seqs, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        M, n = seqs.shape
        if M == 0:
            raise ValueError("cannot build a prefix trie of zero sequences")
        if lengths.min() < 2:
            raise ValueError("every sequence needs at least BOS and EOS (length ≥ 2)")
        if not np.all(seqs[:, 0] == seqs[0, 0]):
            raise ValueError("all sequences must start with the same BOS token")
        self.vocab_size = int(vocab_size)
        node_of = np.full((M, n), -1, dtype=np.int64)
        node_of[:, 0] = 0
        parents, tokens, depths = [np.array([-1])], [seqs[:1, 0]], [np.array([0])]
        n_nodes = 1
        for i in range(1, n - 1):
            active = np.nonzero(lengths - 2 >= i)[0]
            if len(active) == 0:
                break
            par, tok, inv = _unique_pairs(node_of[active, i - 1], seqs[active, i], self.vocab_size)
            node_of[active, i] = n_nodes + inv
            parents.append(par)
            tokens.append(tok)
            depths.append(np.full(len(par), i))
            n_nodes += len(par)
        self.n_nodes = n_nodes
        self.node_of = node_of
        self.parent = np.concatenate(parents).astype(np.int64)
        self.token = np.concatenate(tokens).astype(np.int64)
        self.depth = np.concatenate(depths).astype(np.int64)

        rows, cols = np.nonzero(node_of >= 0)
        nodes = node_of[rows, cols]
        nxt = seqs[rows, cols + 1]
        self.count = np.bincount(nodes, minlength=n_nodes)
        self.next_indptr, self.next_ids = csr_groups(nodes, nxt, n_nodes)
        self.task_indptr, self.task_ids = csr_groups(nodes, np.asarray(task)[rows], n_nodes)
        self.template_indptr, self.template_ids = csr_groups(nodes, np.asarray(template)[rows],
                                                             n_nodes)
        self.n_tasks_at = np.diff(self.task_indptr)  # (P,)
        self._index: dict | None = None
        self._keys: np.ndarray | None = None

    # ---- per-node queries ---------------------------------------------------------------
    def valid_next(self, node: int) -> np.ndarray:
        """V(w) of the prefix at ``node``: ids ascending."""
        return self.next_ids[self.next_indptr[node]:self.next_indptr[node + 1]]

    def tasks(self, node: int) -> np.ndarray:
        return self.task_ids[self.task_indptr[node]:self.task_indptr[node + 1]]

    def templates(self, node: int) -> np.ndarray:
        return self.template_ids[self.template_indptr[node]:self.template_indptr[node + 1]]

    def prefix(self, node: int) -> list[int]:
        """Token ids of the prefix (BOS first)."""
        out = []
        while node >= 0:
            out.append(int(self.token[node]))
            node = int(self.parent[node])
        return out[::-1]

    def find(self, ids) -> int:
        """Node of a prefix given as ids (BOS first); ValueError when no sentence starts so."""
        if self._index is None:
            self._index = {(int(p), int(t)): k for k, (p, t) in
                           enumerate(zip(self.parent, self.token))}
        ids = [int(i) for i in ids]
        if not ids or ids[0] != int(self.token[0]):
            raise ValueError(f"prefix must start with BOS id {int(self.token[0])}: {ids}")
        node = 0
        for t in ids[1:]:
            node = self._index.get((node, t), -1)
            if node < 0:
                raise ValueError(f"no sentence of the dataset starts with {ids}")
        return node

    def is_valid_next(self, nodes, tokens) -> np.ndarray:
        """Vectorised membership test ``tokens[j] ∈ V(nodes[j])`` (arrays of the same shape;
        False where the node is −1).  One binary search in the sorted (node, token) keys."""
        nodes = np.asarray(nodes, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        if self._keys is None:
            owner = np.repeat(np.arange(self.n_nodes), np.diff(self.next_indptr))
            self._keys = owner * self.vocab_size + self.next_ids
        q = nodes * self.vocab_size + tokens
        pos = np.minimum(np.searchsorted(self._keys, q), len(self._keys) - 1)
        return (nodes >= 0) & (tokens >= 0) & (tokens < self.vocab_size) & (self._keys[pos] == q)

    @property
    def ambiguous(self) -> np.ndarray:
        """(P,) bool: prefixes continued by sentences of more than one task."""
        return self.n_tasks_at > 1

    # ---- batched masks ------------------------------------------------------------------
    def valid_next_mask(self, nodes):
        """Boolean masks of V(w) for a batch of nodes.

        nodes : LongTensor or array (...)  node ids, −1 for "no prefix" (all-False row)
        returns BoolTensor (..., V)

        The result is dense: build it per batch (a whole split × V would not fit in memory).
        """
        import torch

        nodes_t = torch.as_tensor(nodes, dtype=torch.long)
        flat = nodes_t.reshape(-1)
        mask = torch.zeros(flat.numel(), self.vocab_size, dtype=torch.bool)
        ok = torch.nonzero(flat >= 0).squeeze(1)
        if ok.numel():
            indptr = torch.from_numpy(self.next_indptr)
            nd = flat[ok]
            start, stop = indptr[nd], indptr[nd + 1]
            cnt = stop - start
            row = torch.repeat_interleave(ok, cnt)
            # position of each entry inside its node's CSR slice
            offs = torch.arange(int(cnt.sum())) - torch.repeat_interleave(
                torch.cumsum(cnt, 0) - cnt, cnt)
            col = torch.from_numpy(self.next_ids)[torch.repeat_interleave(start, cnt) + offs]
            mask[row, col] = True
        return mask.reshape(*nodes_t.shape, self.vocab_size).to(
            nodes.device if hasattr(nodes, "device") else "cpu")


def valid_next_mass(logits, mask):
    """Σ_{x∈V(w)} P(x|w): the probability a model puts on valid next tokens.

    logits : (..., V) float;  mask : (..., V) bool  →  (...,) float
    Rows whose mask is empty give 0 (no prediction is asked there).
    """
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    return torch.logsumexp(logp.masked_fill(~mask, float("-inf")), dim=-1).exp()
