"""Refusals of the construction are proofs (moe_routing.construction.refusals).

A dataset is refused only when a hypothesis provably fails: the refusal names the hypothesis,
the task(s) and a witness prefix, and an LP certificate whose combination of structural codes
is checked here independently.  A separable dataset whose iterative fit is starved is *not*
refused (the LP supplies the separator), and an LP that cannot decide is not a refusal either.
"""

import numpy as np
import pytest
from test_construction_core import running_example

from moe_routing.construction import (
    FitSettings,
    HypothesisFails,
    HypothesisUndecided,
    build_dense,
    build_moe,
    structural_nodes,
)
from moe_routing.construction.codes import structural_code
from moe_routing.construction.separators import (
    DETECTOR_FIT,
    NotSeparable,
    fit_gate,
    fit_multiclass,
    fit_point_detectors,
)
from moe_routing.construction.structure import token_types
from moe_routing.construction.verify import verify
from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask

pytestmark = pytest.mark.kernels

D = {"Paris": "France", "Rome": "Italy"}

# hypothesis -> (tasks, names of the tasks the refusal must name, a witness prefix it must name)
REFUSED = {
    # '⋆1 is' is an object slot of 'a' and shared with 'b'
    "H-obj": ([KnowledgeTask("a", ["⋆1 is ⋆2."], {"x": "y"}),
               KnowledgeTask("b", ["⋆1 is the home of ⋆2."], {"x": "z"})], {"a", "b"}, "⋆1 is"),
    # h1('red green blue') = 2/3 h1('red red blue') + 1/3 h1('green green blue') (ρ = 1/2)
    "H-code": ([KnowledgeTask("t0", ["red red blue ⋆1 is ⋆2.", "green green blue ⋆1 is ⋆2.",
                                     "red green blue ⋆1 is ⋆2."], D)], {"t0"}, "red green blue"),
    # z('red red blue') + z('green green gray') = z('red red gray') + z('green green blue'):
    # an XOR of the labels A, B
    "H-route": ([KnowledgeTask("A", ["red red blue ⋆1 is ⋆2.", "green green gray ⋆1 is ⋆2."], D),
                 KnowledgeTask("B", ["red red gray ⋆1 was ⋆2.", "green green blue ⋆1 was ⋆2."],
                               {"Lyon": "France"})], {"A", "B"}, "red red blue"),
    # the same XOR between A's object slots ('⋆1 red blue', '⋆1 green gray') and A's other nodes
    "H-gate": ([KnowledgeTask("A", ["⋆1 red blue ⋆2.", "⋆1 green gray ⋆2.",
                                    "⋆1 red gray near ⋆2.", "⋆1 green blue near ⋆2."], D)],
               {"A"}, "⋆1 red gray"),
}


def codes_of_nodes(ds, rho=0.5):
    """(U, 2·n_types + T) structural codes z = [TOK | POS | H1] of every node, recomputed."""
    nodes = structural_nodes(ds)
    _, n_types, _ = token_types(ds.tokenizer)
    return nodes, np.stack([structural_code(ty, n_types, ds.seq_len, rho) for ty in nodes.types])


@pytest.mark.parametrize("hypothesis", list(REFUSED))
def test_refusal_names_hypothesis_tasks_and_witness(hypothesis):
    tasks, names, witness = REFUSED[hypothesis]
    ds = KnowledgeDataset(tasks, seed=0)
    with pytest.raises(HypothesisFails) as info:
        build_moe(ds, 1e-3)
    err = info.value
    assert err.hypothesis == hypothesis and f"hypothesis ({hypothesis}) fails" in str(err)
    assert set(err.tasks) == names and f"task(s) {sorted(names)}" in str(err)
    assert witness in err.witnesses and f"'{witness}'" in str(err)
    assert err.certificate is not None


@pytest.mark.parametrize("hypothesis", ["H-code", "H-gate"])
def test_hull_certificate_is_a_common_point_of_the_two_hulls(hypothesis):
    """Σλ z (side A) = Σμ z (side B) with convex weights: no affine function is ≥ 1 on A and
    ≤ 0 on B, so the refusal is right."""
    ds = KnowledgeDataset(REFUSED[hypothesis][0], seed=0)
    with pytest.raises(HypothesisFails) as info:
        build_moe(ds, 1e-3)
    cert = info.value.certificate
    nodes, Z = codes_of_nodes(ds)
    assert cert.kind == "convex hulls" and cert.proves
    a, b = cert.tag == 0, cert.tag == 1
    assert a.any() and b.any() and (cert.weights > 0).all()
    assert np.isclose(cert.weights[a].sum(), 1.0) and np.isclose(cert.weights[b].sum(), 1.0)
    gap = cert.weights[a] @ Z[cert.rows[a]] - cert.weights[b] @ Z[cert.rows[b]]
    assert np.abs(gap).max() < 1e-9
    assert [nodes.text(int(u), ds.tokenizer) for u in cert.rows] == list(info.value.witnesses)


def test_farkas_certificate_of_a_non_separable_router():
    """Σ α_ic (e_{y_i} − e_c) ⊗ [z_i, 1] = 0 with α ≥ 0, Σα = 1: summing the margin constraints
    s_{i,y_i} − s_{i,c} ≥ 1 with these weights gives 0 ≥ 1 for *every* linear router."""
    ds = KnowledgeDataset(REFUSED["H-route"][0], seed=0)
    with pytest.raises(HypothesisFails) as info:
        build_moe(ds, 1e-3)
    cert = info.value.certificate
    nodes, Z = codes_of_nodes(ds)
    assert cert.kind == "farkas" and cert.proves
    assert (cert.weights > 0).all() and np.isclose(cert.weights.sum(), 1.0)
    X = np.hstack([Z, np.ones((len(Z), 1))])
    y = nodes.label[cert.rows]
    assert (y != cert.tag).all()
    C = nodes.n_tasks + 1
    delta = np.zeros((C, X.shape[1]))
    np.add.at(delta, y, cert.weights[:, None] * X[cert.rows])
    np.add.at(delta, cert.tag, -cert.weights[:, None] * X[cert.rows])
    assert np.abs(delta).max() < 1e-9
    rng = np.random.default_rng(0)           # any router: the weighted margins sum to 0 < 1
    W = rng.normal(size=(X.shape[1], C))
    S = X[cert.rows] @ W
    weighted = cert.weights @ (S[np.arange(len(y)), y] - S[np.arange(len(y)), cert.tag])
    assert abs(weighted) < 1e-9


def test_starved_router_fit_is_not_a_refusal():
    ds = running_example(extra=True)
    model, rep = build_moe(ds, 1e-4, router_fit=FitSettings(max_iter=1))
    fit = rep.router_fit
    assert fit.method == "LP" and fit.iterations == 1 and fit.fit_margin <= 0   # the fit failed
    assert any(n.startswith("router: L-BFGS stopped after 1 iterations") for n in rep.notes)
    v = verify(model, rep, ds)
    assert v.max_invalid < 1e-4 and v.routed_ok == 1.0 and v.junction_ok == 1.0


def test_starved_gate_fit_is_not_a_refusal():
    ds = running_example(extra=True)
    model, rep = build_dense(ds, 1e-4, gate_fit=FitSettings(max_iter=1))
    starved = [f for f in rep.gate_fits if f.method == "LP"]
    assert starved and all(f.iterations == 1 and f.fit_margin <= 0 for f in starved)
    assert verify(model, rep, ds).max_invalid < 1e-4


def test_starved_detector_fit_cuts_off_every_vertex():
    t = 2 * np.pi * np.arange(12) / 12                 # 12 vertices of a polygon in 3 dimensions
    H = np.stack([0.5 + 0.2 * np.cos(t), 0.5 + 0.2 * np.sin(t), np.full(12, 0.3)], 1)
    W, c, outcome = fit_point_detectors(H, FitSettings(max_iter=1, chunk=100, reg=1e-8))
    assert outcome.method == "LP" and outcome.fit_margin <= 0
    S = H @ W.T + c                                    # S[v, u] = σ_u(h_v)
    assert np.allclose(np.diag(S), 1.0)
    assert (S[~np.eye(12, dtype=bool)] <= 1e-9).all()
    assert fit_point_detectors(H, DETECTOR_FIT)[2].method == "L-BFGS"


def test_starved_separator_fits_on_separable_data():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(90, 6))
    y = (Z @ rng.normal(size=(6, 3))).argmax(1)
    _, _, m, outcome = fit_multiclass(Z, y, 3, FitSettings(max_iter=1))
    assert outcome.method == "LP" and outcome.fit_margin <= 0 and m.min() > 0
    pos = Z @ rng.normal(size=6) > 0.3
    gate = fit_gate(Z, pos, FitSettings(max_iter=1))
    s = Z @ gate.w + gate.c
    assert np.isclose(s[pos].min(), 1.0) and np.isclose(s[~pos].max(), 0.0)


def test_separator_fits_refuse_xor_with_a_certificate():
    Z = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(NotSeparable) as info:
        fit_multiclass(Z, np.array([0, 0, 1, 1]), 2)
    assert info.value.certificate.proves and sorted(set(info.value.certificate.rows)) == [0, 1, 2, 3]
    with pytest.raises(NotSeparable):
        fit_gate(Z, np.array([True, True, False, False]))


def test_undecided_lp_is_not_a_refusal():
    """With the fit starved and no time for the LP, nothing is proved: the build says so, with
    the iterations and the margin reached, and does not claim that (H-route) fails."""
    ds = running_example(extra=True)
    with pytest.raises(HypothesisUndecided) as info:
        build_moe(ds, 1e-4, router_fit=FitSettings(max_iter=1), lp_time_limit=1e-9)
    err = info.value
    assert not isinstance(err, ValueError) and err.hypothesis == "H-route"
    assert "fit did not converge" in str(err) and "ran 1 iterations" in str(err)
    assert err.fit.iterations == 1 and err.fit.fit_margin <= 0 and err.witnesses
