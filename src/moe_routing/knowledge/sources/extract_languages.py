"""Knowledge-base relations whose subjects are languages and scripts (codes, script, names).

ISO 639 and ISO 15924 codes, a language's usual script and where it is most used, its names in
other languages; built from Debian iso-codes (``pycountry``) and Unicode CLDR.  Each builder
registers itself in :data:`~.extract_registry.BUILDERS`.
"""

from __future__ import annotations

from .extract_registry import builder, functional_pool
from .extract_tables import (cldr_locale, country_name, english, language_name, likely_subtags,
                             plain_language_codes)


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
