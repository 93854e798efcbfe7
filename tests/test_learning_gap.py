"""The paired gap of two objectives along training (``claims.gap_along_training``) and the
budgets line of the convergence box: what the training chapter reads the variant's learning
speed from."""

from __future__ import annotations

import numpy as np
import pytest

from moe_routing._internal.chapters.training import budgets
from moe_routing.experiments.task_routing import claims


def _run(objective: str, seed: int, accs, steps: int = 80, codes=None) -> dict:
    """A result with the fields ``learning_curve`` reads: evaluations every tenth of training
    and a logged CE per step."""
    at = np.linspace(steps / len(accs), steps, len(accs)).astype(int)
    return {"key": f"{objective}-{seed}-{steps}", "accuracy": float(accs[-1]),
            "config": {"objective": objective, "seed": seed, "steps": steps,
                       "entity_codes": codes},
            "history": {"step": list(range(1, steps + 1)),
                        "ce": list(np.linspace(3.0, 0.1, steps)),
                        "evals": [{"step": int(s), "accuracy": float(a)}
                                  for s, a in zip(at, accs)]}}


def test_a_gap_that_closes_is_largest_midway_and_small_at_the_end():
    ref = [_run("ce", s, [0.5, 0.8, 0.9, 0.9]) for s in (0, 1)]
    slow = [_run("ce+router", s, [0.2, 0.6, 0.88, 0.89]) for s in (0, 1)]
    g = claims.gap_along_training(slow, ref)
    assert g["largest"] == pytest.approx(-0.3) and g["largest_step"] == 20
    assert g["final"] == pytest.approx(-0.01) and g["n_pairs"] == 2
    worse = [_run("ce+router", s, [0.4, 0.7, 0.8, 0.8]) for s in (0, 1)]
    assert claims.gap_along_training(worse, ref)["final"] == pytest.approx(-0.1)


def test_the_gap_pairs_by_seed_and_refuses_runs_it_cannot_pair():
    ref = [_run("ce", 0, [0.5, 0.9]), _run("ce", 1, [0.7, 0.9])]
    a = [_run("ce+router", 1, [0.5, 0.9]), _run("ce+router", 2, [0.1, 0.1])]
    g = claims.gap_along_training(a, ref)                 # only seed 1 pairs
    assert g["n_pairs"] == 1 and g["largest"] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match="seeds"):
        claims.gap_along_training([_run("ce+router", 5, [0.5, 0.9])], ref)
    with pytest.raises(ValueError, match="evaluation steps"):
        claims.gap_along_training([_run("ce+router", 0, [0.5, 0.9], steps=60)], ref)


def test_budgets_name_each_arms_steps():
    runs = [_run("ce", 0, [0.5]), _run("ce", 1, [0.5], steps=300, codes=4)]
    assert budgets(runs) == "paper's setting 80 steps, our variant 300 steps"
    assert budgets(runs[:1]) == "paper's setting 80 steps"


def test_a_recorded_controls_table_is_shown_only_for_its_own_variant():
    """benchmarks/variant_controls.py's record is this profile's only when its variant, seeds
    and A-Fig. 2 cell are the profile's: a record of another size reads as not run."""
    from moe_routing._internal.chapters.training import (control_glues, recorded_control_table,
                                                         recorded_controls)

    iv = dict(mean=0.9, low=0.88, high=0.92)
    d = dict(mean=-0.01, low=-0.03, high=0.01)
    rec = dict(commit="abc", codes_variant={"entity_codes": 4, "n_pairs": 25}, seeds=[0, 1],
               fig2=[20, 7], rows=[dict(control="weight λ = 0.1", accuracy=iv, vs_router=d,
                                        vs_ce=d, effect="changes nothing resolvable")])
    cv = {"entity_codes": 4, "n_pairs": 25}
    assert recorded_controls(rec, cv, [0, 1], (20, 7)) is rec
    assert recorded_controls(rec, {**cv, "steps": 3000}, [0, 1], (20, 7)) is None
    assert recorded_controls(rec, cv, [0, 1, 2], (20, 7)) is None
    assert recorded_controls(rec, cv, [0, 1], (20, 3)) is None
    assert recorded_controls(rec, None, [0, 1], (20, 7)) is None
    assert recorded_controls(None, cv, [0, 1], (20, 7)) is None
    table = recorded_control_table(rec)
    assert table.loc["weight λ = 0.1", "− CE (pp)"] == "-1.0 [-3.0, +1.0]"
    glues = control_glues({r["control"]: r["effect"] for r in rec["rows"]})
    assert glues["weight"] == "changes nothing resolvable"
    assert glues["oracle"] == "not run in this profile"
    assert set(control_glues({}).values()) == {"not run in this profile"}
    from moe_routing._internal.chapters.training import oracle_accuracy

    oracle = dict(rec["rows"][0], control="routed by the task (oracle), no router loss")
    assert oracle_accuracy(None, {**rec, "rows": [oracle]}) == pytest.approx(0.9)
    assert np.isnan(oracle_accuracy(None, rec)) and np.isnan(oracle_accuracy(None, None))
