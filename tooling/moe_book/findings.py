"""What the book found: the Findings page, the introduction's map of results, and how to cite.

All three are written at ``stage`` time from the ledger rows (:func:`.pages.ledger_rows`), so
every verdict and number they show is the one the executed chapters recorded — none is typed
into prose. The introduction includes two fragments (``generated/chapter_map.md`` and
``generated/cite.md``; the toc leaves them out, so Sphinx builds them only where they are
included).

A claim's *kind* separates what a verdict means: a **theorem checked** (a statement proved in a
paper, or by us, confronted with a computation that could contradict it), an **empirical
result** (a measurement of trained models whose outcome depends on data, sizes and seeds), or a
**definition** (a property that holds by construction of the model and is only tabulated).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from pathlib import Path

import yaml

from moe_routing._internal.ledger import BADGES, anchor
from moe_routing._internal.runtime import git_commit
from moe_routing._internal.verdicts import VERDICTS

from .myst import table_cell
from .synthesis import CAVEATS, synthesis

KINDS = ("theorem checked", "empirical result", "definition")
KIND_PLURAL = {"theorem checked": "Theorems checked", "empirical result": "Empirical results",
               "definition": "Definitions"}

#: the order verdicts are listed in: the vocabulary's own order, ``pending`` last
VERDICT_ORDER = (*VERDICTS, "pending")

#: the Findings page's heading of each group of claims (a verdict missing here is refused by
#: the tests: a new vocabulary word must say how it is presented)
GROUP_TITLES = {
    "reproduced": "Reproduced",
    "reproduced for our construction": "Reproduced for our construction — what needed our own "
                                       "construction or hypotheses",
    "holds by definition": "Holds by definition — tabulated, not a result",
    "partly": "Only partly, and why",
    "not reproduced": "Not reproduced — adequate evidence against the claim",
    "inconclusive": "Inconclusive — the evidence cannot decide, either way",
    "our extension": "Our extensions",
    "not supported": "Not supported — the book's own hypotheses that the evidence does not bear out",
    "pending": "Not measured in this build",
}

#: verdicts that need a reason beside them: the "why not fully" column
NOT_FULLY = ("reproduced for our construction", "holds by definition", "partly",
             "not reproduced", "inconclusive", "not supported")

_EMPIRICAL = re.compile(r"\bfig\b|fig\.|experiment|measurement|trained|training", re.I)
_DEFINITION = re.compile(r"knowledge model|definition", re.I)


def claim_kind(row: dict) -> str:
    """The kind of a claim, read from where the sources put it (``where`` in claims.yaml, or
    the ``where`` a chapter recorded for its own claims): figures, experiments and
    measurements of trained models are empirical; the knowledge model's definitions are
    definitions; everything else (theorems, propositions, bounds, estimates, our derivations)
    is a theorem checked."""
    where = row.get("where", "")
    if _EMPIRICAL.search(where):
        return "empirical result"
    if _DEFINITION.search(where):
        return "definition"
    return "theorem checked"


def first_clauses(reason: str, limit: int = 140) -> str:
    """The leading clauses of a rule's reason (split at "; "), as many as fit in ``limit``
    characters, "…" marking a cut: the at-a-glance table's "why not fully" column (the whole
    reason stands in the claim's row below the table)."""
    clauses = reason.split("; ")
    out = clauses[0] if len(clauses[0]) <= limit else clauses[0][:limit].rsplit(" ", 1)[0]
    for c in clauses[1:]:
        if len(out) + 2 + len(c) > limit:
            break
        out += "; " + c
    return out if out == reason else out + " …"


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict badge (``verdict-partly``, ``verdict-not-reproduced`` …)."""
    return "verdict-" + re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-")


def verdict_badge(verdict: str) -> str:
    """A verdict as an inline badge: symbol and word (readable without colour), coloured by
    its class (book/_static/companion.css)."""
    symbol = BADGES.get(verdict, "…")
    return (f'<span class="verdict-badge {verdict_class(verdict)}">{symbol} '
            f"{html.escape(verdict)}</span>")


def verdict_symbol(verdict: str) -> str:
    """A verdict as a compact badge for a narrow table column: its symbol, with the word beside
    it for screen readers (and for a phone, where the ledger's rows become cards and the word
    is shown: book/_static/companion.css), and as a tooltip."""
    symbol = BADGES.get(verdict, "…")
    word = html.escape(verdict)
    return (f'<span class="verdict-badge verdict-symbol {verdict_class(verdict)}" '
            f'title="{word}"><span aria-hidden="true">{symbol}</span>'
            f'<span class="verdict-word"> {word}</span></span>')


# a sentence ends at ". " before a capital, never after "i.e." or "e.g."
_SENTENCE_END = re.compile(r"(?<!i\.e\.)(?<!e\.g\.)(?<=[.!?])\s+(?=[A-Z(])")


def _first_sentence(text: str) -> str:
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0].strip() if text else ""


def _clauses(reason: str) -> list[str]:
    """A rule's reason cut at ": " and "; " outside brackets ("(ours: a junction expert)"
    stays whole)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(reason):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and reason.startswith((": ", "; "), i):
            out.append(reason[start:i])
            start = i + 2
    return out + [reason[start:]]


def _wordy(text: str) -> bool:
    """Whether a clause reads as words (a reason, not a table of numbers): outside its
    brackets it starts with a word and holds no "=" and at least four words; digits are under a
    tenth of its characters, brackets included; no symbol with a subscript ("L_τ")."""
    bare = re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "", text).strip()
    words = re.findall(r"[A-Za-z][A-Za-z'’-]+", bare)
    digits = sum(ch.isdigit() for ch in text)
    return (bool(re.match(r"[A-Za-z]", bare)) and "=" not in bare and "_" not in text
            and len(words) >= 4 and digits < 0.1 * len(text))


def plain_why(row: dict) -> str:
    """A sentence in words beside a verdict's machine reason, where the row's data allow one:
    for a verdict short of a plain result, the longest clause of the rule's reason that reads
    as words ("the runs had not converged"); otherwise, or when the reason has none, the first
    sentence of the chapter's note (the caveat it recorded) if it reads as words. "" when
    neither does."""
    candidates = []
    if row.get("verdict") in ("partly", "not reproduced", "inconclusive", "not supported"):
        clauses = [c.strip() for c in _clauses(row.get("reason") or "") if _wordy(c)]
        candidates += sorted(clauses, key=len, reverse=True)[:1]
    note = _first_sentence(row.get("note") or "")
    if note and _wordy(note):
        candidates.append(note)
    if not candidates:
        return ""
    text = candidates[0].rstrip(".;, ") + "."
    return text[0].upper() + text[1:] if text[0].isascii() else text


# Links are roles with absolute document paths, so they resolve the same on a generated page
# and in a fragment included by a chapter.
def _ledger_link(row: dict) -> str:
    return f"{{ref}}`{row['id']} <{anchor(row['id'])}>`"


def _chapter_link(row: dict) -> str:
    return f"{{doc}}`/chapters/{row['notebook']}`" if row.get("notebook") else ""


def _paper_rows(rows: list[dict], paper: str) -> list[dict]:
    return [r for r in rows if r["paper"] == paper]


def counts_sentence(sel: list[dict]) -> str:
    counts = Counter(r["verdict"] for r in sel)
    parts = [f"{counts[v]} {v}" for v in VERDICT_ORDER if counts[v]]
    return ", ".join(parts) if parts else "none recorded"


def _claim_line(r: dict, *, why: bool) -> str:
    where = f"{r['where']}" if r.get("where") else ""
    chapter = _chapter_link(r)
    key = f" — measured: {r['key']}" if r.get("key") else ""
    label = ("What was checked"
             if r["verdict"] in ("reproduced for our construction", "holds by definition")
             else "Why not fully")
    reason = f" *{label}:* {r['reason']}" if why and r.get("reason") else ""
    if reason and not reason.rstrip().endswith((".", "!", "?")):
        reason += "."
    scale = f" (profile `{r['profile']}`)" if r.get("profile") else ""
    # the chapter's note is the caveat that qualifies the verdict (the model variant, whether
    # the runs converged): it stays beside the claim, never only in the chapter
    note = f" *Note:* {r['note']}" if r.get("note") else ""
    return (f"- {verdict_badge(r['verdict'])} "
            f"**<span class=\"ledger-claim\">{r['short']}</span>** ({where}; "
            f"{_ledger_link(r)}{', chapter ' + chapter if chapter else ''}){key}{scale}."
            f"{reason}{note}")


_PAPERS = (
    ("A", "Paper A — task routing",
     "Paper A's theorems are existence statements (a one-layer transformer *can* store and "
     "route every task); the book checks them on a construction of its own, exhaustively on "
     "every prefix of the dataset, so a verdict *for our construction* says the conclusion is "
     "achievable, not that the paper's own weights behave so. Its experiments are measurements "
     "of trained models at the sizes of this build's profile; where they differ from the "
     "paper, the reason is given beside the verdict."),
    ("B", "Paper B — boundary mass and the soft-to-hard limit",
     "Paper B's results are bounds and limits; the book checks each against a computation "
     "(Monte Carlo with intervals, quadrature, closed forms, gradient flows) in models where "
     "the bound could fail: a verdict other than *reproduced* names the hypothesis or the "
     "regime that made the difference."),
)


def findings_page(rows: list[dict], profile: str) -> str:
    """The front-matter page: one section per paper (what reproduced, what only partly and
    why, what needed our own construction or hypotheses) and one on the book's own results,
    every verdict and number taken from the ledger rows, every claim linked to its ledger row
    and its chapter."""
    out = ["# What the book found", "", "## In short", "", synthesis(rows), "",
           "Below, every claim of the two papers that the book confronts with a measurement, grouped "
           "by what came out, with the key number the executed chapter recorded and a link to "
           f"its row of the {{doc}}`/generated/ledger` and to its chapter. Profile of this build: "
           f"**`{profile}`** (the status page says which scale that is). Verdict words: "
           "✓ *reproduced*, ☑ *reproduced for our construction* (a theorem's conclusion holds "
           "for the book's own construction or model, which adds hypotheses of its own), "
           "≡ *holds by definition* (the statement follows from the definitions; what was "
           "checked is the book's implementation of them), "
           "◐ *partly*, ✗ *not reproduced* (adequate evidence against a paper's claim), "
           "? *inconclusive* (the evidence cannot decide, in either direction: runs that had "
           "not converged, intervals too wide, a quantity the model cannot test at its size), "
           "+ *our extension* (a result of the book itself), ⊘ *not supported* (a hypothesis of "
           "the book itself that the evidence does not bear out).", ""]
    for paper, heading, lead in _PAPERS:
        sel = _paper_rows(rows, paper)
        out += [f"## {heading}", "", lead, "",
                f"**{len(sel)} claims:** {counts_sentence(sel)}.", ""]
        for verdict in VERDICT_ORDER:
            group = [r for r in sel if r["verdict"] == verdict]
            if not group:
                continue
            why = verdict in NOT_FULLY
            out += [f"### {GROUP_TITLES[verdict]}", ""]
            for kind in KINDS:
                of_kind = [r for r in group if claim_kind(r) == kind]
                if of_kind:
                    out += [f"*{KIND_PLURAL[kind]}:*", ""]
                    out += [_claim_line(r, why=why) for r in of_kind] + [""]
    ours = [r for r in _paper_rows(rows, "ours") if r["id"] not in CAVEATS]
    caveats = [r for r in _paper_rows(rows, "ours") if r["id"] in CAVEATS]
    out += ["## The book's own results", "",
            "Results that are the book's own — new constants, derivations and measurements "
            "beyond what the papers state — each checked like the papers' claims and labelled "
            "*ours* wherever it appears.", "",
            f"**{len(ours)} results:** {counts_sentence(ours)}.", ""]
    out += [_claim_line(r, why=r["verdict"] in NOT_FULLY) for r in ours]
    if caveats:
        out += ["", "## Caveats on the experiments", "",
                "Checks of the book's own experiments rather than results: each qualifies "
                "the verdicts it names (the rows above carry it in their notes).", ""]
        out += [_claim_line(r, why=True) for r in caveats]
    return "\n".join(out) + "\n"


def chapter_numbers(toc: dict) -> dict[str, int]:
    """Chapter name → the number Jupyter Book gives it (chapters of numbered parts, counted
    through the parts in order, as the rendered book numbers them)."""
    numbers: dict[str, int] = {}
    n = 0
    for part in toc.get("parts", []):
        if not part.get("numbered"):
            continue
        for entry in part.get("chapters", []):
            f = entry.get("file", "")
            if f.startswith("chapters/"):
                n += 1
                numbers[f.split("/", 1)[1]] = n
    return numbers


def chapter_map(rows: list[dict], toc_path: Path, titles: dict[str, str]) -> str:
    """The introduction's map: each numbered chapter, the results of the papers (and ours) it
    tests, and their verdicts, each a symbol and its claim's id (the word is read out, shown
    on hover and on a phone) — a fragment included by the introduction. A list-table laid out
    like the ledger's at-a-glance tables (class ``ledger-glance``: it fits the text column,
    and its rows are cards on a phone)."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    numbers = chapter_numbers(toc)
    lines = ["```{list-table}", ":header-rows: 1", ":widths: 7 38 27 28",
             ":class: ledger-glance chapter-map", "",
             "* - No.", "  - Chapter", "  - Results it tests", "  - Verdicts"]
    for name, number in sorted(numbers.items(), key=lambda kv: kv[1]):
        mine = [r for r in rows if r.get("notebook") == name]
        wheres = list(dict.fromkeys(_short_where(r) for r in mine))
        tested = "; ".join(table_cell(w) for w in wheres) or "—"
        verdicts = "<br>".join(f"{verdict_symbol(r['verdict'])} {_ledger_link(r)}"
                               for r in mine) or "no claim recorded in this build"
        title = table_cell(titles.get(name, name))
        lines += [f"* - {number}", f"  - {{doc}}`{title} </chapters/{name}>`",
                  f"  - {tested}", f"  - {verdicts}"]
    return "\n".join(lines + ["```"]) + "\n"


def _short_where(r: dict) -> str:
    """'A-Thm 4.2, attention' → 'A-Thm 4.2'; our claims → 'ours'."""
    if r["paper"] == "ours":
        return "ours"
    return r.get("where", "").split(",")[0].strip()


def _bib_entry(bib_text: str, key: str) -> str:
    m = re.search(r"@\w+\{" + re.escape(key) + r",.*?\n\}", bib_text, re.S)
    if not m:
        raise ValueError(f"references.bib has no entry {key!r}")
    return m.group(0)


PAPER_KEYS = ("nandakumar2026taskrouting", "rastegar2026boundarymass")


def _commit_year(root: Path) -> str:
    """The year of the commit the book is built from (deterministic for a commit, so a
    rebuild with nothing changed rewrites no page); "" outside a repository."""
    import subprocess

    try:
        return subprocess.run(["git", "show", "-s", "--format=%cs", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()[:4]
    except (OSError, subprocess.CalledProcessError):
        return ""


def cff_with_home(text: str, home) -> str:
    """``CITATION.cff``'s text with the book's published address: ``url`` (the GitHub Pages
    site) and ``repository-code`` (the repository), from the build's home
    (``make ... REPOSITORY=`` / ``BOOK_REPOSITORY_URL``, which the publishing and release
    workflows set to the repository they run in). The repository's own file names no address
    (none is fixed before the book is published); the released bundle's copy is written with
    this. Fields already present are kept; without a home the text is returned unchanged."""
    if home is None:
        return text
    have = set(re.findall(r"^([A-Za-z-]+):", text, re.M))
    extra = [f'{key}: "{value}"' for key, value in (("url", home.site),
                                                  ("repository-code", home.url))
             if key not in have]
    if not extra:
        return text
    lines = text.splitlines()
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("version:")), len(lines))
    return "\n".join(lines[:at] + extra + lines[at:]) + "\n"


def citation(root: Path, book_dir: Path, home=None) -> str:
    """How to cite: the book (title and version from CITATION.cff; the release date when one
    is recorded, else "unreleased" and the year of the commit; the commit this build was staged
    from; the published address when the build has a home, :mod:`moe_book.home`) and the two
    papers (their entries of the book's bibliography)."""
    cff_path, bib_path = root / "CITATION.cff", book_dir / "references.bib"
    if not cff_path.is_file():        # a project without a citation record says so
        return "This project has no citation record (`CITATION.cff`).\n"
    cff = yaml.safe_load(cff_path.read_text(encoding="utf-8"))
    version = str(cff.get("version", ""))
    released = str(cff.get("date-released", ""))
    year = released[:4] or _commit_year(root)
    authors = " and ".join(a.get("name") or f"{a.get('family-names', '')}, {a.get('given-names', '')}"
                           for a in cff.get("authors", []))
    commit = git_commit(root) or "unknown"
    short = commit[:12]
    url = home.site if home is not None else cff.get("url", "")
    source = home.url if home is not None else cff.get("repository-code", "")
    bib = bib_path.read_text(encoding="utf-8") if bib_path.is_file() else ""
    entry = "\n".join([
        "@software{moe_routing_companion,",
        f"  title   = {{{cff['title']}}},",
        f"  author  = {{{authors}}},",
        f"  version = {{{version}}},",
        f"  year    = {{{year}}},",
        *([f"  url     = {{{url}}},"] if url else []),
        f"  note    = {{{'' if released else 'unreleased, '}commit {short}"
        + (f", source {source}" if source else "") + "}",
        "}"])
    papers = "\n\n".join(_bib_entry(bib, k) for k in PAPER_KEYS) if bib else ""
    when = f"released {released}" if released else f"unreleased, {year}" if year else "unreleased"
    where = (f", published at <{url}> (source: <{source}>)" if url and source else
             f", published at <{url}>" if url else "")
    return "\n".join([
        f"Cite the book as *{cff['title']}*, version {version} ({when}){where}, built from "
        f"commit `{short}` — the version and commit of the pages you are reading "
        "(`CITATION.cff` in the repository holds the same record):", "",
        "```bibtex", entry, "```", "",
        *(["and cite the papers whose results it reproduces:", "",
           "```bibtex", papers, "```", ""] if papers else [])])
