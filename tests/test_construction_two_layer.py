"""The two-layer construction for two-hop knowledge: builds, every prefix within ε, every fact
(held-out compositions included) answered, expert sizes additive in the single-hop tasks and
below the one-layer alternative's, refusals with witnesses, and a verification that fails."""

import dataclasses

import numpy as np
import pytest
import torch

from moe_routing.construction import (HypothesisFails, TwoLayerHypothesisFails,
                                      build_two_layer, compare_sizes, one_layer_alternative,
                                      verify_two_layer)
from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask
from moe_routing.knowledge.sources import embedded_tasks, relation_pool
from moe_routing.knowledge.two_hop import two_hop_task
from moe_routing.knowledge.two_hop_dataset import MixedKnowledgeDataset

pytestmark = pytest.mark.kernels

CAPITAL = ["The capital of the country where ⋆1 lies is ⋆2.",
           "From ⋆1, the national capital is ⋆2."]
CURRENCY = ["Shops in ⋆1 take the national currency, the ⋆2."]


def hop_tasks(n_pairs=40):
    """P17 (city → country) with n_pairs cities; P36 (capital) and P38 (currency) holding the
    facts of exactly the countries P17 reaches (the middle entities): many cities share a
    country."""
    ts = {t.name: t for t in embedded_tasks(relations=["P17", "P36", "P38"], n_pairs=n_pairs,
                                            n_templates=2, seed=0)}
    middles = sorted(set(ts["P17"].dictionary.values()))
    for r in ("P36", "P38"):
        pool = relation_pool(r)
        ts[r] = dataclasses.replace(ts[r], dictionary={m: pool[m] for m in middles if m in pool})
    return ts


def mixed(keep=None):
    """Both chains of P17; ``keep``: the first ``keep`` compositions of each two-hop task only."""
    ts = hop_tasks()
    two = [two_hop_task(ts["P17"], ts["P36"], CAPITAL), two_hop_task(ts["P17"], ts["P38"], CURRENCY)]
    if keep is not None:
        two = [dataclasses.replace(t, dictionary=dict(list(t.dictionary.items())[:keep]))
               for t in two]
    return MixedKnowledgeDataset([ts["P17"], ts["P36"], ts["P38"], *two], seed=0)


@pytest.fixture(scope="module")
def built():
    ds = mixed()
    model, rep = build_two_layer(ds, eps=1e-4)
    return ds, model, rep, verify_two_layer(model, rep, ds, eps_list=[1e-8])


def test_every_prefix_within_eps_and_routed_as_built(built):
    ds, model, rep, v = built
    assert model.config.n_layers == 2 and v.n_prefixes == ds.trie.n_nodes == len(v.invalid)
    # the construction's bound is ε/2 at every prefix, for the ε it was built for and another
    assert v.max_invalid <= rep.eps / 2, (v.max_invalid, v.argmin_prefix)
    assert v.max_invalid_by_eps[1e-8] <= 0.5e-8
    assert v.passed and not v.failing and v.min_valid == 1.0 - v.max_invalid
    assert v.routed_ok == (1.0, 1.0) and not v.misrouted
    # layer 2 leaves everything but the two-hop object slots to the no-op expert
    two_hop_slots = sum(len(ds.tasks[t].templates) for t in rep.second_hop)
    assert int((rep.route2 != rep.n_experts - 1).sum()) == two_hop_slots


def test_every_fact_and_every_held_out_composition_answered(built):
    ds, _, rep, v = built
    held = ds.held_out_compositions()
    assert len(held) > 0 and v.n_held_out == sum(len(h.test_sentences) for h in held)
    assert v.fact_accuracy == 1.0 and v.held_out_accuracy == 1.0, v.wrong_facts
    assert v.n_facts == ds.n_sentences
    # a middle entity shared by both chains (same country, hop 2 capital or currency) is answered
    # by each chain's own second hop
    by_middle = {}
    for t in rep.second_hop:
        for s in ds.tasks[t].dictionary:
            by_middle.setdefault(ds.tasks[t].middle(s), set()).add(t)
    assert any(len(ts) == 2 for ts in by_middle.values())


def test_expert_sizes_are_additive_in_the_single_hop_tasks(built):
    ds, _, rep, _ = built
    pairs = {ds.tasks[k].name: ds.tasks[k].n_pairs for k in rep.single}
    seconds = {ds.tasks[rep.single[e]].name for e in rep.second_hop.values()}
    for e, k in enumerate(rep.single):
        name = ds.tasks[k].name
        assert rep.layer1_sizes[e] == rep.syntactic[e] + pairs[name]
        assert rep.layer2_sizes[e] == (pairs[name] if name in seconds else 0)
    assert rep.layer2_sizes[-1] == 0                                # the no-op expert
    # the composed dictionaries are in no expert: shrinking them changes no size at all, while
    # the one-layer alternative's two-hop experts shrink with them
    small = mixed(keep=5)
    _, rep_small = build_two_layer(small)
    assert (rep_small.layer1_sizes, rep_small.layer2_sizes) == (rep.layer1_sizes,
                                                                 rep.layer2_sizes)
    _, one_full = one_layer_alternative(ds)
    _, one_small = one_layer_alternative(small)
    two = list(rep.second_hop)
    shrink = [one_full.expert_sizes[t] - one_small.expert_sizes[t] for t in two]
    assert shrink == [ds.tasks[t].n_pairs - 5 for t in two]


def test_one_layer_alternative_is_larger(built):
    ds, _, rep, _ = built
    _, one = one_layer_alternative(ds)
    c = compare_sizes(rep, one, ds)
    msg = f"two-layer vs one-layer neurons: {c}"
    # facts: Σ|Δ_k| + Σ_{second hops}|Δ_k₂| against Σ|Δ_k| + Σ_t |Δ₂ ∘ Δ₁|
    assert c["one_layer_facts"] - c["two_layer_facts"] == c["composed_facts"] - sum(
        rep.layer2_sizes), msg
    assert c["two_layer_facts"] < c["one_layer_facts"], msg
    assert c["two_layer_total"] < c["one_layer_total"], msg
    for t, row in c["per_two_hop"].items():
        assert row["one_layer_expert"] >= row["composed"], (t, msg)


def test_a_perturbed_layer2_weight_is_caught_at_the_prefixes_it_breaks(built):
    ds, model, rep, _ = built
    e = next(iter(rep.second_hop.values()))                         # a second hop's expert
    k = rep.single[e]
    m_id, o_id = (int(x) for x in ds.dictionary_ids(k)[0])            # its first fact (m, o)
    other = int(ds.dictionary_ids(k)[1][1])
    bad = type(model)(model.config)
    bad.load_state_dict(model.state_dict())
    with torch.no_grad():                   # neuron 0 of layer-2 expert e now raises another value
        w2 = bad.extra_layers[0].experts.w2
        ov = rep.layout.block("OUT_VAL")
        w2[e, 0, ov] = torch.as_tensor(rep.gamma * rep.codes[other - ds.tokenizer.entity_ids[0]],
                                       dtype=torch.float32)
    v = verify_two_layer(bad, rep, ds)
    assert not v.passed
    tok = ds.tokenizer
    m = tok.vocab[m_id]
    # exactly the object slots of the two-hop sentences whose middle entity is m, second hop k
    expect = set()
    for i in range(ds.n_sentences):
        t = int(ds.task[i])
        if rep.second_hop.get(t) == e:
            s = tok.vocab[int(ds.seqs[i, ds.subject_pos[i]])]
            if ds.tasks[t].middle(s) == m:
                expect.add(tok.decode(ds.seqs[i, :ds.object_pos[i]]))
    assert expect and {p for p, _ in v.failing} == expect, (v.failing, expect)
    assert all(inv > 0.5 for _, inv in v.failing) and len(v.wrong_facts) > 0
    assert o_id != other


def test_a_missing_middle_entity_fact_is_refused_with_a_witness():
    ts = hop_tasks()
    t1 = two_hop_task(ts["P17"], ts["P36"], CAPITAL)
    city = next(iter(t1.dictionary))
    country = ts["P17"].dictionary[city]
    trimmed = dataclasses.replace(ts["P36"], dictionary={m: o for m, o in
                                                         ts["P36"].dictionary.items()
                                                         if m != country})
    ds = KnowledgeDataset([ts["P17"], trimmed, t1], seed=0)   # the hop lacks (country, capital)
    with pytest.raises(HypothesisFails) as err:
        build_two_layer(ds)
    e = err.value
    assert isinstance(e, TwoLayerHypothesisFails) and e.hypothesis == "H-hop"
    assert e.tasks == (t1.name, "P17", "P36")
    assert e.witnesses == (f'The capital of the country where "{city}" lies is',)
    assert f"P36 has no fact for the middle entity {country!r}" in str(e)
    # a two-hop task without its second hop among the tasks: refused too
    with pytest.raises(TwoLayerHypothesisFails, match="not among the dataset's single-hop"):
        build_two_layer(KnowledgeDataset([ts["P17"], t1], seed=0))


def test_a_shared_object_slot_is_refused_with_a_witness():
    ts = hop_tasks()
    t1 = two_hop_task(ts["P17"], ts["P36"], CAPITAL)
    # a single-hop template of P36 whose prefix before ⋆2 is a two-hop template's (H-obj)
    clash = KnowledgeTask("P36", ["From ⋆1, the national capital is ⋆2."],
                          ts["P36"].dictionary)
    ds = KnowledgeDataset([ts["P17"], clash, t1], seed=0)
    with pytest.raises(HypothesisFails) as err:
        build_two_layer(ds)
    assert err.value.hypothesis == "H-obj"
    assert err.value.witnesses == ("From ⋆1 , the national capital is",)


def test_bad_arguments_are_refused_by_name(built):
    ds, model, rep, _ = built
    with pytest.raises(ValueError, match="eps"):
        build_two_layer(ds, eps=0.0)
    with pytest.raises(ValueError, match="dataset"):
        build_two_layer([])
    with pytest.raises(ValueError, match="report"):
        verify_two_layer(model, object(), ds)
    assert np.isfinite(rep.beta) and rep.gamma > 1.0
