"""Training loop for paper A's three objectives (CE, CE+LB, CE+task-router).

Reproducibility: the data order comes from a ``torch.Generator`` seeded with ``seed`` and
:func:`build_and_train` seeds torch before building the model, so two CPU runs with the same
configuration produce bit-identical weights and loss histories (tested) -- on one machine, with
the same torch build, thread count and CPU kernel dispatch (MKL picks AVX-512, AVX2 or SSE4.2
kernels by CPU, torch follows ``ATEN_CPU_CAPABILITY``; other kernels round differently, so runs
on another kind of CPU agree to rounding, not bit for bit).  On CUDA, ``amp``
runs the forward pass under bfloat16 autocast; CUDA runs are not promised to be bit-identical.

The optimiser settings are ours (the paper does not report them): AdamW, linear warm-up then
cosine decay to 10 % of ``lr``, gradient clipping at ``grad_clip``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from ..runtime import resolve_device, seed_everything
from .config import MoEConfig
from .losses import IGNORE_INDEX, OBJECTIVES, objective_loss
from .transformer import MoETransformer

SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class TrainData:
    """Sequences ready for next-token training.

    inputs (n, t) long — token ids (right-padded with any valid id);
    targets (n, t) long — ``targets[:, s]`` is the token after input position s, or
        ``IGNORE_INDEX`` (-100) where no loss is taken (padding);
    task_ids (n,) long — task of each sequence (needed by ``ce+router`` and routing metrics);
    router_mask (n, t) bool or None — positions the task-router loss supervises (default: all
        positions whose target is not ignored).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    task_ids: torch.Tensor | None = None
    router_mask: torch.Tensor | None = None

    def __post_init__(self):
        if self.inputs.dim() != 2 or self.inputs.shape != self.targets.shape:
            raise ValueError(f"inputs {tuple(self.inputs.shape)} and targets "
                             f"{tuple(self.targets.shape)} must both be (n, t)")
        n = self.inputs.shape[0]
        if self.task_ids is not None and tuple(self.task_ids.shape) != (n,):
            raise ValueError(f"task_ids has shape {tuple(self.task_ids.shape)}; expected ({n},)")
        if self.router_mask is not None and self.router_mask.shape != self.inputs.shape:
            raise ValueError(f"router_mask has shape {tuple(self.router_mask.shape)}; expected "
                             f"{tuple(self.inputs.shape)}")

    def __len__(self) -> int:
        return self.inputs.shape[0]

    @classmethod
    def from_split(cls, split, router_mask: torch.Tensor | None = None) -> "TrainData":
        """From a knowledge ``EncodedSplit`` (``moe_routing.knowledge``): its ``inputs``,
        ``targets_masked(IGNORE_INDEX)`` and ``task``; ``router_mask`` as in the class doc."""
        return cls(inputs=split.inputs.contiguous(),
                   targets=split.targets_masked(IGNORE_INDEX).contiguous(),
                   task_ids=split.task, router_mask=router_mask)

    def check_vocab(self, vocab_size: int, max_len: int) -> None:
        """ValueError when the data do not fit the model's vocabulary or context."""
        hi = int(self.inputs.max())
        tgt = self.targets[self.targets != IGNORE_INDEX]
        hi = max(hi, int(tgt.max()) if tgt.numel() else 0)
        lo = min(int(self.inputs.min()), int(tgt.min()) if tgt.numel() else 0)
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"token ids span {lo}..{hi}; the model's vocab_size={vocab_size} "
                             f"accepts 0..{vocab_size - 1}")
        if self.inputs.shape[1] > max_len:
            raise ValueError(f"sequences have length {self.inputs.shape[1]}; the model's "
                             f"max_len={max_len}")


@dataclass(frozen=True)
class TrainConfig:
    """One training run.  Exactly one of ``steps`` and ``epochs`` is given."""

    objective: str = "ce"
    lr: float = 3e-3
    steps: int | None = None
    epochs: int | None = None
    batch_size: int = 512
    weight_decay: float = 0.01
    warmup_steps: int = 20
    schedule: str = "cosine"
    grad_clip: float = 1.0
    lb_alpha: float = 0.01
    router_alpha: float = 1.0
    z_beta: float = 0.0
    seed: int = 0
    device: str = "auto"
    amp: bool = True
    log_every: int = 10
    progress: bool = True

    def __post_init__(self):
        def bad(name, accepted):
            raise ValueError(f"TrainConfig.{name} = {getattr(self, name)!r} is invalid; "
                             f"accepted: {accepted}")
        if self.objective not in OBJECTIVES:
            bad("objective", ", ".join(OBJECTIVES))
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("TrainConfig needs exactly one of steps and epochs (an integer ≥ 1)")
        if self.steps is not None and self.steps < 1:
            bad("steps", "an integer ≥ 1")
        if self.epochs is not None and self.epochs < 1:
            bad("epochs", "an integer ≥ 1")
        if not self.lr > 0:
            bad("lr", "a number > 0")
        if self.batch_size < 1:
            bad("batch_size", "an integer ≥ 1")
        if self.weight_decay < 0:
            bad("weight_decay", "a number ≥ 0")
        if self.warmup_steps < 0:
            bad("warmup_steps", "an integer ≥ 0")
        if self.schedule not in SCHEDULES:
            bad("schedule", ", ".join(SCHEDULES))
        if self.lb_alpha < 0 or self.router_alpha < 0 or self.z_beta < 0:
            raise ValueError("TrainConfig loss coefficients (lb_alpha, router_alpha, z_beta) "
                             "must be ≥ 0")
        if self.log_every < 1:
            bad("log_every", "an integer ≥ 1")
        resolve_device(self.device)      # validates the name (and cuda availability)

    def total_steps(self, n_examples: int) -> int:
        if self.steps is not None:
            return self.steps
        return self.epochs * math.ceil(n_examples / self.batch_size)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class History:
    """Losses every ``log_every`` steps (and at the last step), evaluations, speed."""

    step: list[int] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    ce: list[float] = field(default_factory=list)
    lb: list[float] = field(default_factory=list)
    z: list[float] = field(default_factory=list)
    router: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    tokens_per_s: float = 0.0     # input positions processed per second (padding included)
    device: str = "cpu"

    def as_dict(self) -> dict:
        return asdict(self)


def _lr_at(cfg: TrainConfig, step: int, total: int) -> float:
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, total - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(model: MoETransformer, data: TrainData, cfg: TrainConfig,
          eval_fn: Callable[[MoETransformer], dict] | None = None,
          eval_every: int | None = None) -> History:
    """Train ``model`` in place on ``data``; returns the :class:`History`.

    ``eval_fn(model) -> dict`` (called in eval mode under no_grad every ``eval_every`` steps and
    at the end) lets a chapter follow accuracy or routing during training.
    """
    from tqdm.auto import tqdm

    device = resolve_device(cfg.device)
    mcfg = model.config
    data.check_vocab(mcfg.vocab_size, mcfg.max_len)
    if cfg.objective == "ce+router" and data.task_ids is None:
        raise ValueError("objective 'ce+router' needs TrainData.task_ids")
    model.to(device)
    inputs, targets = data.inputs.to(device), data.targets.to(device)
    task_ids = data.task_ids.to(device) if data.task_ids is not None else None
    rmask = data.router_mask.to(device) if data.router_mask is not None else None
    n = len(data)
    total = cfg.total_steps(n)
    opt = torch.optim.AdamW(model.param_groups(cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98),
                            foreach=True)
    gen = torch.Generator().manual_seed(cfg.seed)
    use_amp = cfg.amp and device == "cuda"
    hist = History(device=device)
    perm, cursor, tokens = torch.randperm(n, generator=gen), 0, 0
    model.train()
    t0 = time.perf_counter()
    bar = tqdm(range(total), disable=not cfg.progress, desc=cfg.objective, leave=False)
    for step in bar:
        if cursor >= n:
            perm, cursor = torch.randperm(n, generator=gen), 0
        idx = perm[cursor:cursor + cfg.batch_size].to(device)
        cursor += cfg.batch_size
        lr = _lr_at(cfg, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            tgt = targets[idx]                                            # (b, t)
            real = tgt != IGNORE_INDEX
            out = model(inputs[idx], logits_mask=real)                    # logits (m, v)
            parts = objective_loss(
                cfg.objective, out.logits, tgt, out.router_logits, out.router_probs,
                out.expert_index, None if task_ids is None else task_ids[idx],
                None if rmask is None else rmask[idx], lb_alpha=cfg.lb_alpha,
                router_alpha=cfg.router_alpha, z_beta=cfg.z_beta)
        opt.zero_grad(set_to_none=True)
        parts.total.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        opt.step()
        tokens += idx.numel() * inputs.shape[1]
        if step % cfg.log_every == 0 or step == total - 1:
            vals = parts.as_floats()
            hist.step.append(step)
            for key in ("total", "ce", "lb", "z", "router"):
                getattr(hist, key).append(vals[key])
            hist.lr.append(lr)
            bar.set_postfix(loss=f"{vals['total']:.4f}")
        if eval_fn is not None and eval_every and (step + 1) % eval_every == 0 \
                and step != total - 1:
            hist.evals.append({"step": step + 1, **_run_eval(model, eval_fn)})
    if eval_fn is not None:
        hist.evals.append({"step": total, **_run_eval(model, eval_fn)})
    if device == "cuda":
        torch.cuda.synchronize()
    hist.wall_s = time.perf_counter() - t0
    hist.tokens_per_s = tokens / max(hist.wall_s, 1e-9)
    model.eval()
    return hist


def _run_eval(model, eval_fn) -> dict:
    was = model.training
    model.eval()
    with torch.no_grad():
        res = eval_fn(model)
    model.train(was)
    return dict(res)


def build_and_train(model_cfg: MoEConfig, data: TrainData, cfg: TrainConfig,
                    eval_fn: Callable[[MoETransformer], dict] | None = None,
                    eval_every: int | None = None) -> tuple[MoETransformer, History]:
    """Seed, build a fresh model from ``model_cfg`` and train it: the reproducible entry point."""
    data.check_vocab(model_cfg.vocab_size, model_cfg.max_len)   # fail before any work
    seed_everything(cfg.seed)
    model = MoETransformer(model_cfg)
    hist = train(model, data, cfg, eval_fn=eval_fn, eval_every=eval_every)
    return model, hist
