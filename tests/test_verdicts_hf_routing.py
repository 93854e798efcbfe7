"""The Mixtral-style comparison's rule (ours) on each of its outcomes.

Constructed intervals show every outcome and every refusal; one real measurement (a tiny
Mixtral-style model and the library's model trained on the same dataset, seconds) shows the
rule reads what the experiment returns.
"""

import pytest

from moe_routing._internal.verdicts import hf_routing as rules
from moe_routing._internal.verdicts.hf_routing import ACCURACY_FLOOR

LEARNED = {o: 0.9 for o in ("ce", "ce+lb", "ce+router")}      # every model learned the facts


def hf_same_contrast(library, mixtral, lib_acc=LEARNED, mix_acc=LEARNED, **kw):
    """The rule on models that learned the facts unless told otherwise."""
    return rules.hf_same_contrast(library, mixtral, lib_acc, mix_acc, **kw)


LIB = {"ce": [(0.20, 0.15, 0.25)], "ce+lb": [(0.25, 0.20, 0.30)],
       "ce+router": [(0.80, 0.70, 0.90)]}


def mix(l1, l2):
    """Mixtral intervals: per objective (layer 1, layer 2) means, ±0.05."""
    return {o: [(m, m - 0.05, m + 0.05) for m in (l1[i], l2[i])]
            for i, o in enumerate(("ce", "ce+lb", "ce+router"))}


def test_every_contrast_at_every_layer_is_our_extension():
    v = hf_same_contrast(LIB, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)))
    assert v.verdict == "our extension" and "all 4 shown" in v.reason
    assert v.rule.endswith("hf_same_contrast")


def test_one_layer_only_or_one_contrast_only_is_partly():
    one_layer = hf_same_contrast(LIB, mix((0.2, 0.3, 0.9), (0.2, 0.3, 0.32)))
    assert one_layer.verdict == "partly" and "3 of 4" in one_layer.reason
    one_pair = hf_same_contrast(LIB, mix((0.2, 0.85, 0.9), (0.2, 0.85, 0.9)))
    assert one_pair.verdict == "partly" and "2 of 4" in one_pair.reason


def test_the_reverse_or_no_separation_is_not_reproduced():
    reverse = hf_same_contrast(LIB, mix((0.9, 0.9, 0.2), (0.9, 0.9, 0.2)))
    assert reverse.verdict == "not supported" and "none shown" in reverse.reason
    overlap = hf_same_contrast(LIB, mix((0.5, 0.5, 0.55), (0.5, 0.5, 0.55)))
    assert overlap.verdict == "not supported"


def test_a_library_without_a_contrast_has_nothing_to_reproduce():
    flat = {o: [(0.5, 0.4, 0.6)] for o in LIB}
    v = hf_same_contrast(flat, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)))
    assert v.verdict == "not supported" and "no contrast to reproduce" in v.reason


def test_the_direction_is_the_librarys():
    # a library whose CE routes *more* by task than CE + task router: Mixtral must agree
    rev = {"ce": [(0.8, 0.7, 0.9)], "ce+lb": [(0.8, 0.7, 0.9)], "ce+router": [(0.2, 0.1, 0.3)]}
    assert hf_same_contrast(rev, mix((0.9, 0.9, 0.2), (0.9, 0.9, 0.2))).verdict == "our extension"
    assert hf_same_contrast(rev, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7))).verdict == "not supported"


def test_models_below_the_accuracy_floor_are_inconclusive_by_the_rule():
    """Mixtral-style models at 5 % exact match with the task router's NMI at 0.77: that loss
    optimises the NMI directly, on a model that learned nothing too -- not read."""
    sound = mix((0.05, 0.08, 0.77), (0.07, 0.06, 0.77))
    low = {"ce": 0.049, "ce+lb": 0.052, "ce+router": 0.06}
    v = hf_same_contrast(LIB, sound, mix_acc=low)
    assert v.verdict == "inconclusive" and "below the 50 % floor" in v.reason
    assert "Mixtral ce 4.9 %" in v.reason and "not read" in v.reason
    # a library model below the floor has no contrast to stand for either
    v = hf_same_contrast(LIB, sound, lib_acc={**LEARNED, "ce": 0.3})
    assert v.verdict == "inconclusive" and "library ce 30.0 %" in v.reason
    # the same NMIs on models above the floor are read; the floor is stated and adjustable
    assert ACCURACY_FLOOR == 0.5
    assert hf_same_contrast(LIB, sound).verdict == "our extension"
    assert hf_same_contrast(LIB, sound, mix_acc=low, floor=0.04).verdict == "our extension"


def test_the_accuracy_input_is_checked_by_name():
    with pytest.raises(ValueError, match="mixtral_accuracy objectives"):
        hf_same_contrast(LIB, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)), mix_acc={"ce": 0.9})
    with pytest.raises(ValueError, match=r"library_accuracy\['ce'\]"):
        hf_same_contrast(LIB, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)),
                         lib_acc={**LEARNED, "ce": 96.0})
    with pytest.raises(ValueError, match="floor"):
        hf_same_contrast(LIB, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)), floor=1.5)


@pytest.mark.parametrize("bad, match", [
    ({"ce": [(0.2, 0.1, 0.3)]}, "objectives"),
    ({**LIB, "ce": [(0.2, 0.3, 0.4)]}, "low ≤ mean ≤ high"),
    ({**LIB, "ce": [(float("nan"), 0.1, 0.3)]}, "nan is not allowed"),
    ({**LIB, "ce": []}, "one per layer"),
    ({**LIB, "ce": [(1.2, 0.1, 1.3)]}, "mean"),
    ([0.1, 0.2], "mapping"),
])
def test_bad_input_is_refused_naming_it(bad, match):
    with pytest.raises(ValueError, match=match):
        hf_same_contrast(bad, mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7)))


def test_layers_must_agree_across_objectives():
    m = mix((0.2, 0.3, 0.9), (0.1, 0.2, 0.7))
    m["ce"] = m["ce"][:1]
    with pytest.raises(ValueError, match="same number of layers"):
        hf_same_contrast(LIB, m)


@pytest.mark.training
def test_the_rule_reads_real_measurements(real_comparisons):
    lib, mixtral = real_comparisons
    acc = {m.model: {o: m.accuracy(o) for o in m.objectives} for m in (lib, mixtral)}
    real = hf_same_contrast(lib.nmi_by_layer(), mixtral.nmi_by_layer(), acc[lib.model],
                            acc[mixtral.model])
    # toy models of 40 steps: whether they pass the floor decides whether NMI is read
    learned = min(a.mean for per in acc.values() for a in per.values()) >= ACCURACY_FLOOR
    assert (real.verdict == "inconclusive") == (not learned), real.reason
    # on this easy dataset both models separate the objectives at every layer (read with
    # the floor at 0: the ordering itself)
    v = hf_same_contrast(lib.nmi_by_layer(), mixtral.nmi_by_layer(), floor=0.0)
    assert v.verdict == "our extension", v.reason
    assert f"{lib.cell('ce+router', 1).nmi.mean:.2f}" in v.reason
    # and the rule fails on the same real measurements with Mixtral's labels swapped
    swapped = mixtral.nmi_by_layer()
    swapped["ce"], swapped["ce+router"] = swapped["ce+router"], swapped["ce"]
    swapped["ce+lb"] = swapped["ce+router"]
    assert hf_same_contrast(lib.nmi_by_layer(), swapped).verdict == "not supported"

@pytest.fixture(scope="module")
def real_comparisons(tmp_path_factory):
    """The library's model and the Mixtral-style model, each objective × 2 seeds, trained
    on one tiny dataset (seconds): what the chapter feeds the rule, at toy size."""
    import importlib.util

    import torch

    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (the 'hf' extra)")
    from moe_routing.experiments.grid import GridSession
    from moe_routing.experiments.hf_routing import runs as hr
    from moe_routing.experiments.task_routing.config import ExperimentConfig
    from moe_routing.experiments.task_routing.data import experiment_dataset
    from moe_routing.experiments.task_routing.runs import load_model, run_experiment

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folder = tmp_path_factory.mktemp("rule")
        base = ExperimentConfig.from_flat(n_tasks=3, n_experts=3, objective="ce",
                                          n_relations=6, n_pairs=8, n_templates=3, d_model=16,
                                          n_heads=2, d_expert=16, steps=40, batch_size=32,
                                          lr=0.01, device="cpu")
        ds = experiment_dataset(base)
        models, acc = {}, {}
        for o in ("ce", "ce+lb", "ce+router"):
            for s in (0, 1):
                cfg = base.replace(objective=o, seed=s)
                acc[o, s] = run_experiment(cfg, folder)["accuracy"]
                models[o, s] = load_model(cfg, folder)
        lib = hr.library_routing(models, ds, acc)
        runs = hr.mixtral_runs(base.data, 3, [0, 1], d_model=16, d_expert=16, steps=40,
                               batch_size=32)
        with GridSession(None, 1) as session:
            return lib, hr.hf_routing_experiment(runs, session=session)
    finally:
        torch.set_num_threads(old)
