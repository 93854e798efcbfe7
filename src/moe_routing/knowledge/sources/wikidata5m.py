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
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from zlib import error as zlib_error

import numpy as np

from ...validation import choice, fail, integer, probability, require, sequence
from ..task import KnowledgeTask
from .templates_file import template_file

TRIPLE_FILES_ALL = ("wikidata5m_all_triplet.txt",)
TRIPLE_FILES_TRANSDUCTIVE = ("wikidata5m_transductive_train.txt",
                             "wikidata5m_transductive_valid.txt",
                             "wikidata5m_transductive_test.txt")
ENTITY_FILE = "wikidata5m_entity.txt"
RELATION_FILE = "wikidata5m_relation.txt"
#: longest line accepted, in bytes (the longest alias line of the real files is a few KB)
MAX_LINE_BYTES = 1 << 20
#: bytes handed to the vectorised parsers at a time
CHUNK_BYTES = 1 << 22
#: bytes read per call (a damaged .gz is located to within this)
PIECE_BYTES = 1 << 16


class WikiData5MFileError(FileNotFoundError, ValueError):
    """A WikiData5M file is missing."""


class WikiData5MFormatError(ValueError):
    """A malformed line (the message names the file and the line number)."""


class WikiData5MAliasError(ValueError):
    """A sampled entity or relation has no alias in the alias file."""


def _find(directory: Path, name: str) -> Path | None:
    for cand in (directory / name, directory / (name + ".gz")):
        if cand.is_file():
            return cand
    return None


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def resolve_files(path: str | os.PathLike, triples: Sequence[str] | None = None) -> dict:
    """Locate the files under ``path`` (a directory); every missing one is an error.

    ``triples``: file names to read (``.gz`` found automatically); default: the all-triplet
    file if present, else the three transductive files (train required, valid/test if there).
    """
    if not (isinstance(path, (str, os.PathLike)) and os.fspath(path)):
        fail("path", path, "the path of a WikiData5M directory")
    if triples is not None:
        triples = sequence("triples", triples, "a sequence of file names (or None)")
    d = Path(path)
    if not d.is_dir():
        raise WikiData5MFileError(f"WikiData5M directory not found: {d}")
    if triples is None:
        found = [p for p in (_find(d, n) for n in TRIPLE_FILES_ALL) if p]
        if not found:
            train = _find(d, TRIPLE_FILES_TRANSDUCTIVE[0])
            if train is None:
                raise WikiData5MFileError(
                    f"no WikiData5M triple file in {d}: looked for {TRIPLE_FILES_ALL[0]}[.gz] "
                    f"and {TRIPLE_FILES_TRANSDUCTIVE[0]}[.gz]")
            found = [train] + [p for p in (_find(d, n) for n in TRIPLE_FILES_TRANSDUCTIVE[1:]) if p]
    else:
        found = []
        for n in triples:
            p = _find(d, n)
            if p is None:
                raise WikiData5MFileError(f"WikiData5M triple file not found: {d / n}[.gz]")
            found.append(p)
    out = {"triples": found}
    for key, name in (("entity", ENTITY_FILE), ("relation", RELATION_FILE)):
        p = _find(d, name)
        if p is None:
            raise WikiData5MFileError(f"WikiData5M alias file not found: {d / name}[.gz]")
        out[key] = p
    return out


# possessive repeat (*+): no backtracking state, so memory stays flat on a 16 MB chunk
_LINES_OK = re.compile(rb"(?:Q[0-9]+\tP[0-9]+\tQ[0-9]+[ \t]*\r?\n|[ \t]*\r?\n)*+")


def _check_line(path: Path, n: int, line: bytes) -> None:
    """Raise the error that describes a malformed triple line (nothing for a good one)."""
    line = line.rstrip(b"\r\n")
    parts = line.split(b"\t")
    if len(parts) != 3 or not (parts[0] and parts[1] and parts[2]):
        if not line.strip():
            return  # blank lines (e.g. a trailing one) carry no fact
        raise WikiData5MFormatError(
            f"{path.name}, line {n}: expected 3 tab-separated fields (head, relation, tail), "
            f"got {len(parts)}: {line[:80].decode('utf-8', 'replace')!r}")
    h, r, t = (x.strip(b" ") for x in parts)
    if not (h[:1] == b"Q" and r[:1] == b"P" and t[:1] == b"Q" and h[1:].isdigit()
            and r[1:].isdigit() and t[1:].isdigit()):
        raise WikiData5MFormatError(
            f"{path.name}, line {n}: expected Wikidata ids Q…<TAB>P…<TAB>Q…, got "
            f"{line[:80].decode('utf-8', 'replace')!r}")


def _damaged(path: Path, fh, n_lines: int, n_bytes: int, err: Exception) -> WikiData5MFormatError:
    # gzip checks a member's CRC-32 and length only once the member is fully read: a mismatch
    # says that some byte differs, not where, so no position is reported for it
    if isinstance(err, gzip.BadGzipFile) and str(err).startswith(("CRC check failed",
                                                                   "Incorrect length")):
        return WikiData5MFormatError(
            f"{path.name}: the file is corrupt: its checksum does not match (the damage can be "
            f"anywhere in the file); download it again ({err})")
    raw = getattr(fh, "fileobj", None)
    where = f"; the .gz breaks near byte {raw.tell()} of {path.stat().st_size}" if raw else ""
    return WikiData5MFormatError(
        f"{path.name}: compressed stream is damaged or truncated after line {n_lines} "
        f"(uncompressed byte offset {n_bytes}{where}): {err}")


def _chunks(path: Path, size: int,
            max_line: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the chunk's first line, whole lines ending in a line break).

    Memory: one chunk of ``size`` bytes plus the unfinished line carried over, which may not
    grow beyond ``max_line`` bytes (an error naming the line and its byte offset).  A chunk is
    read in pieces of ``PIECE_BYTES`` so that a damaged ``.gz`` is located to within a piece."""
    first, offset, carry = 1, 0, b""    # offset: uncompressed byte offset of ``carry``
    with _open_binary(path) as fh:
        while True:
            parts, got = [carry], 0
            try:
                while got < size:
                    piece = fh.read(min(PIECE_BYTES, size - got))
                    if not piece:
                        break
                    parts.append(piece)
                    got += len(piece)
            except (EOFError, gzip.BadGzipFile, zlib_error) as e:
                good = b"".join(parts)
                raise _damaged(path, fh, first - 1 + good.count(b"\n"), offset + len(good),
                               e) from None
            if not got:
                break
            block = b"".join(parts)
            del parts
            cut = block.rfind(b"\n") + 1
            carry = block[cut:]
            if cut:
                body = block[:cut]
                del block
                yield first, body
                first += body.count(b"\n")
                offset += cut
                del body
            if len(carry) > max_line:
                raise WikiData5MFormatError(
                    f"{path.name}, line {first} (byte offset {offset}): longer than {max_line} "
                    f"bytes without a line break -- not a WikiData5M file, or a damaged one")
    if carry:
        yield first, carry + b"\n"  # last line without a line break


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A well-mixed 64-bit hash of uint64 values (SplitMix64's finaliser)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass
class RelationSample:
    """Bottom-k sample of one relation's heads: at most ``k`` distinct heads with the smallest
    (priority, head id); ``tail`` is the head's only tail, or −1 once it has shown two."""

    k: int
    head: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    prio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    n_triples: int = 0

    def update(self, h: np.ndarray, t: np.ndarray, p: np.ndarray) -> None:
        self.n_triples += len(h)
        if len(self.head) == self.k:  # only heads at or below the current threshold can enter
            thr = (self.prio[-1], self.head[-1])
            keep = (p < thr[0]) | ((p == thr[0]) & (h <= thr[1]))
            h, t, p = h[keep], t[keep], p[keep]
            if not len(h):
                return
        H = np.concatenate([self.head, h])
        T = np.concatenate([self.tail, t])
        P = np.concatenate([self.prio, p])
        o = np.lexsort((T, H))
        H, T, P = H[o], T[o], P[o]
        start = np.r_[True, H[1:] != H[:-1]]
        gid = np.cumsum(start) - 1
        hs, ps = H[start], P[start]
        # a head is multi-valued when it has two distinct tails or was already marked (−1)
        ntail = np.bincount(gid, weights=np.r_[True, (H[1:] != H[:-1]) | (T[1:] != T[:-1])],
                            minlength=len(hs))
        has_neg = np.bincount(gid, weights=(T < 0), minlength=len(hs)) > 0
        ts = np.where((ntail > 1) | has_neg, -1, T[start])
        sel = np.lexsort((hs, ps))[:self.k]
        self.head, self.tail, self.prio = hs[sel], ts[sel], ps[sel]

    def functional(self) -> list[tuple[bytes, bytes]]:
        """Functional (head, tail) pairs, in priority order, as id bytes (b"Q…")."""
        return [(b"Q%d" % h, b"Q%d" % t) for h, t in zip(self.head.tolist(), self.tail.tolist())
                if t >= 0]


def scan_triples(files: Sequence[Path], relations: set[bytes], k: int, seed: int,
                 chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
                 ) -> tuple[dict[bytes, RelationSample], int]:
    """One pass over the triple files; returns per-relation samples and the number of facts.

    Vectorised: each chunk of whole lines is validated by one regular expression (a chunk that
    fails is re-read line by line to name the bad line), parsed by ``np.fromstring`` and fed to
    the per-relation samplers; priorities are SplitMix64 hashes of (head id XOR a seed key)."""
    k = integer("k", k, low=1)
    seed = integer("seed", seed, low=0)
    chunk_bytes = integer("chunk_bytes", chunk_bytes, low=1)
    max_line_bytes = integer("max_line_bytes", max_line_bytes, low=1)
    for r in relations:
        require(isinstance(r, bytes) and re.fullmatch(rb"P[0-9]+", r) is not None,
                "relations", r, "Wikidata property ids as bytes, e.g. b'P36'")
    seed_key = np.uint64(int.from_bytes(hashlib.blake2b(str(int(seed)).encode(),
                                                        digest_size=8).digest(), "big"))
    rel_ids = np.array(sorted(int(r[1:]) for r in relations), dtype=np.int64)
    samples = {r: RelationSample(k) for r in relations}
    by_id = {int(r[1:]): samples[r] for r in relations}
    n_facts = 0
    for path in files:
        for first, body in _chunks(path, chunk_bytes, max_line_bytes):
            if not _LINES_OK.fullmatch(body):
                for i, line in enumerate(body.split(b"\n")[:-1]):
                    _check_line(path, first + i, line)
                raise WikiData5MFormatError(f"{path.name}: malformed lines from line {first}")
            ids = np.fromstring(body.translate(None, b"QP"), dtype=np.int64, sep=" ")
            if len(ids) % 3:
                raise WikiData5MFormatError(f"{path.name}: could not parse lines from {first}")
            ids = ids.reshape(-1, 3)
            n_facts += len(ids)
            if not len(rel_ids):
                continue
            m = np.isin(ids[:, 1], rel_ids)
            sub = ids[m]
            o = np.argsort(sub[:, 1], kind="stable")
            sub = sub[o]
            rs, starts = np.unique(sub[:, 1], return_index=True)
            ends = np.r_[starts[1:], len(sub)]
            for r, a, b in zip(rs.tolist(), starts.tolist(), ends.tolist()):
                h, t = sub[a:b, 0], sub[a:b, 2]
                by_id[r].update(h, t, _splitmix64(h.astype(np.uint64) ^ seed_key))
    return samples, n_facts


def read_aliases(path: Path, needed: set[bytes], chunk_bytes: int = CHUNK_BYTES,
                 max_line_bytes: int = MAX_LINE_BYTES) -> dict[bytes, str]:
    """First alias of each needed id, in one streaming pass.

    Vectorised per chunk: line starts and first tabs are found with NumPy, the numeric part of
    every id is parsed arithmetically, and only the lines of needed ids are decoded.  A line
    without a tab, or whose id is not Q…/P… digits, is an error naming the line."""
    chunk_bytes = integer("chunk_bytes", chunk_bytes, low=1)
    max_line_bytes = integer("max_line_bytes", max_line_bytes, low=1)
    for b in needed:
        require(isinstance(b, bytes) and re.fullmatch(rb"[QP][0-9]{1,18}", b) is not None,
                "needed", b, "Wikidata ids as bytes, e.g. b'Q42' or b'P36'")
    want = {}
    for b in needed:
        want.setdefault(b[:1], set()).add(int(b[1:]))
    want_arr = {k: np.array(sorted(v), dtype=np.int64) for k, v in want.items()}
    out: dict[bytes, str] = {}
    for first, body in _chunks(path, chunk_bytes, max_line_bytes):
        buf = np.frombuffer(body, dtype=np.uint8)
        nl = np.flatnonzero(buf == 10)
        starts = np.r_[0, nl[:-1] + 1]
        nonblank = nl > starts + (buf[np.maximum(nl - 1, 0)] == 13)
        tabs = np.flatnonzero(buf == 9)
        ti = np.searchsorted(tabs, starts)
        tab = np.where(ti < len(tabs), tabs[np.minimum(ti, len(tabs) - 1)], len(buf))
        lead = buf[np.minimum(starts, len(buf) - 1)]
        ndig = tab - starts - 1
        ok = (tab < nl) & ((lead == ord("Q")) | (lead == ord("P"))) & (ndig >= 1) & (ndig <= 18)
        ident = np.zeros(len(starts), dtype=np.int64)
        for j in range(1, 19):
            live = ok & (ndig >= j)
            if not live.any():
                break
            d = buf[np.minimum(starts + j, len(buf) - 1)].astype(np.int64) - 48
            ok &= ~live | ((d >= 0) & (d <= 9))
            ident = np.where(live & ok, ident * 10 + d, ident)
        bad = np.flatnonzero(nonblank & ~ok)
        if len(bad):
            i = int(bad[0])
            line = body[starts[i]:nl[i]]
            raise WikiData5MFormatError(f"{path.name}, line {first + i}: expected id<TAB>alias…, "
                                        f"got {line[:80].decode('utf-8', 'replace')!r}")
        for letter, arr in want_arr.items():
            hit = np.flatnonzero(nonblank & (lead == letter[0]) & np.isin(ident, arr))
            for i in hit.tolist():
                line = body[starts[i]:nl[i]].rstrip(b"\r")
                rest = line.partition(b"\t")[2]
                first_alias = rest.split(b"\t", 1)[0].decode("utf-8", "replace")
                name = " ".join(first_alias.replace('"', "'").split())
                key = letter + b"%d" % ident[i]
                if name and key not in out:
                    out[key] = name
    return out


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
            f"({len(lacking)} sampled entities lack one: {shown}{', …' if len(lacking) > 5 else ''})")

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
