"""Two-hop knowledge: tasks whose dictionary is the composition of two single-hop dictionaries.

Beyond paper A (ours).  Paper A's knowledge is flat: a task k is a set of templates T(k) and an
arbitrary dictionary Δ_k, and no fact says anything about another.  The simplest hierarchical
knowledge is the *composition* of two facts: "the capital of the country where ⋆1 lies is ⋆2"
is P36 ∘ P17 (city → country → capital).  For tasks 1 and 2,

    Δ₂ ∘ Δ₁ = {(s, Δ₂(Δ₁(s))) : s ∈ keys(Δ₁), Δ₁(s) ∈ keys(Δ₂)},

the keys of Δ₁ whose value m (the *middle entity*) is a key of Δ₂.  It is again functional, so a
two-hop task -- templates with the wildcards ⋆1, ⋆2 and the dictionary Δ₂ ∘ Δ₁ -- is an ordinary
:class:`~moe_routing.knowledge.task.KnowledgeTask`: V(w), the prefix trie, the complexity
c(k) = Σ|τ| + |Δ_k| and every dataset function treat it like any other task.  A
:class:`TwoHopTask` only adds the record of its two hops.

Which pairs compose (:func:`embedded_chains`).  Entity names are shared between relations (an
entity *is* its name, see :mod:`~moe_routing.knowledge.tokenizer`), so a name join alone finds
coincidences as well as chains: the script "Latin" is also a language name, a capital city can
share its name with a country.  A *real chain* also needs the kinds to meet: the objects of
relation 1 are of a kind that relation 2 takes as subjects (``subject:``/``object:`` of
``templates.yaml``, resolved by :data:`ENTITY_KINDS`).  ``typed=False`` lists the bare name
joins.  Some real chains send a subject to itself: every one for an inverse pair (P36 ∘ P1376
sends a capital to itself), the capitals among the cities for P36 ∘ P17 (Rome → Italy → Rome).
They are listed, with their ``s == o`` compositions counted in ``n_identity``: a test of
composition should know which of its answers can be copied from the question.  Others send a
subject to its *middle entity*: the script "Arabic" is the language "Arabic" (one name, one
entity), so Morocco → Arabic → Arabic answers with the first hop's object (``n_middle``);
copying the first hop answers those without composing.

Held-out compositions (:class:`MixedKnowledgeDataset`).  The question a two-hop task asks of a
model is whether it composes facts it knows: a held-out composition (s, o) is one whose two hops
(s, m) ∈ Δ₁ and (m, o) ∈ Δ₂ are single-hop *training* facts while (s, o) itself never appears
in training, in any template of the two-hop task.  The dataset is an ordinary
:class:`~moe_routing.knowledge.dataset.KnowledgeDataset` (its sentences, tokenizer and trie are
built by the same code) with another split rule, so existing callers of ``KnowledgeDataset`` and
``build_dataset`` get exactly what they got before.  It lives in :mod:`.two_hop_dataset`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .._internal.validation import fail, flag, integer, require, sequence, sequence_of
from .task import KnowledgeTask
from .templates import Template

#: entity kinds of the ``subject:``/``object:`` descriptions of ``templates.yaml`` that name
#: more than one kind (any other description is one kind, itself).  A US state is also an
#: ISO 3166-2 subdivision (P300 lists "Texas" → "US-TX"); a US county is not.
ENTITY_KINDS: dict[str, frozenset[str]] = {
    "city or subdivision": frozenset({"city", "subdivision"}),
    "US city or county, or subdivision": frozenset({"city", "US county", "subdivision"}),
    "state or parent subdivision": frozenset({"US state", "subdivision"}),
    "US state": frozenset({"US state", "subdivision"}),
}


def entity_kinds(description: str) -> frozenset[str]:
    """The kinds of entity that a ``subject:``/``object:`` description of the template file
    covers (:data:`ENTITY_KINDS`; a description not listed there is one kind)."""
    require(isinstance(description, str) and bool(description.strip()), "description",
            description, "a non-empty kind description such as 'country' or 'city'")
    return ENTITY_KINDS.get(description, frozenset({description}))


def kinds_meet(objects_of_first: str, subjects_of_second: str) -> bool:
    """Whether an object of the first relation can be a subject of the second: their kinds
    (:func:`entity_kinds`) intersect."""
    return bool(entity_kinds(objects_of_first) & entity_kinds(subjects_of_second))


def compose(first: Mapping[str, str], second: Mapping[str, str]) -> dict[str, str]:
    """Δ₂ ∘ Δ₁ as a new dict, in Δ₁'s order: ``s ↦ second[first[s]]`` for every key s of
    ``first`` whose value is a key of ``second`` (neither argument is modified)."""
    for name, d in (("first", first), ("second", second)):
        require(isinstance(d, Mapping), name, type(d).__name__,
                "a dictionary subject → object (a task's Δ)")
    return {s: second[m] for s, m in first.items() if m in second}


# ---- chains of the embedded knowledge base ---------------------------------------------------
@dataclass(frozen=True)
class Chain:
    """A composable pair of relations: ``first`` then ``second`` (the task ``second ∘ first``).

    Fields::

        n_compositions : |Δ₂ ∘ Δ₁| over the relations' whole pools
        n_identity     : compositions with s == o (all of them for an inverse pair)
        n_middle       : compositions with o == m, the middle entity (P282 ∘ P37: Arabic → Arabic)
        kinds          : (subject of first, middle = object of first, object of second), the
                         template file's descriptions; empty strings where a relation has none
    """

    first: str
    second: str
    n_compositions: int
    n_identity: int
    kinds: tuple[str, str, str] = ("", "", "")
    n_middle: int = 0

    @property
    def name(self) -> str:
        """The two-hop task's default name, ``second∘first`` as in Δ₂ ∘ Δ₁."""
        return f"{self.second}∘{self.first}"


def _chains(dicts: Mapping[str, Mapping[str, str]], kinds: Mapping[str, tuple[str, str]] | None
            ) -> list[Chain]:
    """Every ordered pair (r1, r2) of ``dicts`` with a non-empty composition (and, when ``kinds``
    is given, kinds that meet), in the order of ``dicts``."""
    out = []
    for r1, d1 in dicts.items():
        for r2, d2 in dicts.items():
            if kinds is not None and not kinds_meet(kinds[r1][1], kinds[r2][0]):
                continue
            comp = compose(d1, d2)
            if comp:
                k = (kinds[r1][0], kinds[r1][1], kinds[r2][1]) if kinds else ("", "", "")
                out.append(Chain(r1, r2, len(comp), sum(s == o for s, o in comp.items()), k,
                                 sum(d1[s] == o for s, o in comp.items())))
    return out


@lru_cache(maxsize=2)
def _embedded_chains(typed: bool) -> tuple[Chain, ...]:
    from .sources.embedded import relation_ids, relation_pool
    from .sources.templates_file import relation_spec

    ids = relation_ids()
    kinds = {r: (relation_spec(r).get("subject", ""), relation_spec(r).get("object", ""))
             for r in ids}
    return tuple(_chains({r: relation_pool(r) for r in ids}, kinds if typed else None))


def embedded_chains(*, typed: bool = True, min_compositions: int = 1) -> list[Chain]:
    """Every composable pair of relations of the embedded knowledge base, with the number of
    compositions each yields over the relations' whole pools (the template file's relation
    order, first then second).

    Arguments::

        typed : True (default) keeps the real chains, whose kinds meet at the middle entity
                (module docstring); False lists every non-empty name join, coincidences included
        min_compositions : drop chains with fewer compositions (≥ 1)
    """
    typed = flag("typed", typed)
    min_compositions = integer("min_compositions", min_compositions, low=1)
    return [c for c in _embedded_chains(typed) if c.n_compositions >= min_compositions]


def task_chains(tasks: Sequence[KnowledgeTask], *, typed: bool = True) -> list[Chain]:
    """The composable pairs among ``tasks`` (their sampled dictionaries), in their order.

    typed : True needs every task's ``meta["subject"]`` and ``meta["object"]`` kinds (the
            embedded tasks have them); False joins names only."""
    tasks = sequence_of("tasks", tasks, KnowledgeTask)
    typed = flag("typed", typed)
    kinds = None
    if typed:
        kinds = {}
        for t in tasks:
            s, o = t.meta.get("subject", ""), t.meta.get("object", "")
            require(bool(s) and bool(o), f"task {t.name!r}.meta", dict(t.meta),
                    "the kinds meta['subject'] and meta['object'] (or typed=False)")
            kinds[t.name] = (s, o)
    return _chains({t.name: t.dictionary for t in tasks}, kinds)


def format_chains(chains: Sequence[Chain]) -> str:
    """One line per chain: ``first → second  (kinds)  n compositions[, i identity]``."""
    chains = sequence("chains", chains, "a sequence of Chain records", nonempty=False)
    lines = []
    for i, c in enumerate(chains):
        require(isinstance(c, Chain), f"chains[{i}]", c, "a Chain record")
        kinds = f"  ({' → '.join(c.kinds)})" if any(c.kinds) else ""
        ident = f", {c.n_identity} identity" if c.n_identity else ""
        noun = "composition" if c.n_compositions == 1 else "compositions"
        lines.append(f"{c.first} → {c.second}{kinds}  {c.n_compositions} {noun}{ident}")
    return "\n".join(lines)


def print_chains(chains: Sequence[Chain] | None = None, file=None) -> None:
    """Print :func:`format_chains` of ``chains`` (default: the real chains of the embedded base)."""
    print(format_chains(embedded_chains() if chains is None else chains),
          file=sys.stdout if file is None else file)


# ---- two-hop tasks --------------------------------------------------------------------------
@dataclass(frozen=True)
class Fact:
    """One single-hop fact: (subject, object) of task ``task``."""

    task: str
    subject: str
    object: str


@dataclass(frozen=True, eq=False, repr=False)
class TwoHopTask(KnowledgeTask):
    """A task whose dictionary is (part of) Δ₂ ∘ Δ₁, with its two hops.

    It *is* a :class:`KnowledgeTask` (templates, dictionary, complexity, sentences); ``first``
    and ``second`` are the single-hop tasks composed.  Construction checks that every pair
    (s, o) of the dictionary is a composition: s is a key of Δ₁ and Δ₂(Δ₁(s)) = o.
    Build one with :func:`two_hop_task`.
    """

    first: KnowledgeTask | None = None
    second: KnowledgeTask | None = None

    def __post_init__(self):
        super().__post_init__()
        for hop in ("first", "second"):
            value = getattr(self, hop)
            require(isinstance(value, KnowledgeTask) and not isinstance(value, TwoHopTask),
                    f"TwoHopTask.{hop}", value if not isinstance(value, KnowledgeTask) else
                    value.name, "a single-hop KnowledgeTask (two-hop tasks are not composed "
                                "again)")
        d1, d2 = self.first.dictionary, self.second.dictionary
        for s, o in self.dictionary.items():
            m = d1.get(s)
            require(m is not None and d2.get(m) == o, f"TwoHopTask.dictionary[{s!r}]", o,
                    f"the composition {self.second.name} ∘ {self.first.name}: "
                    + (f"{s!r} is not a subject of {self.first.name}" if m is None else
                       f"{self.second.name}({m!r}) = {d2.get(m)!r}"))

    @property
    def hops(self) -> tuple[str, str]:
        """(first, second) task names: the dictionary is second ∘ first."""
        return self.first.name, self.second.name

    def middle(self, subject: str) -> str:
        """m = Δ₁(s), the entity between the two hops of ``subject``."""
        require(subject in self.dictionary, "subject", subject,
                f"a subject of the two-hop task {self.name!r}")
        return self.first.dictionary[subject]

    def supports(self, subject: str) -> tuple[Fact, Fact]:
        """The two single-hop facts (s, m) of ``first`` and (m, o) of ``second`` behind the
        composition of ``subject``."""
        m = self.middle(subject)
        return (Fact(self.first.name, subject, m),
                Fact(self.second.name, m, self.dictionary[subject]))

    def __repr__(self) -> str:
        return (f"TwoHopTask({self.name!r} = {self.second.name}∘{self.first.name}, "
                f"|T|={self.n_templates}, |Δ|={self.n_pairs}, c={self.complexity})")


def two_hop_task(first: KnowledgeTask, second: KnowledgeTask, templates: Sequence,
                 *, name: str | None = None, label: str | None = None, description: str = "",
                 typed: bool = True) -> TwoHopTask:
    """The two-hop task ``second ∘ first``: ``templates`` (Template objects or strings with
    ⋆1 = the subject of ``first``, ⋆2 = the object of ``second``) and Δ₂ ∘ Δ₁ of the two tasks'
    dictionaries (:func:`compose`).

    Arguments::

        name  : default ``"second∘first"`` (e.g. ``"P36∘P17"``)
        label : default ``"<second's label> ∘ <first's label>"``
        typed : True (default) refuses a pair whose kinds do not meet when both tasks carry
                ``meta`` kinds (as the embedded tasks do): a name join of a city and a language is a
                coincidence, not a chain.  False composes by names alone.

    Refused (ValueError): a hop that is not a single-hop task, a pair whose kinds do not meet,
    and a pair whose composition is empty.
    """
    for hop, value in (("first", first), ("second", second)):
        require(isinstance(value, KnowledgeTask) and not isinstance(value, TwoHopTask), hop,
                value if not isinstance(value, KnowledgeTask) else value.name,
                "a single-hop KnowledgeTask")
    require(not isinstance(templates, (str, Template)), "templates", templates,
            "a sequence of templates (a list, also for one)")
    typed = flag("typed", typed)
    obj, subj = first.meta.get("object", ""), second.meta.get("subject", "")
    if typed and obj and subj and not kinds_meet(obj, subj):
        fail(f"({first.name}, {second.name})", f"{first.name} → {obj!r}, {second.name} takes "
             f"{subj!r}", "a pair whose objects of the first are of a kind the second takes as "
             "subjects (typed=False composes by names alone)")
    comp = compose(first.dictionary, second.dictionary)
    require(bool(comp), f"({first.name}, {second.name})",
            f"{second.name} ∘ {first.name} = {{}} (no object of {first.name} is a subject of "
            f"{second.name})", "two tasks where some object of the first is a subject of the "
                               "second (a non-empty composition)")
    if name is None:
        name = f"{second.name}∘{first.name}"
    if label is None:
        label = f"{second.label or second.name} ∘ {first.label or first.name}"
    return TwoHopTask(name=name, templates=tuple(templates), dictionary=comp, label=label,
                      property_id=None, description=description,
                      meta=dict(subject=first.meta.get("subject", ""), middle=obj,
                                object=second.meta.get("object", ""),
                                hops=(first.name, second.name)),
                      first=first, second=second)


__all__ = ["ENTITY_KINDS", "entity_kinds", "kinds_meet", "compose", "Chain", "embedded_chains",
           "task_chains", "format_chains", "print_chains", "Fact", "TwoHopTask", "two_hop_task"]
