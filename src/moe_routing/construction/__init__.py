"""Theorems 4.1 and 4.2 of paper A made executable: hand-built one-layer transformers (dense and
MoE) that predict valid next tokens of every task, the MoE one routing by template structure.

The construction is ours (the paper's proof is unavailable; see ``build`` for every step and
constant).  ``build_moe``/``build_dense`` write weights into :class:`moe_routing.model.MoETransformer`;
``verify`` checks them exhaustively; ``sizes`` counts neurons and parameters.  A dataset is
refused only with a proof (``refusals``): :class:`HypothesisFails` names the hypothesis, the
tasks and witness prefixes, and carries the certificate.  ``two_layer`` (ours, beyond paper
A): two-hop knowledge in two layers, each lookup neuron one single-hop fact (no composed
dictionary), verified the same way (its routes and hypotheses in ``two_layer_routing``, its
layout, neurons and report in ``two_layer_parts``, its verification in ``two_layer_verify``).
"""

from .build import ConstructionReport, build_dense, build_moe
from .codes import coherence, polynomial_code
from .layout import Layout
from .refusals import HypothesisFails, HypothesisUndecided
from .separators import FitSettings
from .structure import (
                        StructuralNodes,
                        admissible_tasks,
                        check_hypotheses,
                        hypothesis_violations,
                        structural_nodes,
)
from .two_layer_routing import TwoLayerHypothesisFails
from .two_layer_parts import TwoLayerReport
from .two_layer_verify import TwoLayerVerification, verify_two_layer
from .two_layer import build_two_layer, compare_sizes, one_layer_alternative

__all__ = ["ConstructionReport", "build_dense", "build_moe", "coherence", "polynomial_code",
           "Layout", "HypothesisFails", "HypothesisUndecided", "FitSettings",
           "StructuralNodes", "admissible_tasks", "check_hypotheses", "hypothesis_violations",
           "structural_nodes", "TwoLayerHypothesisFails", "TwoLayerReport",
           "TwoLayerVerification", "build_two_layer", "compare_sizes", "one_layer_alternative",
           "verify_two_layer"]
