"""Training loop for paper A's three objectives (CE, CE+LB, CE+task-router).

Reproducibility: the data order comes from a ``torch.Generator`` seeded with ``seed`` and
:func:`build_and_train` seeds torch before building the model, so two CPU runs with the same
configuration produce bit-identical weights and loss histories (tested) -- on one machine, with
the same torch build, thread count and CPU kernel dispatch (MKL picks AVX-512, AVX2 or SSE4.2
kernels by CPU, torch follows ``ATEN_CPU_CAPABILITY``; other kernels round differently, so runs
on another kind of CPU agree to rounding, not bit for bit).  On CUDA, ``amp`` is the speed mode:
the forward pass runs under bfloat16 autocast and, for the run only (the caller's setting is
restored afterwards, and evaluations during training run at the caller's setting), the float32
matmuls that remain may use TensorFloat-32 (``TrainConfig.tf32``).  CUDA runs are not promised
to be bit-identical, except under ``torch.use_deterministic_algorithms(True)`` with
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (a test of ``make gpu-check`` trains twice and compares).

On the device the loop does not wait for the GPU between steps: the data are moved once, each
epoch's order is drawn on the CPU from the seeded generator (the very calls a CPU run makes, so
the CPU history is unchanged by the device code) and copied to the device once per epoch, and
the losses are read back only at logged steps, all parts in one copy.

The optimiser settings are ours (the paper does not report them): AdamW, linear warm-up then
cosine decay to 10 % of ``lr``, gradient clipping at ``grad_clip``.

Checks: ``TrainConfig`` refuses NaN, infinite and out-of-range settings (NumPy scalars are
accepted and stored as Python values); ``TrainData`` checks dtypes, shapes, emptiness and token
ranges once, where data enter; the loop notes on the device the first step whose loss is not
finite (no host round trip per step), reads that note with the logged losses, and stops with
``FloatingPointError`` naming that step rather than train on NaN weights.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import torch

from .._internal.runtime import DEVICES, resolve_device, seed_everything
from .._internal.validation import choice, fail, flag, instance, integer, number, positive, require
from .config import MoEConfig
from .losses import IGNORE_INDEX, OBJECTIVES, objective_loss
from .train_data import TrainData
from .transformer import MoETransformer

SCHEDULES = ("cosine", "constant")
#: On a CPU the loop's cross-entropy multiplies the unembedding out block by block, in cache
#: (:mod:`~.factored_logits`: a quarter off a step of the training chapter's 20-task runs,
#: the same loss to rounding).  False: the whole (m, v) logits tensor, as before
#: (bit for bit the runs of that code; the one-layer reference test trains so).
FACTORED_LOGITS_ON_CPU = True


@dataclass(frozen=True)
class TrainSchedule:
    """What a training run does whatever the objective, the seed and the device: the budget
    (exactly one of ``steps`` and ``epochs``), the batch, AdamW at ``lr`` with its weight decay,
    warm-up and ``schedule``, gradient clipping and the loss weights.

    It is the part of :class:`TrainConfig` an experiment chooses once for all its runs (the
    experiments' configurations hold one, :mod:`moe_routing.experiments`); its fields are
    validated here, once, for both.  Errors name the class that holds the field
    (``TrainSchedule.lr`` for a schedule, ``TrainConfig.lr`` for the loop's configuration).
    """

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

    def _field(self, name: str) -> str:
        return f"{type(self).__name__}.{name}"

    def __post_init__(self):
        # NaN, ±Inf and degenerate settings are refused; NumPy scalars are stored as Python
        # values so that the config (and its JSON) equals one built from Python numbers.
        def put(name, value):
            object.__setattr__(self, name, value)

        field = self._field
        require((self.steps is None) != (self.epochs is None), field("steps/epochs"),
                (self.steps, self.epochs), "exactly one of steps and epochs (an integer ≥ 1)")
        for name in ("steps", "epochs"):
            if getattr(self, name) is not None:
                put(name, integer(field(name), getattr(self, name), low=1))
        put("lr", positive(field("lr"), self.lr))
        put("batch_size", integer(field("batch_size"), self.batch_size, low=1))
        put("warmup_steps", integer(field("warmup_steps"), self.warmup_steps, low=0))
        for name in ("weight_decay", "grad_clip", "lb_alpha", "router_alpha", "z_beta"):
            put(name, number(field(name), getattr(self, name), low=0))
        choice(field("schedule"), self.schedule, SCHEDULES)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrainConfig(TrainSchedule):
    """One training run: a :class:`TrainSchedule` (its fields come first) and what is proper
    to the run.  Exactly one of ``steps`` and ``epochs`` is given.

    ``amp`` (CUDA only): bfloat16 autocast of the forward pass.  ``tf32`` (CUDA only): let the
    float32 matmuls use TensorFloat-32 during the run (``torch.set_float32_matmul_precision
    ("high")``, restored afterwards); ``None`` (default) means "with ``amp``", resolved here so
    that :meth:`as_dict` records what the run does: True only for ``amp`` on a CUDA device.
    ``TrainConfig(**asdict(schedule), objective=…, …)`` is the loop's configuration of a
    schedule.
    """

    objective: str = "ce"
    seed: int = 0
    device: str = "auto"
    amp: bool = True
    tf32: bool | None = None
    log_every: int = 10
    progress: bool = True

    def __post_init__(self):
        super().__post_init__()

        def put(name, value):
            object.__setattr__(self, name, value)

        field = self._field
        choice(field("objective"), self.objective, OBJECTIVES)
        put("log_every", integer(field("log_every"), self.log_every, low=1))
        put("seed", integer(field("seed"), self.seed, low=0))
        for name in ("amp", "progress"):
            put(name, flag(field(name), getattr(self, name)))
        choice(field("device"), self.device, DEVICES)
        device = resolve_device(self.device)      # and CUDA availability
        if self.tf32 is None:
            put("tf32", self.amp and device == "cuda")
        put("tf32", flag(field("tf32"), self.tf32))

    def total_steps(self, n_examples: int) -> int:
        n_examples = integer("n_examples", n_examples, low=1)
        if self.steps is not None:
            return self.steps
        return self.epochs * math.ceil(n_examples / self.batch_size)


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
    tf32: bool = False            # float32 matmuls ran as TensorFloat-32 (CUDA, cfg.tf32)

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


def _check_training_arguments(*args: tuple[str, object, type]) -> None:
    """Each ``(name, value, cls)``: ``value`` must be a ``cls`` (the error names the type got,
    not a model's full repr)."""
    for name, value, cls in args:
        if not isinstance(value, cls):
            fail(name, type(value).__name__, f"a {cls.__name__}")


@contextmanager
def float32_matmul_precision(precision: str):
    """``with float32_matmul_precision("high"):`` -- torch's float32 matmul precision for the
    block only (``"highest"``, ``"high"``: TensorFloat-32 on CUDA, ``"medium"``), the previous
    setting restored on exit, also on an error: a training run must not change the precision
    of whatever the caller computes next.  torch applies it to CUDA matmuls only."""
    choice("precision", precision, ("highest", "high", "medium"))
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def batch_order(n: int, batch_size: int, steps: int, generator: torch.Generator,
                device: str | torch.device = "cpu") -> Iterator[torch.Tensor]:
    """The data order of a run: one index tensor (b,) on ``device`` per step.

    Epoch after epoch, a permutation of the n examples drawn with ``torch.randperm(n,
    generator=generator)`` on the CPU, cut into batches of ``batch_size`` (the last batch of an
    epoch is shorter when ``batch_size`` does not divide n).  Each permutation is copied to the
    device once (pinned, asynchronously), and steps slice it there: no host-to-device copy per
    step.  The generator calls are those a CPU run makes, so the order does not depend on the
    device.
    """
    n = integer("n", n, low=1)
    batch_size = integer("batch_size", batch_size, low=1)
    steps = integer("steps", steps, low=0)
    instance("generator", generator, torch.Generator, "a torch.Generator (on the CPU)")
    cuda = torch.device(device).type == "cuda"
    perm, cursor = None, n
    for _ in range(steps):
        if cursor >= n:
            perm, cursor = torch.randperm(n, generator=generator), 0       # (n,) on the CPU
            if cuda:
                perm = perm.pin_memory().to(device, non_blocking=True)
        yield perm[cursor:cursor + batch_size]                             # (b,)
        cursor += batch_size


def _logged_values(parts, first_bad: torch.Tensor, bad_value: torch.Tensor
                   ) -> tuple[dict[str, float], int, float]:
    """The loss parts as floats (as ``LossParts.as_floats``: float64 holds a float32 exactly),
    and the non-finite note, in one device-to-host copy."""
    names = parts._fields
    host = torch.stack([getattr(parts, k).detach().to(torch.float64) for k in names]
                       + [bad_value, first_bad.to(torch.float64)]).tolist()
    return dict(zip(names, host[:len(names)])), int(host[-1]), host[-2]


def train(model: MoETransformer, data: TrainData, cfg: TrainConfig,
          eval_fn: Callable[[MoETransformer], dict] | None = None,
          eval_every: int | None = None) -> History:
    """Train ``model`` in place on ``data``; returns the :class:`History`.

    ``eval_fn(model) -> dict`` (called in eval mode under no_grad every ``eval_every`` steps and
    at the end, at the caller's float32 matmul precision) lets a chapter follow accuracy or
    routing during training.
    """
    _check_training_arguments(("model", model, MoETransformer), ("data", data, TrainData),
                              ("cfg", cfg, TrainConfig))
    if eval_fn is not None and not callable(eval_fn):
        fail("eval_fn", eval_fn, "None or a function model -> dict")
    if eval_every is not None:
        eval_every = integer("eval_every", eval_every, low=1)
    device = resolve_device(cfg.device)
    mcfg = model.config
    data.check_vocab(mcfg.vocab_size, mcfg.max_len)
    if data.route is not None:
        require(int(data.route.max()) < mcfg.n_experts, "TrainData.route.max()",
                int(data.route.max()), f"expert ids < n_experts={mcfg.n_experts}")
    require(cfg.objective != "ce+router" or data.task_ids is not None
            or data.layer_tasks is not None, "TrainData.task_ids", None,
            "one task id per sequence (or layer_tasks): objective 'ce+router' needs them")
    if data.layer_tasks is not None:
        require(data.layer_tasks.shape[1] == mcfg.n_layers, "TrainData.layer_tasks.shape",
                tuple(data.layer_tasks.shape),
                f"({len(data)}, {mcfg.n_layers}): one column per layer of the model "
                f"(n_layers={mcfg.n_layers})")
    use_amp = cfg.amp and device == "cuda"
    use_tf32 = cfg.tf32 and device == "cuda"
    caller_precision = torch.get_float32_matmul_precision()
    with float32_matmul_precision("high") if use_tf32 else nullcontext():
        hist = _train_loop(model, data, cfg, device, use_amp, eval_fn, eval_every,
                           caller_precision)
    hist.tf32 = use_tf32
    return hist


def _train_loop(model, data, cfg, device, use_amp, eval_fn, eval_every,
                caller_precision) -> History:
    from tqdm.auto import tqdm

    model.to(device)
    inputs, targets = data.inputs.to(device), data.targets.to(device)    # (n, t) each, once
    # the router loss's task ids: per layer where given, else one per sequence
    router_tasks = data.layer_tasks if data.layer_tasks is not None else data.task_ids
    task_ids = router_tasks.to(device) if router_tasks is not None else None
    rmask = data.router_mask.to(device) if data.router_mask is not None else None
    route = data.route.to(device) if data.route is not None else None
    n = len(data)
    total = cfg.total_steps(n)
    opt = torch.optim.AdamW(model.param_groups(cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98),
                            foreach=True)
    gen = torch.Generator().manual_seed(cfg.seed)
    # the same order on the CPU (a generator seeded alike): each batch's number of supervised
    # positions is counted there, so the model selects them on the device without a wait
    host_order = batch_order(n, cfg.batch_size, total, torch.Generator().manual_seed(cfg.seed))
    n_real = (data.targets != IGNORE_INDEX).sum(1)                      # (n,) on the CPU
    hist = History(device=device)
    # first step whose total loss was not finite (-1: none yet) and that loss: kept on the
    # device, read with the logged losses, so that no step waits for the GPU
    first_bad = torch.full((), -1, dtype=torch.long, device=device)
    bad_value = torch.zeros((), dtype=torch.float64, device=device)
    tokens = 0
    factored = FACTORED_LOGITS_ON_CPU and device == "cpu"
    model.train()
    t0 = time.perf_counter()
    bar = tqdm(range(total), disable=not cfg.progress, desc=cfg.objective, leave=False)
    for step, idx, host_idx in zip(bar, batch_order(n, cfg.batch_size, total, gen, device),
                                   host_order):
        lr = _lr_at(cfg, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            tgt = targets[idx]                                            # (b, t)
            real = tgt != IGNORE_INDEX
            out = model(inputs[idx], logits_mask=real,                    # logits (m, v)
                        n_selected=int(n_real[host_idx].sum()), factored_logits=factored,
                        route=None if route is None else route[idx])
            layers = out.layers                                           # one per layer
            parts = objective_loss(
                cfg.objective, out.logits, tgt, tuple(r.router_logits for r in layers),
                tuple(r.router_probs for r in layers), tuple(r.expert_index for r in layers),
                None if task_ids is None else task_ids[idx],
                None if rmask is None else rmask[idx], lb_alpha=cfg.lb_alpha,
                router_alpha=cfg.router_alpha, z_beta=cfg.z_beta)
        opt.zero_grad(set_to_none=True)
        parts.total.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
        opt.step()
        loss = parts.total.detach()
        new_bad = (first_bad < 0) & ~torch.isfinite(loss)
        first_bad = torch.where(new_bad, step, first_bad)
        bad_value = torch.where(new_bad, loss.to(torch.float64), bad_value)
        tokens += idx.numel() * inputs.shape[1]
        if step % cfg.log_every == 0 or step == total - 1:
            vals, bad_step, bad = _logged_values(parts, first_bad, bad_value)
            if bad_step >= 0:
                raise FloatingPointError(
                    f"the {cfg.objective} loss became {bad} at step {bad_step} (parts at step "
                    f"{step}: {vals}); lower TrainConfig.lr={cfg.lr} or raise grad_clip")
            hist.step.append(step)
            for key in ("total", "ce", "lb", "z", "router"):
                getattr(hist, key).append(vals[key])
            hist.lr.append(lr)
            bar.set_postfix(loss=f"{vals['total']:.4f}")
        if eval_fn is not None and eval_every and (step + 1) % eval_every == 0 \
                and step != total - 1:
            hist.evals.append({"step": step + 1,
                               **_run_eval(model, eval_fn, caller_precision)})
    if eval_fn is not None:
        hist.evals.append({"step": total, **_run_eval(model, eval_fn, caller_precision)})
    if device == "cuda":
        torch.cuda.synchronize()
    hist.wall_s = time.perf_counter() - t0
    hist.tokens_per_s = tokens / max(hist.wall_s, 1e-9)
    model.eval()
    return hist


def _run_eval(model, eval_fn, precision: str) -> dict:
    was = model.training
    model.eval()
    with torch.no_grad(), float32_matmul_precision(precision):
        res = eval_fn(model)
    model.train(was)
    return dict(res)


def build_and_train(model_cfg: MoEConfig, data: TrainData, cfg: TrainConfig,
                    eval_fn: Callable[[MoETransformer], dict] | None = None,
                    eval_every: int | None = None) -> tuple[MoETransformer, History]:
    """Seed, build a fresh model from ``model_cfg`` and train it: the reproducible entry point."""
    _check_training_arguments(("model_cfg", model_cfg, MoEConfig), ("data", data, TrainData),
                              ("cfg", cfg, TrainConfig))
    data.check_vocab(model_cfg.vocab_size, model_cfg.max_len)   # fail before any work
    seed_everything(cfg.seed)
    model = MoETransformer(model_cfg)
    hist = train(model, data, cfg, eval_fn=eval_fn, eval_every=eval_every)
    return model, hist
