"""moe_routing: the library behind the companion book to two papers on routing in MoE models.

Paper A (arXiv 2606.14398) -- task routing in one-layer MoE transformers over knowledge
templates and key-value dictionaries.  Paper B (arXiv 2605.02124) -- boundary mass and the
soft-to-hard limit of softmax routing.

Sub-modules are named after the papers' concepts; every number printed in the book is computed
by code in this package (or by a notebook cell calling it).
"""

__version__ = "0.1.0"

# Sub-packages and modules are imported by name (``from moe_routing.boundary import ...``).
__all__ = ["__version__", "atomic", "boundary", "construction", "display", "experiments",
           "fingerprint", "knowledge", "landscape", "ledger", "model", "plots",
           "routing_metrics", "runtime", "validation", "verdicts"]
