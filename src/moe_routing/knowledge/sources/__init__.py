"""Sources of real facts: the WikiData5M loader and the embedded default knowledge base."""

from .embedded import embedded_tasks, relation_ids, relation_pool
from .templates_file import relation_spec, template_file
from .wikidata5m_files import WikiData5MAliasError, WikiData5MFileError, WikiData5MFormatError
from .wikidata5m import WikiData5MLoad, load_wikidata5m
from .wikidata5m_synthetic import write_official_format

__all__ = ["embedded_tasks", "relation_ids", "relation_pool", "relation_spec", "template_file",
           "load_wikidata5m", "write_official_format", "WikiData5MLoad", "WikiData5MFileError",
           "WikiData5MFormatError", "WikiData5MAliasError"]
