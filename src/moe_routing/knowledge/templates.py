"""Syntactic templates: token strings over Σ ∪ {⋆1, ⋆2} (paper A).

A template τ = w1…wL is a sentence shape with two wildcards: ⋆1 marks the subject (the key of a
dictionary) and ⋆2 the object (its value).  Each wildcard occurs exactly once and ⋆1 comes
before ⋆2, so substituting a (subject, object) pair gives exactly one sentence τ[a, b] and every
sentence of the pair's task reads the key before it has to produce the value.

Spellings accepted when parsing: ``⋆1``/``⋆2`` (the paper's), and the ASCII spellings ``*1``/``*2``
and ``{s}``/``{o}`` (ours, for keyboards).  They are normalised to ``⋆1``/``⋆2``.

Syntactic tokenisation (ours; the paper does not specify it): a template's text is split into
words (letters/digits, with inner apostrophes or hyphens: ``isn't``, ``so-called``), the
possessive ``'s`` (its own token, so that ``⋆1's`` keeps the wildcard whole) and single
punctuation characters; whitespace only separates.  |τ| counts every token including the two
wildcards, which matches the paper's reading τ = w1…wL with each wildcard one position: an entity
fills its slot with exactly one (atomic) token, so a sentence of τ has |τ| tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._internal.validation import fail, require

SUBJECT = "⋆1"
OBJECT = "⋆2"
WILDCARDS = (SUBJECT, OBJECT)
#: every accepted spelling of a wildcard, mapped to the canonical one
WILDCARD_SPELLINGS = {"⋆1": SUBJECT, "*1": SUBJECT, "{s}": SUBJECT,
                      "⋆2": OBJECT, "*2": OBJECT, "{o}": OBJECT}

# Words keep inner apostrophes/hyphens; any other non-space, non-quote character is a token of
# its own.  The double quote is reserved: the tokenizer quotes entity names with it.
#: a syntactic word (shared with the tokenizer, which must split text the same way)
WORD_PATTERN = r"['’]s(?![^\W_])|[^\W_]+(?:['’\-][^\W_]+)*|_+"
_TEMPLATE_RE = re.compile(r"⋆[12]|\*[12]|\{s\}|\{o\}|" + rf"{WORD_PATTERN}|[^\w\s\"]|\"")

#: punctuation that attaches to the token before it when a sentence is rendered as text
NO_SPACE_BEFORE = frozenset(".,;:!?)]}%") | {"'s", "’s"}
#: punctuation that attaches to the token after it
NO_SPACE_AFTER = frozenset("([{")


@dataclass(frozen=True)
class Template:
    """One template τ: its tokens, with the canonical wildcards ``⋆1`` and ``⋆2`` as tokens.

    ``subject_pos``/``object_pos`` are the 0-based positions of the wildcards in ``tokens``.
    """

    tokens: tuple[str, ...]

    def __post_init__(self):
        if isinstance(self.tokens, str) or not isinstance(self.tokens, (tuple, list)):
            fail("Template.tokens", self.tokens,
                 "a tuple of token strings (use Template.parse for a text)")
        toks = tuple(self.tokens)
        object.__setattr__(self, "tokens", toks)
        for i, t in enumerate(toks):
            require(isinstance(t, str) and (t in WILDCARDS or (
                bool(t) and '"' not in t and not any(c.isspace() for c in t))),
                f"Template.tokens[{i}]", t,
                "a non-empty string without spaces or double quotes, or a wildcard ⋆1/⋆2")
        n1, n2 = toks.count(SUBJECT), toks.count(OBJECT)
        require(n1 == 1 and n2 == 1, "Template.tokens", render(toks),
                f"each wildcard exactly once (⋆1 subject, ⋆2 object); got ⋆1×{n1}, ⋆2×{n2}")
        require(toks.index(SUBJECT) < toks.index(OBJECT), "Template.tokens", render(toks),
                "⋆1 (subject) must come before ⋆2 (object)")

    @classmethod
    def parse(cls, text: str) -> "Template":
        """Parse ``text`` such as ``"⋆1 is spoken widely in ⋆2."`` (or ``*1``/``{s}`` spellings)."""
        require(isinstance(text, str) and '"' not in text, "text", text,
                "a template string without double quotes (they are reserved for entity names)")
        raw = _TEMPLATE_RE.findall(text)
        return cls(tuple(WILDCARD_SPELLINGS.get(t, t) for t in raw))

    @property
    def subject_pos(self) -> int:
        return self.tokens.index(SUBJECT)

    @property
    def object_pos(self) -> int:
        return self.tokens.index(OBJECT)

    @property
    def words(self) -> tuple[str, ...]:
        """The syntactic tokens (the template without its wildcards)."""
        return tuple(t for t in self.tokens if t not in WILDCARDS)

    def __len__(self) -> int:
        """|τ|: number of positions, wildcards included."""
        return len(self.tokens)

    @property
    def text(self) -> str:
        return render(self.tokens)

    def fill(self, subject: str, obj: str) -> tuple[str, ...]:
        """τ[a, b] as a token tuple (entity names stay single tokens)."""
        require(isinstance(subject, str) and bool(subject), "subject", subject,
                "a non-empty entity name")
        require(isinstance(obj, str) and bool(obj), "obj", obj, "a non-empty entity name")
        return tuple(subject if t == SUBJECT else obj if t == OBJECT else t for t in self.tokens)

    def __str__(self) -> str:
        return self.text


def render(tokens, quote=None) -> str:
    """Join tokens to text: one space between tokens, except around attaching punctuation.

    ``quote`` is a per-token boolean sequence; quoted tokens (entity names) are wrapped in
    double quotes and never treated as punctuation.
    """
    tokens = list(tokens)
    require(quote is None or len(quote) == len(tokens), "quote", quote,
            f"None or one flag per token ({len(tokens)})")
    out: list[str] = []
    prev_attaches = True  # no space before the first token
    prev_slot = False     # previous token is an entity name or a wildcard
    for i, t in enumerate(tokens):
        q = bool(quote[i]) if quote is not None else False
        s = f'"{t}"' if q else t
        # "'s" attaches only to a slot: after a plain word, "king's" would re-parse as one word
        attach = not q and t in NO_SPACE_BEFORE and (t not in ("'s", "’s") or prev_slot)
        if out and not prev_attaches and not attach:
            out.append(" ")
        out.append(s)
        prev_attaches = (not q) and t in NO_SPACE_AFTER
        prev_slot = q or t in WILDCARDS
    return "".join(out)
