"""A word-level tokenizer that keeps every entity name one atomic token (paper A).

The paper's experiments use a custom tokenizer in which each (quoted) entity name is a single
token, so that a dictionary entry is one key token and one value token.  Ours does the same.

Vocabulary layout (fixed, so that models and constructions can rely on it)::

    0 PAD | 1 BOS | 2 EOS | syntactic tokens (sorted) | entity tokens (sorted)

Syntactic tokens come from the templates; entity tokens are the subject and object names of all
dictionaries.  The two kinds are separate id ranges even when a surface string occurs as both
(an entity called "is" is not the word *is*): the construction needs the split (entity tokens
are what the semantic block and the expert lookups index), and so does the text form: entity
names are written inside double quotes, so ``encode`` knows what is atomic.  Two entities with
the same name -- in one relation or across relations (the country "Georgia" and the US state) --
are one token: in a text world an entity *is* its name.

Text form: tokens separated by one space, punctuation attached (see :func:`templates.render`),
entity names in double quotes, e.g. ``"Paris" is the capital of "France".``  For any id
sequence, ``encode(decode(ids)) == ids``; for any text that ``decode`` produced,
``decode(encode(text)) == text``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from .._internal.validation import fail, integer, require, sequence
from .templates import WORD_PATTERN, render

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)

_TEXT_RE = re.compile(rf'"([^"]*)"|({WORD_PATTERN}|[^\w\s"])|(")')


def check_entity_name(name: str) -> str:
    """An entity name is non-empty, has no double quote, no line break or tab, and no
    leading/trailing whitespace (so that its quoted text form parses back to itself)."""
    require(isinstance(name, str) and bool(name) and not any(c in name for c in '"\n\r\t')
            and name == name.strip(), "entity name", name,
            "a non-empty string without double quotes, tabs, line breaks or leading/trailing "
            "whitespace")
    return name


class Tokenizer:
    """Maps sentences (token tuples or text) to ids and back.

    Attributes
    ----------
    vocab : list[str]            id -> surface string (entity names without quotes)
    n_special, n_syntactic, n_entity : sizes of the three id ranges
    syntactic_ids, entity_ids : np.ndarray[int64]   the id ranges, ascending
    is_entity : np.ndarray[bool] (V,)
    """

    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, words: Iterable[str], entities: Iterable[str]):
        words = sequence("words", words, "an iterable of strings", nonempty=False)
        entities = sequence("entities", entities, "an iterable of strings", nonempty=False)
        for w in words:
            require(isinstance(w, str) and bool(w) and '"' not in w
                    and not any(c.isspace() for c in w) and w not in SPECIALS,
                    "syntactic token", w, "a non-empty string without spaces or double quotes, "
                    f"other than {', '.join(SPECIALS)}")
        words = sorted(set(words))
        entities = sorted({check_entity_name(e) for e in entities})
        self.n_special = len(SPECIALS)
        self.n_syntactic = len(words)
        self.n_entity = len(entities)
        self.vocab: list[str] = [*SPECIALS, *words, *entities]
        self._word_id = {w: i + self.n_special for i, w in enumerate(words)}
        off = self.n_special + self.n_syntactic
        self._entity_id = {e: i + off for i, e in enumerate(entities)}
        self.syntactic_ids = np.arange(self.n_special, off, dtype=np.int64)
        self.entity_ids = np.arange(off, len(self.vocab), dtype=np.int64)
        self.is_entity = np.zeros(len(self.vocab), dtype=bool)
        self.is_entity[off:] = True

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def word_id(self, word: str) -> int:
        require(isinstance(word, str) and word in self._word_id, "word", word,
                "a syntactic token of some template")
        return self._word_id[word]

    def entity_id(self, name: str) -> int:
        require(isinstance(name, str) and name in self._entity_id, "entity", name,
                "an entity of some dictionary")
        return self._entity_id[name]

    def is_entity_id(self, i: int) -> bool:
        return bool(self.is_entity[integer("i", i, low=0, high=len(self.vocab) - 1)])

    def encode(self, text: str, add_special: bool = False) -> list[int]:
        """Text -> ids.  Quoted spans are entity names, everything else syntactic tokens."""
        require(isinstance(text, str), "text", text, "a string")
        ids: list[int] = [self.bos_id] if add_special else []
        for m in _TEXT_RE.finditer(text):
            ent, word, stray = m.groups()
            if stray is not None:
                fail("text", text, f"balanced double quotes (a stray one at character "
                                   f"{m.start()})")
            ids.append(self.entity_id(ent) if ent is not None else self.word_id(word))
        if add_special:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Ids -> text (entity names quoted).  PAD/BOS/EOS are dropped unless ``skip_special`` is
        False, in which case they are written as ``<pad>``/``<bos>``/``<eos>`` (not re-encodable)."""
        require(not isinstance(ids, (str, bytes)), "ids", ids, "a sequence of token ids")
        arr = np.asarray(ids.detach().cpu() if hasattr(ids, "detach") else ids)
        require(arr.ndim == 1 and (arr.size == 0 or (arr.dtype != np.bool_ and np.issubdtype(
            arr.dtype, np.integer))), "ids", ids, "a flat sequence of integer token ids")
        bad = np.flatnonzero((arr < 0) | (arr >= len(self.vocab)))
        if len(bad):
            fail(f"ids[{bad[0]}]", int(arr[bad[0]]), f"a token id in 0..{len(self.vocab) - 1}")
        ids = arr.tolist()
        if skip_special:
            ids = [i for i in ids if i >= self.n_special]
        return render([self.vocab[i] for i in ids], quote=[bool(self.is_entity[i]) for i in ids])

    def encode_tokens(self, tokens: Sequence[str], entity_positions: Iterable[int]) -> list[int]:
        """A token tuple (e.g. ``Template.fill``'s output) -> ids; ``entity_positions`` says which
        tokens are entity names."""
        require(not isinstance(tokens, str), "tokens", tokens, "a sequence of token strings")
        ent = {integer("entity_positions", i, low=0) for i in entity_positions}
        return [self.entity_id(t) if i in ent else self.word_id(t) for i, t in enumerate(tokens)]
