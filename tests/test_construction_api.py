"""The construction's public surface: parameters checked by the library's one validation idiom
(before any work, NumPy scalars accepted), and no private name used across modules -- not by
the tests, not in the construction chapter."""

import ast
import importlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_construction_core import running_example

from moe_routing.construction import FitSettings, build_dense, build_moe
from moe_routing.construction.build import beta_for
from moe_routing.construction.circuits import JunctionNeuron, SemanticNeuron, SyntacticNeuron
from moe_routing.construction.separators import fit_gate, fit_multiclass
from moe_routing.construction.verify import verify

pytestmark = pytest.mark.kernels

ROOT = Path(__file__).resolve().parents[1]


def standard_error(name):
    """The message of ``moe_routing._internal.validation.fail`` for argument ``name``."""
    return rf"^{re.escape(name)} = .* is not allowed; accepted: "


@pytest.mark.parametrize("kw, name", [
    (dict(max_iter=0), "FitSettings.max_iter"), (dict(max_iter=True), "FitSettings.max_iter"),
    (dict(max_iter=10.5), "FitSettings.max_iter"), (dict(chunk=0), "FitSettings.chunk"),
    (dict(reg=-1e-3), "FitSettings.reg"), (dict(reg=float("inf")), "FitSettings.reg"),
    (dict(tol=0.0), "FitSettings.tol"), (dict(tol=float("nan")), "FitSettings.tol")])
def test_bad_fit_settings_get_the_standard_error(kw, name):
    with pytest.raises(ValueError, match=standard_error(name)):
        FitSettings(**kw)


@pytest.mark.parametrize("kw, name", [
    (dict(eps=0.0), "eps"), (dict(eps=1.5), "eps"), (dict(eps=np.float32("nan")), "eps"),
    (dict(eps=True), "eps"), (dict(rho=1.0), "rho"), (dict(eta=0.5), "eta"),
    (dict(max_coherence=0.5), "max_coherence"), (dict(router_margin=0), "router_margin"),
    (dict(lp_time_limit=0), "lp_time_limit"), (dict(lp_time_limit=float("inf")), "lp_time_limit"),
    (dict(router_fit=600), "router_fit"), (dict(gate_fit=None), "gate_fit"),
    (dict(detector_fit={"max_iter": 10}), "detector_fit")])
def test_bad_build_parameters_raise_before_any_work(kw, name):
    """``dataset=None``: the check must come before the dataset is touched."""
    with pytest.raises(ValueError, match=standard_error(name)):
        build_moe(None, **{"eps": 1e-3, **kw})
    if name != "router_margin" and name != "router_fit":
        with pytest.raises(ValueError, match=standard_error(name)):
            build_dense(None, **{"eps": 1e-3, **kw})


def test_bad_arguments_of_fits_and_verification():
    Z = np.eye(4)
    with pytest.raises(ValueError, match=standard_error("labels")):
        fit_multiclass(Z, np.array([0, 1, 2, 3]), 3)
    with pytest.raises(ValueError, match=standard_error("positive")):
        fit_gate(Z, np.ones(4, dtype=bool))
    with pytest.raises(ValueError, match=standard_error("settings")):
        fit_gate(Z, np.array([True, False, True, False]), settings=dict(max_iter=5))
    ds = running_example()
    model, rep = build_moe(ds, 1e-3)
    with pytest.raises(ValueError, match=standard_error("batch_size")):
        verify(model, rep, ds, batch_size=0)
    with pytest.raises(ValueError, match=standard_error("eps_list[1]")):
        verify(model, rep, ds, eps_list=[1e-2, 0.0])
    with pytest.raises(ValueError, match=standard_error("eps")):
        beta_for(rep, 2.0, ds.vocab_size)


def test_numpy_scalars_are_accepted_and_build_the_same_model():
    ds = running_example(extra=True)
    ref_model, _ = build_moe(ds, 1e-4)
    model, rep = build_moe(ds, np.float64(1e-4), rho=np.float64(0.5), eta=np.float64(0.01),
                           max_coherence=np.float64(0.3), router_margin=np.int64(20),
                           router_fit=FitSettings(max_iter=np.int64(600), chunk=np.int32(50),
                                                  reg=np.float64(1e-6), tol=np.float64(0.05)),
                           lp_time_limit=np.float32(30.0))
    assert type(rep.eps) is float and type(rep.eta) is float
    a, b = ref_model.state_dict(), model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    m32, r32 = build_moe(ds, np.float32(1e-3), eta=np.float32(0.01))   # float32 ε and η
    assert verify(m32, r32, ds).max_invalid < 1e-3


def test_neuron_kinds_are_typed_and_written_by_themselves():
    """Every neuron of both builds is one of the three kinds (no tagged tuples), and the MoE's
    task experts hold exactly the syntactic detectors of the dense layer's circuits."""
    ds = running_example(extra=True)
    moe, rep = build_moe(ds, 1e-4)
    dense, drep = build_dense(ds, 1e-4)
    kinds = (SyntacticNeuron, SemanticNeuron, JunctionNeuron)
    assert all(k.__dataclass_params__.frozen for k in kinds)
    w1m, w1d = moe.experts.w1.detach(), dense.experts.w1.detach()
    rb = rep.layout.router_block[1]
    start = 0
    for k in range(ds.n_tasks):
        n_syn = rep.syntactic_neurons[k]
        assert n_syn == drep.syntactic_neurons[k]
        assert torch.equal(w1m[k, :, :n_syn], w1d[0, :, start:start + n_syn])
        assert torch.count_nonzero(w1m[k, rb:, :n_syn]) == 0      # detectors read [TOK|POS|H1]
        start += n_syn + drep.semantic_neurons[k]


def private_names_of_the_construction() -> set[str]:
    names = set()
    for f in (ROOT / "src" / "moe_routing" / "construction").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.startswith("_") \
                    and not node.name.startswith("__"):
                names.add(node.name)
    return names


def test_no_test_imports_a_private_name_from_the_construction():
    private = private_names_of_the_construction()
    offenders = []
    for f in (ROOT / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "moe_routing.construction"):
                offenders += [f"{f.name}: {a.name}" for a in node.names if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr in private:
                offenders.append(f"{f.name}: .{node.attr}")
    assert offenders == []


def test_chapter_names_only_public_construction_names():
    """Inline code in the construction chapter's prose never names a private (underscore)
    name, and every ``module.name`` of the construction it names exists."""
    text = (ROOT / "notebooks" / "construction.md").read_text(encoding="utf-8")
    prose = re.sub(r"```\{code-cell\}.*?```", "", text, flags=re.S)   # drop code cells
    spans = re.findall(r"`([^`\n]+)`", prose)
    # (the book's own plumbing, moe_routing._internal, is named where the prose points at it)
    private = [s for s in spans if re.search(r"(^|[.\s(])_(?!internal\.)[A-Za-z]", s)]
    assert private == []
    assert not (private_names_of_the_construction() & set(re.findall(r"\b_\w+", text)))
    modules = {p.stem for p in (ROOT / "src" / "moe_routing" / "construction").glob("*.py")}
    named = [s for s in spans if re.fullmatch(r"[A-Za-z_][\w.]*", s) and "." in s]
    checked = 0
    for s in named:
        parts = s.split(".")
        if parts[:2] == ["moe_routing", "construction"]:
            parts = parts[2:]
        if not parts or parts[0] not in modules:
            continue
        obj = importlib.import_module(f"moe_routing.construction.{parts[0]}")
        for p in parts[1:]:
            obj = getattr(obj, p)                                       # AttributeError: stale
        checked += 1
    assert checked >= 4                                # the proof's steps name their functions


def test_nested_growth_compares_each_task_across_nested_datasets():
    """The construction on the first 2 and 3 relations: the two shared tasks are the same tasks
    (same dictionary and template tokens), their experts are compared neuron by neuron, and a
    built triple is reused as it is.  Changing one expert's semantic count flips the check, so
    it can fail."""
    from dataclasses import replace

    from moe_routing.construction.sizes import NestedGrowth, nested_growth
    from moe_routing.knowledge import build_dataset

    ds3 = build_dataset(n_relations=3, seed=0)
    built = (ds3, *build_moe(ds3, eps=1e-3))
    g = nested_growth([3, 2], seed=0, eps=1e-3, built=built)
    assert [s.tasks for s in g.sizes] == [2, 3]
    assert len(g.common) == 2 and g.same_tasks
    assert g.sizes[1].live_params > g.sizes[0].live_params and g.sizes[1].V >= g.sizes[0].V
    assert g.semantic_unchanged and g.syntactic_never_grows
    assert list(g.expert_frame().columns)[:3] == ["task", "neurons (2 tasks)", "neurons (3 tasks)"]
    assert list(g.size_frame()["tasks"]) == [2, 3]
    t = g.common[0]
    row = dict(g.sizes[1].experts[t], semantic=g.sizes[1].experts[t]["semantic"] + 1)
    broken = NestedGrowth((g.sizes[0], replace(g.sizes[1], experts={**g.sizes[1].experts,
                                                                   t: row})))
    assert not broken.semantic_unchanged
    for kw, name in ((dict(relations=[]), "relations"), (dict(relations=[0]), r"relations\[0\]"),
                     (dict(eps=0.0), "eps"), (dict(built=(ds3,)), "built")):
        args = {**dict(relations=[2], seed=0, eps=1e-3), **kw}
        with pytest.raises(ValueError, match=f"^{name} = "):
            nested_growth(**args)
