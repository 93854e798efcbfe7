"""Random files in the official WikiData5M format, for tests and benchmarks.

:func:`write_official_format` writes triple and alias files of any size (random facts, some
heads made non-functional on purpose) so that the loader's format handling, speed and memory
can be checked without the real 20 M-line download.  Kept out of the loader: nothing that
reads real files uses it.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..._internal.validation import integer, probability, require, sequence
from .wikidata5m_files import ENTITY_FILE, RELATION_FILE, TRIPLE_FILES_TRANSDUCTIVE


def write_official_format(directory: str | os.PathLike, n_lines: int, *,
                          relations: Sequence[str] = ("P17", "P19", "P27", "P36", "P106"),
                          n_entities: int = 100_000, multi_share: float = 0.2, seed: int = 0,
                          gz: bool = False, chunk: int = 500_000) -> dict:
    """Write random files in the official WikiData5M format (for tests and benchmarks).

    Triples go to ``wikidata5m_transductive_train.txt``: heads drawn from Q1..Q{n_entities},
    relations from ``relations``, tails from the same entities.  A share ``multi_share`` of the
    lines repeats an earlier (head, relation) with another tail, so some heads are not
    functional.  Every entity and relation gets an alias line ``id<TAB>name<TAB>other alias``.
    The facts are random: this checks format handling, speed and memory, not knowledge.
    """
    n_lines = integer("n_lines", n_lines, low=1)
    n_entities = integer("n_entities", n_entities, low=2)
    multi_share = probability("multi_share", multi_share, open_interval=False)
    require(multi_share < 1, "multi_share", multi_share, "a number in [0, 1)")
    seed = integer("seed", seed, low=0)
    chunk = integer("chunk", chunk, low=1)
    relations = sequence("relations", relations,
                         "a sequence of Wikidata property ids, e.g. ['P36']")
    require(all(isinstance(r, str) and re.fullmatch(r"P[0-9]+", r)
                                       for r in relations),
            "relations", relations, "a non-empty sequence of property ids such as 'P36'")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if gz else (lambda p: open(p, "wb"))
    rng = np.random.default_rng(seed)
    rel = np.array([int(r[1:]) for r in relations])
    tri = d / (TRIPLE_FILES_TRANSDUCTIVE[0] + ext)
    with opener(tri) as fh:
        done = 0
        while done < n_lines:
            m = min(chunk, n_lines - done)
            h = rng.integers(1, n_entities + 1, m)
            r = rel[rng.integers(0, len(rel), m)]
            t = rng.integers(1, n_entities + 1, m)
            rep = np.nonzero(rng.random(m) < multi_share)[0]
            rep = rep[rep > 0]
            h[rep], r[rep] = h[rep - 1], r[rep - 1]  # same (head, relation), another tail
            fh.write("".join(f"Q{a}\tP{b}\tQ{c}\n" for a, b, c in
                             zip(h.tolist(), r.tolist(), t.tolist())).encode())
            done += m
    ent = d / (ENTITY_FILE + ext)
    with opener(ent) as fh:
        for start in range(1, n_entities + 1, chunk):
            stop = min(start + chunk, n_entities + 1)
            fh.write("".join(f"Q{i}\tentity {i}\tE{i}\n" for i in range(start, stop)).encode())
    relf = d / (RELATION_FILE + ext)
    with opener(relf) as fh:
        fh.write("".join(f"{r}\trelation {r}\t{r.lower()}\n" for r in relations).encode())
    return {"triples": tri, "entity": ent, "relation": relf}
