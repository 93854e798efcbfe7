"""The power of the training chapter's verdict rules: what each would say of a broken model.

A rule that reads *reproduced* for a model that cannot have the property it tests carries no
information.  So every rule of :mod:`moe_routing._internal.verdicts.training` is also fed the
measurements of deliberately broken variants of the A-Fig. 2 configuration -- real training
runs or measurements of real models, through the same inputs the chapter gives it
(:mod:`.claims`):

=============================  ==========================================================
variant                         what is broken
=============================  ==========================================================
constant router                 trained with the router's weights held at 0: constant
                                logits, every token at expert 0 (a router bug)
collapsed routing               the trained CE model, measured with every token sent to
                                its most used expert
shuffled task labels            CE + task router trained with the sentences' task labels
                                permuted: supervised towards a random expert per sentence
dense, fewer active parameters  one expert a quarter as wide as the MoE's experts
untrained                       the initial model, no training step
stopped early                   the CE run stopped after a tenth of the steps
=============================  ==========================================================

Each variant takes, in turn, the place of the run a rule judges (the CE and CE + LB runs for
``routing_diffuse``; the task-router run for ``routing_aligned``, the accuracy rules and
``active_parameters``; the runs for ``runs_converged``), the other inputs staying those of the
real runs.  :data:`MUST_FAIL` lists the pairs where the rule must say its negative word (or
refuse the measurement), :data:`MUST_ABSTAIN` those it cannot decide and must read
*inconclusive*: ``tests/test_rule_power.py`` holds both on real runs, and the chapter prints the
whole table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..._internal.validation import choice, fail, require
from ..._internal.verdicts import training as rules
from . import claims
from .config import ExperimentConfig

#: variant name -> what is broken (the module docstring's table)
VARIANT_NAMES = ("constant router", "collapsed routing", "shuffled task labels",
                 "dense, fewer active parameters", "untrained", "stopped early")

RULES = ("routing_diffuse", "routing_aligned", "accuracy_comparable", "accuracy_in_band",
         "active_parameters", "runs_converged")

#: (rule, variant) pairs where the rule must say its negative word (or refuse the measurement):
#: the variant cannot have the property the rule tests
MUST_FAIL = frozenset({
    ("routing_diffuse", "constant router"), ("routing_diffuse", "collapsed routing"),
    ("routing_aligned", "constant router"), ("routing_aligned", "collapsed routing"),
    ("routing_aligned", "shuffled task labels"),
    ("runs_converged", "stopped early"), ("runs_converged", "untrained"),
})

#: (rule, variant) pairs the rule cannot decide and must say so (*inconclusive*, or refuse):
#: an untrained model's routing or accuracy says nothing about what training does, and a run
#: stopped while still improving can neither confirm nor refute an accuracy claim
MUST_ABSTAIN = frozenset({
    ("routing_diffuse", "untrained"), ("routing_aligned", "untrained"),
    ("accuracy_comparable", "untrained"), ("accuracy_comparable", "stopped early"),
    ("accuracy_in_band", "untrained"), ("accuracy_in_band", "stopped early"),
    ("active_parameters", "untrained"), ("active_parameters", "stopped early"),
})

#: the words that count as failing, and as abstaining (a refusal counts as both)
NEGATIVE = ("not reproduced", "not supported", "refused")
ABSTAIN = ("inconclusive", "refused")


def broken_configs(fig2: Sequence[ExperimentConfig]) -> dict[str, ExperimentConfig]:
    """The variants of the A-Fig. 2 configuration (its ``ce`` and ``ce+router`` runs)."""
    if isinstance(fig2, ExperimentConfig) or not isinstance(fig2, Sequence):
        fail("fig2", type(fig2).__name__, "the A-Fig. 2 configurations (a sequence)")
    by_obj = {c.objective: c for c in fig2 if isinstance(c, ExperimentConfig)}
    require({"ce", "ce+router"} <= set(by_obj), "fig2", sorted(by_obj),
            "configurations with objectives 'ce' and 'ce+router'")
    ce, rt = by_obj["ce"], by_obj["ce+router"]
    require(ce.model.n_experts > 1, "fig2 n_experts", ce.model.n_experts,
            "more than one expert")
    return {
        "constant router": ce.replace(variant="constant_router"),
        "collapsed routing": ce.replace(variant="collapsed"),
        "shuffled task labels": rt.replace(variant="shuffled_tasks"),
        "dense, fewer active parameters": ce.replace(n_experts=1,
                                                     d_expert=max(1, ce.model.d_expert // 4)),
        "untrained": ce.replace(variant="untrained"),
        "stopped early": ce.replace(steps=max(8, ce.train.steps // 10)),
    }


@dataclass(frozen=True)
class PowerRow:
    """One rule × one model: the verdict word, its reason, and whether it had to fail."""

    rule: str
    variant: str
    verdict: str
    reason: str
    must_fail: bool
    must_abstain: bool = False

    @property
    def ok(self) -> bool:
        """False only where the rule had to fail, or to abstain, and did not."""
        if self.must_fail:
            return self.verdict in NEGATIVE
        return not self.must_abstain or self.verdict in ABSTAIN


def _converged(model: dict) -> bool:
    """Whether ``model``'s own run had converged (False where it cannot be judged: an
    untrained model has no training history)."""
    try:
        return claims.converged([model]).verdict == "our extension"
    except ValueError:
        return False


def _judge(rule: str, model: dict, real: Mapping[str, dict], dense: Sequence[dict],
           one_expert: Sequence[dict]):
    ce, lb = real["ce"], real["ce+lb"]
    if rule == "routing_diffuse":
        return claims.diffuse(model, model, claims.ceiling_nmi(ce))
    if rule == "routing_aligned":
        return claims.aligned(model, ce, lb)
    conv = _converged(model)
    if rule == "accuracy_comparable":
        cell = (int(ce["config"]["n_tasks"]), int(ce["config"]["n_experts"]))
        std = min(float(ce["accuracy"]), float(lb["accuracy"]))
        return rules.accuracy_comparable(
            {cell: (claims.cell_difference([model], [ce]), claims.cell_difference([model], [lb]),
                    std)}, min_expert_counts=1, converged=conv)
    if rule == "accuracy_in_band":
        iv = claims.cell_interval([model])
        return rules.accuracy_in_band([iv], [iv], converged=conv)
    if rule == "active_parameters":
        return claims.active([model], dense, [ce, lb], one_expert, converged=conv)
    return claims.converged([model])


def power_table(real: Mapping[str, dict], broken: Mapping[str, dict],
                dense: Sequence[dict] = (), one_expert: Sequence[dict] = ()) -> list[PowerRow]:
    """Every rule × (the real router/CE runs, then every broken variant).

    real : objective -> the A-Fig. 2 run of that objective (``ce``, ``ce+lb``, ``ce+router``).
    broken : variant name (:data:`VARIANT_NAMES`) -> its run result.
    dense, one_expert : the dense runs with the MoE's total parameters and the one-expert runs
        with its active parameters (for ``active_parameters``; the rule is left out without
        both).
    The "working model" column judges the real runs in each rule's own role.  A rule that
    refuses a variant's measurement (a NaN: an untrained model has no training history) is
    recorded as ``refused`` with the refusal as reason.
    """
    if not isinstance(real, Mapping) or not {"ce", "ce+lb", "ce+router"} <= set(real):
        fail("real", type(real).__name__, "a mapping with the runs 'ce', 'ce+lb', 'ce+router'")
    if not isinstance(broken, Mapping):
        fail("broken", type(broken).__name__, "a mapping variant name -> run result")
    for name in broken:
        choice("broken variant", name, VARIANT_NAMES)
    dense, one_expert = list(dense), list(one_expert)
    rows = []
    for rule in RULES:
        if rule == "active_parameters" and not (dense and one_expert):
            continue
        models = {"working model": None, **broken}
        for variant, model in models.items():
            if model is None:                        # the real runs, each in its own role
                model = real["ce"] if rule == "routing_diffuse" else real["ce+router"]
                if rule == "routing_diffuse":
                    v = claims.diffuse(real["ce"], real["ce+lb"])
                elif rule == "runs_converged":
                    v = claims.converged(list(real.values()))
                else:
                    v = _judge(rule, model, real, dense, one_expert)
            else:
                try:
                    v = _judge(rule, model, real, dense, one_expert)
                except ValueError as e:
                    rows.append(PowerRow(rule, variant, "refused", str(e).split(";")[0],
                                         (rule, variant) in MUST_FAIL,
                                         (rule, variant) in MUST_ABSTAIN))
                    continue
            rows.append(PowerRow(rule, variant, v.verdict, v.reason,
                                 (rule, variant) in MUST_FAIL, (rule, variant) in MUST_ABSTAIN))
    return rows


__all__ = ["ABSTAIN", "MUST_ABSTAIN", "MUST_FAIL", "NEGATIVE", "PowerRow", "RULES",
           "VARIANT_NAMES", "broken_configs", "power_table"]
