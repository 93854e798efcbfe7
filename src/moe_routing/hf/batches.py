"""A knowledge dataset as input of a Hugging Face causal LM (part of :mod:`moe_routing.hf`):
:func:`knowledge_batch` and its :class:`KnowledgeBatch` (``input_ids`` / ``attention_mask`` /
``labels`` in the library's own token ids, the task of each token and the positions that
predict the object), and :func:`object_exact_match`, the exact match at the object.

Separate because building a batch needs no transformers (only :func:`object_exact_match` runs
a model), and it is where the dataset's padded layout is mapped to the row order of
:func:`~moe_routing.hf.collect_router_logits`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .._internal.validation import fail, integer, require

IGNORE_INDEX = -100


# ---------------------------------------------------------------------- knowledge as HF input
@dataclass(frozen=True)
class KnowledgeBatch:
    """One split of a knowledge dataset as input of an HF causal LM (M sentences, n = L + 2
    positions, N non-padding tokens); token ids are the dataset's own.

    input_ids (M, n) long — [BOS, w1 … w|τ|, EOS, PAD …] (the dataset's ``seqs``);
    attention_mask (M, n) long — 1 on the sentence, 0 on padding;
    labels (M, n) long — input_ids with −100 on padding (the model shifts them: position i
        predicts token i + 1, as the library's ``targets``);
    task (M,), object_pos (M,), lengths (M,), index (M,) — as in ``EncodedSplit``;
    task_per_token (N,) — the task of each non-padding token, in the row order of
        :func:`collect_router_logits`;
    predicting (N,) bool — tokens that predict a next token (all but EOS: the positions the
        library's routing metrics and task-router loss use, ``EncodedSplit.loss_mask``);
    object_query (M,) — for each sentence, the index among the N tokens of the position that
        predicts its object (``object_pos − 1``: exact-match completion reads its argmax there).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    task: torch.Tensor
    object_pos: torch.Tensor
    lengths: torch.Tensor
    index: torch.Tensor
    task_per_token: torch.Tensor
    predicting: torch.Tensor
    object_query: torch.Tensor = field(repr=False)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def predicting_mask(self) -> torch.Tensor:
        """(M, n) bool: ``predicting`` in the padded layout (for losses on (b, t) tensors)."""
        pos = torch.arange(self.input_ids.shape[1])
        return pos[None, :] < (self.lengths[:, None] - 1)

    def rows(self, idx) -> "KnowledgeBatch":
        """The batch of some sentences (index tensor), flat token fields recomputed."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        return _batch(self.input_ids[idx], self.lengths[idx], self.task[idx],
                      self.object_pos[idx], self.index[idx])


def _batch(tokens, lengths, task, object_pos, index) -> KnowledgeBatch:
    n = tokens.shape[1]
    am = (torch.arange(n)[None, :] < lengths[:, None]).long()
    keep = am.bool()
    offsets = torch.cumsum(lengths, 0) - lengths
    predicting = (torch.arange(n)[None, :] < (lengths[:, None] - 1))[keep]
    return KnowledgeBatch(input_ids=tokens, attention_mask=am,
                          labels=tokens.masked_fill(~keep, IGNORE_INDEX), task=task,
                          object_pos=object_pos, lengths=lengths, index=index,
                          task_per_token=task[:, None].expand(-1, n)[keep],
                          predicting=predicting, object_query=offsets + object_pos - 1)


def _vocab_of(value) -> int:
    for v in (value, getattr(value, "vocab_size", None),
              getattr(getattr(value, "config", None), "vocab_size", None)):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
    fail("tokenizer_vocab", type(value).__name__,
         "the HF model's vocabulary size: an int, a config or a model with vocab_size")


def knowledge_batch(dataset, tokenizer_vocab, split: str = "train") -> KnowledgeBatch:
    """A split of ``dataset`` (a :class:`~moe_routing.knowledge.KnowledgeDataset`) as HF model
    input, in the dataset's own token ids (no HF tokenizer is involved).

    tokenizer_vocab: the model's vocabulary size (an int, or its config or the model), which
    must hold the dataset's ids (≥ ``dataset.vocab_size``; ids beyond are never produced, so a
    pretrained model's embedding rows of those ids are simply unused).  ``split``: "train",
    "test" or "all".
    """
    from ..knowledge import KnowledgeDataset

    require(isinstance(dataset, KnowledgeDataset), "dataset", type(dataset).__name__,
            "a moe_routing.knowledge.KnowledgeDataset")
    vocab = _vocab_of(tokenizer_vocab)
    require(vocab >= dataset.vocab_size, "tokenizer_vocab", vocab,
            f"≥ {dataset.vocab_size}, the dataset's vocabulary (its ids are "
            f"0..{dataset.vocab_size - 1})")
    enc = dataset.encode_split(split)
    return _batch(enc.tokens, enc.lengths, enc.task, enc.object_pos, enc.index)


@torch.no_grad()
def object_exact_match(model, batch: KnowledgeBatch, batch_size: int = 512) -> float:
    """Fraction of sentences whose object is the argmax next token at ``object_pos − 1``.

    Under causal attention this is greedy completion of the truncated prefix
    ``tokens[:object_pos]`` (what ``moe_routing.model.exact_match`` scores for the library's
    model, for the object token)."""
    require(isinstance(batch, KnowledgeBatch), "batch", type(batch).__name__,
            "a KnowledgeBatch (knowledge_batch(...))")
    batch_size = integer("batch_size", batch_size, low=1)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    hits = 0
    try:
        for s in range(0, len(batch), batch_size):
            ids = batch.input_ids[s:s + batch_size].to(device)
            out = model(input_ids=ids, attention_mask=batch.attention_mask[s:s + batch_size]
                        .to(device), use_cache=False)
            rows = torch.arange(ids.shape[0], device=device)
            q = batch.object_pos[s:s + batch_size].to(device)
            pred = out.logits[rows, q - 1].argmax(-1)
            hits += int((pred == ids[rows, q]).sum())
    finally:
        model.train(was)
    return hits / len(batch)
