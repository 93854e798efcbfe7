"""Templates, tasks, tokenizer, valid next tokens and the dataset API."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_routing.knowledge import (OBJECT_SLOT, SUBJECT_SLOT, KnowledgeDataset, KnowledgeTask,
                                   Template, Tokenizer)
from moe_routing.model import MoEConfig, MoETransformer, valid_next_mass

pytestmark = pytest.mark.kernels

# ---- templates ---------------------------------------------------------------------------


def test_template_parse_spellings_and_length():
    t = Template.parse("⋆1 is spoken widely in ⋆2.")
    assert t.tokens == ("⋆1", "is", "spoken", "widely", "in", "⋆2", ".")
    assert len(t) == 7 and t.subject_pos == 0 and t.object_pos == 5
    assert Template.parse("*1 is spoken widely in *2.") == t
    assert Template.parse("{s} is spoken widely in {o}.") == t
    assert t.text == "⋆1 is spoken widely in ⋆2."
    poss = Template.parse("⋆1's capital is ⋆2.")
    assert poss.tokens[:2] == ("⋆1", "'s") and poss.text == "⋆1's capital is ⋆2."
    assert t.fill("French", "France") == ("French", "is", "spoken", "widely", "in", "France", ".")


@pytest.mark.parametrize("text, msg", [
    ("⋆1 is in the country", "exactly once"),
    ("⋆1 and ⋆1 are in ⋆2", "exactly once"),
    ("⋆2 contains ⋆1", "must come before"),
    ('⋆1 is "in" ⋆2', "double quote"),
])
def test_template_errors(text, msg):
    with pytest.raises(ValueError, match=msg):
        Template.parse(text)


# ---- tasks ---------------------------------------------------------------------------------

def running_example():
    located = KnowledgeTask("located", ["⋆1 is in ⋆2."], {"Paris": "France", "Rome": "Italy"})
    spoken = KnowledgeTask("spoken", ["⋆1 is spoken widely in ⋆2."],
                           {"French": "France", "Italian": "Italy", "Basque": "Spain"})
    return located, spoken


def test_complexity_by_hand():
    located, spoken = running_example()
    assert located.complexity == 5 + 2          # |"⋆1 is in ⋆2 ."| = 5, two entries
    assert spoken.complexity == 7 + 3
    assert located.complexity_bound() == 5 * 1 + 2
    assert spoken.complexity_bound(L=7, N=3) == 10 and located.complexity_bound(L=7, N=3) == 10
    with pytest.raises(ValueError, match="L = 3 is not allowed"):
        spoken.complexity_bound(L=3)


def test_task_validation():
    with pytest.raises(ValueError, match=r"dictionary of t\['Paris'\].*functional"):
        KnowledgeTask("t", ["⋆1 is in ⋆2."], [("Paris", "France"), ("Paris", "Texas")])
    KnowledgeTask("t", ["⋆1 is in ⋆2."], [("Paris", "France"), ("Paris", "France")])
    with pytest.raises(ValueError, match="KnowledgeTask.dictionary = {} .*at least one"):
        KnowledgeTask("t", ["⋆1 is in ⋆2."], {})
    with pytest.raises(ValueError, match="twice"):
        KnowledgeTask("t", ["⋆1 is in ⋆2.", "*1 is in *2."], {"a": "b"})
    with pytest.raises(ValueError, match="double quote"):
        KnowledgeTask("t", ["⋆1 is in ⋆2."], {'say "hi"': "b"})


# ---- tokenizer ---------------------------------------------------------------------------

def test_tokenizer_layout_and_collisions():
    tok = Tokenizer(["is", "in", "."], ["is", "New York", "Georgia"])
    assert tok.vocab[:3] == ["<pad>", "<bos>", "<eos>"]
    assert list(tok.syntactic_ids) == [3, 4, 5] and list(tok.entity_ids) == [6, 7, 8]
    # the entity "is" and the word is are different tokens
    ids = tok.encode('"is" is in "New York".')
    assert ids == [tok.entity_id("is"), tok.word_id("is"), tok.word_id("in"),
                   tok.entity_id("New York"), tok.word_id(".")]
    assert tok.decode(ids) == '"is" is in "New York".'
    with pytest.raises(ValueError, match="balanced double quotes"):
        tok.encode('"is is in')
    with pytest.raises(ValueError, match="word = 'on'"):
        tok.encode("is on")
    with pytest.raises(ValueError, match=r"ids\[0\] = 99 .*0..8"):
        tok.decode([99])


# ---- dataset ------------------------------------------------------------------------------

def test_running_example_valid_next_and_shared_prefix():
    located, spoken = running_example()
    spoken2 = KnowledgeTask("spoken", spoken.templates, {**spoken.dictionary, "Paris": "Texas"})
    ds = KnowledgeDataset([located, spoken2])
    assert set(ds.valid_next_text("")) == {'"Paris"', '"Rome"', '"French"', '"Italian"', '"Basque"'}
    # "Paris" is a key of both tasks: after "Paris is" both templates continue
    assert set(ds.valid_next_text('"Paris" is')) == {"in", "spoken"}
    assert ds.valid_next_text('"Paris" is in') == ['"France"']
    assert ds.valid_next_text('"Paris" is spoken widely in') == ['"Texas"']
    assert ds.valid_next_text('"Paris" is in "France".') == ["<eos>"]
    node = ds.trie.find(ds.tokenizer.encode('"Paris" is', add_special=True)[:-1])
    assert ds.trie.tasks(node).tolist() == [0, 1]
    node = ds.trie.find(ds.tokenizer.encode('"Rome" is', add_special=True)[:-1])
    assert ds.trie.tasks(node).tolist() == [0]
    st_ = ds.prefix_stats()
    # [BOS], [BOS Paris], [BOS Paris is] are continued by both tasks
    assert st_["n_ambiguous"] == 3 and st_["max_tasks_at_prefix"] == 2
    # structurally: "", "⋆1", "⋆1 is" are shared by the two templates
    assert st_["n_structural_ambiguous"] == 3 and st_["n_templates_shared_between_tasks"] == 0
    with pytest.raises(ValueError, match="prefix of some sentence"):
        ds.valid_next_text('"Rome" is spoken')


def test_template_and_dictionary_ids_for_the_construction():
    located, spoken = running_example()
    ds = KnowledgeDataset([located, spoken])
    tok = ds.tokenizer
    (tids,) = ds.template_ids("spoken")
    assert tids[0] == SUBJECT_SLOT and tids[5] == OBJECT_SLOT
    assert tok.decode([t for t in tids if t >= 0]) == "is spoken widely in."
    d = ds.dictionary_ids(1)
    assert d.shape == (3, 2) and all(tok.is_entity[d.ravel()])
    assert [tok.vocab[i] for i in d[0]] == ["French", "France"]
    assert ds.max_template_length == 7 and ds.seq_len == 9
    with pytest.raises(ValueError, match="task = 'nope'"):
        ds.template_ids("nope")


def small_dataset(seed=0, split_unit="sentence"):
    rng = np.random.default_rng(1)
    tasks = []
    for k in range(4):
        pairs = {f"s{k}_{i}": f"o{int(rng.integers(6))}" for i in range(20)}
        tasks.append(KnowledgeTask(f"r{k}", [f"⋆1 rel{k} ⋆2.", f"The rel{k} of ⋆1 is ⋆2.",
                                             f"⋆1 has rel{k} ⋆2 !"], pairs))
    return KnowledgeDataset(tasks, seed=seed, split_unit=split_unit)


def test_encode_split_shapes_and_positions():
    ds = small_dataset()
    tr, te = ds.encode_split("train"), ds.encode_split("test")
    M, n = tr.tokens.shape
    assert M + len(te) == ds.n_sentences == 4 * 3 * 20 and n == ds.seq_len
    for e in (tr, te):
        assert e.prefix_node.shape == e.tokens.shape
        rows = torch.arange(len(e))
        assert ds.tokenizer.is_entity[e.tokens[rows, e.object_pos].numpy()].all()
        assert ds.tokenizer.is_entity[e.tokens[rows, e.subject_pos].numpy()].all()
        assert (e.subject_pos < e.object_pos).all()
        assert (e.tokens[rows, e.lengths - 1] == ds.tokenizer.eos_id).all()
        # a loss is taken exactly at the positions inside the sentence
        assert (e.loss_mask.sum(1) == e.lengths - 1).all()
        assert (e.targets_masked()[~e.loss_mask] == -100).all()
        # the object is the ground truth at its position
        d = ds.dictionary_ids
        obj = torch.tensor([d(int(k))[int(p), 1] for k, p in zip(e.task, e.pair)])
        assert torch.equal(obj, e.tokens[rows, e.object_pos])
    # 80/20 per task, disjoint, deterministic; another seed, another split
    for k in range(4):
        assert int((te.task == k).sum()) == 12
    assert not set(tr.index.tolist()) & set(te.index.tolist())
    assert torch.equal(small_dataset().encode_split("test").index, te.index)
    assert not torch.equal(small_dataset(seed=1).encode_split("test").index, te.index)
    with pytest.raises(ValueError, match="accepted"):
        ds.encode_split("val")


def test_fact_split_holds_out_whole_facts():
    ds = small_dataset(split_unit="fact")
    assert ds.split_stats()["test_fact_seen_in_train"] == 0.0
    assert ds.split_stats()["n_test"] == 4 * 4 * 3
    assert small_dataset().split_stats()["test_fact_seen_in_train"] > 0.9


def test_valid_next_mask_and_mass():
    ds = small_dataset()
    e = ds.encode_split("test")
    mask = ds.valid_next_mask(e.prefix_node)
    assert mask.shape == (*e.tokens.shape, ds.vocab_size)
    assert not mask[e.prefix_node < 0].any()
    for r in range(0, len(e), 17):
        for i in range(int(e.lengths[r]) - 1):
            node = int(e.prefix_node[r, i])
            assert set(torch.nonzero(mask[r, i]).squeeze(1).tolist()) == \
                set(ds.trie.valid_next(node).tolist())
            assert mask[r, i, e.tokens[r, i + 1]]
    # a model whose logits are all equal (zero unembedding) puts |V(w)|/V on V(w), also when
    # the masks are built batch by batch from the prefix nodes
    model = MoETransformer(MoEConfig(vocab_size=ds.vocab_size, max_len=ds.seq_len, d_model=8,
                                     n_heads=2, n_experts=2, d_expert=8)).double()
    with torch.no_grad():
        model.unembed.weight.zero_()
    whole = valid_next_mass(model, e.tokens, mask)
    lazy = valid_next_mass(model, e.tokens, lambda rows: ds.valid_next_mask(e.prefix_node[rows]),
                           batch_size=7)
    want = mask.sum(-1).double() / ds.vocab_size
    assert torch.allclose(whole.mass, want, rtol=1e-12) and torch.equal(whole.mass, lazy.mass)


def test_dataset_errors():
    located, spoken = running_example()
    with pytest.raises(ValueError, match="unique"):
        KnowledgeDataset([located, located])
    with pytest.raises(ValueError, match=r"test_fraction = 1.0 .* < 1"):
        KnowledgeDataset([located], test_fraction=1.0)
    with pytest.raises(ValueError, match="split_unit"):
        KnowledgeDataset([located], split_unit="pair")


# ---- property tests ---------------------------------------------------------------------

WORDS = ["is", "in", "the", "of", "a", "capital", "spoken", "King", "isn't", "so-called", "3"]
PUNCT = [".", ",", "(", ")", "'s", "-", ":"]
NAMES = st.text(alphabet="abcXYZ é'-.,()", min_size=1, max_size=6).map(str.strip).filter(bool) | \
    st.sampled_from(WORDS + ["New York", "is", "'s", "(", "Georgia"])


@st.composite
def template_text(draw):
    filler = st.lists(st.sampled_from(WORDS + PUNCT), max_size=3)
    a, b, c = draw(filler), draw(filler), draw(filler)
    return " ".join([*a, "⋆1", *b, "⋆2", *c])


@st.composite
def task_sets(draw):
    n_tasks = draw(st.integers(1, 3))
    shared = draw(st.lists(NAMES, min_size=1, max_size=3))
    tasks = []
    for k in range(n_tasks):
        tpls = draw(st.lists(template_text(), min_size=1, max_size=3,
                             unique_by=lambda t: Template.parse(t)))
        keys = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
        keys = list(dict.fromkeys(keys + shared))  # subjects colliding across tasks
        vals = draw(st.lists(NAMES | st.sampled_from(shared), min_size=len(keys),
                             max_size=len(keys)))
        tasks.append(KnowledgeTask(f"t{k}", tpls, dict(zip(keys, vals))))
    return tasks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_sets(), st.integers(0, 3))
def test_property_roundtrip_valid_next_and_bound(tasks, seed):
    ds = KnowledgeDataset(tasks, seed=seed)
    tok = ds.tokenizer
    seqs = [tuple(row[:n]) for row, n in zip(ds.seqs.tolist(), ds.lengths.tolist())]
    # every sentence tokenises and round-trips, text -> ids -> text and ids -> text -> ids
    for t in range(ds.n_sentences):
        text = tok.decode(seqs[t])
        assert tok.encode(text, add_special=True) == list(seqs[t])
        assert tok.decode(tok.encode(text)) == text
    # the sentences are exactly D(k): τ[a, b] for every template and pair
    for k, task in enumerate(tasks):
        want = {(tok.bos_id, *tok.encode_tokens(tp.fill(a, b), (tp.subject_pos, tp.object_pos)),
                 tok.eos_id) for tp in task.templates for a, b in task.dictionary.items()}
        assert want == {s for s, kk in zip(seqs, ds.task) if kk == k}
    # V(w) = brute force {next tokens of all sentences sharing the prefix}; contains the truth
    for s in seqs:
        for i in range(len(s) - 1):
            w = s[:i + 1]
            brute = {t[i + 1] for t in seqs if len(t) > i + 1 and t[:i + 1] == w}
            tasks_brute = {int(kk) for t, kk in zip(seqs, ds.task) if t[:i + 1] == w}
            node = ds.trie.find(w)
            assert set(ds.trie.valid_next(node).tolist()) == brute and s[i + 1] in brute
            assert set(ds.trie.tasks(node).tolist()) == tasks_brute
    # node_of agrees with find for every (sentence, position)
    for r in range(0, ds.n_sentences, 7):
        for i in range(int(ds.lengths[r]) - 1):
            assert ds.prefix_node[r, i] == ds.trie.find(seqs[r][:i + 1])
    # complexity bound with the dataset's L and N
    L, N = ds.max_template_length, ds.max_dictionary_size
    for row in ds.task_table():
        assert row["complexity"] <= row["bound_own"] <= row["bound_uniform"]
        assert row["bound_uniform"] == L * row["n_templates"] + N


def test_identification_depth():
    located, spoken = running_example()
    ds = KnowledgeDataset([located, spoken])
    # "⋆1 is in" vs "⋆1 is spoken": the third token decides
    assert ds.identification_depth().tolist() == [3, 3]
    same = KnowledgeTask("same", ["⋆1 is in ⋆2."], {"x": "y"})
    ds2 = KnowledgeDataset([located, spoken, same])
    assert ds2.identification_depth().tolist() == [-1, 3, -1]
    assert ds2.prefix_stats()["n_templates_shared_between_tasks"] == 1
    assert KnowledgeDataset([located]).identification_depth().tolist() == [0]


def test_object_slot_determination(tmp_path):
    a = KnowledgeTask("a", ["⋆1 is ⋆2."], {"x": "y"})
    b = KnowledgeTask("b", ["⋆1 is a kind of ⋆2."], {"z": "w"})
    # after "x is" a perfect model cannot know whether the object or "a" comes next
    assert KnowledgeDataset([a, b]).prefix_stats()["n_templates_object_undetermined"] == 1
    c = KnowledgeTask("c", ["The kind of ⋆1 is ⋆2."], {"z": "w"})
    assert KnowledgeDataset([a, c]).prefix_stats()["n_templates_object_undetermined"] == 0
    from moe_routing.knowledge.sources.templates_file import template_file

    five = lambda w: "\n".join(f'      - "{w} {i} ⋆1 is ⋆2."' for i in range(5))  # noqa: E731
    bad = tmp_path / "t.yaml"
    bad.write_text("relations:\n  P1:\n    label: a\n    templates:\n" + five("A") +
                   "\n  P2:\n    label: b\n    templates:\n" + five("A").replace("is ⋆2", "is the ⋆2")
                   + "\n")
    with pytest.raises(ValueError, match="object slot of 'A 0 ⋆1 is ⋆2.' \\(P1\\) is not determined"):
        template_file(str(bad))
    bad.write_text("relations:\n  P1:\n    label: a\n    templates:\n" + five("A") + "\n")
    assert list(template_file(str(bad))) == ["P1"]
