"""Knowledge as templates and dictionaries (paper A, §3): the data model of task routing.

``Template`` (τ with wildcards ⋆1, ⋆2), ``KnowledgeTask`` (T(k), Δ_k, complexity),
``KnowledgeDataset`` (sentences, split, tokenizer, valid next tokens V(w) through a prefix trie),
and two sources of real facts in ``sources``: the WikiData5M loader and the embedded default
knowledge base built from data shipped in installed packages.
"""

from .dataset import OBJECT_SLOT, SUBJECT_SLOT, EncodedSplit, KnowledgeDataset
from .task import KnowledgeTask, functional_dictionary
from .templates import OBJECT, SUBJECT, Template
from .tokenizer import Tokenizer
from .trie import PrefixTrie, valid_next_mass

__all__ = ["Template", "SUBJECT", "OBJECT", "KnowledgeTask", "functional_dictionary",
           "KnowledgeDataset", "EncodedSplit", "SUBJECT_SLOT", "OBJECT_SLOT", "Tokenizer",
           "PrefixTrie", "valid_next_mass"]


def build_dataset(wikidata5m_path=None, *, n_relations: int | None = 50, n_pairs: int = 200,
                  n_templates: int = 5, seed: int = 0, test_fraction: float = 0.2,
                  split_unit: str = "sentence") -> KnowledgeDataset:
    """The paper-shaped dataset: from WikiData5M files when ``wikidata5m_path`` is given, else
    from the embedded knowledge base of real facts.  One seed drives sampling and split."""
    if wikidata5m_path:
        from .sources.wikidata5m import load_wikidata5m

        tasks = load_wikidata5m(wikidata5m_path, n_relations=n_relations or 50, n_pairs=n_pairs,
                                n_templates=n_templates, seed=seed).tasks
    else:
        from .sources.embedded import embedded_tasks

        tasks = embedded_tasks(n_relations=n_relations, n_pairs=n_pairs, seed=seed,
                               n_templates=n_templates)
    return KnowledgeDataset(tasks, seed=seed, test_fraction=test_fraction, split_unit=split_unit)


__all__.append("build_dataset")
