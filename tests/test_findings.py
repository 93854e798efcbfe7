"""What the book found: the Findings page, the introduction's map and the citation are built
from the ledger rows, so a verdict that changes moves on every page that shows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from moe_book import findings
from moe_routing._internal.ledger import anchor, registry

ROOT = Path(__file__).resolve().parents[1]


def _row(cid, verdict, *, paper="A", where="A-Thm 4.2", key="k", reason="r", notebook="demo",
         short=None):
    return {"id": cid, "paper": paper, "where": where, "short": short or f"claim {cid}",
            "claim": f"claim {cid}", "verdict": verdict, "key": key, "reason": reason,
            "notebook": notebook, "profile": "default", "source": "summary"}


def test_every_registered_claim_has_a_kind_and_the_kinds_are_the_expected_ones():
    kinds = {cid: findings.claim_kind(c) for cid, c in registry().items()}
    assert set(kinds.values()) <= set(findings.KINDS)
    assert kinds["A-fig2-aligned"] == "empirical result"           # a figure of trained models
    assert kinds["A-accuracy-comparable"] == "empirical result"    # "experiments"
    assert kinds["A-task-complexity"] == "definition"              # the knowledge model
    assert kinds["A-thm42-accuracy"] == "theorem checked"
    assert kinds["B-risk-linear"] == "theorem checked"             # "risk bound"
    assert findings.claim_kind({"where": "our measurement, every training run"}) == \
        "empirical result"


def test_findings_page_groups_by_verdict_with_reason_key_and_links():
    rows = [_row("A-one", "reproduced", key="99 %"),
            _row("A-two", "partly", key="80 %", reason="two cells fail"),
            _row("A-three", "pending", key="", reason="", notebook=""),
            _row("B-four", "not reproduced", paper="B", where="B-Thm 4.7", reason="gap 0.3"),
            _row("X-five", "our extension", paper="ours", where="ours: a constant", key="C = 2")]
    page = findings.findings_page(rows, "default")
    sections = re.split(r"^## ", page, flags=re.M)
    short, a, b, ours = sections[1], sections[2], sections[3], sections[4]
    assert short.startswith("In short") and "**Paper A** (3 claims" in short
    assert a.startswith("Paper A") and b.startswith("Paper B") and "own results" in ours
    assert "**3 claims:** 1 reproduced, 1 partly, 1 pending." in a
    partly = a.split("### Only partly, and why")[1].split("###")[0]
    assert "claim A-two" in partly and "80 %" in partly and "*Why not fully:* two cells fail" in partly
    assert "claim A-one" not in partly
    assert "### Not measured in this build" in a and "claim A-three" in a.split("Not measured")[1]
    assert "*Why not fully:* gap 0.3" in b.split("### Not reproduced")[1]
    assert "C = 2" in ours
    # every claim links to its ledger row and its chapter
    assert f"<{anchor('A-two')}>" in page and "{doc}`/chapters/demo`" in page
    # a verdict that changes moves the claim: the page is not fixed text
    rows[1] = _row("A-two", "reproduced", key="95 %")
    again = findings.findings_page(rows, "default")
    assert "Only partly" not in again.split("## Paper B")[0]


def test_chapter_numbers_follow_the_rendered_numbering_of_the_toc():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    numbers = findings.chapter_numbers(toc)
    # Jupyter Book numbers the chapters of numbered parts continuously across the parts
    assert numbers["knowledge"] == 1 and numbers["training"] == 3
    assert numbers["boundary_mass"] == 4 and numbers["landscape"] == 7
    assert "intro" not in numbers                          # the root is not numbered
    assert sorted(numbers.values()) == list(range(1, len(numbers) + 1))


def test_chapter_map_lists_each_chapters_claims_with_their_verdicts(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text(yaml.safe_dump({"format": "jb-book", "root": "chapters/intro", "parts": [
        {"caption": "x", "numbered": True, "chapters": [{"file": "chapters/demo"},
                                                         {"file": "chapters/empty"}]}]}))
    rows = [_row("A-one", "reproduced"), _row("A-two", "partly", where="A-Fig. 2, right")]
    text = findings.chapter_map(rows, toc, {"demo": "A demo chapter"})
    assert text.startswith("```{list-table}") and ":class: ledger-glance chapter-map" in text
    demo, empty = text.split("\n* - ")[2:]
    assert demo.startswith("1\n  - {doc}`A demo chapter </chapters/demo>`\n"
                           "  - A-Thm 4.2; A-Fig. 2\n")
    assert 'title="reproduced"' in demo and "> reproduced</span>" in demo
    assert 'title="partly"' in demo and f"<{anchor('A-two')}>" in demo
    assert empty.startswith("2\n") and "no claim recorded" in empty


def test_citation_carries_version_commit_and_both_papers():
    text = findings.citation(ROOT, ROOT / "book")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert f"version = {{{cff['version']}}}" in text
    assert (re.search(r"note    = \{(unreleased, )?commit [0-9a-f]{7,12}", text)
            or "commit unknown" in text)
    for key in findings.PAPER_KEYS:
        assert f"@misc{{{key}," in text
    with pytest.raises(ValueError, match="no entry 'nope'"):
        findings._bib_entry("@misc{other,\n}", "nope")


def test_every_verdict_word_has_a_group_title():
    assert set(findings.GROUP_TITLES) == set(findings.VERDICT_ORDER)


def test_verdict_badges_are_readable_without_colour():
    for verdict in findings.VERDICT_ORDER:
        badge = findings.verdict_badge(verdict)
        assert verdict in badge and findings.verdict_class(verdict) in badge
    css = (ROOT / "book" / "_static" / "companion.css").read_text(encoding="utf-8")
    for verdict in findings.VERDICT_ORDER:
        assert f"span.verdict-badge.{findings.verdict_class(verdict)}" in css


def test_citation_of_a_project_without_a_record_says_so(tmp_path):
    assert "no citation record" in findings.citation(tmp_path, tmp_path)


def test_first_clauses_keeps_whole_clauses_and_marks_the_cut():
    reason = "all 86 task experts within bound; but the junction grows 29 → 61 → 134; n = 5"
    assert findings.first_clauses(reason) == reason                        # fits: unchanged
    assert findings.first_clauses(reason, limit=60) == "all 86 task experts within bound …"
    long = "word " * 60
    cut = findings.first_clauses(long.strip(), limit=40)
    assert cut.endswith(" …") and len(cut) <= 42 and not cut[:-2].endswith(" ")


def test_a_claims_note_stands_beside_it_on_the_findings_page():
    """The ledger's note (the model variant, unconverged runs) qualifies the verdict: a row
    read without it reads stronger than its chapter."""
    row = {**_row("A-six", "inconclusive", reason="runs not converged"),
           "note": "Decided on our variant: fixed entity codes."}
    page = findings.findings_page([row, _row("A-seven", "reproduced")], "default")
    line = next(ln for ln in page.splitlines() if "claim A-six" in ln)
    assert "*Note:* Decided on our variant: fixed entity codes." in line
    assert "*Note:*" not in next(ln for ln in page.splitlines() if "claim A-seven" in ln)
    assert "### Inconclusive" in page


def test_an_unreleased_version_claims_no_release_date():
    """CITATION.cff records no release that has not happened (no tag, CHANGELOG's first
    section *Unreleased*): no date-released, and the citation says "unreleased"."""
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    if f"## [{cff['version']}]" not in changelog:
        assert "date-released" not in cff
        text = findings.citation(ROOT, ROOT / "book")
        assert "(unreleased, " in text and "unreleased, commit" in text


def test_the_citation_gives_the_published_address_of_a_book_with_a_home():
    from moe_book.home import parse

    h = parse("https://github.com/moe-lab/routing-book")
    text = findings.citation(ROOT, ROOT / "book", h)
    assert "published at <https://moe-lab.github.io/routing-book>" in text
    assert "(source: <https://github.com/moe-lab/routing-book>)" in text
    assert "  url     = {https://moe-lab.github.io/routing-book}," in text
    assert "source https://github.com/moe-lab/routing-book}" in text
    bare = findings.citation(ROOT, ROOT / "book")          # no home: no address invented
    assert "published at" not in bare and "url     =" not in bare


def test_the_released_citation_file_gets_the_published_address(tmp_path):
    """The bundle's CITATION.cff (moe_book.dist) is written with cff_with_home: url and
    repository-code filled from the build's home, valid against the CFF schema."""
    import os
    import subprocess

    from moe_book.home import parse

    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert findings.cff_with_home(text, None) == text
    filled = findings.cff_with_home(text, parse("https://github.com/moe-lab/routing-book"))
    cff = yaml.safe_load(filled)
    assert cff["url"] == "https://moe-lab.github.io/routing-book"
    assert cff["repository-code"] == "https://github.com/moe-lab/routing-book"
    assert findings.cff_with_home(filled, parse("https://github.com/other/x")) == filled
    out = tmp_path / "CITATION.cff"
    out.write_text(filled, encoding="utf-8")
    check = Path(os.sys.executable).parent / "check-jsonschema"
    res = subprocess.run([str(check), "--builtin-schema", "vendor.citation-file-format",
                          str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    dist_src = (ROOT / "tooling" / "moe_book" / "dist.py").read_text(encoding="utf-8")
    assert "cff_with_home(" in dist_src and "from_environment()" in dist_src


def test_plain_why_is_a_sentence_in_words_where_the_row_has_one():
    row = {"verdict": "inconclusive", "note": "",
           "reason": "router − CE -19.1 pp [-26.9, -11.4]: the runs had not converged"}
    assert findings.plain_why(row) == "The runs had not converged."
    # a clause inside brackets is not cut at its colon
    row = {"verdict": "partly", "note": "", "reason": "structural only, but 8217 prefixes "
           "have no task's expert (ours: a junction expert): 246991/246991 routed"}
    assert findings.plain_why(row).endswith("(ours: a junction expert).")
    # numbers only: the chapter's note, if it reads as words; else nothing
    row = {"verdict": "partly", "reason": "K = 3, d = 2: 3 of 3", "note":
           "The four-region teacher is searched for minima only. More text."}
    assert findings.plain_why(row) == "The four-region teacher is searched for minima only."
    assert findings.plain_why({"verdict": "reproduced", "reason": "x = 1", "note": ""}) == ""
    assert findings.plain_why({"verdict": "reproduced", "reason": "",
                               "note": "Flow on L_τ without a half, our derivation."}) == ""


def test_the_glance_table_is_a_narrow_list_table_with_symbols_and_folded_reasons():
    from moe_book.pages import glance_table

    rows = [{**_row("A-one", "partly", reason="a: the runs had not converged"),
             "measured": "m", "rule": "r.x", "note": ""},
            {**_row("A-two", "pending", reason="", notebook=""), "measured": "",
             "note": "what to show"}]
    text = "\n".join(glance_table(rows))
    assert text.startswith("```{list-table}") and ":class: ledger-glance" in text
    assert ":widths: " in text and "* - Verdict" in text
    assert 'class="verdict-badge verdict-symbol verdict-partly" title="partly"' in text
    assert '<span class="verdict-word"> partly</span>' in text
    assert "The runs had not converged." in text
    assert '<details class="ledger-more"><summary>The rule\'s reason</summary>' in text
    assert "What a reproduction has to show" in text and "what to show" in text
    assert '<span class="ledger-claim">claim A-one</span>' in text


def test_a_caveat_on_the_experiments_is_listed_apart_not_as_a_result():
    rows = [_row("X-five", "our extension", paper="ours", key="C = 2"),
            _row("X-training-converged", "not supported", paper="ours", key="15 of 55",
                 reason="the variant's runs still moved")]
    page = findings.findings_page(rows, "default")
    results, caveats = page.split("## Caveats on the experiments")
    assert "claim X-training-converged" not in results.split("## The book's own results")[1]
    assert "**1 results:**" in results or "**1 result" in results
    assert "claim X-training-converged" in caveats and "still moved" in caveats
