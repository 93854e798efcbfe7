"""Temperature in training (ours): does a trained router leave the symmetric state at ∝ 1/τ?

Paper B (Proposition 6.3) linearises the gradient flow of its two-expert Gaussian model at the
symmetric state (router w = 0, experts equal up to a small contrast δ): ẇ = M δ / (2τ),
δ̇ = M w / τ, so the unstable mode grows like exp(λ t / τ) -- at a rate ∝ 1/τ
(:mod:`moe_routing.landscape.symmetry`).  This module asks the same question of paper A's
transformer trained on the knowledge datasets, with every hypothesis made concrete:

* **soft mixture** -- ``top_k = n_experts`` with the renormalised gate, so the MoE output is
  Σ_k softmax(a/τ)_k f_k(x), paper B's soft gate.  (Paper A's top-1 Switch gate scales the
  chosen expert's output by its probability, so even with identical experts its output
  depends on the router: B's "at exact symmetry the output ignores the router" fails there.)
* **symmetric start, same for every τ** -- the model is drawn from ``seed`` (the draws do not
  depend on τ), then the router weights are set to ``router_init``·N(0, 1) and every expert to
  expert 0 plus a relative perturbation ``expert_init``, both from a generator seeded by
  ``seed``: only τ differs between the runs of one seed.
* **gradient flow** -- plain full-batch gradient descent (``optimizer="sgd"``, constant ``lr``)
  on a fixed set of ``n_sentences`` training sentences: the Euler discretisation of the flow
  the proposition linearises.  Adam-type optimisers divide each update by the gradient's scale,
  which removes the router gradient's 1/τ factor; ``optimizer="adamw"`` (no weight decay) runs
  the same experiment to show what that does.
* **plain cross-entropy** -- the paper's setting: specialisation from the data loss alone.
  The task-router loss would supervise the router directly (a constant push at w = 0, not an
  instability), so it is not the quantity Proposition 6.3 describes.

Two measures of the router, recorded before every step:

* the **router contrast** |w| -- the Frobenius norm of the router weights centred over the
  experts, B's state variable (the norm of w in :func:`.symmetry.fit_growth_rate`);
* the **task-aligned component** A -- at the template-determined positions (the prefix is
  continued by one task only, as in :mod:`.margins`), the router's raw logits ``W x`` (the
  model's logits times τ: B's state is w, not w/τ) centred over the experts, and their
  between-task spread ``A = sqrt(Σ_k f_k |μ_k − μ|²)`` (μ_k the mean centred logit vector of
  task k's positions, f_k their share, μ the overall mean): the projection of the logits on
  the task-indicator directions; with their whole spread ``S = sqrt(mean |c − μ|²)`` beside
  it, A²/S² is the between-task fraction of their variance (:func:`task_fraction`).

The **growth rate** is the least-squares slope of log |w| (or log A) against the step over the
window where the softmax's argument (the largest |centred logit|/τ) first lies in ``band`` =
(lo, hi): above lo the start's transient (w = 0 grows first like t, not exponentially) is
over, below hi the softmax is still linear -- the same band of the linearisation for every τ.
A fit counts only when the growth is log-linear there
(:meth:`moe_routing.experiments.bridge.temperature_fits.GrowthFit.log_linear`: R² and the ratio of
the window's two halves' slopes), so a drift that is a power of t -- AdamW's router grows like t --
is never read as a rate.

Shapes: ``n`` sentences, ``t`` positions, ``e`` experts, ``S`` steps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..._internal import validation as check
from ..._internal.runtime import torch_threads
from ...model.config import MoEShape
from ..task_routing import DataConfig, knowledge_dataset
from ..task_routing.config import NestedConfig

# what a run records and the fits of its rates live in .router_temperature_fits; importable
# from here
from .temperature_fits import GrowthRun, fit_growth

OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class TemperatureSetup(NestedConfig):
    """One experiment, in the parts every trained experiment shares: ``data``
    (:class:`~moe_routing.experiments.task_routing.DataConfig`: ``n_tasks`` tasks of the
    embedded knowledge base, drawn as a training run draws them), ``model``
    (:class:`~moe_routing.model.MoEShape`: ``n_experts``, ``d_model``, ``n_heads``,
    ``d_expert``; a soft mixture, module doc), and the experiment's own fields: ``n_sentences``
    training sentences (a fixed draw); at most ``steps`` full-batch steps of ``optimizer`` at
    constant ``lr`` (with ``stop_early``, a run stops once the softmax's argument leaves
    ``band``); the symmetric start ``router_init``, ``expert_init``; ``band`` of the softmax's
    argument where the growth is fitted.  No :class:`~moe_routing.model.TrainSchedule`: full-batch
    descent at a constant step is the flow the proposition linearises, not a schedule.

    ``setup.d_model`` reads the model part; :meth:`from_flat` and :meth:`replace` take any
    part's field by name (``TemperatureSetup.from_flat(d_model=32, steps=250)``).
    """

    data: DataConfig = field(
        default_factory=lambda: DataConfig(**TemperatureSetup._DEFAULTS["data"]))
    model: MoEShape = field(
        default_factory=lambda: MoEShape(**TemperatureSetup._DEFAULTS["model"]))
    n_sentences: int = 48
    steps: int = 150
    lr: float = 0.1
    optimizer: str = "sgd"
    router_init: float = 0.0
    expert_init: float = 1e-4
    band: tuple[float, float] = (1e-3, 0.1)
    stop_early: bool = True

    _PARTS: ClassVar[dict[str, type]] = {"data": DataConfig, "model": MoEShape}
    _DEFAULTS: ClassVar[dict[str, dict]] = {
        "data": dict(n_tasks=2, n_relations=8, n_pairs=20, n_templates=5),
        "model": dict(n_experts=2, d_model=16, n_heads=4, d_expert=16)}

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        self._check_parts()
        check.require(self.data.n_tasks >= 2, "TemperatureSetup.n_tasks", self.data.n_tasks,
                      "at least 2 (the between-task spread needs two tasks)")
        check.require(self.model.n_experts >= 2, "TemperatureSetup.n_experts",
                      self.model.n_experts, "at least 2 (a router between experts)")
        check.require(self.model.n_layers == 1 and self.model.entity_codes is None,
                      "TemperatureSetup.model", self.model,
                      "one layer with learned entity rows (the model B's proposition reads)")
        put("steps", check.integer("TemperatureSetup.steps", self.steps, low=1))
        put("n_sentences", check.integer("TemperatureSetup.n_sentences", self.n_sentences,
                                         low=2))
        put("lr", check.positive("TemperatureSetup.lr", self.lr))
        check.choice("TemperatureSetup.optimizer", self.optimizer, OPTIMIZERS)
        put("router_init", check.number("TemperatureSetup.router_init", self.router_init,
                                        low=0))
        put("expert_init", check.number("TemperatureSetup.expert_init", self.expert_init,
                                        low=0))
        accepted = "(lo, hi) with 0 < lo < hi: the band of max |centred logit|/τ fitted"
        try:
            lo, hi = self.band
        except (TypeError, ValueError):
            check.fail("TemperatureSetup.band", self.band, accepted)
        lo = check.positive("TemperatureSetup.band[0]", lo)
        hi = check.positive("TemperatureSetup.band[1]", hi)
        check.require(lo < hi, "TemperatureSetup.band", self.band, accepted)
        put("band", (lo, hi))
        put("stop_early", check.flag("TemperatureSetup.stop_early", self.stop_early))


def _batch(setup: TemperatureSetup):
    """The fixed training set: (inputs (n, t), targets (n, t), loss mask (n, t), determined
    (n, t), task (n,), vocabulary size)."""
    import torch

    ds = knowledge_dataset(setup.data)
    enc = ds.encode_split("train")
    n = min(setup.n_sentences, len(enc))
    sel = torch.randperm(len(enc), generator=torch.Generator().manual_seed(setup.data_seed))[:n]
    loss_mask = enc.loss_mask[sel]
    shared = torch.from_numpy(ds.trie.ambiguous)[enc.prefix_node[sel, :-1].clamp_min(0)]
    determined = loss_mask & ~shared
    check.require(len(set(enc.task[sel][determined.any(1)].tolist())) >= 2,
                  "TemperatureSetup.n_sentences", setup.n_sentences,
                  "enough sentences that two tasks have template-determined positions")
    return (enc.inputs[sel], enc.targets_masked(-100)[sel], loss_mask, determined,
            enc.task[sel], ds.vocab_size)


def symmetric_model(setup: TemperatureSetup, tau: float, seed: int, vocab_size: int,
                    max_len: int):
    """The soft-mixture model at the symmetric start (module doc): the same weights for every
    τ of one seed; with ``router_init = expert_init = 0`` the state is exactly symmetric."""
    import torch

    from ...model import MoETransformer
    from ..._internal.runtime import seed_everything

    tau = check.temperature("tau", tau)
    seed = check.integer("seed", seed, low=0)
    cfg = setup.model.config(vocab_size, max_len, top_k=setup.n_experts, gate="renormalised",
                             router_temperature=tau)
    seed_everything(seed)
    model = MoETransformer(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        r = model.router.weight
        r.copy_(setup.router_init * torch.randn(r.shape, generator=g))
        ex = model.experts
        for p in (ex.w1, ex.b1, ex.w2, ex.b2):
            scale = setup.expert_init * float(p[0].std()) if p[0].numel() > 1 else 0.0
            scale = scale or setup.expert_init * model.config.init_std
            p.copy_(p[0:1].expand_as(p) + scale * torch.randn(p.shape, generator=g))
    return model


def _between_within(raw_logits, determined, task) -> tuple[float, float]:
    """(Σ_k f_k |μ_k − μ|², mean |c − μ|²) of the centred raw logits c at the determined
    positions: the between-task part of their spread and their whole spread."""
    z = raw_logits - raw_logits.mean(-1, keepdim=True)                     # (n, t, e)
    zd = z[determined].double()                                           # (m, e)
    tk = task[:, None].expand_as(determined)[determined]                  # (m,)
    mu = zd.mean(0)
    between = 0.0
    for k in tk.unique():
        sel = tk == k
        between += float(sel.double().mean()) * float(((zd[sel].mean(0) - mu) ** 2).sum())
    return between, float(((zd - mu) ** 2).sum(-1).mean())


def separator_fractions(router_inputs, determined, task) -> tuple[float, float]:
    """(chance, best): the between-task fractions a router could give its centred logits on
    these inputs -- the yardsticks of :func:`task_fraction`.  ``router_inputs`` (n, t, d) the
    router's inputs x, ``determined`` (n, t) bool, ``task`` (n,).

    With Σ_B the between-task and Σ_T the whole covariance of x at the determined positions:
    ``chance`` = tr Σ_B / tr Σ_T, the ratio of the expected between-task and whole variance of
    the logits of a router of i.i.d. Gaussian weights (a direction that knows nothing of the
    tasks; centring over the experts scales both parts alike); ``best`` = the largest
    eigenvalue of Σ_T⁻¹ Σ_B, the fraction of a router along the best task separator (Fisher's
    discriminant).  B-Prop 6.3's unstable direction correlates with the teacher's separator:
    its fraction lies towards ``best``, not at ``chance``."""
    import scipy.linalg

    x = router_inputs[determined].double()                                 # (m, d)
    tk = task[:, None].expand_as(determined)[determined]                  # (m,)
    mu = x.mean(0)
    zeros = x.new_zeros(x.shape[1], x.shape[1])
    between = zeros                                                       # (d, d)
    for k in tk.unique():
        sel = tk == k
        dk = x[sel].mean(0) - mu
        between = between + float(sel.double().mean()) * zeros.addr(dk, dk)
    xc = x - mu
    total = xc.T @ xc / x.shape[0]                                        # (d, d)
    tr_total = float(total.trace())
    if tr_total <= 0:
        return math.nan, math.nan
    b, t = between.numpy(), total.numpy()
    ridge = 1e-9 * tr_total / t.shape[0]                # Σ_T may be singular (LayerNorm)
    best = float(scipy.linalg.eigh(b, t + ridge * np.eye(t.shape[0]), eigvals_only=True)[-1])
    return float(between.trace()) / tr_total, min(best, 1.0)


def task_aligned(raw_logits, determined, task) -> float:
    """A: the between-task spread of the centred raw router logits at the determined
    positions.  ``raw_logits`` (n, t, e), ``determined`` (n, t) bool, ``task`` (n,)."""
    return math.sqrt(_between_within(raw_logits, determined, task)[0])


def task_fraction(raw_logits, determined, task) -> float:
    """The between-task fraction of the variance of the centred raw router logits c at the
    determined positions, Σ_k f_k |μ_k − μ|² / mean |c − μ|² (f_k task k's share of the
    positions, μ_k its mean, μ the overall mean): in [0, 1] (the law of total variance), 1
    when the logits depend on the task only, ≈ 0 when they do not depend on it; NaN when
    the logits do not vary at all.  Arguments as :func:`task_aligned`."""
    between, total = _between_within(raw_logits, determined, task)
    return min(between / total, 1.0) if total > 0 else math.nan


def train_from_symmetry(setup: TemperatureSetup, tau: float, seed: int = 0) -> GrowthRun:
    """Train one run from the symmetric start; measure A, |w| and max|a|/τ before every step.

    With ``setup.stop_early`` the run stops once the softmax's argument has left the fitted
    band (the window is complete; what follows is the nonlinear phase), so the arrays may be
    shorter than ``steps + 1``."""
    import torch
    import torch.nn.functional as F

    check.instance("setup", setup, TemperatureSetup, "a TemperatureSetup")
    t0 = time.perf_counter()
    inputs, targets, loss_mask, determined, task, vocab = _batch(setup)
    model = symmetric_model(setup, tau, seed, vocab, inputs.shape[1])
    tau = float(model.config.router_temperature)
    params = list(model.parameters())
    opt = (torch.optim.SGD(params, lr=setup.lr) if setup.optimizer == "sgd"
           else torch.optim.AdamW(params, lr=setup.lr, weight_decay=0.0))
    keep = targets != -100
    aligned, contrast, scaled, losses, spread, yardsticks = [], [], [], [], [], []
    seen = {}                                       # the router's input of the last forward
    hook = model.router.register_forward_pre_hook(
        lambda _module, args: seen.__setitem__("x", args[0].detach()))

    def record(router_logits):
        with torch.no_grad():
            raw = router_logits * tau                                      # (n, t, e) = W x
            between, total = _between_within(raw, determined, task)
            aligned.append(math.sqrt(between))
            spread.append(math.sqrt(total))
            yardsticks.append(separator_fractions(seen["x"], determined, task))
            w = model.router.weight                                       # (e, d)
            contrast.append(float((w - w.mean(0, keepdim=True)).norm()))
            c = raw - raw.mean(-1, keepdim=True)
            scaled.append(float(c[loss_mask].abs().max()) / tau)

    for s in range(setup.steps):
        out = model(inputs)
        record(out.router_logits)
        if setup.stop_early and scaled[-1] > setup.band[1]:
            break
        loss = F.cross_entropy(out.logits[keep], targets[keep])
        check.require(bool(torch.isfinite(loss)), "TemperatureSetup.lr", setup.lr,
                      f"a smaller learning rate: the loss is not finite at step {s} "
                      f"(τ = {tau:g})")
        losses.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            record(model(inputs).router_logits)
    hook.remove()
    aligned, contrast, scaled = np.array(aligned), np.array(contrast), np.array(scaled)
    return GrowthRun(tau=tau, seed=seed, optimizer=setup.optimizer, aligned=aligned,
                     router_contrast=contrast, max_scaled=scaled, loss=np.array(losses),
                     fit=fit_growth(aligned, scaled, setup.band),
                     fit_contrast=fit_growth(contrast, scaled, setup.band),
                     wall_s=time.perf_counter() - t0, spread=np.array(spread),
                     yardsticks=np.array(yardsticks))


def temperature_sweep(setup: TemperatureSetup, taus, seeds) -> tuple[GrowthRun, ...]:
    """Every (seed, τ) run, seeds outer: ``len(seeds) * len(taus)`` runs, each on one torch
    thread whatever the machine has (the runs amplify a reduction's last bit at 1/τ: at two
    threads the default sweep's slope reads 1.637, at one 1.634), the caller's count restored
    after."""
    taus = check.temperatures("taus", taus)
    check.require(taus.size >= 2 and np.unique(taus).size == taus.size, "taus", taus.tolist(),
                  "at least two distinct temperatures")
    seeds = [check.integer(f"seeds[{i}]", s, low=0) for i, s in
             enumerate(check.sequence("seeds", seeds, "a non-empty list of seeds ≥ 0"))]
    check.require(len(set(seeds)) == len(seeds), "seeds", seeds,
                  "distinct seeds (a repeated seed is the same run twice)")
    with torch_threads(1):
        return tuple(train_from_symmetry(setup, float(t), s) for s in seeds for t in taus)
