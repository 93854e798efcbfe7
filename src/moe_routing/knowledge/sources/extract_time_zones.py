"""Knowledge-base relations whose subjects are time zones (UTC offset, name, country).

Built from the IANA tz database (``zoneinfo``) and Unicode CLDR: offsets and names of the zones
both know, countries of the zones CLDR places.  Each builder registers itself in
:data:`~.extract_registry.BUILDERS`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache

from .extract_registry import builder, functional_pool
from .extract_tables import country_name


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
