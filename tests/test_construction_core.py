"""The hand-built transformers of Theorems 4.1/4.2 (moe_routing.construction): codes, hypotheses,
the ε guarantee, routing, disentanglement, isolation and sizes, on small datasets."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from moe_routing.construction import (build_dense, build_moe, check_hypotheses, coherence,
                                      polynomial_code, structural_nodes)
from moe_routing.construction.separators import fit_point_detectors
from moe_routing.construction.sizes import expert_table, parameter_counts
from moe_routing.construction.verify import isolation, verify
from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask, build_dataset

pytestmark = pytest.mark.kernels


def running_example(extra=False):
    """The paper's running example: two relations sharing the prefix '⋆1 is'."""
    tasks = [KnowledgeTask("located", ["⋆1 is in ⋆2.", "The city ⋆1 lies in ⋆2."],
                           {"Paris": "France", "Rome": "Italy", "Lyon": "France"}),
             KnowledgeTask("spoken", ["⋆1 is spoken widely in ⋆2.", "The language ⋆1 is heard in ⋆2."],
                           {"French": "France", "Italian": "Italy", "Basque": "Spain",
                            "Paris": "Texas"})]
    if extra:
        tasks.append(KnowledgeTask("capital", ["The capital of ⋆1 is ⋆2."],
                                   {"France": "Paris", "Italy": "Rome"}))
    return KnowledgeDataset(tasks, seed=0)


def test_polynomial_code_coherence_bound_holds():
    for n, mu_max in [(10, 0.3), (500, 0.3), (3000, 0.2)]:
        C, mu = polynomial_code(n, mu_max)
        assert C.shape[0] == n and mu <= mu_max
        assert np.allclose(np.linalg.norm(C, axis=1), 1.0)
        assert coherence(C) <= mu + 1e-12
        assert len({tuple(r) for r in np.round(C, 9)}) == n       # all codewords distinct


def simplex_code(n):
    """The regular simplex: n unit vectors in R^(n-1) with pairwise inner products -1/(n-1)
    (the construction of the chapter's output-code table)."""
    Q = np.linalg.qr(np.eye(n)[:, :-1] - 1.0 / n)[0]
    return math.sqrt(n / (n - 1)) * Q


def sum_readout_margins(C, sets):
    """Smallest valid minus largest invalid logit of the sum read-out, per valid set."""
    G = C @ C.T
    return np.array([G[t].sum(0)[t].min() - np.delete(G[t].sum(0), t).max() for t in sets])


@pytest.mark.parametrize("n", [3, 4, 6, 9])
def test_simplex_code_saves_a_dimension_and_gains_margin_on_every_set(n):
    """A code one dimension shorter than one-hot can have *more* margin: the simplex gives
    margin 1 + 1/(n-1) on every nonempty proper subset, whatever its size."""
    import itertools
    C = simplex_code(n)
    assert C.shape == (n, n - 1)
    assert np.allclose(np.linalg.norm(C, axis=1), 1.0)
    assert np.linalg.matrix_rank(C) == n - 1
    assert np.allclose(C @ C.T - np.eye(n), -(1 - np.eye(n)) / (n - 1))
    sets = [np.array(t) for k in range(1, n) for t in itertools.combinations(range(n), k)]
    assert np.allclose(sum_readout_margins(C, sets), 1 + 1 / (n - 1))
    assert np.allclose(sum_readout_margins(np.eye(n), sets), 1.0)


def test_below_n_minus_1_dimensions_some_single_word_set_has_margin_at_most_one():
    """n >= d + 2 unit vectors in R^d always contain a pair with a non-negative inner
    product (at most d + 1 are pairwise obtuse), so some singleton set has margin <= 1."""
    rng = np.random.default_rng(0)
    for d in (2, 3, 5):
        n = d + 2
        singletons = [np.array([i]) for i in range(n)]
        for _ in range(200):
            C = rng.standard_normal((n, d))
            C /= np.linalg.norm(C, axis=1, keepdims=True)
            assert sum_readout_margins(C, singletons).min() <= 1.0 + 1e-12
        # the simplex of R^d (d + 1 words) still beats one-hot on singletons
        assert sum_readout_margins(simplex_code(d + 1), singletons[:d + 1]).min() > 1.0


def test_router_inputs_of_a_generic_attention_layer_need_the_positions_twice():
    """With input tok_emb + pos_emb and values linear in it, the router input x_t + head
    output spans at most 2·(types + positions) dimensions, and a generic layer exceeds
    2·types + positions: the positions enter through x_t and through the head."""
    rng = np.random.default_rng(0)
    n_types, n_pos, d = 3, 6, 64
    E, P = rng.standard_normal((n_types, d)), rng.standard_normal((n_pos, d))
    WQ, WK, WV = (rng.standard_normal((d, d)) / 8 for _ in range(3))
    causal = np.tri(n_pos, dtype=bool)
    Z = []
    for _ in range(300):
        X = E[rng.integers(0, n_types, n_pos)] + P                      # (T, d)
        S = np.where(causal, (X @ WQ) @ (X @ WK).T, -np.inf)
        A = np.exp(S - S.max(1, keepdims=True))
        Z.append(X + (A / A.sum(1, keepdims=True)) @ X @ WV)
    sv = np.linalg.svd(np.concatenate(Z), compute_uv=False)
    rank = int((sv > 1e-8 * sv[0]).sum())
    assert 2 * n_types + n_pos < rank <= 2 * (n_types + n_pos)


@pytest.mark.parametrize("make", [running_example,
                                  lambda: running_example(extra=True),
                                  lambda: build_dataset(n_relations=3, seed=0)])
def test_chapter_router_dimension_formula_is_the_built_models(make):
    """The router input dimension the construction chapter computes (its ``dim_router =``
    line) is the width of the router block of the built model, and the general bound
    2·(types + positions) of the same chapter is at least that."""
    text = (Path(__file__).resolve().parents[1] / "notebooks" / "construction.md").read_text(
        encoding="utf-8")
    ours = re.search(r"^dim_router = ([^#\n]+)", text, re.M).group(1)
    general = re.search(r"^dim_router_any = ([^#\n]+)", text, re.M).group(1)
    ds = make()
    model, rep = build_moe(ds, 1e-3)
    names = {"n_types": structural_nodes(ds).n_types, "ds": ds}
    lo, hi = rep.layout.router_block
    assert eval(ours, {}, names) == hi - lo == int(model.router.input_mask.sum())
    assert eval(general, {}, names) >= hi - lo
    assert (model.router.weight[:, :lo] == 0).all() and (model.router.weight[:, hi:] == 0).all()


def test_structural_nodes_of_running_example():
    ds = running_example()
    nodes = structural_nodes(ds)
    tok = ds.tokenizer
    texts = {nodes.text(u, tok): u for u in range(nodes.n_nodes)}
    shared = texts["⋆1 is"]
    assert nodes.tasks[shared] == (0, 1) and nodes.junction[shared]
    assert nodes.label[texts["⋆1 is in"]] == 0                   # object slot of 'located'
    assert nodes.label[texts["⋆1 is spoken"]] == 1
    assert nodes.label[texts["(empty prefix)"]] == 2               # every task starts there


def test_violation_of_object_slot_hypothesis_is_named():
    ds = KnowledgeDataset([KnowledgeTask("a", ["⋆1 is ⋆2."], {"x": "y"}),
                           KnowledgeTask("b", ["⋆1 is the home of ⋆2."], {"x": "z"})])
    with pytest.raises(ValueError, match=r"(?s)H-obj.*'⋆1 is' shared by tasks \['a', 'b'\]"):
        check_hypotheses(ds)
    with pytest.raises(ValueError, match="H-obj"):
        build_moe(ds, 1e-3)


@pytest.mark.parametrize("kw, msg", [(dict(eps=0.0), "eps"), (dict(eps=1.5), "eps"),
                                     (dict(eps=1e-3, rho=1.0), "rho"),
                                     (dict(eps=1e-3, eta=0.5), "eta")])
def test_bad_parameters_raise_before_work(kw, msg):
    with pytest.raises(ValueError, match=msg):
        build_moe(running_example(), **kw)


def test_point_detectors_cut_off_dependent_vertices():
    # AB + CD = AD + CB: linearly dependent, yet every point is a vertex
    e = np.eye(4)
    H = np.stack([e[0] + e[1], e[2] + e[3], e[0] + e[3], e[2] + e[1]]) / 2
    W, c, _ = fit_point_detectors(H)
    S = H @ W.T + c                                               # S[v, u] = σ_u(h_v)
    assert np.allclose(np.diag(S), 1.0)
    assert (S[~np.eye(4, dtype=bool)] <= 1e-9).all()
    with pytest.raises(ValueError, match="cannot be cut off"):
        fit_point_detectors(np.stack([e[0], e[1], (e[0] + e[1]) / 2]))


@pytest.mark.parametrize("eps", [1e-2, 1e-8])
def test_running_example_guarantee_routing_disentanglement(eps):
    ds = running_example(extra=True)
    model, rep = build_moe(ds, eps)
    v = verify(model, rep, ds)
    assert v.n_prefixes == ds.trie.n_nodes
    assert v.max_invalid < eps
    assert v.routed_ok == 1.0 and v.junction_ok == 1.0
    assert v.head1_dev == 0.0
    assert v.head2_dev_before_object < 1e-6 and v.head2_dev < 2 * rep.eta
    # the same verdicts through the model's own logits at every position
    sp = ds.encode_split("all")
    with torch.no_grad():
        logits = model(sp.inputs).logits
    valid = ds.valid_next_mask(sp.prefix_node[:, :-1])
    lz = torch.logsumexp(logits, -1)
    li = torch.logsumexp(logits.masked_fill(valid, -math.inf), -1)
    inv = (li - lz).exp()[sp.loss_mask]
    assert float(inv.max()) < eps
    assert math.isclose(float(inv.max()), v.max_invalid, rel_tol=1e-3)


def test_beta_formula_and_sizes():
    ds = running_example(extra=True)
    model, rep = build_moe(ds, 1e-4)
    V = ds.vocab_size
    assert math.isclose(rep.beta * (rep.v_min - rep.i_max), math.log((V - 1) / 1e-4) + math.log(2))
    for row in expert_table(rep, ds):
        assert row["neurons"] <= row["bound"]
        assert row["semantic"] == row["n_pairs"]
    assert rep.expert_sizes[:ds.n_tasks] == [r["neurons"] for r in expert_table(rep, ds)]
    pc = parameter_counts(model)
    assert pc["active_max"] < pc["total"]


def test_isolation_knockout_is_chance_and_leaves_others():
    ds = running_example(extra=True)
    model, rep = build_moe(ds, 1e-4)
    res = isolation(model, rep, ds, range(ds.n_tasks), split="all")
    for r in res:
        assert r["acc_before"] == 1.0
        assert math.isclose(r["p_object_after"], 1.0 / ds.vocab_size, rel_tol=1e-9)
        assert r["logit_spread_after"] == 0.0
        assert r["other_acc_change"] == 0.0 and r["other_p_change"] == 0.0


@pytest.mark.parametrize("leak", [False, True])
def test_isolation_rows_method_equals_the_full_reevaluation(leak):
    """The default isolation re-evaluates only the slots routed to the knocked-out expert; the
    reference re-evaluates every slot.  They agree on every number, also when the router is
    broken so that other tasks' slots go to the knocked-out expert (then the knock-out leaks
    into other tasks, and both methods must show it)."""
    ds = running_example(extra=True)
    model, rep = build_moe(ds, 1e-4)
    if leak:
        with torch.no_grad():
            model.layers()[0].router.bias[0] += 1e6        # expert 0 takes every token
    fast = isolation(model, rep, ds, range(ds.n_tasks), split="all")
    full = isolation(model, rep, ds, range(ds.n_tasks), split="all", method="full")
    assert fast == full
    if leak:
        assert max(r["other_p_change"] for r in full) > 1e-3
    with pytest.raises(ValueError, match="method"):
        isolation(model, rep, ds, [0], method="every")


def test_dense_variant_guarantee():
    ds = running_example(extra=True)
    model, rep = build_dense(ds, 1e-4)
    assert model.config.n_experts == 1
    v = verify(model, rep, ds)
    assert v.max_invalid < 1e-4
    assert sum(rep.syntactic_neurons) + sum(rep.semantic_neurons) + rep.junction_neurons \
        == rep.expert_sizes[0]


def _same_up_to_rounding(a, b, rep):
    """The certified and the full evaluation are the same function; in float32 they differ by
    rounding only: a detector's pre-activation sums terms of size up to its gate constant G,
    so a matrix product over a subset of the columns may round ~1e-4 differently, and logits
    are β times the output.  Compared on log P(invalid): |Δ| ≤ 1e-3·β."""
    la, lb = np.log(np.maximum(a.invalid, 1e-300)), np.log(np.maximum(b.invalid, 1e-300))
    assert np.abs(la - lb).max() <= 1e-3 * rep.beta


def test_dense_certificate_is_sound_and_exact():
    """The certified evaluation of the dense layer equals the full one at every prefix, and
    every neuron it skips really has a negative pre-activation there."""
    from moe_routing.construction.fastpath import RestrictedForward
    from moe_routing.construction.verify import dense_certificate, struct_of_trie

    ds = running_example(extra=True)
    model, rep = build_dense(ds, 1e-4)
    a = verify(model, rep, ds, batch_size=1)          # one sentence per batch: few candidates
    b = verify(model, rep, ds, certify=False)
    assert a.certificate is not None and b.certificate is None
    _same_up_to_rounding(a, b, rep)
    st_ = a.certificate
    assert st_.foreign_candidates == 0 and st_.max_syntactic_deviation == 0.0
    assert st_.evaluated_fraction < 0.5
    # soundness, checked directly: all pre-activations at every prefix
    fast = RestrictedForward(model)
    s_of_t = struct_of_trie(ds, rep.nodes)
    pn = ds.prefix_node
    cert = dense_certificate(fast, rep, ds)
    x = torch.as_tensor(ds.seqs[:, :-1])
    sel = torch.as_tensor(pn[:, :-1] >= 0)
    res = fast.residual(x, select=sel)
    pre = res["flat"][:, cert.ins] @ cert.w1 + cert.b1                # (prefixes, U)
    struct = torch.as_tensor(s_of_t[pn[:, :-1][pn[:, :-1] >= 0]])
    skipped = ~cert.cand[struct]
    assert skipped.float().mean() > 0.5                               # the certificate is useful
    assert float(pre[skipped].max()) < 0.0                            # … and sound


def test_dense_certificate_rejects_moe():
    from moe_routing.construction.certify import SilenceCertificate
    from moe_routing.construction.fastpath import RestrictedForward

    model, rep = build_moe(running_example(), 1e-4)
    with pytest.raises(ValueError, match="dense construction"):
        SilenceCertificate(RestrictedForward(model), rep, torch.zeros(1, 1), rep.nodes.label)


# ---- random small datasets -------------------------------------------------------------

WORDS = ["is", "the", "of", "in", "a", "capital", "river", "code", "home", "lies", "near"]


@st.composite
def small_datasets(draw):
    n_tasks = draw(st.integers(1, 3))
    ents = [f"E{i}" for i in range(12)]
    tasks = []
    for k in range(n_tasks):
        n_tpl = draw(st.integers(1, 3))
        tpls = set()
        for _ in range(n_tpl):
            a = draw(st.lists(st.sampled_from(WORDS), max_size=2))
            b = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
            c = draw(st.lists(st.sampled_from(WORDS + ["."]), max_size=2))
            tpls.add(" ".join(a + ["⋆1"] + b + ["⋆2"] + c))
        keys = draw(st.lists(st.sampled_from(ents), min_size=1, max_size=5, unique=True))
        vals = draw(st.lists(st.sampled_from(ents), min_size=len(keys), max_size=len(keys)))
        tasks.append(KnowledgeTask(f"t{k}", sorted(tpls), dict(zip(keys, vals))))
    return KnowledgeDataset(tasks, seed=0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(ds=small_datasets(), eps=st.sampled_from([1e-2, 1e-4, 1e-8]))
def test_random_datasets_guarantee_or_named_violation(ds, eps):
    nodes = structural_nodes(ds)
    shared_obj = [u for u in range(nodes.n_nodes)
                  if len(nodes.tasks[u]) > 1 and nodes.object_slot_tasks(u)]
    if shared_obj:
        with pytest.raises(ValueError, match="H-obj"):
            build_moe(ds, eps)
        return
    try:
        model, rep = build_moe(ds, eps)
    except ValueError as err:       # outside (H-code)/(H-route): the error names the prefixes
        assert "H-route" in str(err) or "H-code" in str(err)
        assert "⋆" in str(err)
        return
    v = verify(model, rep, ds)
    assert v.max_invalid < eps
    assert v.routed_ok == 1.0
    if nodes.junction.any():
        assert v.junction_ok == 1.0
    # the dense layer (Theorem 4.1) on the same dataset, through its certificate
    dm, drep = build_dense(ds, eps)
    dv = verify(dm, drep, ds, batch_size=1)
    assert dv.max_invalid < eps
    assert dv.certificate.foreign_candidates == 0
    full = verify(dm, drep, ds, certify=False)
    _same_up_to_rounding(dv, full, drep)


def test_restricted_forward_equals_model_forward():
    from moe_routing.construction.fastpath import RestrictedForward

    ds = running_example(extra=True)
    for build in (build_moe, build_dense):
        model, rep = build(ds, 1e-4)
        x = torch.as_tensor(ds.seqs[:, :-1])
        with torch.no_grad():
            ref = model(x, return_internals=True)
        fast = RestrictedForward(model)
        out = fast(x)
        lg = fast.logits(out["out"].reshape(-1, out["out"].shape[-1])).view(ref.logits.shape)
        assert torch.allclose(lg, ref.logits, atol=1e-4 * float(ref.logits.abs().max()))
        # integer result of two paths: exact because the construction's router margins are
        # orders of magnitude above rounding (a near-tie would make it kernel-dependent)
        assert torch.equal(out["expert"], ref.expert_index[..., 0])
        with model.knocked_out([0]), torch.no_grad():
            ref0 = model(x).logits
            out0 = fast(x)["out"]
        lg0 = fast.logits(out0.reshape(-1, out0.shape[-1])).view(ref0.shape)
        assert torch.allclose(lg0, ref0, atol=1e-4 * float(ref0.abs().max()) + 1e-6)


def test_coherence_of_the_regular_simplex_is_negative_and_a_single_word_is_refused():
    # the regular simplex of n words (centred one-hot vectors, normalised): ⟨c_i, c_j⟩ = -1/(n-1)
    n = 7
    c = np.eye(n) - 1.0 / n
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    assert coherence(c) == pytest.approx(-1.0 / (n - 1))
    assert coherence(c, block=3) == pytest.approx(-1.0 / (n - 1))      # across blocks too
    with pytest.raises(ValueError, match="at least 2 codewords, got 1"):
        coherence(c[:1])
