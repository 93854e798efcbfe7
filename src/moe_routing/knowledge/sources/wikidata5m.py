"""Loader for the official WikiData5M files (Wang et al., KEPLER, TACL 2021), in bounded memory.

Files (plain text or ``.gz``), as distributed:

* triples -- ``wikidata5m_all_triplet.txt`` or ``wikidata5m_transductive_{train,valid,test}.txt``:
  one fact per line, ``head<TAB>relation<TAB>tail`` with Wikidata ids (``Q…``, ``P…``,
  ``Q…``); the transductive train file alone has about 20.6 M lines;
* ``wikidata5m_entity.txt`` and ``wikidata5m_relation.txt``: ``id<TAB>alias1<TAB>alias2…``.

Paper A builds its dataset from 50 WikiData5M relations with 200 (subject, object) pairs each.
This loader reproduces that shape.

Sampling (ours; the paper does not say how it sampled) -- one streaming pass, memory bounded by
``#relations × oversample × n_pairs`` heads, whatever the file size:

* every head of a relation gets a pseudo-random priority, SplitMix64(numeric id XOR a key
  derived from the seed); per relation we keep the ``oversample·n_pairs`` heads of smallest
  (priority, id) (a bottom-k sample: uniform over the relation's distinct heads, deterministic
  for a seed, independent of line order and of how the file is cut into chunks);
* a kept head records its objects; because a head's priority never changes and the admission
  threshold only falls, a head still kept at the end was kept at every one of its lines, so all
  its objects were seen;
* **functional** pairs are the heads with exactly one distinct object; heads with several
  objects (e.g. a person with two citizenships) are dropped, never truncated to one object;
* the ``n_pairs`` functional heads of smallest priority are kept, after naming.

Naming: an entity is named by its first alias (``"`` replaced by ``'`` so names stay quotable).
Two heads of one relation that share a name but not an object make that name non-functional
and are both dropped.  A second streaming pass over the alias file reads only the needed ids.

Speed: the triple files are read in 4 MB chunks of whole lines; a chunk is validated by one
regular expression (a failing chunk is re-read line by line to name the bad line), parsed by
``np.fromstring`` and fed to the samplers as arrays, so Python does no per-line work.

Errors: a missing file raises :class:`WikiData5MFileError` (a ``FileNotFoundError`` and a
``ValueError``) naming what was looked for; a malformed line raises
:class:`WikiData5MFormatError` (a ``ValueError``) naming the file and line number; a needed
entity without an alias raises :class:`WikiData5MAliasError` (or is skipped with
``on_missing_alias="skip"``, and named in ``WikiData5MLoad.skipped_entities``).

Bounded memory on any input: a line longer than ``MAX_LINE_BYTES`` (1 MiB; real lines are
under a few KB) is an error naming the file, the line and its byte offset -- the reader never
holds more than one chunk and one capped line, so a file that is one 100 MB line (binary
garbage, a wrong file) fails after reading about 1 MiB.  A damaged or truncated ``.gz`` names
the last whole line read and the uncompressed byte offset where decompression stopped.

The loader is this module (:func:`load_wikidata5m`: choosing relations, naming, the tasks) and
three beside it: :mod:`.wikidata5m_files` (the file names, the errors, the bounded chunk reader),
:mod:`.wikidata5m_scan` (the two streaming passes: :func:`scan_triples`, :func:`read_aliases`)
and :mod:`.wikidata5m_synthetic` (:func:`write_official_format`, random files for tests and
benchmarks).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..._internal.validation import choice, integer, require, sequence
from ..task import KnowledgeTask
from .templates_file import template_file
from .wikidata5m_files import WikiData5MAliasError, resolve_files
from .wikidata5m_scan import read_aliases, scan_triples


@dataclass
class WikiData5MLoad:
    """What :func:`load_wikidata5m` read: the tasks and per-relation counts.

    ``skipped_entities``: ids of the sampled entities without an alias whose pairs were dropped
    (``on_missing_alias="skip"``), shortest id first -- named, not only counted, so a report can
    say which facts are missing; per relation, ``relations[r]["skipped_pairs"]`` counts them.
    """

    tasks: list[KnowledgeTask]
    files: dict
    n_lines: int
    relations: dict[str, dict]
    seconds: float
    skipped_entities: list[str] = field(default_factory=list)


def load_wikidata5m(path: str | os.PathLike, *, relations: Sequence[str] | None = None,
                    n_relations: int = 50, n_pairs: int = 200, seed: int = 0,
                    n_templates: int = 5, triples: Sequence[str] | None = None,
                    oversample: int = 4, min_pairs: int | None = None,
                    on_missing_alias: str = "error", template_path: str | None = None
                    ) -> WikiData5MLoad:
    """Tasks from WikiData5M: one per relation, ``n_pairs`` functional pairs each.

    Arguments::

        relations   : Wikidata property ids to load (each needs templates in the template file);
                      None = choose ``n_relations`` among the templated relations having at least
                      ``min_pairs`` (default ``n_pairs``) functional pairs, by a seeded permutation
        oversample  : heads kept per relation = oversample × n_pairs (room for non-functional ones)
        on_missing_alias : "error" (default) or "skip" (drop pairs whose entity has no alias)
    """
    t0 = time.perf_counter()
    n_pairs = integer("n_pairs", n_pairs, low=1)
    oversample = integer("oversample", oversample, low=1)
    n_templates = integer("n_templates", n_templates, low=1, high=5)
    seed = integer("seed", seed, low=0)
    choice("on_missing_alias", on_missing_alias, ("error", "skip"))
    min_pairs = n_pairs if min_pairs is None else integer("min_pairs", min_pairs, low=1)
    specs = {r: s for r, s in template_file(template_path).items() if re.fullmatch(r"P\d+", r)}
    if relations is not None:
        relations = sequence("relations", relations,
                             "a sequence of Wikidata property ids, e.g. ['P36']")
        missing = [r for r in relations if r not in specs]
        require(not missing, "relations", missing,
                "relations with templates: " + ", ".join(sorted(specs, key=lambda x: int(x[1:]))))
        wanted = list(dict.fromkeys(relations))
    else:
        n_relations = integer("n_relations", n_relations, low=1, high=len(specs))
        wanted = sorted(specs, key=lambda x: int(x[1:]))
    files = resolve_files(path, triples)  # all files checked before the long pass

    samples, n_lines = scan_triples(files["triples"], {r.encode() for r in wanted},
                                    oversample * n_pairs, seed)
    cand = {r.decode(): s.functional() for r, s in samples.items()}

    # aliases of every candidate entity (bounded: ≤ #relations × oversample × n_pairs × 2)
    needed = {e for pairs in cand.values() for ht in pairs for e in ht}
    names = read_aliases(files["entity"], needed)
    rel_names = read_aliases(files["relation"], {r.encode() for r in wanted})
    lacking = sorted(needed - set(names), key=lambda b: (len(b), b))
    if lacking and on_missing_alias == "error":
        shown = ", ".join(b.decode() for b in lacking[:5])
        raise WikiData5MAliasError(
            f"{files['entity'].name}: no alias for entity {lacking[0].decode()} "
            f"({len(lacking)} sampled entities lack one: {shown}"
            f"{', …' if len(lacking) > 5 else ''})")

    stats, pools = {}, {}
    for r in wanted:
        by_name: dict[str, str] = {}
        bad: set[str] = set()
        skipped_pairs = 0
        for h, t in cand[r]:
            if h not in names or t not in names:
                skipped_pairs += 1
                continue
            a, b = names[h], names[t]
            if by_name.setdefault(a, b) != b:
                bad.add(a)
        pool = [(a, b) for a, b in by_name.items() if a not in bad][:n_pairs]
        pools[r] = pool
        s = samples[r.encode()]
        stats[r] = dict(triples=s.n_triples, heads_sampled=len(s.head),
                        functional=len(cand[r]), kept=len(pool), skipped_pairs=skipped_pairs,
                        label=rel_names.get(r.encode(), specs[r]["label"]))
    if relations is None:
        eligible = [r for r in wanted if len(pools[r]) >= min_pairs]
        require(len(eligible) >= n_relations, "n_relations", n_relations,
                f"at most {len(eligible)}: only that many templated relations have "
                f"≥ {min_pairs} functional pairs in these files (lower n_relations or "
                f"min_pairs)")
        order = np.random.default_rng(seed).permutation(len(eligible))[:n_relations]
        chosen = [eligible[i] for i in sorted(order)]
    else:
        chosen = wanted
        empty = [r for r in chosen if not pools[r]]
        require(not empty, "relations", empty,
                "relations with at least one functional pair in these files (these have none)")
    tasks = [KnowledgeTask(name=r, templates=tuple(specs[r]["templates"][:n_templates]),
                           dictionary=dict(pools[r]), label=stats[r]["label"], property_id=r,
                           description="WikiData5M", meta=dict(stats[r]))
             for r in chosen]
    present = {r: v for r, v in stats.items() if v["triples"]}  # templated and in the files
    return WikiData5MLoad(tasks=tasks, files={k: [str(p) for p in v] if isinstance(v, list)
                                              else str(v) for k, v in files.items()},
                          n_lines=n_lines, relations=present, seconds=time.perf_counter() - t0,
                          skipped_entities=[b.decode() for b in lacking])
