"""The reproduction ledger: ids, verdicts decided by rules, the verdict box, the file the book's
ledger page reads."""

from __future__ import annotations

import json
import re

import pytest

from moe_routing._internal.ledger import BADGES, SOURCES, Ledger, load_claims, registry
from moe_routing._internal.verdicts import VERDICTS, Verdict, rule


@rule
def threshold_rule(x: float):
    return ("reproduced", f"x = {x} ≥ 1") if x >= 1 else ("partly", f"x = {x} < 1")


def test_registry_holds_both_papers_claims():
    reg = registry()
    assert {c["paper"] for c in reg.values()} == {"A", "B"}
    assert "A-thm42-accuracy" in reg and "B-symmetry-inverse-tau" in reg
    assert all(c["criterion"] and c["claim"] and c["where"] for c in reg.values())
    assert all(c["source"] in SOURCES and c["short"] for c in reg.values())
    assert not any("§" in c["where"] for c in reg.values())   # no section no source supports


def test_every_verdict_has_a_badge_and_verdicts_are_checked():
    assert set(BADGES) == set(VERDICTS)
    with pytest.raises(ValueError, match="verdict = 'sort of' is not allowed"):
        Verdict("sort of", "because", "r")
    with pytest.raises(ValueError, match="reason"):
        Verdict("partly", "", "r")


def test_every_verdict_is_wired_through_the_book():
    """A verdict word needs its box colour and badge colour (book/_static/companion.css), an
    explanation on the ledger page and a place in the Findings page's order; a word added to
    VERDICTS without them would render unstyled or be counted nowhere."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    css = (root / "book" / "_static" / "companion.css").read_text(encoding="utf-8")
    pages = (root / "tooling" / "moe_book" / "pages.py").read_text(encoding="utf-8")
    findings = (root / "tooling" / "moe_book" / "findings.py").read_text(encoding="utf-8")
    for v in VERDICTS:
        cls = "verdict-" + v.replace(" ", "-")
        for sel in (f"div.admonition.{cls}", f"span.verdict-badge.{cls}"):
            assert re.search(re.escape(sel) + r"[\s,{]", css), sel
        assert f"*{v}* —" in " ".join(pages.split()), v
        assert f'"{v}"' in findings, v


def test_a_definition_is_not_counted_as_reproduced():
    c = Ledger(None, notebook="demo").record(
        "A-task-complexity", measured="c(k) ≤ L·|T(k)| + N for 3 of 3 tasks",
        verdict=Verdict("holds by definition", "as the definitions imply", "r"))
    box = c._repr_html_()
    assert "verdict-holds-by-definition" in box and "≡ holds by definition" in box
    assert "✓" not in box and "≡ **holds by definition**" in c._repr_markdown_()


def test_rule_stamps_its_name():
    v = threshold_rule(0.5)
    assert (v.verdict, v.reason) == ("partly", "x = 0.5 < 1")
    assert v.rule.endswith("test_ledger.threshold_rule")


def test_record_writes_claims_json_atomically(tmp_path):
    led = Ledger(tmp_path / "art", notebook="demo")
    c = led.record("B-bm-binary", measured="slope 1.00 ± 0.01", verdict=threshold_rule(2),
                   key="slope 1.00")
    assert c.paper == "B" and c.verdict == "reproduced" and c.rule == threshold_rule(2).rule
    led.record("X-demo", measured="3", verdict=Verdict("our extension", "ours", "r"),
               where="here", claim="c")
    led.record("B-bm-binary", measured="slope 0.98", verdict=threshold_rule(0.98))  # replaces
    data = json.loads((tmp_path / "art" / "claims.json").read_text())
    assert [d["id"] for d in data] == ["B-bm-binary", "X-demo"]
    assert data[0]["verdict"] == "partly" and data[0]["reason"] == "x = 0.98 < 1"
    assert load_claims(tmp_path)[1]["paper"] == "ours" and load_claims(tmp_path)[1]["source"] == "ours"


def test_verdict_box_shows_claim_measurement_verdict_reason_and_link(tmp_path):
    c = Ledger(None, notebook="demo").record("A-thm42-routing", measured="routed 97 %",
                                             verdict=threshold_rule(0.97))
    box = c._repr_html_()
    text = re.sub(r"<[^>]+>", " ", box)
    assert "◐ partly" in text and "✓" not in text             # the verdict, not another one
    assert "routed 97 %" in text and "x = 0.97 &lt; 1" in box
    assert "ledger.html#ledger-a-thm42-routing" in box
    assert registry()["A-thm42-routing"]["where"] in text
    summary = Ledger(None, notebook="demo")
    summary.record("A-thm42-routing", measured="m", verdict=threshold_rule(3), key="k = 3")
    table = summary.summary()._repr_html_()
    assert table.count("<tr>") == 2 and "k = 3" in table and "✓ reproduced" in table


@pytest.mark.parametrize("kwargs,match", [
    (dict(id="B-nope", measured="1", verdict=Verdict("partly", "r", "r")), "unknown claim id 'B-nope'"),
    (dict(id="B-bm-binary", measured="1", verdict="reproduced"), "is a literal"),
    (dict(id="B-bm-binary", measured="1", verdict=0.5), "must be a moe_routing._internal.verdicts.Verdict"),
    (dict(id="X-new", measured="1", verdict=Verdict("our extension", "r", "r")),
     "needs both `where` and `claim`"),
    (dict(id="B-bm-binary", measured="1", verdict=Verdict("partly", "r", "r"), source="blog"),
     "source = 'blog'"),
])
def test_bad_records_are_refused(tmp_path, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Ledger(tmp_path, notebook="demo").record(**kwargs)


def test_without_artifacts_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Ledger(None, notebook="demo").record("A-thm42-routing", measured="x",
                                         verdict=threshold_rule(1))
    assert list(tmp_path.iterdir()) == []


def test_the_profile_is_shown_in_the_box_and_stored(tmp_path):
    led = Ledger(tmp_path, notebook="demo", profile="default")
    c = led.record("A-thm42-routing", measured="routed 97 %",
                   verdict=threshold_rule(0.97))
    assert c.profile == "default"
    assert "(profile <code>default</code>)" in c._repr_html_()
    assert "(default profile)" in c._repr_markdown_()
    assert json.loads((tmp_path / "claims.json").read_text())[0]["profile"] == "default"
    with pytest.raises(ValueError, match="profile"):
        Ledger(tmp_path, notebook="demo", profile="huge")


def test_whose_claim_decides_which_words_it_can_receive():
    """A paper's claim can be "not reproduced", never "not supported" or "our extension"; the
    book's own (X-) claim the reverse: the ledger refuses a rule's word given to the wrong kind
    of claim (a rule of the book read "not reproduced", as if someone's result had failed)."""
    led = Ledger(None, notebook="demo")
    with pytest.raises(ValueError, match="book's own claim"):
        led.record("X-demo", where="here", claim="ours", measured="m",
                   verdict=Verdict("not reproduced", "r", "rule"))
    with pytest.raises(ValueError, match="a claim of a paper"):
        led.record("A-task-complexity", measured="m",
                   verdict=Verdict("our extension", "r", "rule"))
    with pytest.raises(ValueError, match="a claim of a paper"):
        led.record("A-task-complexity", measured="m",
                   verdict=Verdict("not supported", "r", "rule"))
    for word in ("inconclusive", "not supported", "our extension"):
        assert led.record("X-demo", where="here", claim="ours", measured="m",
                          verdict=Verdict(word, "r", "rule")).verdict == word
    for word in ("inconclusive", "not reproduced"):
        assert led.record("A-task-complexity", measured="m",
                          verdict=Verdict(word, "r", "rule")).verdict == word
