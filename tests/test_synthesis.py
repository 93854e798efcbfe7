"""The synthesis at the top of Findings: built from the ledger rows, bounded in words, and
saying what each verdict means -- a verdict that changes changes the sentence."""

from __future__ import annotations

import pytest

from moe_book.synthesis import MAX_WORDS, OURS, PAPER_A, PAPER_B, PHRASE, synthesis, word_count
from moe_routing._internal.verdicts import VERDICTS


def rows(verdict: str = "reproduced", key: str = "a key number of some length") -> list[dict]:
    out = [{"id": c, "paper": c[0] if c[0] in "AB" else "ours", "verdict": verdict,
            "key": key, "note": ""} for c, _ in (*PAPER_A, *PAPER_B)]
    out += [{"id": c, "paper": "ours", "verdict": "our extension", "key": key, "note": ""}
            for c, _ in OURS]
    out += [{"id": f"A-thm{i}", "paper": "A", "verdict": "reproduced for our construction",
             "key": key, "note": ""} for i in range(4)]
    return out


def test_every_verdict_has_words():
    assert set(VERDICTS) <= set(PHRASE)


def test_the_synthesis_says_each_verdict_in_words_and_links_its_row():
    text = synthesis(rows("reproduced"))
    assert "task routing as accurate as CE and CE + LB: *holds*" in text
    assert "<ledger-a-accuracy-comparable>`" in text
    changed = rows("reproduced")
    changed[0]["verdict"] = "not reproduced"
    assert "as accurate as CE and CE + LB: *does not hold*" in synthesis(changed)


def test_a_claim_missing_from_the_build_is_left_out_not_invented():
    some = [r for r in rows() if r["id"] != "A-active-params"]
    text = synthesis(some)
    assert "active parameters" not in text and "ledger-a-active-params" not in text


def test_the_caveats_come_from_the_notes():
    rs = rows()
    rs[0]["note"] = ("Decided in the paper's setting; with every expert switched off, CE at 20 "
                     "tasks × 7 experts keeps 93.9 % of its 96.5 % (...); the runs had not "
                     "converged (X-training-converged), which makes the verdict inconclusive.")
    text = synthesis(rs)
    assert "93.9 % of facts against 96.5 %" in text
    assert "had not converged" in text
    assert "93.9" not in synthesis(rows())


@pytest.mark.parametrize("verdict", VERDICTS)
def test_the_synthesis_stays_within_its_words(verdict):
    rs = rows(verdict, key="router − best standard ≥ -0.2 pp")
    rs[0]["note"] = "keeps 93.9 % of its 96.5 %; the runs had not converged"
    assert word_count(synthesis(rs)) <= MAX_WORDS


def test_the_word_count_counts_prose_not_link_targets():
    assert word_count("a {ref}`b c <ledger-x-y-z>` **d**") == 4
    assert word_count(" ".join(["w"] * (MAX_WORDS + 1))) == MAX_WORDS + 1
