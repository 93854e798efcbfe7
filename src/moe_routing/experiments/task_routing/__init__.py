"""Paper A's experiments: one-layer MoE transformers on knowledge tasks trained with
cross-entropy, CE + load balancing or CE + the task-router loss.

``config`` — a run's configuration and cache key; ``data`` — its data and measurements;
``store`` — its result and weights files; ``runs`` — a run, the grid and its frame; ``plan`` —
the training chapter's runs from its parameters; ``claims`` — from runs to the verdicts of paper
A's experimental claims; ``power`` — the verdict rules fed deliberately broken models.
"""

from .config import DataConfig, ExperimentConfig
from .data import experiment_dataset, knowledge_dataset
from .plan import TrainingPlan, plan_knobs, run_fields, training_plan
from .runs import (convergence, grid_configs, load_model, results_frame, run_experiment,
                   run_grid)
from .store import load_result, result_path, weights_path

__all__ = ["DataConfig", "ExperimentConfig", "TrainingPlan", "convergence", "experiment_dataset",
           "grid_configs", "knowledge_dataset", "load_model", "load_result", "plan_knobs", "result_path",
           "results_frame", "run_experiment", "run_fields", "run_grid", "training_plan",
           "weights_path"]
