"""Finding and reading the WikiData5M files: their names, the loader's errors, bounded chunks.

:func:`resolve_files` locates the official files (plain or ``.gz``) and names every missing one
before the long pass; :func:`_chunks` reads a file as chunks of whole lines in bounded memory
(one chunk and one capped line at a time) and turns a damaged or truncated ``.gz`` into a
:class:`WikiData5MFormatError` that says where it broke.  Both passes of :mod:`.wikidata5m_scan`
read through it.  Separate from the parsing so that what a file is, and how much of it is held,
is decided in one place.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from zlib import error as zlib_error

from ..._internal.validation import fail, sequence

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
