"""The two streaming passes of the WikiData5M loader: sampling the triples, reading aliases.

:func:`scan_triples` validates and parses each chunk of the triple files with one regular
expression and ``np.fromstring`` and feeds a bottom-k :class:`RelationSample` per relation
(priorities: SplitMix64 of the head id XOR a seed key); :func:`read_aliases` picks the first
alias of the needed ids out of an alias file with NumPy, decoding only their lines.  Both read
through :func:`~.wikidata5m_files._chunks`; :func:`~.wikidata5m.load_wikidata5m` runs them.
The sampling scheme and why it sees all of a kept head's objects: :mod:`.wikidata5m`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..._internal.validation import integer, require
from .wikidata5m_files import CHUNK_BYTES, MAX_LINE_BYTES, WikiData5MFormatError, _chunks

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
