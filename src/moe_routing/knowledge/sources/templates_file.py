"""The shipped template file (``templates.yaml``): relation id -> label, property, templates."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from ..._internal.validation import require
from ..templates import Template

TEMPLATES_PER_RELATION = 5


@lru_cache(maxsize=4)
def template_file(path: str | None = None) -> dict[str, dict]:
    """Relation id -> spec (``label``, ``property``, ``templates`` as text, ...), validated:
    five distinct, parseable templates per relation, and no two relations with templates that
    agree up to the object slot (so the object of a sentence is always one task's)."""
    if path is None:
        text = resources.files("moe_routing.knowledge.sources").joinpath(
            "templates.yaml").read_text(encoding="utf-8")
        where = "templates.yaml"
    else:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"template file not found: {p}")
        text, where = p.read_text(encoding="utf-8"), str(p)
    raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(raw, dict) or not isinstance(raw.get("relations"), dict):
        raise ValueError(f"{where}: expected a mapping with a `relations` mapping")
    out, parsed_all = {}, []
    for rid, spec in raw["relations"].items():
        tpls = spec.get("templates") or []
        if len(tpls) != TEMPLATES_PER_RELATION:
            raise ValueError(f"{where}: relation {rid} has {len(tpls)} templates; "
                             f"expected {TEMPLATES_PER_RELATION}")
        for t in tpls:
            try:
                parsed_all.append((str(rid), t, Template.parse(t)))
            except ValueError as e:
                raise ValueError(f"{where}: relation {rid}: {e}") from None
        if len({p for r, _, p in parsed_all if r == str(rid)}) != len(tpls):
            raise ValueError(f"{where}: relation {rid} lists a template twice")
        out[str(rid)] = dict(spec, id=str(rid))
    conflicts = object_slot_conflicts([(r, p) for r, _, p in parsed_all])
    if conflicts:
        (r1, i), (r2, j) = conflicts[0]
        raise ValueError(f"{where}: the object slot of {parsed_all[i][1]!r} ({r1}) is not "
                         f"determined: {parsed_all[j][1]!r} ({r2}) continues the same prefix "
                         f"differently ({len(conflicts)} such pairs)")
    return out


def object_slot_conflicts(templates) -> list:
    """Pairs ((rid, i), (rid', j)) where template j continues template i's prefix before ⋆2
    with something other than ⋆2 of the same relation.

    At such a prefix the next token is not determined (the object of i, or j's next word, or
    j's object when j belongs to another relation), so exact-match completion of i from its
    truncated prefix is ambiguous even for a perfect model."""
    from ..templates import OBJECT

    heads: dict[tuple, list] = {}
    for i, (rid, tp) in enumerate(templates):
        toks = tp.tokens
        for n in range(len(toks)):
            heads.setdefault(toks[:n], []).append((rid, i, toks[n]))
    out = []
    for i, (rid, tp) in enumerate(templates):
        for r2, j, nxt in heads.get(tp.tokens[:tp.object_pos], ()):
            if j != i and not (nxt == OBJECT and r2 == rid):
                out.append(((rid, i), (r2, j)))
    return out


def relation_spec(rid: str, path: str | None = None) -> dict:
    specs = template_file(path)
    require(isinstance(rid, str) and rid in specs, "rid", rid,
            f"a relation with templates in the template file ({len(specs)} have some)")
    return specs[rid]
