"""Knowledge tasks: a set of templates T(k) and a functional dictionary Δ_k (paper A, §3.1).

The sentences of task k are D(k) = {τ[a, b] : τ ∈ T(k), (a, b) ∈ Δ_k}.  Its complexity is

    c(k) = Σ_{τ ∈ T(k)} |τ| + |Δ_k|  ≤  L·|T(k)| + N,

with L the maximal template length and N the dictionary size: this is the size of the expert
that Theorem 4.2 builds for the task (one neuron per template position, one per entry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .templates import Template
from .tokenizer import check_entity_name


def functional_dictionary(pairs: Iterable[tuple[str, str]], name: str = "") -> dict[str, str]:
    """Build Δ from (subject, object) pairs; a subject with two different objects is an error.

    Repeating an identical pair is allowed (it is the same fact).
    """
    out: dict[str, str] = {}
    for a, b in pairs:
        check_entity_name(a)
        check_entity_name(b)
        if out.setdefault(a, b) != b:
            raise ValueError(f"dictionary{' of ' + name if name else ''} is not functional: subject "
                             f"{a!r} has two objects {out[a]!r} and {b!r}")
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
        if not self.name:
            raise ValueError("a task needs a non-empty name")
        tpls = tuple(t if isinstance(t, Template) else Template.parse(t) for t in self.templates)
        if not tpls:
            raise ValueError(f"task {self.name!r} has no templates (needs at least 1)")
        if len(set(tpls)) != len(tpls):
            raise ValueError(f"task {self.name!r} lists a template twice")
        object.__setattr__(self, "templates", tpls)
        d = self.dictionary
        if not isinstance(d, Mapping):
            d = functional_dictionary(d, self.name)
        else:
            d = functional_dictionary(d.items(), self.name)
        if not d:
            raise ValueError(f"task {self.name!r} has an empty dictionary (needs at least 1 pair)")
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
        L = self.max_template_length if L is None else L
        N = self.n_pairs if N is None else N
        if L < self.max_template_length or N < self.n_pairs:
            raise ValueError(f"L={L} and N={N} must be at least the task's own "
                             f"{self.max_template_length} and {self.n_pairs}")
        return L * self.n_templates + N

    def sentences(self) -> list[tuple[str, ...]]:
        """D(k) as token tuples, template-major: all pairs for template 0, then template 1, …"""
        return [t.fill(a, b) for t in self.templates for a, b in self.dictionary.items()]

    def __repr__(self) -> str:
        return (f"KnowledgeTask({self.name!r}, |T|={self.n_templates}, |Δ|={self.n_pairs}, "
                f"c={self.complexity})")
