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
