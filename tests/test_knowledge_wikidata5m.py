"""WikiData5M loader on small files in the official format, written by the tests."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from moe_routing.knowledge.sources.wikidata5m_files import (CHUNK_BYTES, MAX_LINE_BYTES,
                                                            WikiData5MAliasError,
                                                            WikiData5MFileError,
                                                            WikiData5MFormatError)
from moe_routing.knowledge.sources.wikidata5m import load_wikidata5m
from moe_routing.knowledge.sources.wikidata5m_synthetic import write_official_format

TRIPLES = [
    # P36 capital: Q1 France -> Q2 Paris, Q3 Italy -> Q4 Rome; Q5 has two capitals (not functional)
    ("Q1", "P36", "Q2"), ("Q3", "P36", "Q4"), ("Q5", "P36", "Q6"), ("Q5", "P36", "Q7"),
    # P17 country: Q2 Paris -> Q1, Q4 Rome -> Q3, repeated fact is fine
    ("Q2", "P17", "Q1"), ("Q4", "P17", "Q3"), ("Q4", "P17", "Q3"),
    # P999 has no templates: read, validated, ignored
    ("Q1", "P999", "Q3"),
]
ENTITIES = {"Q1": ["France", "French Republic"], "Q2": ["Paris", "City of Light"],
            "Q3": ["Italy"], "Q4": ["Rome", "Roma"], "Q5": ["Bolivia"], "Q6": ["Sucre"],
            "Q7": ['La "Paz"']}
RELATIONS = {"P36": ["capital"], "P17": ["country"], "P999": ["other"]}


def write(d: Path, triples=TRIPLES, entities=ENTITIES, relations=RELATIONS, gz=False,
          name="wikidata5m_transductive_train.txt"):
    d.mkdir(parents=True, exist_ok=True)
    op = (lambda p: gzip.open(str(p) + ".gz", "wt", encoding="utf-8")) if gz else \
        (lambda p: open(p, "w", encoding="utf-8"))
    with op(d / name) as f:
        f.write("".join("\t".join(t) + "\n" for t in triples))
    with op(d / "wikidata5m_entity.txt") as f:
        f.write("".join("\t".join([k, *v]) + "\n" for k, v in entities.items()))
    with op(d / "wikidata5m_relation.txt") as f:
        f.write("".join("\t".join([k, *v]) + "\n" for k, v in relations.items()))
    return d


@pytest.mark.parametrize("gz", [False, True])
def test_loads_functional_pairs_named_by_first_alias(tmp_path, gz):
    write(tmp_path, gz=gz)
    res = load_wikidata5m(tmp_path, relations=["P36", "P17"], n_pairs=10)
    by = {t.name: t for t in res.tasks}
    assert dict(by["P36"].dictionary) == {"France": "Paris", "Italy": "Rome"}   # Q5 dropped
    assert dict(by["P17"].dictionary) == {"Paris": "France", "Rome": "Italy"}
    assert by["P36"].label == "capital" and by["P36"].property_id == "P36"
    assert len(by["P36"].templates) == 5
    assert res.n_lines == len(TRIPLES)
    assert res.relations["P36"]["triples"] == 4 and res.relations["P36"]["functional"] == 2


def test_all_triplet_file_is_preferred(tmp_path):
    write(tmp_path)
    write(tmp_path / "x", triples=TRIPLES[:2])
    (tmp_path / "x" / "wikidata5m_transductive_train.txt").rename(
        tmp_path / "wikidata5m_all_triplet.txt")
    res = load_wikidata5m(tmp_path, relations=["P36"])
    assert res.n_lines == 2 and res.files["triples"][0].endswith("wikidata5m_all_triplet.txt")


def test_truncated_line_names_file_and_line(tmp_path):
    write(tmp_path)
    p = tmp_path / "wikidata5m_transductive_train.txt"
    p.write_text(p.read_text() + "Q8\tP36")   # the file ends in the middle of a line
    with pytest.raises(WikiData5MFormatError) as e:
        load_wikidata5m(tmp_path, relations=["P36"])
    assert str(e.value) == ("wikidata5m_transductive_train.txt, line 9: expected 3 tab-separated "
                            "fields (head, relation, tail), got 2: 'Q8\\tP36'")
    p.write_text("Q1\tP36\tQ2\nQ1\tP36\tParis\n")
    with pytest.raises(WikiData5MFormatError, match="line 2: expected Wikidata ids"):
        load_wikidata5m(tmp_path, relations=["P36"])


def test_truncated_gz_is_reported(tmp_path):
    write(tmp_path, gz=True)
    p = tmp_path / "wikidata5m_transductive_train.txt.gz"
    p.write_bytes(p.read_bytes()[:-12])
    with pytest.raises(WikiData5MFormatError, match="truncated"):
        load_wikidata5m(tmp_path, relations=["P36"])


def test_missing_alias(tmp_path):
    ents = {k: v for k, v in ENTITIES.items() if k != "Q4"}
    write(tmp_path, entities=ents)
    with pytest.raises(WikiData5MAliasError) as e:
        load_wikidata5m(tmp_path, relations=["P36", "P17"])
    assert str(e.value) == ("wikidata5m_entity.txt: no alias for entity Q4 "
                            "(1 sampled entities lack one: Q4)")
    res = load_wikidata5m(tmp_path, relations=["P36", "P17"], on_missing_alias="skip")
    assert dict(res.tasks[0].dictionary) == {"France": "Paris"}
    # the skipped entity is named, not only counted
    assert res.skipped_entities == ["Q4"]
    assert res.relations["P36"]["skipped_pairs"] == res.relations["P17"]["skipped_pairs"] == 1


def test_build_dataset_exposes_on_missing_alias_and_names_skipped_entities(tmp_path):
    from moe_routing.knowledge import build_dataset

    write(tmp_path, entities={k: v for k, v in ENTITIES.items() if k != "Q4"})
    kw = dict(n_relations=2, n_pairs=1, n_templates=2)
    with pytest.raises(WikiData5MAliasError, match="no alias for entity Q4"):
        build_dataset(tmp_path, **kw)
    with pytest.warns(UserWarning, match=r"skipped 1 sampled entities without an alias .*: Q4"):
        ds = build_dataset(tmp_path, on_missing_alias="skip", **kw)
    assert ds.skipped_entities == ("Q4",) and ds.subset([0]).skipped_entities == ("Q4",)
    assert {t.name: dict(t.dictionary) for t in ds.tasks} == {"P17": {"Paris": "France"},
                                                              "P36": {"France": "Paris"}}
    with pytest.raises(ValueError, match="on_missing_alias = 'drop'"):
        build_dataset(tmp_path, on_missing_alias="drop", **kw)


def test_missing_files(tmp_path):
    with pytest.raises(WikiData5MFileError, match="directory not found"):
        load_wikidata5m(tmp_path / "nope")
    write(tmp_path)
    (tmp_path / "wikidata5m_entity.txt").unlink()
    with pytest.raises(WikiData5MFileError) as e:
        load_wikidata5m(tmp_path, relations=["P36"])
    assert str(e.value) == f"WikiData5M alias file not found: {tmp_path}/wikidata5m_entity.txt[.gz]"
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ValueError)
    (tmp_path / "wikidata5m_transductive_train.txt").unlink()
    with pytest.raises(WikiData5MFileError, match="no WikiData5M triple file"):
        load_wikidata5m(tmp_path, relations=["P36"])


def test_bad_arguments_fail_before_reading(tmp_path):
    with pytest.raises(ValueError, match=r"relations = \['P999'\].*relations with templates"):
        load_wikidata5m(tmp_path, relations=["P999"])
    with pytest.raises(ValueError, match="n_pairs"):
        load_wikidata5m(tmp_path, n_pairs=0)


def test_name_collisions_drop_non_functional_names(tmp_path):
    ents = {**ENTITIES, "Q3": ["France"]}  # Q1 and Q3 are both named "France"
    write(tmp_path, entities=ents)
    # P36: "France" -> Paris and "France" -> Rome: the name is not functional, both dropped,
    # and Q5 has two capitals: nothing is left
    with pytest.raises(ValueError, match=r"relations = \['P36'\].*functional pair"):
        load_wikidata5m(tmp_path, relations=["P36", "P17"])
    # P17: Paris -> France and Rome -> France: many-to-one is fine
    res = load_wikidata5m(tmp_path, relations=["P17"])
    assert dict(res.tasks[0].dictionary) == {"Paris": "France", "Rome": "France"}


def test_sampling_is_seeded_bounded_and_functional(tmp_path):
    write_official_format(tmp_path, 60_000, n_entities=50_000, relations=("P17", "P19", "P27"),
                          multi_share=0.3, seed=1)
    a = load_wikidata5m(tmp_path, n_relations=3, n_pairs=50, seed=0)
    b = load_wikidata5m(tmp_path, n_relations=3, n_pairs=50, seed=0)
    c = load_wikidata5m(tmp_path, n_relations=3, n_pairs=50, seed=1)
    assert [dict(t.dictionary) for t in a.tasks] == [dict(t.dictionary) for t in b.tasks]
    assert [dict(t.dictionary) for t in a.tasks] != [dict(t.dictionary) for t in c.tasks]
    assert all(t.n_pairs == 50 for t in a.tasks)
    for s in a.relations.values():
        assert s["heads_sampled"] <= 4 * 50 < s["triples"]
    # functional against the whole file: no kept head has another tail anywhere
    tails = {}
    for line in (tmp_path / "wikidata5m_transductive_train.txt").read_text().splitlines():
        h, r, t = line.split("\t")
        tails.setdefault((f"entity {h[1:]}", r), set()).add(f"entity {t[1:]}")
    for task in a.tasks:
        for s, o in task.dictionary.items():
            assert tails[(s, task.name)] == {o}
    with pytest.raises(ValueError, match="n_relations = 4 .*at most 3"):
        load_wikidata5m(tmp_path, n_relations=4, n_pairs=50)


def test_sample_does_not_depend_on_chunking(tmp_path):
    from moe_routing.knowledge.sources.wikidata5m_scan import scan_triples

    write_official_format(tmp_path, 20_000, n_entities=3_000, relations=("P17", "P19"),
                          multi_share=0.3, seed=2)
    f = [tmp_path / "wikidata5m_transductive_train.txt"]
    big, n1 = scan_triples(f, {b"P17", b"P19"}, k=100, seed=5)
    small, n2 = scan_triples(f, {b"P17", b"P19"}, k=100, seed=5, chunk_bytes=256)
    assert n1 == n2 == 20_000
    for r in big:
        assert big[r].functional() == small[r].functional()
        assert big[r].n_triples == small[r].n_triples
        # with 3 000 heads and ~10 000 triples per relation most heads have several tails
        assert 0 < len(big[r].functional()) < 100


def test_malformed_alias_line(tmp_path):
    write(tmp_path)
    p = tmp_path / "wikidata5m_entity.txt"
    p.write_text(p.read_text() + "Q8 no tab here\n")
    with pytest.raises(WikiData5MFormatError) as e:
        load_wikidata5m(tmp_path, relations=["P36"])
    assert str(e.value) == ("wikidata5m_entity.txt, line 8: expected id<TAB>alias…, "
                            "got 'Q8 no tab here'")


def test_crlf_line_ends_and_blank_lines(tmp_path):
    write(tmp_path)
    for name in ("wikidata5m_transductive_train.txt", "wikidata5m_entity.txt"):
        p = tmp_path / name
        p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n") + b"\r\n\n")
    res = load_wikidata5m(tmp_path, relations=["P36", "P17"], n_pairs=10)
    assert dict(res.tasks[0].dictionary) == {"France": "Paris", "Italy": "Rome"}
    assert res.n_lines == len(TRIPLES)


# ---- damaged files: a clear error naming the file and where, in bounded memory ----------------

HUNDRED_MB = 100 * 2 ** 20


def peak_bytes_of(fn):
    """(the error ``fn`` raised, peak bytes Python and NumPy allocated meanwhile)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(WikiData5MFormatError) as e:
            fn()
        return e.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name, line", [("wikidata5m_transductive_train.txt", 9),
                                        ("wikidata5m_entity.txt", 8)])
def test_binary_garbage_names_file_and_line(tmp_path, name, line):
    write(tmp_path)
    p = tmp_path / name
    garbage = np.random.default_rng(1).integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes()
    p.write_bytes(p.read_bytes() + b"\x00\xff\xfe" + garbage)   # never a valid first byte
    with pytest.raises(WikiData5MFormatError) as e:
        load_wikidata5m(tmp_path, relations=["P36"])
    assert str(e.value).startswith(f"{name}, line {line}: expected ")


@pytest.mark.parametrize("name, gz", [("wikidata5m_transductive_train.txt", False),
                                      ("wikidata5m_entity.txt", True)])
def test_a_100_mb_line_fails_after_about_one_mib(tmp_path, name, gz):
    write(tmp_path)
    p = tmp_path / name
    head = p.read_bytes()
    p.unlink()
    if gz:   # 100 MB of zero bytes compress to ~100 KB; written piece by piece
        with gzip.open(str(p) + ".gz", "wb", compresslevel=1) as f:
            f.write(head)
            zeros = bytes(2 ** 22)
            for _ in range(HUNDRED_MB // len(zeros)):
                f.write(zeros)
            f.write(b"\n")
    else:    # a sparse file: the 100 MB line costs no disk and no time to write
        with open(p, "wb") as f:
            f.write(head)
            f.seek(len(head) + HUNDRED_MB)
            f.write(b"\n")
    n = head.count(b"\n") + 1
    err, peak = peak_bytes_of(lambda: load_wikidata5m(tmp_path, relations=["P36"]))
    assert str(err).startswith(f"{name}{'.gz' if gz else ''}, line {n} (byte offset "
                               f"{len(head)}): longer than {MAX_LINE_BYTES} bytes")
    # one 4 MiB chunk, its pieces and the 1 MiB cap: far below the 100 MB line
    assert peak < 3 * CHUNK_BYTES + 2 * MAX_LINE_BYTES < HUNDRED_MB / 6, peak


def test_truncated_gz_names_last_whole_line_and_offsets(tmp_path):
    write_official_format(tmp_path, 30_000, n_entities=1_000, gz=True, seed=3)
    p = tmp_path / "wikidata5m_transductive_train.txt.gz"
    whole = gzip.decompress(p.read_bytes())
    cut = p.stat().st_size // 2
    p.write_bytes(p.read_bytes()[:cut])
    err, peak = peak_bytes_of(lambda: load_wikidata5m(tmp_path, relations=["P17"]))
    msg = str(err)
    assert msg.startswith(f"{p.name}: compressed stream is damaged or truncated after line ")
    n_lines = int(msg.split("after line ")[1].split(" ")[0])
    offset = int(msg.split("uncompressed byte offset ")[1].split(";")[0])
    assert f"the .gz breaks near byte {cut} of {cut}" in msg
    # exactly the lines before the offset were read whole; the rest of the file was not
    assert n_lines == whole[:offset].count(b"\n") > 0 and offset < len(whole)
    assert peak < 3 * CHUNK_BYTES
