"""Knowledge-base relations whose subjects are countries (capital, currency, ISO codes, names).

Built from the GeoNames country table, with countryinfo records, Debian iso-codes
(``pycountry``) and Unicode CLDR where the table lacks the facts.  Each builder registers itself
in :data:`~.extract_registry.BUILDERS`; the docstrings give the functional choices made.
"""

from __future__ import annotations

from .extract_registry import builder, functional_pool
from .extract_tables import (cities, cldr_locale, countries, country_name, countryinfo_records,
                             language_name, largest_city_by_country)

CONTINENTS = {"AF": "Africa", "AS": "Asia", "EU": "Europe", "NA": "North America",
              "OC": "Oceania", "SA": "South America", "AN": "Antarctica"}


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
