"""The reproduction ledger: ids, verdicts, and the file the book's ledger page reads."""

from __future__ import annotations

import json

import pytest

from moe_routing.ledger import VERDICTS, Ledger, load_claims, registry


def test_registry_holds_both_papers_claims():
    reg = registry()
    assert {c["paper"] for c in reg.values()} == {"A", "B"}
    assert "A-thm42-accuracy" in reg and "B-symmetry-inverse-tau" in reg
    assert all(c["criterion"] and c["claim"] and c["where"] for c in reg.values())


def test_record_writes_claims_json_atomically(tmp_path):
    led = Ledger(tmp_path / "art", notebook="demo")
    c = led.record("B-bm-binary", measured="slope 1.00 ± 0.01", verdict="reproduced")
    assert c.paper == "B" and c.where == "§2.2"
    led.record("X-demo", measured="3", verdict="our extension", where="here", claim="c")
    led.record("B-bm-binary", measured="slope 0.98", verdict="partly")   # re-record replaces
    data = json.loads((tmp_path / "art" / "claims.json").read_text())
    assert [d["id"] for d in data] == ["B-bm-binary", "X-demo"]
    assert data[0]["verdict"] == "partly"
    assert load_claims(tmp_path)[1]["paper"] == "ours"
    assert "partly" in c._repr_markdown_() or "reproduced" in c._repr_markdown_()


@pytest.mark.parametrize("kwargs,match", [
    (dict(id="B-nope", measured="1", verdict="reproduced"), "unknown claim id 'B-nope'"),
    (dict(id="B-bm-binary", measured="1", verdict="sort of"), "unknown verdict 'sort of'"),
    (dict(id="X-new", measured="1", verdict="our extension"), "needs both `where` and `claim`"),
])
def test_bad_records_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Ledger(tmp_path, notebook="demo").record(**kwargs)


def test_without_artifacts_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Ledger(None, notebook="demo").record("A-thm42-routing", measured="x", verdict=VERDICTS[0])
    assert list(tmp_path.iterdir()) == []
