"""The synthesis at the top of the Findings page: what the book concluded, in one paragraph per
paper and one for its own results, each sentence built from ledger rows.

Why generated and not written: the verdicts change with the profile and with the evidence (a
claim "reproduced" in one build may be "inconclusive" in another), and a paragraph typed into
the page would go on saying what an earlier build found.  Each sentence names a claim, says
what its verdict means in words (:data:`PHRASE`) and quotes its key number, linked to its
ledger row; a claim missing from the build is left out of the sentence, never invented.  The
caveats that decide a verdict (the model variant, convergence, the capacity witness) come from
the rows' notes.  At most :data:`MAX_WORDS` words (a test holds it on real ledgers).
"""

from __future__ import annotations

import re
from collections import Counter

from moe_routing._internal.ledger import anchor

#: the most words the synthesis may have (the prose, not counting link targets)
MAX_WORDS = 300

#: a verdict in words, after a claim's subject ("{subject}: {phrase} (key)")
PHRASE = {
    "reproduced": "holds",
    "reproduced for our construction": "holds for our construction",
    "holds by definition": "holds by definition",
    "partly": "holds only in part",
    "not reproduced": "does not hold",
    "inconclusive": "cannot be decided here",
    "our extension": "holds",
    "not supported": "is not borne out",
    "pending": "was not measured in this build",
}

#: what each paper's paragraph says, claim by claim: (claim id, subject of the sentence)
PAPER_A = (("A-accuracy-comparable", "task routing as accurate as CE and CE + LB"),
           ("A-fig2-aligned", "routing aligned with the tasks"),
           ("A-active-params", "fewer active parameters at equal accuracy"))
PAPER_B = (("B-bm-binary", "boundary mass linear in w, with its surface constant"),
           ("B-symmetry-inverse-tau", "the symmetric state's instability growing as 1/τ"))
OURS = (("X-bridge-margins", "the task-router loss buys large router margins"),
        ("X-two-hop-held-out", "two layers compose held-out two-hop facts (fixed entity "
                               "codes)"),
        ("X-bridge-temperature", "a trained router leaves symmetry at rate ∝ 1/τ"),
        ("X-codes-router-cost", "the task-router loss costs accuracy when experts hold the "
                                "facts (fixed entity codes)"))

#: rows that check the book's experiments rather than state a result (a caveat on the
#: verdicts they name): listed apart on the Findings page, not counted among the results
CAVEATS = ("X-training-converged", "X-two-hop-converged")

#: the capacity witness, as the training chapter writes it into the A-* notes
_WITNESS = re.compile(r"keeps ([\d.]+) % of its ([\d.]+) %")


def _link(row: dict, text: str) -> str:
    """A cross-reference to the claim's ledger row (the same target as the Findings list's);
    a key's ``<``, ``>`` or backtick would end the role early, so they are written out."""
    safe = text.replace("`", "'").replace("<", "‹").replace(">", "›")
    return f"{{ref}}`{safe} <{anchor(row['id'])}>`"


def _said(by_id: dict[str, dict], claim: str, subject: str) -> str | None:
    row = by_id.get(claim)
    if row is None:
        return None
    key = row.get("key") or row.get("measured", "")
    return f"{subject}: *{PHRASE.get(row['verdict'], row['verdict'])}* ({_link(row, key)})"


def _join(parts: list[str]) -> str:
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return "".join(parts)
    return "; ".join(parts[:-1]) + "; and " + parts[-1]


def _tally(rows: list[dict]) -> str:
    counts = Counter(r["verdict"] for r in rows)
    return ", ".join(f"{n} {v}" for v, n in counts.most_common())


def synthesis(rows: list[dict]) -> str:
    """The synthesis paragraphs (MyST), from the ledger rows of one build."""
    by_id = {r["id"]: r for r in rows}
    a_rows = [r for r in rows if r.get("paper") == "A"]
    b_rows = [r for r in rows if r.get("paper") == "B"]
    ours = [r for r in rows if r.get("paper") == "ours" and r["id"] not in CAVEATS]
    out = ["The papers' statements are reconstructed from summaries and secondary digests, "
           "not from their full texts: check a statement against the paper before citing our "
           "verdict.", ""]
    if a_rows:
        thm = [r for r in a_rows if r["id"].startswith(("A-thm", "A-disentangle"))]
        text = (f"**Paper A** ({len(a_rows)} claims: {_tally(a_rows)}). Its theorems, on "
                f"our hand-built construction: {_tally(thm) or 'none in this build'}. Trained "
                "one-layer models in the paper's setting (learned entity rows): "
                + _join([_said(by_id, c, s) for c, s in PAPER_A]) + ".")
        note = by_id.get("A-accuracy-comparable", {}).get("note", "")
        m = _WITNESS.search(note)
        if m:
            text += (f" The caveat: with every expert off, CE still recalls {m.group(1)} % of "
                     f"facts against {m.group(2)} % — the embedding rows, not the experts, hold "
                     "most of them at this size.")
        if "had not converged" in note:
            text += " Those runs had not converged: their verdicts cannot decide either way."
        out += [text, ""]
    if b_rows:
        weak = [r for r in b_rows if r["verdict"] in ("partly", "inconclusive",
                                                       "not reproduced")]
        text = (f"**Paper B** ({len(b_rows)} claims: {_tally(b_rows)}). Among them: "
                + _join([_said(by_id, c, s) for c, s in PAPER_B]) + ".")
        if weak:
            text += (" Short of full: " + "; ".join(
                f"{_link(r, r['id'])} {PHRASE[r['verdict']]}" for r in weak) + ".")
        out += [text, ""]
    if ours:
        text = (f"**The book's own results** ({len(ours)}: {_tally(ours)}): "
                + _join([_said(by_id, c, s) for c, s in OURS]) + ".")
        out += [text, ""]
    return "\n".join(out)


def word_count(text: str) -> int:
    """Words a reader reads: link targets and markup left out."""
    prose = re.sub(r"\{ref\}`([^`]*?) <[^`]*>`", r"\1", text)
    return len(re.findall(r"[\w%.±−+∝/≤≥-]+", prose.replace("**", "")))
