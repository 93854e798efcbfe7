"""Paper A experiment runner: configuration checks, one tiny run end to end, JSON, caching."""

import json

import numpy as np
import pytest
import torch

from moe_routing.experiments import task_routing as tr
from moe_routing.experiments import (ExperimentConfig, grid_configs, load_result, result_path,
                                     results_frame, run_experiment, run_grid)




TINY = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
            batch_size=32, warmup_steps=2)


@pytest.mark.parametrize("field,value,words", [
    ("objective", "ce+zloss", "ce, ce+lb, ce+router"),
    ("n_experts", 0, "≥ 1"),
    ("n_tasks", 5, "n_relations=4"),
    ("n_tasks", 0, "n_relations=4"),
    ("d_model", 15, "divisible by n_heads=2"),
    ("lr", 0.0, "> 0"),
    ("epochs", 0, "≥ 1"),
    ("device", "tpu", "auto, cpu, cuda"),
    ("lb_alpha", -0.1, "≥ 0"),
])
def test_bad_config_names_field_and_range(field, value, words):
    kw = dict(n_tasks=2, n_experts=2, objective="ce", **TINY)
    kw[field] = value
    with pytest.raises(ValueError) as err:
        ExperimentConfig(**kw)
    assert f"ExperimentConfig.{field}" in str(err.value) and words in str(err.value)


def test_grid_validates_before_training():
    with pytest.raises(ValueError, match="objective"):
        grid_configs([2], [2], objectives=["ce", "cross-entropy"], **TINY)


def test_numpy_integers_accepted_and_keys():
    a = ExperimentConfig(n_tasks=np.int64(2), n_experts=3, objective="ce", **TINY)
    assert isinstance(a.n_tasks, int)
    b = a.replace(objective="ce+router")
    assert a.key() != b.key()
    # one expert: the three objectives are one training problem, one key
    one = [a.replace(n_experts=1, objective=o) for o in ("ce", "ce+lb", "ce+router")]
    assert len({c.key() for c in one}) == 1
    assert a.replace(seed=1).key() != a.key()


def test_task_selection_is_nested_and_seeded():
    c = ExperimentConfig(n_tasks=2, n_experts=1, objective="ce", **TINY)
    s2, s3 = tr.task_selection(c), tr.task_selection(c.replace(n_tasks=3))
    assert set(s2) <= set(s3) and len(s3) == 3
    others = {tuple(tr.task_selection(c.replace(task_seed=s))) for s in range(6)}
    assert len(others) > 1


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    art = tmp_path_factory.mktemp("art")
    cfg = ExperimentConfig(n_tasks=3, n_experts=3, objective="ce+router", epochs=12, lr=1e-2,
                           **TINY)
    return cfg, art, run_experiment(cfg, art)


def test_end_to_end_run_measures_sane_values(tiny_run):
    cfg, _, res = tiny_run
    assert 0.0 <= res["accuracy"] <= 1.0 and 0.0 <= res["train_accuracy"] <= 1.0
    assert 0.0 < res["valid_mass_min"] <= res["valid_mass"] <= 1.0
    for which in ("routing_all", "routing_object"):
        p = np.array(res[which]["p_expert_given_task"])
        assert p.shape == (3, 3)
        np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
        assert 0.0 <= res[which]["nmi"] <= 1.0 and 0.0 < res[which]["purity"] <= 1.0
    # active parameters: one of three experts per token
    pr = res["params"]
    assert pr["active"] < pr["total"]
    assert pr["experts_active"] == pytest.approx(pr["experts_total"] / 3)
    assert res["dataset"]["tasks"] and len(res["dataset"]["tasks"]) == 3
    assert res["provenance"]["device"] == "cpu"
    # the task-router loss was trained: routing follows the designated experts (task mod E)
    assert res["routing_all"]["diagonal_accuracy"] > 0.9


def test_json_round_trip(tiny_run):
    cfg, art, res = tiny_run
    path = result_path(cfg, art)
    on_disk = json.loads(path.read_text())
    assert on_disk == json.loads(json.dumps(res))
    assert load_result(cfg, art) == on_disk
    assert load_result(cfg.replace(seed=7), art) is None


def test_grid_cache_hit_does_not_retrain(tiny_run, tmp_path, monkeypatch):
    cfg, art, res = tiny_run

    def boom(*a, **k):
        raise AssertionError("retrained a cached configuration")

    monkeypatch.setattr(tr, "run_experiment", boom)
    out = run_grid([cfg], art, progress=False)
    assert out[0]["cached"] and out[0]["accuracy"] == res["accuracy"]
    # from a previous execution's folder into a fresh one (the pipeline's layout)
    fresh = tmp_path / "fresh"
    out = run_grid([cfg], fresh, progress=False, reuse_from=[art])
    assert out[0]["cached"] and result_path(cfg, fresh).exists()
    df = results_frame(out)
    assert list(df["objective"]) == ["ce+router"] and bool(df["cached"].iloc[0])


def test_one_expert_objectives_share_one_run(tmp_path):
    base = ExperimentConfig(n_tasks=2, n_experts=1, objective="ce", epochs=1, **TINY)
    cfgs = [base.replace(objective=o) for o in ("ce", "ce+lb", "ce+router")]
    out = run_grid(cfgs, tmp_path, progress=False)
    assert [r["cached"] for r in out] == [False, True, True]
    assert [r["config"]["objective"] for r in out] == ["ce", "ce+lb", "ce+router"]
    assert len({r["accuracy"] for r in out}) == 1
    assert len(list((tmp_path / "task_routing").glob("*.json"))) == 1


def test_cache_key_depends_on_the_code(monkeypatch):
    """A result computed by other code must never be reused (content-addressed like the
    pipeline): the key changes with the package's code fingerprint."""
    cfg = ExperimentConfig(n_tasks=2, n_experts=3, objective="ce", **TINY)
    before = cfg.key()
    assert len(tr.code_fingerprint()) == 16
    monkeypatch.setattr(tr, "code_fingerprint", lambda: "0" * 16)
    assert cfg.key() != before
