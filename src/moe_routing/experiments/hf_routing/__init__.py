"""The training chapter's routing contrast on a Mixtral-style Hugging Face model (ours; the
``hf`` extra for training, not for importing).

``runs`` — a run's configuration (:class:`MixtralRun`, on the shared parts), the grid of runs
and the summary over seeds; ``results`` — the run
and comparison records; ``measure`` — the task-determined positions and the per-layer
measurement.
"""

from .runs import (MixtralRun, hf_routing_experiment, library_routing, mixtral_runs,
                   run_hf_grid, summarise)

__all__ = ["MixtralRun", "hf_routing_experiment", "library_routing", "mixtral_runs",
           "run_hf_grid", "summarise"]
