"""Knowledge tasks: a set of templates T(k) and a functional dictionary Δ_k (paper A).

The sentences of task k are D(k) = {τ[a, b] : τ ∈ T(k), (a, b) ∈ Δ_k}.  Its complexity is

    c(k) = Σ_{τ ∈ T(k)} |τ| + |Δ_k|  ≤  L·|T(k)| + N,

with L the maximal template length and N the dictionary size: this is the size of the expert
that Theorem 4.2 builds for the task (one neuron per template position, one per entry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .._internal.validation import fail, integer, require, sequence
from .templates import Template
from .tokenizer import check_entity_name


def functional_dictionary(pairs: Iterable[tuple[str, str]], name: str = "") -> dict[str, str]:
    """Build Δ from (subject, object) pairs; a subject with two different objects is an error.

    Repeating an identical pair is allowed (it is the same fact).
    """
    where = f"dictionary of {name}" if name else "dictionary"
    pairs = sequence(where, pairs, "(subject, object) pairs of entity names", nonempty=False)
    out: dict[str, str] = {}
    for i, pair in enumerate(pairs):
        require(isinstance(pair, (tuple, list)) and len(pair) == 2, f"{where}[{i}]", pair,
                "a (subject, object) pair")
        a, b = pair
        check_entity_name(a)
        check_entity_name(b)
        require(out.setdefault(a, b) == b, f"{where}[{a!r}]", (out[a], b),
                "one object per subject (a functional dictionary)")
    return out


@dataclass(frozen=True, eq=False)
class KnowledgeTask:
    """Task k = (T(k), Δ_k).

    ``name`` is the relation id (a Wikidata property such as ``P36``, or one of ours such as
    ``X-largest-city``); ``label`` is human-readable; ``property_id`` is the Wikidata property id
    when the relation is Wikidata's (None when it is ours).
    """

    name: str
    templates: tuple[Template, ...]
    dictionary: Mapping[str, str]
    label: str = ""
    property_id: str | None = None
    description: str = ""
    meta: Mapping = field(default_factory=dict, compare=False)

    def __post_init__(self):
        require(isinstance(self.name, str) and bool(self.name.strip()), "KnowledgeTask.name",
                self.name, "a non-empty string")
        for field_name in ("label", "description"):
            require(isinstance(getattr(self, field_name), str), f"KnowledgeTask.{field_name}",
                    getattr(self, field_name), "a string")
        require(self.property_id is None or (isinstance(self.property_id, str)
                                             and bool(self.property_id)),
                "KnowledgeTask.property_id", self.property_id,
                "None or a Wikidata property id such as 'P36'")
        require(isinstance(self.meta, Mapping), "KnowledgeTask.meta", self.meta, "a mapping")
        if isinstance(self.templates, Template):
            fail("KnowledgeTask.templates", self.templates, "a sequence of templates")
        tpls = tuple(t if isinstance(t, Template) else Template.parse(t) for t in sequence(
            "KnowledgeTask.templates", self.templates,
            "a sequence of Template objects or template strings"))
        require(len(set(tpls)) == len(tpls), "KnowledgeTask.templates",
                [t.text for t in tpls], "distinct templates (one is listed twice)")
        object.__setattr__(self, "templates", tpls)
        d = self.dictionary
        d = functional_dictionary(d.items() if isinstance(d, Mapping) else d, self.name)
        require(len(d) > 0, "KnowledgeTask.dictionary", d, "at least one (subject, object) pair")
        object.__setattr__(self, "dictionary", d)

    @property
    def n_templates(self) -> int:
        """|T(k)|"""
        return len(self.templates)

    @property
    def n_pairs(self) -> int:
        """|Δ_k|"""
        return len(self.dictionary)

    @property
    def max_template_length(self) -> int:
        return max(len(t) for t in self.templates)

    @property
    def complexity(self) -> int:
        """c(k) = Σ_τ |τ| + |Δ_k|."""
        return sum(len(t) for t in self.templates) + len(self.dictionary)

    def complexity_bound(self, L: int | None = None, N: int | None = None) -> int:
        """L·|T(k)| + N; by default L is this task's longest template and N = |Δ_k| (the
        tightest form).  Pass the dataset's L and N for the paper's uniform bound."""
        L = self.max_template_length if L is None else integer(
            "L", L, low=self.max_template_length)
        N = self.n_pairs if N is None else integer("N", N, low=self.n_pairs)
        return L * self.n_templates + N

    def sentences(self) -> list[tuple[str, ...]]:
        """D(k) as token tuples, template-major: all pairs for template 0, then template 1, …"""
        return [t.fill(a, b) for t in self.templates for a, b in self.dictionary.items()]

    def __repr__(self) -> str:
        return (f"KnowledgeTask({self.name!r}, |T|={self.n_templates}, |Δ|={self.n_pairs}, "
                f"c={self.complexity})")
