"""Experiments of the papers, run end to end from configuration to JSON artifacts.

``task_routing`` — paper A's experiments: one-layer MoE transformers on knowledge tasks trained
with cross-entropy, CE + load balancing or CE + the task-router loss (Figure 2 and the accuracy
grid).
``accuracy`` — intervals of a cell's mean accuracy (seed spread or binomial error).
``plan`` — the training chapter's runs from its parameters.
``claims`` — from runs to the verdicts of paper A's experimental claims.
``power`` — the verdict rules fed deliberately broken models.
``executor`` — where a grid's runs go: worker processes on this machine or a Ray cluster.
"""

from ..executor import GridError
from .accuracy import AccuracyInterval, accuracy_interval
from .task_routing import (ExperimentConfig, convergence, grid_configs, load_result,
                           result_path, results_frame, run_experiment, run_grid)

__all__ = ["AccuracyInterval", "ExperimentConfig", "GridError", "accuracy_interval",
           "convergence", "grid_configs", "load_result", "result_path", "results_frame",
           "run_experiment", "run_grid"]
