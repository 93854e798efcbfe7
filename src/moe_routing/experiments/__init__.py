"""Experiments of the papers, run end to end from configuration to JSON artifacts.

``task_routing`` — paper A's experiments: one-layer MoE transformers on knowledge tasks trained
with cross-entropy, CE + load balancing or CE + the task-router loss (Figure 2 and the accuracy
grid); a run's configuration and cache key in ``config``, its data and measurements in
``data``, its result and weights files in ``store``.
``accuracy`` — intervals of a cell's mean accuracy (seed spread or binomial error).
``plan`` — the training chapter's runs from its parameters.
``claims`` — from runs to the verdicts of paper A's experimental claims.
``power`` — the verdict rules fed deliberately broken models.
``executor`` — where a grid's runs go: worker processes on this machine or a Ray cluster; its
backends in ``executor_local``, ``executor_ray`` and ``executor_slurm``, what they share in
``executor_tasks``.  ``grid`` — the one grid runner (cached results first, the rest to the
executor); ``session`` — a chapter's grids for its whole execution (``GridSession``).
``bridge`` — paper B's quantities (margins, boundary mass, soft-to-hard gap and its bound)
measured on the trained routers of ``task_routing`` (ours).
``two_hop`` — one- and two-layer MoEs trained on single-hop facts and their two-hop
compositions: do held-out compositions come out, do the hops' experts compose? (ours)
"""

from .executor import GridError
from .accuracy import AccuracyInterval, accuracy_interval
from .bridge import (BoundCheck, RouterBoundaryMass, RouterMargins, SoftHard, bound_check,
                     boundary_mass_of_router, margin_tail_constant, router_margins,
                     soft_vs_hard)
from .config import DataConfig, ExperimentConfig
from .store import load_result, result_path, weights_path
from .task_routing import (convergence, grid_configs, load_model, results_frame, run_experiment,
                           run_grid)
from .two_hop import (TwoHopConfig, run_two_hop, run_two_hop_grid, two_hop_cells,
                      two_hop_frame, two_hop_grid)

__all__ = ["AccuracyInterval", "BoundCheck", "DataConfig", "ExperimentConfig", "GridError",
           "RouterBoundaryMass", "RouterMargins", "SoftHard", "accuracy_interval",
           "bound_check", "boundary_mass_of_router", "load_model", "margin_tail_constant",
           "router_margins", "soft_vs_hard", "weights_path",
           "convergence", "grid_configs", "load_result", "result_path", "results_frame",
           "run_experiment", "run_grid", "TwoHopConfig", "run_two_hop", "run_two_hop_grid",
           "two_hop_cells", "two_hop_frame", "two_hop_grid"]
