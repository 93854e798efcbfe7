"""The shipped template file (``templates.yaml``): relation id -> label, property, templates."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from ..templates import Template

TEMPLATES_PER_RELATION = 5


@lru_cache(maxsize=4)
def template_file(path: str | None = None) -> dict[str, dict]:
    """Relation id -> spec (``label``, ``property``, ``templates`` as text, ...), validated:
    five distinct, parseable templates per relation, none shared by two relations."""
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
    seen: dict[Template, str] = {}
    out = {}
    for rid, spec in raw["relations"].items():
        tpls = spec.get("templates") or []
        if len(tpls) != TEMPLATES_PER_RELATION:
            raise ValueError(f"{where}: relation {rid} has {len(tpls)} templates; "
                             f"expected {TEMPLATES_PER_RELATION}")
        for t in tpls:
            try:
                parsed = Template.parse(t)
            except ValueError as e:
                raise ValueError(f"{where}: relation {rid}: {e}") from None
            if parsed in seen:
                raise ValueError(f"{where}: template {t!r} used by both {seen[parsed]} and {rid}")
            seen[parsed] = rid
        out[str(rid)] = dict(spec, id=str(rid))
    return out


def relation_spec(rid: str, path: str | None = None) -> dict:
    specs = template_file(path)
    if rid not in specs:
        raise ValueError(f"no templates for relation {rid!r} in the template file; "
                         f"{len(specs)} relations have some")
    return specs[rid]
