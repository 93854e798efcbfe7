"""The reproduction ledger: every claim of the papers confronted with a measurement.

A chapter records each claim it tests with :meth:`Ledger.record`.  The record is shown in the
notebook (so the reader sees the verdict beside the cell that measured it) and written to
``<artifacts_dir>/claims.json``; the book's "Reproduction ledger" page gathers those files.

Claim ids come from ``claims.yaml`` (shipped with this package: the papers' claims, with where
they are stated and what a reproduction has to show).  A chapter's own extension uses an id
starting with ``X-`` and must then say where and what it claims.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from .atomic import atomic_write_json

VERDICTS = ("reproduced", "partly", "not reproduced", "our extension")
# Symbols from the basic fonts (DejaVu), not emoji: the book must look right on machines
# without an emoji font.
BADGES = {"reproduced": "✓", "partly": "◐", "not reproduced": "✗", "our extension": "+"}


@lru_cache(maxsize=1)
def registry() -> dict[str, dict]:
    """All claims of both papers, keyed by id, each with ``paper``, ``where``, ``claim``,
    ``criterion``."""
    text = resources.files("moe_routing").joinpath("claims.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    out: dict[str, dict] = {}
    for key, paper in (("paper_a", "A"), ("paper_b", "B")):
        for item in raw[key]:
            out[item["id"]] = {"paper": paper, **item}
    return out


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    where: str
    claim: str
    measured: str
    verdict: str
    notebook: str
    note: str = ""

    def _repr_markdown_(self) -> str:
        badge = BADGES[self.verdict]
        note = f"<br>*{html.escape(self.note)}*" if self.note else ""
        return (f"**Ledger — {self.id}** ({self.where}): {badge} **{self.verdict}**  \n"
                f"*Paper:* {self.claim}  \n*Measured:* {self.measured}{note}")


class Ledger:
    """Collects one notebook's claims and keeps ``claims.json`` up to date after each record.

    ``artifacts_dir`` is injected by the pipeline; ``None`` (a notebook opened by hand) keeps
    the records in memory only.
    """

    def __init__(self, artifacts_dir: str | Path | None, notebook: str):
        self.dir = Path(artifacts_dir) if artifacts_dir else None
        self.notebook = notebook
        self.claims: dict[str, Claim] = {}

    def record(self, id: str, *, measured: str, verdict: str, note: str = "",
               where: str | None = None, claim: str | None = None) -> Claim:
        if verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {verdict!r}; accepted: {', '.join(VERDICTS)}")
        reg = registry()
        if id.startswith("X-"):
            if not (where and claim):
                raise ValueError(f"extension claim {id!r} needs both `where` and `claim`")
            paper = "ours"
        elif id in reg:
            entry = reg[id]
            paper, where, claim = entry["paper"], where or entry["where"], claim or entry["claim"]
        else:
            raise ValueError(f"unknown claim id {id!r}: not in claims.yaml and not an X- extension")
        c = Claim(id=id, paper=paper, where=where, claim=claim, measured=measured,
                  verdict=verdict, notebook=self.notebook, note=note)
        self.claims[id] = c
        if self.dir is not None:
            atomic_write_json(self.dir / "claims.json", [asdict(x) for x in self.claims.values()])
        return c


def load_claims(artifacts_root: Path) -> list[dict]:
    """Every claim recorded under ``artifacts_root/<notebook>/claims.json``."""
    found = []
    for f in sorted(Path(artifacts_root).glob("*/claims.json")):
        found.extend(json.loads(f.read_text()))
    return found
