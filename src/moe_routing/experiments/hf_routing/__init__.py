"""The training chapter's routing contrast on a Mixtral-style Hugging Face model (ours; the
``hf`` extra for training, not for importing).

``runs`` — the model's size, the cached runs and the summary over seeds; ``results`` — the run
and comparison records; ``measure`` — the task-determined positions and the per-layer
measurement.
"""

from .runs import MixtralSize, hf_routing_experiment, library_routing, summarise

__all__ = ["MixtralSize", "hf_routing_experiment", "library_routing", "summarise"]
