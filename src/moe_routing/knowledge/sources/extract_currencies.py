"""Knowledge-base relations whose subjects are currencies (ISO 4217 codes, country).

Built from Debian iso-codes (``pycountry``) and CLDR's legal-tender data.  Each builder
registers itself in :data:`~.extract_registry.BUILDERS`.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from .extract_registry import builder, functional_pool
from .extract_tables import country_name


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
