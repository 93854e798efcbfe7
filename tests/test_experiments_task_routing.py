"""Paper A experiment runner: configuration checks, one tiny run end to end, JSON, caching."""

import json

import numpy as np
import pytest
import torch

from moe_routing.experiments.task_routing import config as config_module
from moe_routing.experiments.task_routing.data import task_selection
from moe_routing.experiments.task_routing import runs as tr
from moe_routing.experiments.task_routing.config import ExperimentConfig
from moe_routing.experiments.task_routing.runs import (convergence, grid_configs, results_frame,
                                                       run_experiment, run_grid)
from moe_routing.experiments.task_routing.store import load_result, result_path
from moe_routing.model import MoEConfig, TrainConfig, TrainData, build_and_train
from moe_routing.experiments.task_routing import config
from moe_routing.experiments.task_routing import data

pytestmark = pytest.mark.kernels

TINY = dict(n_relations=4, n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=16,
            batch_size=32, warmup_steps=2)


@pytest.mark.parametrize("field,value,owner,words", [
    ("objective", "ce+zloss", "ExperimentConfig", "'ce', 'ce+lb', 'ce+router'"),
    ("n_experts", 0, "MoEConfig", "≥ 1"),
    ("n_tasks", 5, "DataConfig", "n_relations=4"),
    ("n_tasks", 0, "DataConfig", "n_relations=4"),
    ("d_model", 15, "MoEShape", "divisible by n_heads=2"),
    ("lr", 0.0, "TrainSchedule", "> 0"),
    ("steps", 0, "TrainSchedule", "≥ 1"),
    ("device", "tpu", "ExperimentConfig", "'auto', 'cpu', 'cuda'"),
    ("lb_alpha", -0.1, "TrainSchedule", "≥ 0"),
    ("n_layers", 2, "ExperimentConfig.model", "paper A's model"),
])
def test_bad_config_names_field_and_range(field, value, owner, words):
    # each field is validated once, by the part that owns it, and the error names that part
    kw = dict(n_tasks=2, n_experts=2, objective="ce", **TINY)
    kw[field] = value
    with pytest.raises(ValueError) as err:
        ExperimentConfig.from_flat(**kw)
    assert f"{owner}.{field}" in str(err.value) and words in str(err.value)


def test_flat_knobs_map_onto_the_parts():
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=3, objective="ce", steps=7, **TINY)
    assert (cfg.data.n_tasks, cfg.model.n_experts, cfg.train.steps) == (2, 3, 7)
    assert cfg.n_experts == cfg.model.n_experts and cfg.n_relations == cfg.data.n_relations
    assert cfg.replace(n_experts=5, lr=0.5).model.n_experts == 5
    assert cfg.replace(n_experts=5, lr=0.5).train.lr == 0.5
    # the nested constructor and from_flat build the same run
    nested = ExperimentConfig(data=cfg.data, model=cfg.model, train=cfg.train, objective="ce")
    assert nested == cfg and nested.key() == cfg.key()
    # the experiment's sizes, not the loop's defaults
    plain = ExperimentConfig.from_flat(n_tasks=2, n_experts=3, objective="ce")
    assert (plain.model.d_model, plain.train.steps, plain.train.batch_size) == (128, 4000, 256)
    with pytest.raises(ValueError, match="from_flat.*'n_taks'"):
        ExperimentConfig.from_flat(n_taks=2, n_experts=3, objective="ce")
    with pytest.raises(ValueError, match="ExperimentConfig.train.epochs.*number of steps"):
        cfg.replace(steps=None, epochs=3)
    with pytest.raises(ValueError, match="replace.*'widths'"):
        cfg.replace(widths=3)
    with pytest.raises(AttributeError):
        cfg.no_such_knob  # noqa: B018


def test_the_loop_config_is_the_parts_of_the_run():
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=1, objective="ce+router",
                                     **{**TINY, "amp": False})
    loop = cfg.loop_config("cpu")
    assert isinstance(loop, TrainConfig) and loop.objective == "ce"   # one expert
    assert (loop.steps, loop.batch_size, loop.lr, loop.warmup_steps, loop.amp, loop.seed) == (
        4000, 32, 3e-3, 2, False, 0)
    assert (loop.weight_decay, loop.grad_clip, loop.schedule) == (0.01, 1.0, "cosine")


#: keys computed on the code before the configuration had parts, with the code fingerprint
#: held at "f" * 16 and the result format at version 3 (both change the key by design: a run
#: is reused only by the code, and read only in the format, that computed it)
PINNED_KEYS = {
    "e56faf7adca478e6": dict(n_tasks=10, n_experts=7, objective="ce+router"),
    "f831f17615edb3b0": dict(n_tasks=2, n_experts=3, objective="ce+lb", seed=1, n_relations=4,
                             n_pairs=12, n_templates=3, d_model=16, n_heads=2, d_expert=8,
                             steps=30, batch_size=32, lr=1e-2, device="cpu", amp=False),
    "943ca71295a012b3": dict(n_tasks=5, n_experts=1, objective="ce+router", d_expert=512),
    "32973f556e376b1e": dict(n_tasks=10, n_experts=7, objective="ce+router",
                             variant="shuffled_tasks"),
}


@pytest.mark.parametrize("key", sorted(PINNED_KEYS))
def test_cache_keys_of_unchanged_configurations_are_unchanged(key, monkeypatch):
    monkeypatch.setattr(config_module, "code_fingerprint", lambda: "f" * 16)
    monkeypatch.setattr(config_module, "RESULT_VERSION", 3)
    cfg = ExperimentConfig.from_flat(**PINNED_KEYS[key])
    assert cfg.key() == key
    monkeypatch.setattr(config_module, "RESULT_VERSION", 4)    # a new format: a new key
    assert cfg.key() != key
    assert list(cfg.as_dict())[:3] == ["n_tasks", "n_experts", "objective"]   # flat, in order
    # a knob that joined a part later enters the key only when it is set
    assert "weight_decay" not in cfg.as_dict()
    assert cfg.replace(weight_decay=0.1).key() != key
    assert cfg.replace(weight_decay=0.1).as_dict()["weight_decay"] == 0.1


def test_grid_validates_before_training():
    with pytest.raises(ValueError, match="objective"):
        grid_configs([2], [2], objectives=["ce", "cross-entropy"], **TINY)


def test_numpy_integers_accepted_and_keys():
    a = ExperimentConfig.from_flat(n_tasks=np.int64(2), n_experts=3, objective="ce", **TINY)
    assert isinstance(a.n_tasks, int)
    b = a.replace(objective="ce+router")
    assert a.key() != b.key()
    # one expert: the three objectives are one training problem, one key
    one = [a.replace(n_experts=1, objective=o) for o in ("ce", "ce+lb", "ce+router")]
    assert len({c.key() for c in one}) == 1
    assert a.replace(seed=1).key() != a.key()


def test_task_selection_is_nested_and_seeded():
    c = ExperimentConfig.from_flat(n_tasks=2, n_experts=1, objective="ce", **TINY)
    s2, s3 = task_selection(c), task_selection(c.replace(n_tasks=3))
    assert set(s2) <= set(s3) and len(s3) == 3
    others = {tuple(task_selection(c.replace(task_seed=s))) for s in range(6)}
    assert len(others) > 1


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    art = tmp_path_factory.mktemp("art")
    cfg = ExperimentConfig.from_flat(n_tasks=3, n_experts=3, objective="ce+router", steps=36, lr=1e-2,
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
    base = ExperimentConfig.from_flat(n_tasks=2, n_experts=1, objective="ce", steps=3, **TINY)
    cfgs = [base.replace(objective=o) for o in ("ce", "ce+lb", "ce+router")]
    out = run_grid(cfgs, tmp_path, progress=False)
    assert [r["cached"] for r in out] == [False, True, True]
    assert [r["config"]["objective"] for r in out] == ["ce", "ce+lb", "ce+router"]
    assert len({r["accuracy"] for r in out}) == 1
    assert len(list((tmp_path / "task_routing").glob("*.json"))) == 1


def train_weights(n_experts: int, objective: str):
    """A real training run (no cache, no sharing): the flat weights and the CE history."""
    cfg = ExperimentConfig.from_flat(n_tasks=3, n_experts=n_experts, objective=objective, steps=30,
                           **TINY)
    ds = data.experiment_dataset(cfg)
    split = ds.encode_split("train")
    mcfg = MoEConfig(vocab_size=ds.vocab_size, max_len=split.inputs.shape[1], d_model=16,
                     n_heads=2, n_experts=n_experts, d_expert=16, top_k=1, gate="switch")
    tcfg = TrainConfig(objective=objective, steps=30, batch_size=32, lr=1e-2, warmup_steps=2,
                       seed=0, device="cpu", progress=False, log_every=1)
    model, hist = build_and_train(mcfg, TrainData.from_split(split), tcfg)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), hist


def test_one_expert_objectives_train_the_same_model():
    """The proposition behind sharing the E = 1 runs (training chapter): with one expert the
    LB term is the constant α and the task-router loss is 0, neither with a gradient, so three
    real trainings end at the same weights with the same cross-entropy history.  With two
    experts the auxiliary losses have gradients and the three runs differ: the hypothesis
    E = 1 is what makes them coincide."""
    ref_w, ref_h = train_weights(1, "ce")
    for objective in ("ce+lb", "ce+router"):
        w, h = train_weights(1, objective)
        torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h.ce, ref_h.ce, rtol=1e-5)
        aux = h.lb if objective == "ce+lb" else h.router
        np.testing.assert_allclose(aux, 0.01 if objective == "ce+lb" else 0.0, atol=1e-6)
    two_ce, _ = train_weights(2, "ce")
    for objective in ("ce+lb", "ce+router"):
        w, _ = train_weights(2, objective)
        assert float((w - two_ce).abs().max()) > 1e-3, objective


def test_budget_is_steps_whatever_the_number_of_tasks(tmp_path):
    """The training budget is counted in optimiser steps: a run with more tasks does not get
    more updates (a budget in epochs would)."""
    runs = run_grid(grid_configs([2, 4], [2], ["ce"], steps=5, **{**TINY, "n_relations": 4}),
                    tmp_path, progress=False)
    assert [r["steps"] for r in runs] == [5, 5]
    assert runs[0]["n_train"] < runs[1]["n_train"]
    # the history's last logged step and the evaluations follow the step budget
    assert [r["history"]["step"][-1] for r in runs] == [4, 4]
    assert [e["step"] for e in runs[1]["history"]["evals"]] == [1, 2, 3, 4, 5]


def test_convergence_measures_the_tail(tiny_run):
    _, _, res = tiny_run
    conv = convergence(res)
    # an evaluation after each eighth of the 36 steps; the change is over the last quarter:
    # from the evaluation closest to step 27 (step 28) to the end
    assert [e["step"] for e in res["history"]["evals"]] == list(range(4, 37, 4))
    evals = {e["step"]: e["accuracy"] for e in res["history"]["evals"]}
    assert conv["acc_change"] == pytest.approx(evals[36] - evals[28])
    assert conv["acc_change"] == pytest.approx(res["accuracy"] - evals[28])
    # a hand-made history: the CE halves between the last two fifths
    fake = {"steps": 100, "history": {"step": list(range(0, 100, 10)) + [99],
                                      "ce": [9, 9, 9, 9, 9, 9, 2, 2, 1, 1, 1],
                                      "evals": [{"step": 75, "accuracy": 0.5},
                                                {"step": 100, "accuracy": 0.6}]}}
    conv = convergence(fake)
    assert conv["ce_prev"] == pytest.approx(2.0) and conv["ce_last"] == pytest.approx(1.0)
    assert conv["ce_drop"] == pytest.approx(0.5) and conv["acc_change"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="tail"):
        convergence(fake, tail=0.9)
    # too short to measure: NaN, never a converged-looking 0
    assert np.isnan(convergence({**fake, "steps": 1000})["ce_drop"])


def test_cache_key_depends_on_the_code(monkeypatch):
    """A result computed by other code must never be reused (content-addressed like the
    pipeline): the key changes with the package's code fingerprint."""
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=3, objective="ce", **TINY)
    before = cfg.key()
    assert len(config.code_fingerprint()) == 16
    monkeypatch.setattr(config_module, "code_fingerprint", lambda: "0" * 16)
    assert cfg.key() != before


# ---- a damaged cache is re-run, never read ---------------------------------------------------

DAMAGE = {
    "truncated": lambda good: good[:len(good) // 2],
    "binary garbage": lambda _good: bytes(np.random.default_rng(0).integers(0, 256, 4096,
                                                                        dtype=np.uint8)),
    "not a result": lambda _good: b"[1, 2, 3]\n",
    "measurements missing": lambda good: json.dumps(
        {k: v for k, v in json.loads(good).items() if k != "routing_all"}).encode(),
    "another configuration": lambda good: json.dumps(
        {**json.loads(good), "key": "0" * 16}).encode(),
}


def task_routing_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == tr.__name__]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_cached_run_is_rerun_with_one_log_line(tiny_run, tmp_path, monkeypatch, caplog,
                                                      damage):
    cfg, art, res = tiny_run
    good = result_path(cfg, art).read_bytes()
    path = result_path(cfg, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(DAMAGE[damage](good))
    assert load_result(cfg, tmp_path) is None            # never read as a result
    reruns = []

    def rerun(c, artifacts_dir, profile="smoke", progress=False):
        reruns.append(c)
        tr.atomic_write_json(result_path(c, artifacts_dir), res)
        return res

    monkeypatch.setattr(tr, "run_experiment", rerun)
    caplog.clear()
    with caplog.at_level("WARNING", logger=tr.__name__):
        out = run_grid([cfg], tmp_path, progress=False)
    assert reruns == [cfg] and out[0]["cached"] is False
    (line,) = task_routing_warnings(caplog)
    assert "re-running" in line and str(path) in line and "\n" not in line
    assert load_result(cfg, tmp_path) == json.loads(good)


def test_damaged_cached_run_prefers_a_good_copy_elsewhere(tiny_run, tmp_path, monkeypatch,
                                                          caplog):
    cfg, art, res = tiny_run
    path = result_path(cfg, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(result_path(cfg, art).read_bytes()[:100])

    def boom(*a, **k):
        raise AssertionError("retrained although a good copy was cached")

    monkeypatch.setattr(tr, "run_experiment", boom)
    with caplog.at_level("WARNING", logger=tr.__name__):
        out = run_grid([cfg], tmp_path, progress=False, reuse_from=[art])
    assert out[0]["cached"] and out[0]["accuracy"] == res["accuracy"]
    (line,) = task_routing_warnings(caplog)
    assert "reusing another cached copy" in line
    assert load_result(cfg, tmp_path) == load_result(cfg, art)      # the damaged file replaced


def test_real_rerun_replaces_a_truncated_file_atomically(tmp_path, caplog):
    cfg = ExperimentConfig.from_flat(n_tasks=2, n_experts=2, objective="ce", steps=3, **TINY)
    path = result_path(cfg, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"version": 1, "key": "')
    with caplog.at_level("WARNING", logger=tr.__name__):
        (row,) = run_grid([cfg], tmp_path, progress=False)
    assert row["cached"] is False and len(task_routing_warnings(caplog)) == 1
    assert json.loads(path.read_text())["key"] == cfg.key()
    # written through moe_routing._internal.atomic: a temporary file renamed over the target, none left
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_parallel_workers_give_the_serial_results(tmp_path):
    """run_grid(workers=2) trains in two spawned processes; every run seeds itself, so the
    results are the serial ones (same code, same seeds, same thread count)."""
    cfgs = grid_configs([2], [1, 2], ["ce", "ce+router"], steps=6, **TINY)
    serial = run_grid(cfgs, tmp_path / "serial", progress=False)
    par = run_grid(cfgs, tmp_path / "par", progress=False, workers=2)
    assert [r["cached"] for r in par] == [r["cached"] for r in serial] == [False, True,
                                                                          False, False]
    for a, b in zip(serial, par):
        assert a["key"] == b["key"] and a["config"] == b["config"]
        np.testing.assert_allclose(a["history"]["ce"], b["history"]["ce"], rtol=1e-6)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-12)
    assert len(list((tmp_path / "par" / "task_routing").glob("*.json"))) == 3
    with pytest.raises(ValueError, match="workers"):
        run_grid(cfgs, None, progress=False, workers=0)


def test_collapsed_variant_reads_its_trained_ce_run_back(tmp_path, monkeypatch):
    """The collapsed variant measures the CE run's trained model with its routing collapsed:
    with that run's result and weights in the folder it trains nothing and measures what a
    collapsed run trained afresh measures (training is bit-identical on one machine); without
    them it trains."""
    import moe_routing.model as model_api
    from moe_routing.experiments.task_routing import runs as tr_mod

    ce = ExperimentConfig.from_flat(n_tasks=3, n_experts=3, objective="ce", steps=24, lr=1e-2,
                                    **TINY)
    collapsed = ce.replace(variant="collapsed")
    fresh = run_experiment(collapsed, tmp_path / "alone")          # no CE run there: trains
    run_experiment(ce, tmp_path / "both")

    def no_training(*_a, **_k):
        raise AssertionError("the collapsed variant trained although its CE run is there")

    monkeypatch.setattr(model_api, "build_and_train", no_training)
    reused = run_experiment(collapsed, tmp_path / "both")
    for key in ("accuracy", "routing_object", "routing_all", "valid_mass"):
        assert reused[key] == fresh[key], key
    assert reused["history"]["total"] == fresh["history"]["total"]
    with pytest.raises(AssertionError, match="trained although"):
        run_experiment(collapsed, tmp_path / "neither")
    assert tr_mod.run_cost(collapsed) < tr_mod.run_cost(ce.replace(steps=2))
