"""Knowledge as templates and dictionaries (paper A): the data model of task routing.

``Template`` (τ with wildcards ⋆1, ⋆2), ``KnowledgeTask`` (T(k), Δ_k, complexity),
``KnowledgeDataset`` (sentences, split, tokenizer, valid next tokens V(w) through a prefix trie),
and two sources of real facts in ``sources``: the WikiData5M loader and the embedded default
knowledge base built from data shipped in installed packages.
"""

import os
import warnings

from .._internal.validation import choice, fail, integer
from .dataset import OBJECT_SLOT, SUBJECT_SLOT, EncodedSplit, KnowledgeDataset
from .dataset import split_arguments as _split_arguments    # build_dataset's: not exported
from .task import KnowledgeTask, functional_dictionary
from .templates import OBJECT, SUBJECT, Template
from .tokenizer import Tokenizer
from .trie import PrefixTrie

__all__ = ["Template", "SUBJECT", "OBJECT", "KnowledgeTask", "functional_dictionary",
           "KnowledgeDataset", "EncodedSplit", "SUBJECT_SLOT", "OBJECT_SLOT", "Tokenizer",
           "PrefixTrie", "build_dataset"]
# Two-hop knowledge (ours) lives in its own modules, imported from there
# (``knowledge.two_hop``: tasks and chains; ``knowledge.two_hop_dataset``: the mixed dataset),
# so that single-hop work never loads them (a test compares datasets with and without them).

#: how many skipped entity ids a warning shows (the dataset's ``skipped_entities`` has all)
SHOWN_SKIPPED = 10


def build_dataset(wikidata5m_path=None, *, n_relations: int | None = 50, n_pairs: int = 200,
                  n_templates: int = 5, seed: int = 0, test_fraction: float = 0.2,
                  split_unit: str = "sentence", on_missing_alias: str = "error"
                  ) -> KnowledgeDataset:
    """The paper-shaped dataset: from WikiData5M files when ``wikidata5m_path`` is given, else
    from the embedded knowledge base of real facts.  One seed drives sampling and split.

    on_missing_alias : WikiData5M only -- ``"error"`` (default) refuses a sampled entity without
        an alias; ``"skip"`` drops its pairs, warns naming the skipped entity ids and records
        them all in the dataset's ``skipped_entities``.

    Every argument is checked before any file is read.
    """
    if wikidata5m_path is not None and not (isinstance(wikidata5m_path, (str, os.PathLike))
                                            and os.fspath(wikidata5m_path)):
        fail("wikidata5m_path", wikidata5m_path,
             "None (the embedded knowledge base) or the path of a WikiData5M directory")
    seed, test_fraction, split_unit = _split_arguments(seed, test_fraction, split_unit)
    choice("on_missing_alias", on_missing_alias, ("error", "skip"))
    n_relations = None if n_relations is None else integer("n_relations", n_relations, low=1)
    n_pairs = integer("n_pairs", n_pairs, low=1)
    n_templates = integer("n_templates", n_templates, low=1, high=5)
    skipped: list[str] = []
    if wikidata5m_path is not None:
        from .sources.wikidata5m import load_wikidata5m

        load = load_wikidata5m(wikidata5m_path, n_relations=n_relations or 50, n_pairs=n_pairs,
                               n_templates=n_templates, seed=seed,
                               on_missing_alias=on_missing_alias)
        tasks, skipped = load.tasks, load.skipped_entities
        if skipped:
            shown = ", ".join(skipped[:SHOWN_SKIPPED])
            more = f", … ({len(skipped)} in all)" if len(skipped) > SHOWN_SKIPPED else ""
            warnings.warn(f"WikiData5M: skipped {len(skipped)} sampled entities without an "
                          f"alias (on_missing_alias='skip'): {shown}{more}; "
                          f"dataset.skipped_entities lists them", stacklevel=2)
    else:
        from .sources.embedded import embedded_tasks

        tasks = embedded_tasks(n_relations=n_relations, n_pairs=n_pairs, seed=seed,
                               n_templates=n_templates)
    return KnowledgeDataset(tasks, seed=seed, test_fraction=test_fraction,
                            split_unit=split_unit, skipped_entities=skipped)
