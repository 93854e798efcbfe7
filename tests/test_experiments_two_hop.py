"""Two-hop experiment runner: configuration checks, the split, per-layer router targets, one
tiny run end to end, its JSON and cache, and the grid through the executor."""

import json
import logging

import numpy as np
import pytest
import torch

import moe_routing.model as model_pkg
from moe_routing.experiments.grid import GridError
from moe_routing.experiments.two_hop import runs as th
from moe_routing.experiments.two_hop.config import TwoHopConfig, two_hop_grid
from moe_routing.experiments.two_hop.runs import (run_two_hop, run_two_hop_grid, two_hop_cells,
                                                  two_hop_frame)
from moe_routing.experiments.two_hop import config

pytestmark = pytest.mark.kernels

#: a run of a few seconds: 12 facts per relation, two templates, a 16-wide model, 6 steps
TINY = dict(n_pairs=12, n_templates=2, d_model=16, d_expert=16, n_heads=2, steps=6,
            batch_size=32, warmup_steps=2)


def tiny(**changes) -> TwoHopConfig:
    return TwoHopConfig.from_flat(**{**TINY, **changes})


# ---- configuration ---------------------------------------------------------------------------
@pytest.mark.parametrize("changes,words", [
    (dict(chains=(("P17", "P999"),)), r"TwoHopData.chains\[0\] = \('P17', 'P999'\).*chain of "
                                      r"the embedded base"),
    (dict(chains=(("P17", "P17"),)), r"TwoHopData.chains\[0\] = \('P17', 'P17'\)"),
    (dict(chains=(("P17", "P36"), ("P17", "P36"))), "distinct"),
    (dict(chains="P17"), "TwoHopData.chains"),
    (dict(chains=(("P17", "P36"),), templates=(("⋆1 is in a land ruled from ⋆2.",),)),
     r"TwoHopData.templates\[0\].*at least two template strings"),
    (dict(chains=(("P17", "P36"),), templates=(("⋆1 a b.", "⋆1 c d."),)), "with ⋆1 and ⋆2"),
    (dict(chains=(("P17", "P36"),), templates=(("⋆1 x ⋆2.", "⋆1 y ⋆2."),) * 2),
     "one sequence of template strings per chain"),
    (dict(n_pairs=1), r"TwoHopData.n_pairs = 1.*≥ 2"),
    (dict(n_templates=6), "TwoHopData.n_templates = 6"),
    (dict(test_fraction=1.0), "TwoHopData.test_fraction = 1.0"),
    (dict(n_layers=3), r"TwoHopConfig.model.n_layers = 3.*1 or 2"),
    (dict(n_experts=0), "MoEConfig.n_experts = 0"),
    (dict(d_model=18, n_heads=4), r"MoEShape.d_model = 18.*divisible by n_heads=4"),
    (dict(objective="ce+zz"), r"TwoHopConfig.objective = 'ce\+zz'.*'ce\+router'"),
    (dict(steps=0), "TrainSchedule.steps = 0"),
    (dict(lr=float("nan")), "TrainSchedule.lr"),
    (dict(device="tpu"), "TwoHopConfig.device = 'tpu'"),
    (dict(amp=1), "TwoHopConfig.amp = 1"),
    (dict(entity_codes=65), r"MoEConfig.entity_codes = 65.*≤ 64"),
    (dict(epochs=3, steps=None), r"TwoHopConfig.train.epochs = 3.*steps"),
    (dict(n_layer=2), r"TwoHopConfig.from_flat = \['n_layer'\].*n_layers"),
])
def test_bad_config_names_field_and_what_is_accepted(changes, words):
    with pytest.raises(ValueError, match=words):
        TwoHopConfig.from_flat(**changes)


def test_a_chain_without_default_templates_needs_them():
    with pytest.raises(ValueError, match=r"explicit templates for the chains without defaults"):
        TwoHopConfig.from_flat(chains=(("P17", "P30"),))


def test_config_parts_keys_and_json_round_trip():
    cfg = tiny(n_layers=1, objective="ce+lb", seed=3)
    assert (cfg.model.n_layers, cfg.objective, cfg.seed) == (1, "ce+lb", 3)
    assert cfg.data.chain_templates == tuple(config.DEFAULT_TEMPLATES[c] for c in cfg.data.chains)
    # other chains take their own default templates; the key holds the text
    other = cfg.replace(chains=(("P17", "P38"),))
    assert other.data.chain_templates == (config.DEFAULT_TEMPLATES[("P17", "P38")],)
    assert cfg.training_key()["data"]["templates"][0] == list(config.DEFAULT_TEMPLATES[("P17", "P36")])
    explicit = cfg.replace(templates=tuple(config.DEFAULT_TEMPLATES[c] for c in cfg.data.chains))
    assert explicit.key() == cfg.key()                   # the defaults, spelt out: the same run
    reworded = cfg.replace(templates=(("⋆1 lies in a land ruled from ⋆2.", "⋆1: ⋆2."),
                                      config.DEFAULT_TEMPLATES[("P37", "P282")]))
    assert reworded.key() != cfg.key()
    assert cfg.replace(n_layers=np.int64(1)) == cfg                 # NumPy scalars accepted
    back = TwoHopConfig(**json.loads(json.dumps(cfg.as_dict())))   # from a result's config
    assert back == cfg and back.key() == cfg.key()
    keys = {c.key() for c in two_hop_grid(base=cfg)}
    assert len(keys) == 12                                           # 2 depths × 3 × 2 seeds
    # one expert: the three objectives train the same model and share a key
    one = {tiny(n_experts=1, objective=o).key() for o in ("ce", "ce+lb", "ce+router")}
    assert len(one) == 1
    with pytest.raises(ValueError, match="TwoHopConfig.model = 'TrainSchedule'"):
        TwoHopConfig(model=TwoHopConfig().train)
    with pytest.raises(ValueError, match="cfg = 'dict'"):
        run_two_hop({"model": {}})


def test_the_parts_are_the_librarys_and_reach_the_loop_without_copies():
    from moe_routing.model import MoEShape, TrainSchedule

    cfg = tiny(objective="ce+router", seed=2, z_beta=0.05, grad_clip=0.5, d_expert=24)
    assert isinstance(cfg.model, MoEShape) and isinstance(cfg.train, TrainSchedule)
    # a schedule knob no two-hop code names (z_beta, grad_clip) reaches the training loop
    loop = cfg.loop_config("cpu")
    assert (loop.z_beta, loop.grad_clip, loop.objective, loop.seed) == (0.05, 0.5, "ce+router", 2)
    assert loop.steps == cfg.train.steps == TINY["steps"]
    # a shape knob reaches the model's configuration the same way
    mcfg = cfg.model.config(40, 9, top_k=1, gate="switch")
    assert (mcfg.d_expert, mcfg.n_layers, mcfg.d_model, mcfg.top_k) == (24, 2, 16, 1)
    assert tiny(z_beta=0.05).key() != tiny().key()        # and so does the cache key
    # the experiment's own sizes, not the library's defaults
    assert (TwoHopConfig().model.d_model, TwoHopConfig().train.steps) == (64, 800)


# ---- the split and the router targets -------------------------------------------------------
@pytest.fixture(scope="module")
def data():
    cfg = tiny()
    ds = th.two_hop_dataset(cfg)
    return ds, th.two_hop_split(ds)


def _facts(ds, idx):
    return {(int(ds.task[i]), int(ds.pair[i])) for i in idx}


def test_held_out_compositions_are_never_trained_and_their_hops_are(data):
    ds, parts = data
    held = ds.held_out_compositions()
    assert held and len(parts.held_out) == sum(len(h.test_sentences) for h in held)
    train = set(parts.train.tolist())
    train_text = {ds.tokenizer.decode(ds.seqs[i]) for i in parts.train}
    names = [t.name for t in ds.tasks]
    for h in held:
        k = names.index(h.task)
        # no training sentence of the two-hop task has the held-out subject, in any template
        first = h.test_sentences[0]
        subj = ds.seqs[first, ds.subject_pos[first]]
        tr_k = parts.train[ds.task[parts.train] == k]
        assert len(tr_k) and not (ds.seqs[tr_k, ds.subject_pos[tr_k]] == subj).any()
        assert ds.tokenizer.vocab[subj] == h.subject
        assert not train & set(h.test_sentences)
        assert not {ds.tokenizer.decode(ds.seqs[i]) for i in h.test_sentences} & train_text
        # both hops are trained, in every template of their task
        for f in (h.first, h.second):
            kf = names.index(f.task)
            rows = np.nonzero((ds.task == kf)
                              & (ds.pair == list(ds.tasks[kf].dictionary).index(f.subject)))[0]
            assert len(rows) == ds.tasks[kf].n_templates and set(rows.tolist()) <= train


def test_seen_compositions_are_asked_in_a_template_they_were_not_trained_in(data):
    ds, parts = data
    assert len(parts.seen) > 0
    assert not set(parts.seen.tolist()) & set(parts.train.tolist())
    assert not set(parts.seen.tolist()) & set(parts.held_out.tolist())
    # every asked composition is trained in its other templates
    assert _facts(ds, parts.seen) <= _facts(ds, parts.train)
    # the parts cover the dataset exactly once
    every = np.concatenate([parts.train, parts.single_test, parts.seen, parts.held_out])
    assert sorted(every.tolist()) == list(range(ds.n_sentences))


def test_layer_targets_are_the_hops(data):
    ds, parts = data
    hops = th.hop_tasks(ds)
    enc = ds.encode_split("all")
    tr = th._take(enc, parts.train)
    assert torch.equal(tr.tokens, enc.tokens[torch.from_numpy(parts.train)])
    lt = th.layer_targets(tr, hops, 2)
    names = [t.name for t in ds.tasks]
    for row, k in zip(lt.tolist(), tr.task.tolist()):
        t = ds.tasks[k]
        want = (names.index(t.first.name), names.index(t.second.name)) \
            if isinstance(t, th_task()) else (k, k)
        assert tuple(row) == want
    assert torch.equal(th.layer_targets(tr, hops, 1), lt[:, :1])
    two = hops[tr.task.numpy(), 0] != tr.task.numpy()
    assert two.any() and (lt[two, 0] != lt[two, 1]).all()          # the hops differ


def th_task():
    from moe_routing.knowledge.two_hop import TwoHopTask

    return TwoHopTask


def test_the_per_layer_targets_reach_the_training_loop(monkeypatch):
    """ce+router of a two-layer model trains with layer_tasks = (hop 1, hop 2): what the
    training loop receives, column by column."""
    seen = {}
    real = model_pkg.build_and_train

    def spy(mcfg, data, tcfg, **kw):
        seen.update(data=data, mcfg=mcfg, tcfg=tcfg)
        return real(mcfg, data, tcfg, **kw)

    monkeypatch.setattr(model_pkg, "build_and_train", spy)
    cfg = tiny(objective="ce+router", steps=2)
    run_two_hop(cfg)
    ds = th.two_hop_dataset(cfg)
    hops = th.hop_tasks(ds)
    data, names = seen["data"], [t.name for t in ds.tasks]
    assert seen["mcfg"].n_layers == 2 and seen["tcfg"].objective == "ce+router"
    assert data.layer_tasks.shape == (len(data), 2)
    two = torch.from_numpy(hops[data.task_ids.numpy(), 0] != data.task_ids.numpy())
    for k, t in enumerate(ds.tasks):
        rows = data.task_ids == k
        if isinstance(t, th_task()):
            assert (data.layer_tasks[rows, 0] == names.index(t.first.name)).all()
            assert (data.layer_tasks[rows, 1] == names.index(t.second.name)).all()
        elif rows.any():
            assert (data.layer_tasks[rows] == k).all()
    assert two.any()


@pytest.mark.training
def test_router_supervision_sends_each_layer_to_its_hops_expert():
    """Trained with ce+router, layer 1 routes two-hop queries to the hop-1 expert and layer 2
    to the hop-2 expert (the task-mod-E experts differ for the two hops of every chain)."""
    cfg = tiny(objective="ce+router", steps=60, router_alpha=5.0, lr=1e-2, n_pairs=16)
    r = run_two_hop(cfg)
    l1, l2 = r["routing"]
    assert l1["hop1"]["designated_fraction"] > 0.9 > 0.1 > l1["hop2"]["designated_fraction"]
    assert l2["hop2"]["designated_fraction"] > 0.9 > 0.1 > l2["hop1"]["designated_fraction"]


# ---- one tiny run ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two_hop")
    cfg = tiny(objective="ce+lb")
    return cfg, folder, run_two_hop(cfg, folder)


def test_result_keys_and_types(tiny_run):
    cfg, folder, r = tiny_run
    assert set(th.RESULT_KEYS) <= set(r) and r["cached"] is False
    assert r["key"] == cfg.key() and r["config"] == json.loads(json.dumps(cfg.as_dict()))
    json.dumps(r)                                                    # JSON-ready as returned
    for name in ("single_hop", "two_hop_seen", "held_out", "accuracy_non_majority"):
        s = r[name]
        assert isinstance(s["n"], int) and s["n"] > 0 and 0 <= s["accuracy"] <= 1
        iv = s["interval"]
        assert iv["low"] <= s["accuracy"] <= iv["high"] and iv["n_seeds"] == 1
        # clustered by fact: the templates of one fact (composition) are one cluster
        assert iv["test_source"].startswith("clustered by fact")
        assert len(s["correct"]) == len(s["facts"]) == s["n"]
        assert np.mean(s["correct"]) == pytest.approx(s["accuracy"])
    held_facts = r["held_out"]["facts"]
    assert len(set(held_facts)) == r["n_held_out_compositions"] < len(held_facts)
    d = r["dataset"]
    assert r["held_out"]["n"] == d["n_held_out"] and r["two_hop_seen"]["n"] == d["n_seen"]
    assert r["n_held_out_compositions"] == d["split"]["n_held_out_compositions"]
    for name in ("majority_baseline", "copy_middle_baseline", "identity_fraction",
                 "copyable_fraction", "composition_accuracy", "train_two_hop",
                 "train_single_hop"):
        assert isinstance(r[name], float) and 0 <= r[name] <= 1
    assert len(r["routing"]) == cfg.model.n_layers == 2
    for layer, entry in enumerate(r["routing"], 1):
        assert entry["layer"] == entry["matched_hop"] == layer
        for hop in ("hop1", "hop2"):
            x = entry[hop]
            for f in ("designated_fraction", "reuse_fraction", "held_out_designated_fraction",
                      "held_out_reuse_fraction"):
                assert 0 <= x[f] <= 1
            assert x["reuse_se"][0] >= 0 and x["reuse_se"][1] >= 1
            assert 0 <= x["summary"]["nmi"] <= 1 + 1e-9
            assert np.sum(x["summary"]["counts"]) == len(th.two_hop_split(
                th.two_hop_dataset(cfg)).two_hop_all)
        assert set(entry["dominant_expert"]) == {"P17", "P36", "P37", "P282"}
        assert [x["task"] for x in entry["reuse"]] == d["two_hop_tasks"]
    assert [e["step"] for e in r["history"]["evals"]][-1] == cfg.train.steps
    assert r["steps"] == cfg.train.steps


def test_majority_baseline_counts_the_majority_answers(tiny_run):
    cfg, _, r = tiny_run
    ds = th.two_hop_dataset(cfg)
    parts = th.two_hop_split(ds)
    objs = ds.seqs[np.arange(ds.n_sentences), ds.object_pos]
    hits = []
    for i in parts.held_out:
        trained = objs[parts.train][ds.task[parts.train] == ds.task[i]]
        vals, counts = np.unique(trained, return_counts=True)
        hits.append(objs[i] == vals[counts.argmax()])
    assert r["majority_baseline"] == pytest.approx(np.mean(hits))
    assert r["accuracy_non_majority"]["n"] == len(hits) - sum(hits)


def test_copy_the_middle_entity_baseline_and_no_copyable_held_out_query(tiny_run):
    """Copying the first hop's object answers a held-out query exactly when o = m; the split
    holds none out, so the baseline and the copyable fraction read 0 -- and on the old
    selection (copyable compositions held out too) the same code counts them."""
    cfg, _, r = tiny_run
    ds = th.two_hop_dataset(cfg)
    parts = th.two_hop_split(ds)
    objs = ds.seqs[np.arange(ds.n_sentences), ds.object_pos]
    want = []
    for i in parts.held_out:
        t = ds.tasks[ds.task[i]]
        m = t.middle(list(t.dictionary)[ds.pair[i]])
        want.append(int(objs[i] == ds.tokenizer.entity_id(m)))
    assert r["copy_middle_correct"] == want == [0] * len(want)
    assert r["copy_middle_baseline"] == 0.0 == r["copyable_fraction"]
    assert len(r["majority_correct"]) == r["held_out"]["n"]
    assert np.mean(r["majority_correct"]) == pytest.approx(r["majority_baseline"])


def test_the_copy_baseline_counts_copyable_queries_where_they_are_held_out():
    from moe_routing.knowledge.two_hop_dataset import MixedKnowledgeDataset
    from moe_routing.model import MoETransformer

    cfg = tiny(n_pairs=60, n_templates=3)
    ds0 = th.two_hop_dataset(cfg)
    ds = MixedKnowledgeDataset(ds0.tasks, seed=0, hold_out_copyable=True)   # the old split
    parts = th.two_hop_split(ds)
    torch.manual_seed(0)
    enc = ds.encode_split("all")
    model = MoETransformer(cfg.model.config(ds.vocab_size, enc.inputs.shape[1], top_k=1,
                                            gate="switch"))
    with torch.no_grad():
        m = th.evaluate_two_hop(model, ds, parts, cfg.model.n_experts)
    leaked = sum(h.object == h.middle for h in ds.held_out_compositions())
    assert leaked == 2                                     # Morocco → Arabic → Arabic, …
    n_tpl = len(config.DEFAULT_TEMPLATES[("P37", "P282")])
    assert sum(m["copy_middle_correct"]) >= leaked * min(n_tpl, 2)
    assert m["copyable_fraction"] == pytest.approx(np.mean(m["copy_middle_correct"]))
    assert m["copy_middle_baseline"] > 0


def test_cache_returns_the_result_without_retraining(tiny_run, monkeypatch):
    cfg, folder, r = tiny_run

    def boom(*a, **k):
        raise AssertionError("retrained a cached run")

    monkeypatch.setattr(model_pkg, "build_and_train", boom)
    again = run_two_hop(cfg, folder)
    assert again["cached"] is True
    assert {k: v for k, v in again.items() if k != "cached"} == \
        {k: v for k, v in r.items() if k != "cached"}


def test_a_re_executed_chapter_reads_its_earlier_runs(tiny_run, tmp_path, monkeypatch):
    """The grid looks a run up in ``reuse_from`` (an earlier execution's artifacts, the
    chapter's ``runs_from``) after its own folder: re-executing the chapter trains nothing it
    trained before.  Without the folder, the same grid trains (the control)."""
    cfg, folder, r = tiny_run

    def boom(*a, **k):
        raise AssertionError("retrained a cached run")

    monkeypatch.setattr(model_pkg, "build_and_train", boom)
    (again,) = run_two_hop_grid([cfg], tmp_path / "fresh", progress=False, workers=1,
                                reuse_from=[folder])
    assert again["cached"] is True and again["key"] == r["key"]
    with pytest.raises(GridError, match="retrained a cached run"):
        run_two_hop_grid([cfg], tmp_path / "other", progress=False, workers=1)
    with pytest.raises(ValueError, match="reuse_from = .*a sequence of folders"):
        run_two_hop_grid([cfg], tmp_path / "fresh", reuse_from=folder)


@pytest.mark.parametrize("damage", ["truncated", "not json", "other config", "list"])
def test_a_corrupt_cache_file_is_redone(tiny_run, tmp_path, monkeypatch, caplog, damage):
    cfg, folder, r = tiny_run
    path = th.result_path(cfg, tmp_path)
    path.parent.mkdir(parents=True)
    good = th.result_path(cfg, folder).read_text()
    path.write_text({"truncated": good[:len(good) // 2], "not json": "\x00\xff",
                     "list": "[1, 2]",
                     "other config": json.dumps(dict(json.loads(good), key="0" * 16))}[damage])
    calls = []
    real = model_pkg.build_and_train
    monkeypatch.setattr(model_pkg, "build_and_train",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    with caplog.at_level(logging.WARNING, logger="moe_routing.experiments.two_hop.runs"):
        redone = run_two_hop(cfg, tmp_path)
    assert calls == [1] and redone["cached"] is False
    assert [rec.getMessage() for rec in caplog.records if str(path) in rec.getMessage()]
    assert json.loads(path.read_text())["key"] == cfg.key()          # replaced by a good one
    assert redone["held_out"] == r["held_out"]                       # seeded: the same run


# ---- the grid ---------------------------------------------------------------------------------
def test_grid_runs_through_the_executor_and_frames_one_row_per_run(tmp_path, monkeypatch):
    configs = two_hop_grid(n_layers=(1, 2), objectives=("ce", "ce+router"), seeds=(0,),
                           base=tiny(steps=3))
    res = run_two_hop_grid(configs + configs[:1], tmp_path, executor="local", workers=1,
                           progress=False)
    assert [r["key"] for r in res] == [c.key() for c in configs + configs[:1]]
    assert [r["cached"] for r in res] == [False] * 4 + [True]       # a repeat is shared
    assert sorted(p.stem for p in (tmp_path / "two_hop").iterdir()) == \
        sorted(c.key() for c in configs)
    frame = two_hop_frame(res[:4])
    assert len(frame) == 4 and list(frame["n_layers"]) == [1, 1, 2, 2]
    assert list(frame["objective"]) == ["ce", "ce+router", "ce", "ce+router"]
    assert frame.loc[frame.n_layers == 1, "l2_hop2_reuse"].isna().all()
    assert frame.loc[frame.n_layers == 2, "l2_hop2_reuse"].notna().all()
    assert (frame["held_out_low"] <= frame["held_out"]).all()
    cells = two_hop_cells(res[:4])
    assert len(cells) == 4 and set(cells["n_seeds"]) == {1}
    # one seed: the held-out interval is the run's own, clustered by composition
    for row, r in zip(cells.itertuples(), sorted(res[:4], key=lambda r: (
            r["config"]["model"]["n_layers"], r["config"]["objective"]))):
        assert row.held_out_half_width == pytest.approx(r["held_out"]["interval"]["half_width"])
    assert cells["copy_middle_baseline"].eq(0).all()
    d = th.held_out_differences(res[:4], 2, "ce+router", control=(1, "ce+router"))
    two = next(r for r in res if r["config"]["model"]["n_layers"] == 2
               and r["config"]["objective"] == "ce+router")
    one = next(r for r in res if r["config"]["model"]["n_layers"] == 1
               and r["config"]["objective"] == "ce+router")
    assert d["seeds"] == [0]
    assert d["control"].mean == pytest.approx(two["held_out"]["accuracy"]
                                              - one["held_out"]["accuracy"])
    assert d["majority"].mean == pytest.approx(two["held_out"]["accuracy"]
                                               - two["majority_baseline"])
    assert d["copy_middle"].mean == pytest.approx(two["held_out"]["accuracy"])
    # a cell against itself: the same answer on every query, no difference and no spread
    same = th.held_out_differences(res[:4], 2, "ce", control=(2, "ce"))["control"]
    assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match=r"control = \(1, 'ce\+lb'\).*cell of the results"):
        th.held_out_differences(res[:4], control=(1, "ce+lb"))

    def boom(*a, **k):
        raise AssertionError("retrained a cached run")

    monkeypatch.setattr(th, "run_two_hop", boom)
    again = run_two_hop_grid(configs, tmp_path, executor="local", workers=1, progress=False)
    assert all(r["cached"] for r in again)
    with pytest.raises(ValueError, match="results = 'dict'"):
        two_hop_frame(res[0])
    with pytest.raises(ValueError, match=r"results\[0\]"):
        two_hop_frame([{"config": {}}])


# ---- the regime where the experts hold the facts, its witness, the word control ---------------
def test_a_coded_run_fixes_the_entity_rows_and_records_the_experts_off_witness(tmp_path,
                                                                              monkeypatch):
    """``entity_codes`` reaches the model: the entities' rows are the fixed code buffer from
    the vocabulary's first entity id on (not trained), and the result records what the model
    recalls with every expert's output zeroed -- on the training facts and the test splits."""
    cfg = tiny(entity_codes=4, steps=30)
    seen = {}
    real = model_pkg.build_and_train

    def spy(mcfg, data, tcfg, **kw):
        seen["mcfg"] = mcfg
        return real(mcfg, data, tcfg, **kw)

    monkeypatch.setattr(model_pkg, "build_and_train", spy)
    r = run_two_hop(cfg, tmp_path)
    ds = th.two_hop_dataset(cfg)
    assert seen["mcfg"].entity_codes == 4
    assert seen["mcfg"].code_start == int(ds.tokenizer.entity_ids.min())
    assert r["model_config"]["entity_codes"] == 4 and r["config"]["model"]["entity_codes"] == 4
    off = r["experts_off"]
    assert set(off) == {"train_single_hop", "train_two_hop", "single_hop", "held_out"}
    assert all(0 <= v <= 1 for v in off.values())
    frame = two_hop_frame([r])
    assert frame.train_single_hop_experts_off.iloc[0] == off["train_single_hop"]
    assert frame.entity_codes.iloc[0] == 4
    assert cfg.key() != tiny(steps=30).key()                 # codes are part of the run


def test_the_witness_zeroes_the_experts_and_puts_them_back():
    """:func:`experts_knocked_out` changes what a model predicts (its experts are zeroed) and
    restores it exactly, also its own knock-out state."""
    from moe_routing.experiments.task_routing.data import experts_knocked_out
    from moe_routing.model import MoEConfig, MoETransformer

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(vocab_size=20, max_len=6, d_model=16, n_heads=2,
                                     n_experts=3, d_expert=8, n_layers=2)).eval()
    x = torch.randint(0, 20, (4, 6))
    with torch.no_grad():
        before = model(x).logits
        with experts_knocked_out(model):
            inside = model(x).logits
        after = model(x).logits
    assert not torch.allclose(before, inside)
    assert torch.equal(before, after)


def test_the_word_control_shares_no_word_the_chapters_templates_do():
    """:func:`shared_hop_words` finds the words a two-hop template has before its object slot
    in common with its hops' templates: several for the chapter's templates, none for the
    control's, and a planted one ("capital") when a control template is given it."""
    from moe_routing.experiments.two_hop import (WORD_DISJOINT_TEMPLATES, shared_hop_words,
                                                 two_hop_dataset)

    base = tiny()
    chapter = shared_hop_words(two_hop_dataset(base))
    assert {"capital", "country"} <= set(chapter["P36∘P17"])
    assert "written" in chapter["P282∘P37"]
    words = tuple(WORD_DISJOINT_TEMPLATES[c] for c in base.data.chains)
    control = base.replace(templates=words)
    assert shared_hop_words(two_hop_dataset(control)) == {"P36∘P17": (), "P282∘P37": ()}
    planted = (words[0][:-1] + ("The capital seen from ⋆1 is ⋆2.",), words[1])
    # the tiny dataset's two P36 templates: "The capital of ⋆1 is ⋆2.", "⋆1's capital city is"
    assert shared_hop_words(two_hop_dataset(base.replace(templates=planted)))["P36∘P17"] == (
        "The", "capital", "is")


def test_the_grid_trains_the_cells_it_is_given_and_refuses_bad_ones():
    cfgs = two_hop_grid(seeds=[0, 1], base=tiny(), cells=[[1, "ce+router"], [2, "ce"]])
    assert [(c.model.n_layers, c.objective, c.seed) for c in cfgs] == [
        (1, "ce+router", 0), (1, "ce+router", 1), (2, "ce", 0), (2, "ce", 1)]
    for bad, word in (([[1, "ce"], [1, "ce"]], "distinct pairs"), ([[1]], r"cells\[0\]"),
                      ([[3, "ce"]], "n_layers"), ([[1, "cee"]], "objective"), ("12", "cells")):
        with pytest.raises(ValueError, match=word):
            two_hop_grid(seeds=[0], base=tiny(), cells=bad)


def test_the_chapters_reading_of_the_held_out_verdict_and_its_witness_table():
    """Each verdict of the held-out rule has its sentence, and a word the rule never says is
    refused (a new verdict word cannot be read as one of these silently); the witness table
    subtracts the experts-off score from the score with the experts."""
    import pandas as pd

    from moe_routing._internal.chapters import two_hop as shown
    from moe_routing._internal.verdicts import two_hop as rules

    for verdict in ("our extension", "not supported", "inconclusive"):
        assert shown.composition_reading(verdict)
    assert "not borne out" in shown.composition_reading("not supported")
    with pytest.raises(ValueError, match="'partly'"):
        shown.composition_reading("partly")
    # the rule's own verdicts are the three read here
    said = {rules.held_out_composes((0.1, 0.05, 0.2), (0.1, 0.05, 0.2), (0.1, 0.05, 0.2), 20,
                                    0.9).verdict,
            rules.held_out_composes((-0.1, -0.2, -0.05), (0.1, 0.05, 0.2), (0.1, 0.05, 0.2),
                                    20, 0.9).verdict,
            rules.held_out_composes((0.1, -0.05, 0.2), (0.1, 0.05, 0.2), (0.1, 0.05, 0.2), 20,
                                    0.9).verdict}
    assert said == {"our extension", "not supported", "inconclusive"}
    cells = pd.DataFrame(dict(n_layers=[2], objective=["ce"], train_single_hop=[1.0],
                              train_single_hop_experts_off=[0.34]))
    row = shown.witness_table(cells).iloc[0]
    assert (row["single-hop training facts (%)"], row["experts off (%)"],
            row["held by the experts (points)"]) == ("100", "34", "66")


def test_convergence_reads_the_held_out_score_and_its_noise(tiny_run):
    """One entry per run: the CE drop and the held-out change come from the run's history
    (the evaluation at three quarters against the last), the noise is the binomial one of two
    evaluations on its held-out sentences."""
    from moe_routing.experiments.two_hop import two_hop_convergence

    cfg, _, r = tiny_run
    (label, (drop, change, noise)), = two_hop_convergence([r]).items()
    assert label == "2 layers, ce+lb, seed 0"
    evals = {e["step"]: e["held_out"] for e in r["history"]["evals"]}
    last = max(evals)
    q3 = min((s for s in evals if s < last), key=lambda s: abs(s - 0.75 * last))
    assert change == pytest.approx(evals[last] - evals[q3])
    p, n = r["held_out"]["accuracy"], r["held_out"]["n"]
    assert noise == pytest.approx(1.96 * np.sqrt(2 * p * (1 - p) / n))
    assert np.isfinite(drop) or cfg.train.steps < 10       # 6 steps: too few logged losses
