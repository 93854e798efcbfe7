"""The trainable MoE transformer of paper A (one layer; L layers for our two-hop chapter), its
losses, training and evaluation.

The hand-built model of Theorems 4.1/4.2 (``moe_routing.construction``) writes its weights into
the same :class:`MoETransformer`, so trained and constructed models share one forward pass and
one evaluation path.
"""

from .config import ACTIVATIONS, BACKENDS, GATE_MODES, MoEConfig, MoEShape
from .evaluate import (ExactMatch, RoutingRecord, ValidMass, collect_routing, exact_match,
                       greedy_complete, valid_next_mass)
from .losses import (IGNORE_INDEX, OBJECTIVES, LossParts, load_balancing_loss,
                     next_token_cross_entropy, objective_loss, router_z_loss, task_router_loss,
                     task_to_expert)
from .factored_logits import FactoredLogits
from .parameters import ParameterCount, parameter_count
from .train import History, TrainConfig, TrainSchedule, build_and_train, train
from .train_data import TrainData
from .layers import LayerOutput, ModelOutput, MoELayer
from .transformer import MoETransformer

__all__ = [
    "ACTIVATIONS", "BACKENDS", "GATE_MODES", "IGNORE_INDEX", "OBJECTIVES", "ExactMatch",
    "FactoredLogits",
    "History", "LayerOutput", "LossParts", "ModelOutput", "MoEConfig", "MoELayer", "MoEShape",
    "MoETransformer", "ParameterCount", "RoutingRecord", "TrainConfig", "TrainData",
    "TrainSchedule", "ValidMass", "build_and_train",
    "collect_routing", "exact_match", "greedy_complete", "load_balancing_loss",
    "next_token_cross_entropy", "objective_loss", "parameter_count", "router_z_loss",
    "task_router_loss", "task_to_expert", "train", "valid_next_mass",
]
