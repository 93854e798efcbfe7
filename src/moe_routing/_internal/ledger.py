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
from .verdicts import OUR_VERDICTS, PAPER_VERDICTS, Verdict

# Symbols from the basic fonts (DejaVu), not emoji: the book must look right on machines
# without an emoji font.
BADGES = {"reproduced": "✓", "reproduced for our construction": "☑",
          "holds by definition": "≡", "partly": "◐", "not reproduced": "✗",
          "inconclusive": "?", "our extension": "+", "not supported": "⊘"}
# Where a statement about a paper comes from (what is known of the papers is their abstracts
# and summaries of them; the full texts were not available to the book).
SOURCES = ("abstract", "summary", "secondary", "ours")


def anchor(claim_id: str) -> str:
    """The anchor of a claim's row on the ledger page (``A-thm42-routing`` →
    ``ledger-a-thm42-routing``)."""
    return "ledger-" + claim_id.lower().replace(" ", "-")


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
    """One recorded claim: the paper's statement, our measurement and the rule's verdict."""

    id: str
    paper: str
    where: str
    claim: str
    measured: str
    verdict: str
    notebook: str
    note: str = ""
    key: str = ""          # the key number, short ("max P(invalid) = 2.0e-4")
    reason: str = ""       # the deciding rule's one-line reason
    rule: str = ""         # the deciding rule (a function of moe_routing._internal.verdicts)
    source: str = ""       # where the statement about the paper comes from (SOURCES)
    short: str = ""        # the claim in one line
    profile: str = ""      # the execution profile the measurement came from (smoke/default/paper)

    def _repr_html_(self) -> str:
        e = html.escape
        cls = self.verdict.replace(" ", "-")
        link = f"../generated/ledger.html#{anchor(self.id)}"
        src = f" <span class='ledger-source'>[{e(self.source)}]</span>" if self.source else ""
        rows = [f"<p class='admonition-title'>Ledger · {e(self.id)} — {BADGES[self.verdict]} "
                f"{e(self.verdict)}</p>",
                f"<p><b>Claim</b> ({e(self.where)}){src}: <span class='ledger-claim'>"
                f"{e(self.short or self.claim)}</span></p>",
                f"<p><b>Measured</b>{self._profile_html()}<b>:</b> {e(self.measured)}</p>",
                f"<p><b>Why this verdict:</b> {e(self.reason)}</p>"]
        if self.note:
            rows.append(f"<p><i>{e(self.note)}</i></p>")
        rows.append(f"<p class='ledger-link'><a href='{link}'>Row {e(self.id)} of the "
                    "reproduction ledger</a></p>")
        return f"<div class='admonition ledger-verdict verdict-{cls}'>{''.join(rows)}</div>"

    def _profile_html(self) -> str:
        return (f" (profile <code>{html.escape(self.profile)}</code>)" if self.profile else "")

    def _repr_markdown_(self) -> str:
        note = f"  \n*{self.note}*" if self.note else ""
        return (f"**Ledger — {self.id}** ({self.where}): {BADGES[self.verdict]} "
                f"**{self.verdict}**  \n*Claim:* {self.short or self.claim}  \n"
                f"*Measured{f' ({self.profile} profile)' if self.profile else ''}:* "
                f"{self.measured}  \n*Why:* {self.reason}{note}")


class Summary:
    """The chapter's closing table: what it reproduced (rendered as HTML in the book)."""

    def __init__(self, claims: list[Claim]):
        self.claims = claims

    def _repr_html_(self) -> str:
        e = html.escape
        head = ("<table class='ledger-summary'><thead><tr><th>Claim</th><th>In one line</th>"
                "<th>Key number</th><th>Verdict</th></tr></thead><tbody>")
        body = "".join(
            f"<tr><td><a href='../generated/ledger.html#{anchor(c.id)}'>{e(c.id)}</a></td>"
            f"<td class='ledger-claim'>{e(c.short or c.claim)}</td>"
            f"<td>{e(c.key or c.measured)}</td>"
            f"<td>{BADGES[c.verdict]} {e(c.verdict)}</td></tr>" for c in self.claims)
        return head + body + "</tbody></table>"

    def _repr_markdown_(self) -> str:
        lines = ["| Claim | In one line | Key number | Verdict |", "|---|---|---|---|"]
        lines += [f"| {c.id} | {c.short or c.claim} | {c.key or c.measured} | "
                  f"{BADGES[c.verdict]} {c.verdict} |" for c in self.claims]
        return "\n".join(lines)


class Ledger:
    """Collects one notebook's claims and keeps ``claims.json`` up to date after each record.

    ``artifacts_dir`` is injected by the pipeline; ``None`` (a notebook opened by hand) keeps
    the records in memory only.  ``profile``: the execution profile the measurements come from
    (shown in every verdict box and on the ledger page).
    """

    def __init__(self, artifacts_dir: str | Path | None, notebook: str,
                 profile: str | None = None):
        from .runtime import PROFILES

        if profile is not None and profile not in PROFILES:
            raise ValueError(f"profile = {profile!r} is not allowed; accepted: "
                             + ", ".join(map(repr, PROFILES)))
        self.dir = Path(artifacts_dir) if artifacts_dir else None
        self.notebook = notebook
        self.profile = profile or ""
        self.claims: dict[str, Claim] = {}

    def record(self, id: str, *, measured: str, verdict: Verdict | str, key: str = "",
               note: str = "", where: str | None = None, claim: str | None = None,
               source: str | None = None) -> Claim:
        """Record claim ``id`` with what was ``measured`` (built from computed values) and the
        :class:`~moe_routing._internal.verdicts.Verdict` of its rule; returns the verdict box."""
        if isinstance(verdict, str):
            raise TypeError(f"verdict = {verdict!r} is a literal; accepted: the Verdict returned "
                            "by a rule of moe_routing._internal.verdicts (no verdict is decided by hand)")
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verdict must be a moe_routing._internal.verdicts.Verdict, got "
                            f"{type(verdict).__name__}")
        if source is not None and source not in SOURCES:
            raise ValueError(f"source = {source!r} is not allowed; accepted: {', '.join(SOURCES)}")
        reg = registry()
        allowed = OUR_VERDICTS if id.startswith("X-") else PAPER_VERDICTS
        if verdict.verdict not in allowed:
            whose = "the book's own claim" if id.startswith("X-") else "a claim of a paper"
            raise ValueError(f"verdict = {verdict.verdict!r} (rule {verdict.rule}) is not allowed "
                             f"for {id!r}, {whose}; accepted: " + ", ".join(map(repr, allowed)))
        if id.startswith("X-"):
            if not (where and claim):
                raise ValueError(f"extension claim {id!r} needs both `where` and `claim`")
            paper, short, source = "ours", claim, source or "ours"
        elif id in reg:
            entry = reg[id]
            paper, where, claim = entry["paper"], where or entry["where"], claim or entry["claim"]
            short, source = entry.get("short", ""), source or entry.get("source", "")
        else:
            raise ValueError(f"unknown claim id {id!r}: not in claims.yaml and not an X- extension")
        c = Claim(id=id, paper=paper, where=where, claim=claim, measured=measured,
                  verdict=verdict.verdict, notebook=self.notebook, note=note, key=key,
                  reason=verdict.reason, rule=verdict.rule, source=source, short=short,
                  profile=self.profile)
        self.claims[id] = c
        if self.dir is not None:
            atomic_write_json(self.dir / "claims.json", [asdict(x) for x in self.claims.values()])
        return c

    def summary(self) -> Summary:
        """"What this chapter reproduced": make it the last expression of the chapter's last
        cell."""
        return Summary(list(self.claims.values()))


def load_claims(artifacts_root: Path) -> list[dict]:
    """Every claim recorded under ``artifacts_root/<notebook>/claims.json``."""
    found = []
    for f in sorted(Path(artifacts_root).glob("*/claims.json")):
        found.extend(json.loads(f.read_text()))
    return found
