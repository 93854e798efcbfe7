"""The training chapter's runs, from its parameters: one plan for the chapter and its tools.

The chapter (``notebooks/training.md``), the GPU check (``scripts/gpu_check.py``) and the tests
build the same configurations from the same parameters through :func:`training_plan`, so the
set of runs a projection times is the set the chapter trains.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...model.losses import OBJECTIVES
from ..._internal.validation import flag, integer, require, sequence
from .power import broken_configs
from .config import CONTROLS, ExperimentConfig
from .runs import grid_configs


@dataclass(frozen=True)
class TrainingPlan:
    """Every configuration of the chapter, validated before anything is trained.

    Paper A's claims are decided in the paper's setting, where every entity has a learned
    embedding row (``grid``, ``dense``, ``fig2``); the book's capacity-bound variant, whose
    entities are fixed random codes (:class:`~moe_routing.model.MoEShape`'s ``entity_codes``,
    ours), runs beside it at A-Fig. 2's configuration and decides the book's own claims
    (``variant``).

    fig2 : A-Fig. 2's configuration with the three objectives (first seed), paper's setting.
    grid : tasks × experts × objectives × seeds, paper's setting.
    dense : per seed, one expert as wide as all the experts of the largest MoE together, at
        the largest number of tasks (the same total parameters, all active).
    variant : A-Fig. 2's configuration × objectives × seeds with fixed entity codes and the
        other changes of ``codes_variant`` (ours); empty without it.
    controls : the variant's task-router runs with the loss changed, × seeds: its gradient
        stopped at the router's input, the loss only at the task-determined positions, routed
        by the task with no router (the oracle), and a tenth of its weight
        (:data:`~moe_routing.experiments.task_routing.config.CONTROLS`); empty without a variant or with
        ``controls`` off.
    broken : the broken variants of A-Fig. 2's configuration (:mod:`.power`), or none.
    seeds : the plan's seeds, in order.
    codes_variant : the fields the variant changes (``codes_variant`` checked), or None.

    What a chapter prints about its runs (sizes, budget, variant) is read from here and from
    the configurations, not from the parameters again: the tables cannot drift from what runs.
    """

    fig2: tuple[ExperimentConfig, ...]
    grid: tuple[ExperimentConfig, ...]
    dense: tuple[ExperimentConfig, ...]
    variant: tuple[ExperimentConfig, ...] = ()
    controls: tuple[ExperimentConfig, ...] = ()
    broken: dict[str, ExperimentConfig] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    codes_variant: dict | None = None

    @property
    def n_tasks_max(self) -> int:
        return max(c.data.n_tasks for c in self.grid)

    @property
    def n_experts_max(self) -> int:
        return max(c.model.n_experts for c in self.grid)

    def configs(self) -> list[ExperimentConfig]:
        return [*self.fig2, *self.grid, *self.dense, *self.variant, *self.controls,
                *self.broken.values()]

    def distinct(self) -> list[ExperimentConfig]:
        """One configuration per training key (the one-expert cells of the three objectives
        are one run, as :func:`~moe_routing.experiments.task_routing.run_grid` trains them)."""
        unique: dict[str, ExperimentConfig] = {}
        for c in self.configs():
            unique.setdefault(json.dumps(c.training_key(), sort_keys=True), c)
        return list(unique.values())


#: the fields that make a run one of the plan's cells (the plan sets them), which neither the
#: shared run fields nor ``codes_variant`` can change
_CELL = ("n_tasks", "n_experts", "objective", "seed", "control", "variant")


def run_fields() -> tuple[str, ...]:
    """The fields every run of a plan shares, by their flat names: every field of
    :class:`~moe_routing.experiments.task_routing.ExperimentConfig` but those that place a run
    in the plan (:data:`_CELL`), ``device`` (resolved by the caller and passed by name) and
    ``entity_codes`` (the variant's, through ``codes_variant``: the grid is the paper's
    setting)."""
    names = [*ExperimentConfig._owners(), *ExperimentConfig._own()]
    return tuple(sorted(n for n in names if n not in (*_CELL, "device", "entity_codes")))


def plan_knobs(params: Mapping) -> dict:
    """The parameters of :func:`training_plan` found in ``params``, by name: its keywords and
    every shared run field (:func:`run_fields`), except ``device``.

    ``params`` is a chapter's namespace (``plan_knobs(globals())``, read right after its
    parameters cell) or a profile file's block: a knob that is a field of the run reaches
    every run of the plan from the parameters cell and the profile files alone, with no list
    of names in between to keep in step (the chapter, the GPU check, the controls' benchmark
    and the count of planned runs all read the same knobs this way)."""
    named = [k for k in inspect.signature(training_plan).parameters if k not in ("run", "device")]
    return {k: params[k] for k in (*named, *run_fields()) if k in params}


def training_plan(*, seeds, fig2_tasks: int, fig2_experts: int, grid_tasks, grid_experts,
                  device: str = "cpu", rule_power: bool = True,
                  codes_variant: Mapping | None = None, controls: bool = False,
                  **run) -> TrainingPlan:
    """The plan of the chapter's parameters (their names are the chapter's).  The grid is
    the paper's setting (learned entity embeddings).  ``run``: the fields every run shares
    (the knowledge base's sizes, the model's shape, the schedule), any of :func:`run_fields`
    by its flat name, the others :class:`ExperimentConfig`'s defaults; each is validated by
    the part that owns it, and a name that is no run field is refused with the accepted ones.
    ``codes_variant``: the book's variant, as the fields of A-Fig. 2's configuration it
    changes -- ``entity_codes`` (the rank of the fixed entity codes) and any other field of
    the run (for example fewer pairs and more steps, so that it converges within the
    profile's budget); None: no variant.  ``controls``: also the variant's controls of the
    task-router loss."""
    accepted = run_fields()
    unknown = sorted(k for k in run if k not in accepted)
    require(not unknown, "training_plan", unknown,
            "the plan's keywords or the runs' shared fields: " + ", ".join(accepted))
    seeds = [integer(f"seeds[{i}]", s, low=0) for i, s in enumerate(
        sequence("seeds", seeds, "a sequence of seeds (a list, even of one)"))]
    require(len(set(seeds)) == len(seeds), "seeds", seeds, "distinct seeds")
    common = {**run, "device": device}
    fig2 = tuple(ExperimentConfig.from_flat(n_tasks=fig2_tasks, n_experts=fig2_experts,
                                            objective=o, seed=seeds[0], **common)
                 for o in OBJECTIVES)
    grid = tuple(grid_configs(grid_tasks, grid_experts, OBJECTIVES, seeds, **common))
    require(any(c.model.n_experts > 1 for c in grid), "grid_experts", grid_experts,
            "at least one number of experts > 1")
    k_max = max(c.data.n_tasks for c in grid)
    e_max = max(c.model.n_experts for c in grid)
    d_expert = fig2[0].model.d_expert
    dense = tuple(ExperimentConfig.from_flat(n_tasks=k_max, n_experts=1, objective="ce", seed=s,
                                             **{**common, "d_expert": d_expert * e_max})
                  for s in seeds)
    changes = _variant_changes(codes_variant)
    variant = () if changes is None else tuple(
        ExperimentConfig.from_flat(n_tasks=fig2_tasks, n_experts=fig2_experts, objective=o,
                                   seed=s, **common).replace(**changes)
        for o in OBJECTIVES for s in seeds)
    router_runs = [c for c in variant if c.objective == "ce+router"]
    control_runs = () if not flag("controls", controls) else tuple(
        [c.replace(control=k) for k in CONTROLS if k != "none" for c in router_runs]
        + [c.replace(router_alpha=c.train.router_alpha / 10) for c in router_runs])
    broken = broken_configs(list(fig2)) if flag("rule_power", rule_power) else {}
    return TrainingPlan(fig2=fig2, grid=grid, dense=dense, variant=variant,
                        controls=control_runs, broken=broken, seeds=tuple(seeds),
                        codes_variant=changes)


def _variant_changes(codes_variant) -> dict | None:
    """``codes_variant`` checked: None, or a mapping naming ``entity_codes`` and other fields of
    a run, none of them one that places the run in the plan (:data:`_CELL`)."""
    if codes_variant is None:
        return None
    require(isinstance(codes_variant, Mapping) and "entity_codes" in codes_variant,
            "codes_variant", codes_variant,
            "None, or a mapping of run fields with entity_codes (the codes' rank)")
    integer("codes_variant['entity_codes']", codes_variant["entity_codes"], low=1)
    cell = sorted(k for k in codes_variant if k in _CELL)
    require(not cell, "codes_variant", cell,
            "fields other than " + ", ".join(_CELL) + " (the plan sets those)")
    return dict(codes_variant)


__all__ = ["TrainingPlan", "training_plan"]
