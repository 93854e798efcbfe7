"""Two-hop knowledge: compositions Δ₂ ∘ Δ₁ of the embedded base, two-hop tasks as ordinary
tasks, mixed datasets whose split holds out compositions of seen hops, and V(w) at the object
of a two-hop sentence."""

import json
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask
from moe_routing.knowledge.sources import embedded_tasks, relation_ids, relation_pool
from moe_routing.knowledge.two_hop import (Chain, TwoHopTask, compose, embedded_chains,
                                           format_chains, print_chains, task_chains,
                                           two_hop_task)
from moe_routing.knowledge.two_hop_dataset import MixedKnowledgeDataset, build_mixed_dataset

#: templates of three chains of the embedded base (city → country → capital / currency,
#: country → language → script)
TEMPLATES = {
    ("P17", "P36"): ["The capital of the country where ⋆1 lies is ⋆2.",
                     "⋆1 lies in a country governed from ⋆2.",
                     "From ⋆1, the national capital is ⋆2."],
    ("P17", "P38"): ["People in ⋆1 pay with their country's currency, the ⋆2.",
                     "Shops in ⋆1 take the national currency, the ⋆2."],
    ("P37", "P282"): ["Official texts of ⋆1 are written in the ⋆2 script.",
                      "Official documents of ⋆1 are printed in ⋆2 letters."],
}


def brute_join(d1, d2):
    """{(s, o) : (s, m) ∈ Δ₁, (m, o) ∈ Δ₂} by a nested loop over both dictionaries' pairs."""
    return {(s, o) for s, m in d1.items() for m2, o in d2.items() if m == m2}


@pytest.fixture(scope="module")
def mixed():
    return build_mixed_dataset(TEMPLATES, relations=["P30"], n_pairs=120, seed=0)


def rows(ds, mask):
    return {tuple(r[:n]) for r, n in zip(ds.seqs[mask].tolist(), ds.lengths[mask].tolist())}


# ---- composition ----------------------------------------------------------------------------
NAMES = st.sampled_from([f"e{i}" for i in range(8)])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(NAMES, NAMES, max_size=8), st.dictionaries(NAMES, NAMES, max_size=8))
def test_compose_is_the_join_of_the_two_dictionaries(d1, d2):
    before = (dict(d1), dict(d2))
    comp = compose(d1, d2)
    assert (d1, d2) == before                                  # the tasks' Δ are left alone
    assert set(comp.items()) == brute_join(d1, d2)
    assert list(comp) == [s for s in d1 if s in comp]          # in Δ₁'s order


def test_a_two_hop_task_of_the_embedded_base_is_the_join():
    tasks = {t.name: t for t in embedded_tasks(relations=["P17", "P36", "P38", "P37", "P282"],
                                               n_pairs=150, seed=2)}
    for (a, b), tpls in TEMPLATES.items():
        t = two_hop_task(tasks[a], tasks[b], tpls)
        assert set(t.dictionary.items()) == brute_join(tasks[a].dictionary, tasks[b].dictionary)
        assert t.n_pairs > 0 and t.hops == (a, b) and t.name == f"{b}∘{a}"
        for s, o in t.dictionary.items():
            f1, f2 = t.supports(s)
            assert (f1.task, f1.subject, f2.task, f2.object) == (a, s, b, o)
            assert tasks[a].dictionary[s] == f1.object == f2.subject == t.middle(s)
            assert tasks[b].dictionary[f2.subject] == o
    # a real example: Cento lies in Italy, whose capital is Rome
    p17 = KnowledgeTask("P17", ["⋆1 is located in the country of ⋆2."],
                        {"Cento": relation_pool("P17")["Cento"]})
    p36 = KnowledgeTask("P36", ["The capital of ⋆1 is ⋆2."],
                        {"Italy": relation_pool("P36")["Italy"]})
    assert two_hop_task(p17, p36, TEMPLATES[("P17", "P36")]).dictionary == {"Cento": "Rome"}


def test_chain_counts_printed_equal_the_brute_force_counts(capsys):
    """Every printed chain's count is the size of the join of the two whole pools, computed
    another way: names as integers, a relation's subjects as a boolean mask over them."""
    ids = relation_ids()
    pools = {r: relation_pool(r) for r in ids}
    code = {n: i for i, n in enumerate(sorted({n for p in pools.values() for kv in p.items()
                                               for n in kv}))}
    objects = {r: np.array([code[o] for o in p.values()]) for r, p in pools.items()}
    is_subject = {r: np.isin(np.arange(len(code)), [code[s] for s in p]) for r, p in pools.items()}
    count = lambda a, b: int(is_subject[b][objects[a]].sum())  # noqa: E731
    print_chains()
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(embedded_chains()) > 100
    pattern = re.compile(r"(\S+) → (\S+)  \(.*\)  (\d+) compositions?(?:, (\d+) identity)?")
    seen = set()
    for line in printed:
        m = pattern.fullmatch(line)
        assert m, line
        a, b, n = m.group(1), m.group(2), int(m.group(3))
        assert n == count(a, b) > 0, line
        same = sum(pools[b].get(mid) == s for s, mid in pools[a].items())
        assert int(m.group(4) or 0) == same, line
        seen.add((a, b))
    # every non-empty name join is listed untyped, with its count, and nothing else is
    raw = {(a, b) for a in ids for b in ids if count(a, b)}
    untyped = embedded_chains(typed=False)
    assert {(c.first, c.second) for c in untyped} == raw
    assert all(c.n_compositions == count(c.first, c.second) for c in untyped)
    assert seen < raw
    # real chains are kept, coincidences of names are not
    for chain in [("P17", "P36"), ("P17", "P38"), ("P421", "X-timezone-country"),
                  ("P131", "P5086"), ("P37", "P282"), ("P282", "P506")]:
        assert chain in seen, chain
    for coincidence in [("P36", "P36"), ("P1376", "X-language-name-de"), ("P282", "P218")]:
        assert coincidence in raw and coincidence not in seen, coincidence
    # s == o: everywhere for an inverse pair, for the capitals among P17's cities (Rome → Italy
    # → Rome), never for a chain ending in codes
    ident = {(c.first, c.second): c.n_identity for c in embedded_chains()}
    assert ident[("P1376", "P36")] == count("P1376", "P36")
    assert ident[("P17", "P36")] == sum(pools["P36"].get(m) == s
                                        for s, m in pools["P17"].items()) > 150
    assert ident[("P38", "P498")] == 0
    # o == m: a language and its script of one name (Arabic → Arabic), a city-state's country
    # and capital of one name
    middle = {(c.first, c.second): c.n_middle for c in embedded_chains()}
    assert middle[("P37", "P282")] == sum(pools["P282"].get(m) == m
                                          for m in pools["P37"].values()) > 10
    assert middle[("P17", "P36")] == sum(pools["P36"].get(m) == m
                                         for m in pools["P17"].values()) > 0


def test_task_chains_and_format():
    tasks = embedded_tasks(relations=["P17", "P36", "P30"], n_pairs=60, seed=1)
    got = {(c.first, c.second): c.n_compositions for c in task_chains(tasks)}
    d = {t.name: t.dictionary for t in tasks}
    assert got == {(a, b): len(brute_join(d[a], d[b])) for a in d for b in d
                   if (a, b) in {("P17", "P36"), ("P17", "P30"), ("P36", "P17")}
                   and brute_join(d[a], d[b])}
    assert format_chains([Chain("a", "b", 3, 1)]) == "a → b  3 compositions, 1 identity"


def test_complete_middles_adds_exactly_the_missing_middle_entity_facts():
    chains = {("P37", "P282"): TEMPLATES[("P37", "P282")]}
    plain = embedded_tasks(relations=["P37", "P282"], n_pairs=80, seed=7)
    done = build_mixed_dataset(chains, n_pairs=80, seed=7)
    # without completion the hops are embedded_tasks' own samples (here they share no middle
    # entity)
    assert compose(plain[0].dictionary, plain[1].dictionary) == {}
    with pytest.raises(ValueError, match=r"P282 ∘ P37 = \{\}"):
        build_mixed_dataset(chains, n_pairs=80, seed=7, complete_middles=False)
    cities = {k: v for k, v in TEMPLATES.items() if k[0] == "P17"}
    kept = build_mixed_dataset(cities, n_pairs=80, seed=7, complete_middles=False)
    assert [dict(t.dictionary) for t in kept.tasks if not isinstance(t, TwoHopTask)] == \
        [dict(t.dictionary) for t in embedded_tasks(relations=["P36", "P38", "P17"], n_pairs=80,
                                                    seed=7)]
    p37, p282 = (t.dictionary for t in done.tasks[:2])
    pool = relation_pool("P282")
    added = {m: o for m, o in p282.items() if m not in plain[1].dictionary}
    assert list(p282.items())[:plain[1].n_pairs] == list(plain[1].dictionary.items())
    assert added == {m: pool[m] for m in p37.values()
                     if m in pool and m not in plain[1].dictionary}
    assert done.tasks[1].meta["added_middles"] == len(added) > 0
    # every official language with a script in the pool now composes
    assert done.tasks[2].n_pairs == sum(m in pool for m in p37.values()) > 0


# ---- a two-hop task is an ordinary task --------------------------------------------------------
def test_a_two_hop_task_is_an_ordinary_task(mixed):
    t = mixed.tasks[mixed.n_tasks - 1]
    assert isinstance(t, TwoHopTask) and isinstance(t, KnowledgeTask)
    assert t.complexity == sum(len(x) for x in t.templates) + t.n_pairs
    assert len(t.sentences()) == t.n_templates * t.n_pairs
    plain = KnowledgeDataset(mixed.tasks, seed=0)          # the library's own dataset takes it
    assert np.array_equal(plain.seqs, mixed.seqs) and plain.vocab_size == mixed.vocab_size
    assert [r["task"] for r in mixed.task_table()][-3:] == [x.name for x in mixed.two_hop_tasks]
    again = pickle.loads(pickle.dumps(t))                  # travels to worker processes
    assert again.hops == t.hops and dict(again.dictionary) == dict(t.dictionary)
    assert mixed.encode_split("test").tokens.shape[1] == mixed.seq_len
    sub = mixed.subset(["P17", "P36", "P36∘P17"])
    assert isinstance(sub, MixedKnowledgeDataset) and len(sub.held_out_compositions()) > 0


# ---- held-out compositions ----------------------------------------------------------------------
@pytest.mark.parametrize("split_unit", ["sentence", "fact"])
def test_held_out_compositions_have_seen_hops_and_are_never_trained(split_unit):
    ds = build_mixed_dataset(TEMPLATES, relations=["P30"], n_pairs=120, seed=1,
                             split_unit=split_unit)
    tok = ds.tokenizer
    train = rows(ds, ~ds.is_test)
    names = {t.name: k for k, t in enumerate(ds.tasks)}
    held = ds.held_out_compositions()
    for k, t in enumerate(ds.tasks):
        if isinstance(t, TwoHopTask):
            mine = [h for h in held if h.task == t.name]
            free = t.n_pairs - len(ds.copyable(t.name))
            assert len(mine) == round(ds.test_fraction * free) > 0
            # the two-hop task's test sentences are exactly those of its held-out compositions
            assert sorted(i for h in mine for i in h.test_sentences) == \
                np.nonzero(ds.is_test & (ds.task == k))[0].tolist()
    for h in held:
        t = ds.tasks[names[h.task]]
        assert (h.first.object, h.second.subject, h.second.object) == (h.middle, h.middle, h.object)
        assert t.dictionary[h.subject] == h.object and h == ds.supports(h.task, h.subject)
        # both hops are single-hop training facts, in every template of their task
        for f in (h.first, h.second):
            hop = ds.tasks[names[f.task]]
            assert hop.dictionary[f.subject] == f.object and not isinstance(hop, TwoHopTask)
            for tp in hop.templates:
                sent = (tok.bos_id, *tok.encode_tokens(tp.fill(f.subject, f.object),
                                                       (tp.subject_pos, tp.object_pos)),
                        tok.eos_id)
                assert sent in train, (h, tp.text)
        assert h.support_sentences and not ds.is_test[list(h.support_sentences)].any()
        # the composed fact is in no training sentence, in any template of the two-hop task
        for tp in t.templates:
            sent = (tok.bos_id, *tok.encode_tokens(tp.fill(h.subject, h.object),
                                                   (tp.subject_pos, tp.object_pos)), tok.eos_id)
            assert sent not in train
    assert len(held) == ds.split_stats()["n_held_out_compositions"]
    # the single-hop tasks still contribute test sentences (the pins do not take them all)
    single = [k for k, t in enumerate(ds.tasks) if not isinstance(t, TwoHopTask)]
    assert all(ds.is_test[ds.task == k].any() for k in single)


# ---- the leak: compositions whose answer is in the question or its first hop ------------------
def _old_selection(ds):
    """The held-out compositions as the split drew them before copyable ones were excluded:
    round(test_fraction · |Δ_k|) by one permutation per two-hop task, in task order."""
    rng = np.random.default_rng(ds.seed)
    held = []
    for t in ds.tasks:
        if isinstance(t, TwoHopTask):
            subjects = list(t.dictionary)
            out = rng.permutation(t.n_pairs)[:int(round(ds.test_fraction * t.n_pairs))]
            held += [(t, subjects[p]) for p in sorted(out)]
    return held


def test_the_old_split_held_out_compositions_that_copying_the_middle_entity_answers():
    """An entity is its name: the script "Arabic" is the language "Arabic", so Morocco → Arabic
    → Arabic answers with its middle entity, and its first hop (Morocco, Arabic) is a training
    sentence.  At the two-hop experiment's default size (60 pairs, 3 templates) the old
    selection held out 2 such compositions of 24, and 9 of 80 at 200 pairs."""
    chains = {("P17", "P36"): TEMPLATES[("P17", "P36")],
              ("P37", "P282"): TEMPLATES[("P37", "P282")]}
    for n_pairs, leaked, n_held in ((60, 2, 24), (200, 9, 80)):
        ds = build_mixed_dataset(chains, n_pairs=n_pairs, n_templates=3, seed=0)
        old = _old_selection(ds)
        assert len(old) == n_held
        assert sum(t.dictionary[s] == t.middle(s) for t, s in old) == leaked
        # the same selection, drawn by the dataset when asked to hold copyable ones out
        again = MixedKnowledgeDataset(ds.tasks, seed=0, hold_out_copyable=True)
        assert [(h.task, h.subject) for h in again.held_out_compositions()] == \
            [(t.name, s) for t, s in old]
        assert again.split_stats()["n_copyable_held_out"] >= leaked


@pytest.mark.parametrize("n_pairs", [60, 200])
def test_no_held_out_composition_can_be_copied_from_its_question_or_first_hop(n_pairs):
    chains = {("P17", "P36"): TEMPLATES[("P17", "P36")],
              ("P37", "P282"): TEMPLATES[("P37", "P282")]}
    ds = build_mixed_dataset(chains, n_pairs=n_pairs, n_templates=3, seed=0)
    held = ds.held_out_compositions()
    assert held and all(h.object not in (h.middle, h.subject) for h in held)
    stats = ds.split_stats()
    assert stats["n_copyable_held_out"] == 0 and stats["n_copyable_compositions"] > 10
    # the copyable compositions exist, and stay training compositions
    script = next(t for t in ds.two_hop_tasks if t.name == "P282∘P37")
    copy = ds.copyable(script.name)
    assert copy and all(script.dictionary[s] in (s, script.middle(s)) for s in copy)
    k = [t.name for t in ds.tasks].index(script.name)
    subjects = list(script.dictionary)
    for s in copy:
        rows_ = (ds.task == k) & (ds.pair == subjects.index(s))
        assert rows_.any() and not ds.is_test[rows_].any()
    with pytest.raises(ValueError, match="a two-hop task of the dataset"):
        ds.copyable("P17")
    with pytest.raises(ValueError, match="hold_out_copyable = 1 is not allowed"):
        MixedKnowledgeDataset(ds.tasks, hold_out_copyable=1)


def test_without_two_hop_tasks_the_split_is_the_knowledge_datasets():
    tasks = embedded_tasks(relations=["P17", "P36", "P30"], n_pairs=80, seed=4)
    for unit in ("sentence", "fact"):
        a = MixedKnowledgeDataset(tasks, seed=5, split_unit=unit)
        b = KnowledgeDataset(tasks, seed=5, split_unit=unit)
        assert np.array_equal(a.is_test, b.is_test) and a.held_out_compositions() == []


def test_deterministic_given_the_seed():
    a = build_mixed_dataset(TEMPLATES, n_pairs=80, seed=7)
    b = build_mixed_dataset(TEMPLATES, n_pairs=80, seed=7)
    c = build_mixed_dataset(TEMPLATES, n_pairs=80, seed=8)
    assert np.array_equal(a.seqs, b.seqs) and np.array_equal(a.is_test, b.is_test)
    assert a.held_out_compositions() == b.held_out_compositions()
    assert [h.subject for h in a.held_out_compositions()] != \
        [h.subject for h in c.held_out_compositions()]


# ---- V(w) ---------------------------------------------------------------------------------------
def test_valid_next_at_the_object_of_a_two_hop_sentence_is_the_composed_object(mixed):
    tok = mixed.tokenizer
    e = mixed.encode_split("all")
    object_nodes = e.prefix_node[torch.arange(len(e)), e.object_pos - 1]
    mask = mixed.valid_next_mask(object_nodes)
    checked = 0
    for k, t in enumerate(mixed.tasks):
        if not isinstance(t, TwoHopTask):
            continue
        subjects = list(t.dictionary)
        first, second = (relation_pool(r) for r in t.hops)       # the shipped facts
        for r in np.nonzero(e.task.numpy() == k)[0]:
            s = subjects[int(e.pair[r])]
            want = [tok.entity_id(second[first[s]])]
            prefix = e.tokens[r, :int(e.object_pos[r])].tolist()
            assert mixed.valid_next(prefix) == want
            assert mask[r].nonzero().squeeze(1).tolist() == want
            checked += 1
        # the held-out ones, from their text
        for h in mixed.held_out_compositions(t.name):
            tp = t.templates[0]
            text = tok.decode(tok.encode_tokens(tp.fill(h.subject, h.object),
                                                (tp.subject_pos, tp.object_pos)))
            head = text[:text.rindex(f'"{h.object}"')].rstrip()
            assert mixed.valid_next_text(head) == [f'"{h.object}"']
    assert checked == sum(t.n_templates * t.n_pairs for t in mixed.two_hop_tasks)


# ---- refusals -----------------------------------------------------------------------------------
def test_refusals():
    tasks = {t.name: t for t in embedded_tasks(
        relations=["P17", "P36", "P30", "P1376", "X-language-name-de"], n_pairs=10 ** 5, seed=0)}
    tpl = ["Of ⋆1 we say ⋆2."]
    # kinds that do not meet: a country is not a language, whatever names the two share
    assert compose(tasks["P1376"].dictionary, tasks["X-language-name-de"].dictionary)
    with pytest.raises(ValueError, match=r"\(P1376, X-language-name-de\) = .*accepted: a pair "
                                         r"whose objects of the first are of a kind"):
        two_hop_task(tasks["P1376"], tasks["X-language-name-de"], tpl)
    # an empty composition: no continent is a country
    with pytest.raises(ValueError, match=r"P36 ∘ P30 = \{\}.*accepted: .*non-empty composition"):
        two_hop_task(tasks["P30"], tasks["P36"], tpl, typed=False)
    with pytest.raises(ValueError, match=r"first = \{'a': 'b'\} .*single-hop KnowledgeTask"):
        two_hop_task({"a": "b"}, tasks["P36"], tpl)
    with pytest.raises(ValueError, match="templates = 'Of ⋆1 we say ⋆2.' .*a sequence"):
        two_hop_task(tasks["P17"], tasks["P36"], tpl[0])
    t = two_hop_task(tasks["P17"], tasks["P36"], tpl)
    with pytest.raises(ValueError, match="second = 'P36∘P17' .*single-hop"):
        two_hop_task(tasks["P17"], t, tpl)
    s = next(iter(t.dictionary))
    with pytest.raises(ValueError, match=re.escape(f"dictionary[{s!r}] = 'Atlantis' is not "
                                                   f"allowed; accepted: the composition")):
        TwoHopTask("bad", tpl, {s: "Atlantis"}, first=tasks["P17"], second=tasks["P36"])
    # a mixed dataset needs the hops, with the facts composed
    with pytest.raises(ValueError, match=r"tasks \(P36∘P17\) = 'P36' .*the hop 'P36'"):
        MixedKnowledgeDataset([tasks["P17"], t])
    other = KnowledgeTask("P36", ["The capital of ⋆1 is ⋆2."], {"Nowhere": "Nothing"})
    with pytest.raises(ValueError, match=r"tasks\['P36'\]\.dictionary\[.*\] = None .*composes"):
        MixedKnowledgeDataset([tasks["P17"], other, t])
    # a two-hop template whose object slot another task's template makes undetermined
    clash = two_hop_task(tasks["P17"], tasks["P36"], ["⋆1 is located in the country of ⋆2."])
    with pytest.raises(ValueError, match="object slot of a two-hop sentence must be determined"):
        MixedKnowledgeDataset([tasks["P17"], tasks["P36"], clash])
    with pytest.raises(ValueError, match=r"two_hop key = \('P17', 'P999'\)"):
        build_mixed_dataset({("P17", "P999"): tpl})
    with pytest.raises(ValueError, match="min_compositions = 0"):
        embedded_chains(min_compositions=0)


# ---- single-hop datasets do not change ---------------------------------------------------------
DIGEST = """
import hashlib, json, sys
from moe_routing.knowledge import build_dataset
def digest():
    ds = build_dataset(n_relations=None, n_pairs=60, seed=3)
    h = hashlib.sha256()
    for a in (ds.seqs, ds.lengths, ds.task, ds.pair, ds.is_test, ds.prefix_node,
              ds.trie.next_ids, ds.trie.next_indptr):
        h.update(a.tobytes())
    h.update(json.dumps(ds.tokenizer.vocab).encode())
    h.update(json.dumps([[t.name, [x.text for x in t.templates], list(t.dictionary.items())]
                         for t in ds.tasks]).encode())
    return h.hexdigest()
"""
WITHOUT = DIGEST + """
out = digest()
assert "moe_routing.knowledge.two_hop" not in sys.modules
print(json.dumps([out]))
"""
WITH = DIGEST + """
from moe_routing.knowledge import two_hop, two_hop_dataset
two_hop.embedded_chains(); two_hop.embedded_chains(typed=False)
two_hop_dataset.build_mixed_dataset({TEMPLATES!r}, n_pairs=60, seed=3)
print(json.dumps([digest(), digest()]))
"""


def test_a_single_hop_dataset_is_byte_identical_with_and_without_the_module():
    def run(code):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    (without,) = run(WITHOUT)
    after_use = run(WITH.replace("{TEMPLATES!r}", repr(TEMPLATES)))
    assert after_use == [without, without]
