"""The data a training run reads (:class:`TrainData`): sequences, their next-token targets and
what the objectives and the routing controls need beside them, checked once where they enter.

Apart from the loop (:mod:`.train`) because they are a different thing: the loop's settings
change from run to run of one experiment, the data are built once per dataset by the
experiments (``TrainData.from_split``) and validated here, before any step is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._internal.validation import integer, require
from .checks import tensor
from .losses import IGNORE_INDEX


@dataclass(frozen=True)
class TrainData:
    """Sequences ready for next-token training.

    inputs (n, t) long — token ids (right-padded with any valid id);
    targets (n, t) long — ``targets[:, s]`` is the token after input position s, or
        ``IGNORE_INDEX`` (-100) where no loss is taken (padding);
    task_ids (n,) long — task of each sequence (needed by ``ce+router`` and routing metrics);
    router_mask (n, t) bool or None — positions the task-router loss supervises (default: all
        positions whose target is not ignored).
    layer_tasks (n, L) long or None — for a model of L layers, the task whose designated expert
        supervises layer l (column l) in ``ce+router`` (e.g. hop 1 and hop 2 of a two-hop
        sentence); without it ``task_ids`` supervises every layer.  L must equal the model's
        ``n_layers`` (checked by :func:`train`).  ``task_ids`` stays the task of the sentence.
    route (n,) long or None — an oracle's routing: every position of sequence i goes to expert
        ``route[i]`` with gate 1, whatever the router computes (``MoETransformer.forward``'s
        ``route``); None: the router routes.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    task_ids: torch.Tensor | None = None
    router_mask: torch.Tensor | None = None
    layer_tasks: torch.Tensor | None = None
    route: torch.Tensor | None = None

    def __post_init__(self):
        tensor("TrainData.inputs", self.inputs, "int", ndim=2)
        shape = tuple(self.inputs.shape)
        tensor("TrainData.targets", self.targets, "int", shape=shape)
        real = self.targets[self.targets != IGNORE_INDEX]
        require(real.numel() > 0, "TrainData.targets", "all IGNORE_INDEX",
                "at least one supervised target")
        if self.task_ids is not None:
            tensor("TrainData.task_ids", self.task_ids, "int", shape=(shape[0],))
        if self.route is not None:
            tensor("TrainData.route", self.route, "int", shape=(shape[0],))
        for name, ids in (("inputs", self.inputs), ("targets (not ignored)", real),
                          ("task_ids", self.task_ids), ("route", self.route)):
            if ids is not None:
                require(int(ids.min()) >= 0, f"TrainData.{name}.min()", int(ids.min()),
                        "ids ≥ 0")
        if self.router_mask is not None:
            tensor("TrainData.router_mask", self.router_mask, "bool", shape=shape)
        if self.layer_tasks is not None:
            tensor("TrainData.layer_tasks", self.layer_tasks, "int", ndim=2)
            require(self.layer_tasks.shape[0] == shape[0], "TrainData.layer_tasks.shape",
                    tuple(self.layer_tasks.shape),
                    f"({shape[0]}, n_layers): one row per sequence (n={shape[0]}), one column "
                    "per layer -- a transposed (n_layers, n) tensor is refused here")
            require(int(self.layer_tasks.min()) >= 0, "TrainData.layer_tasks.min()",
                    int(self.layer_tasks.min()), "task ids ≥ 0")

    def __len__(self) -> int:
        return self.inputs.shape[0]

    @classmethod
    def from_split(cls, split, router_mask: torch.Tensor | None = None,
                   layer_tasks: torch.Tensor | None = None,
                   route: torch.Tensor | None = None) -> "TrainData":
        """From a knowledge ``EncodedSplit`` (``moe_routing.knowledge``): its ``inputs``,
        ``targets_masked(IGNORE_INDEX)`` and ``task``; the rest as in the class doc."""
        return cls(inputs=split.inputs.contiguous(),
                   targets=split.targets_masked(IGNORE_INDEX).contiguous(),
                   task_ids=split.task, router_mask=router_mask, layer_tasks=layer_tasks,
                   route=route)

    def check_vocab(self, vocab_size: int, max_len: int) -> None:
        """ValueError when the data do not fit the model's vocabulary or context."""
        vocab_size = integer("vocab_size", vocab_size, low=1)
        max_len = integer("max_len", max_len, low=1)
        tgt = self.targets[self.targets != IGNORE_INDEX]
        hi = max(int(self.inputs.max()), int(tgt.max()))
        require(hi < vocab_size, "token ids", f"0..{hi}",
                f"ids in 0..{vocab_size - 1} (the model's vocab_size={vocab_size})")
        require(self.inputs.shape[1] <= max_len, "sequence length", self.inputs.shape[1],
                f"at most the model's max_len={max_len}")
