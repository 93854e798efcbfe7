"""Paper B's quantities measured on paper A's trained routers (ours).

Paper A trains a softmax router and routes each token to its top-1 expert; paper B studies
that very object: the top-two margin Δ(x) of the router logits, the boundary mass
BM(w) = P(Δ ≤ w) with its power law BM(w) ≈ C w^α, and the gap |L_τ − L_0| = O(τ^α) between the
soft mixture at temperature τ and hard routing.  This module measures them on a trained
:class:`~moe_routing.model.MoETransformer` (one layer, as :mod:`.task_routing` trains it; a
model from :func:`.task_routing.load_model`), over the sentences of one split of its dataset.

Conventions (what is measured, exactly):

* **Logits.** Δ is taken on the router's logits as the model computes them,
  ``a(x) = W_r LN(A'(x)) / τ_model`` (``MoEConfig.router_temperature``, 1 in every run of
  :mod:`.task_routing`), *not* on the probabilities softmax(a): paper B's margin is a logit
  margin, the one for which the gate gap ``1 − π_{k*,τ} ≤ (K − 1) e^{−Δ/τ}``
  (:mod:`moe_routing.boundary.margin`) holds and for which ``p_(2)/p_(1) = e^{−Δ}`` exactly.
  The bridge's temperature τ comes *on top of* τ_model: the soft gate is softmax(a/τ).
* **Positions.** Every position of a sentence at which a next token is predicted (BOS, the
  template words, the subject -- the positions of the training loss), each tagged
  ``determined`` when its prefix is continued by sentences of one task only (the positions of
  ``routing_determined`` in :func:`.task_routing.evaluate_run`: there a router reading the
  prefix can know the task) or ``shared`` otherwise; ``object`` marks the position that
  predicts the object.
* **Hard and soft.** The trained model's layer is ``A'' = A' + g·FF_{k*}(LN(A'))`` with the
  Switch gate g = p_{k*} (the router probability of the chosen expert).  Paper B's hard router
  is the τ → 0 limit of the soft mixture, ``A'' = A' + FF_{k*}`` (unit gate), and its soft
  router is ``A'' = A' + Σ_k softmax(a/τ)_k FF_k`` (every expert: a mixture of predictions at
  the layer's output, then the shared unembedding).  L_0 and L_τ are their cross-entropies at
  the object position; the trained (Switch) model is reported beside them, as it is neither.
  The mixture is computed from the model's own parts (attention, router, experts, unembedding,
  run one after another), in float64 on a copy of the model, so that exponentially small gaps
  are not float32 rounding.  The *mixture of losses* ``Σ_k π_{k,τ} ℓ_k`` (ℓ_k: the loss with
  expert k alone) is reported too: it is the form whose bound has a constant computable from
  the data (the loss range across experts), see :func:`bound_check`.

The chapter that calls these functions reads its numbers from the returned objects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .. import validation as check
from ..boundary.fits import bootstrap_bm_fit, fit_loglog
from ..boundary.mass import boundary_mass_from_margins, tail_constant
from ..boundary.risk import risk_bound

#: which positions :func:`router_margins` returns
POSITIONS = ("all", "object", "determined", "shared")
#: the splits of a dataset the measurements run on
SPLITS = ("test", "train")


# ----------------------------------------------------------------------------- checks
def _model(model):
    from ..model import MoETransformer

    check.instance("model", model, MoETransformer, "a MoETransformer (e.g. from load_model)")
    cfg = model.config
    check.require(cfg.n_layers == 1, "model.config.n_layers", cfg.n_layers,
                  "1 (paper A's one-layer model: the soft router replaces its only MoE layer)")
    check.require(cfg.n_experts >= 2, "model.config.n_experts", cfg.n_experts,
                  "≥ 2 experts (with one expert there is no margin and no routing)")
    alive = model.expert_alive
    check.require(bool((alive == 1).all()) and model.knockout_mode == "zero",
                  "model.expert_alive", alive.tolist(),
                  "all experts alive (restore_experts() first: a knocked-out expert has no "
                  "finite logit margin)")
    return model


def _dataset(dataset, model):
    from ..knowledge import KnowledgeDataset

    check.instance("dataset", dataset, KnowledgeDataset,
                   "a KnowledgeDataset (e.g. task_routing.experiment_dataset(cfg))")
    check.require(dataset.vocab_size == model.config.vocab_size, "dataset.vocab_size",
                  dataset.vocab_size,
                  f"the model's vocabulary size {model.config.vocab_size} (the dataset the "
                  "model was trained on)")
    return dataset


def _split(dataset, split, model):
    split = check.choice("split", split, SPLITS)
    enc = dataset.encode_split(split)
    check.require(len(enc) > 0, "split", split, "a split with at least one sentence")
    check.require(enc.inputs.shape[1] <= model.config.max_len, "dataset.seq_len",
                  enc.inputs.shape[1], f"at most the model's max_len={model.config.max_len}")
    return enc


# ----------------------------------------------------------------------------- layer parts
def _layer_parts(model, inputs, batch_size: int = 512):
    """A' (the residual after attention) and the router logits a, at every position:
    ``(a1 (M, t, d), logits (M, t, K))`` from the model's own forward pass."""
    import torch

    device = next(model.parameters()).device
    a1, logits = [], []
    with torch.no_grad():
        for s in range(0, inputs.shape[0], batch_size):
            out = model(inputs[s:s + batch_size].to(device), return_internals=True)
            a1.append(out.resid_mid.cpu())
            logits.append(out.router_logits.cpu())
    return torch.cat(a1), torch.cat(logits)


def _expert_outputs(model, x):
    """FF_k(x) of every expert k, (n, K, d), through the model's ``experts`` module (each token
    sent to expert k with gate 1)."""
    import torch

    n, K = x.shape[0], model.config.n_experts
    outs = []
    for k in range(K):
        idx = torch.full((n, 1), k, dtype=torch.long, device=x.device)
        outs.append(model.experts(x, idx, torch.ones(n, 1, dtype=x.dtype, device=x.device),
                                  backend="loop"))
    return torch.stack(outs, 1)


def _head(model, a1, moe):
    """Logits of the vocabulary from A' and the MoE output: W_U LN(A' + moe)."""
    return model.unembed(model.ln_out(a1 + moe))


def _float64(model):
    """A float64 copy on the CPU (the caller's model is left as it is)."""
    m = copy.deepcopy(model).cpu().double().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


# ----------------------------------------------------------------------------- margins
@dataclass(frozen=True)
class RouterMargins:
    """Top-two margins of the router logits at the selected positions (all arrays (n,)).

    ``margins`` Δ = a_(1) − a_(2) on the logits ``logits`` (n, K) as the model computes them
    (already divided by ``router_temperature`` = τ_model; *not* probabilities).
    ``determined``: the prefix is continued by one task only; ``is_object``: the position
    predicts the object; ``sentence`` (row of the split), ``position`` (input position),
    ``task``; ``split``, ``positions`` as requested.
    """

    margins: np.ndarray
    logits: np.ndarray
    determined: np.ndarray
    is_object: np.ndarray
    sentence: np.ndarray
    position: np.ndarray
    task: np.ndarray
    router_temperature: float
    split: str
    positions: str

    @property
    def kind(self) -> np.ndarray:
        """``'determined'`` or ``'shared'`` per position."""
        return np.where(self.determined, "determined", "shared")

    def of_kind(self, kind: str) -> np.ndarray:
        """The margins of the positions of one kind (``'determined'``, ``'shared'``, or
        ``'object'``)."""
        kind = check.choice("kind", kind, ("determined", "shared", "object"))
        sel = {"determined": self.determined, "shared": ~self.determined,
               "object": self.is_object}[kind]
        return self.margins[sel]


def _position_masks(dataset, enc):
    import torch

    loss_mask = enc.loss_mask                                                 # (M, t)
    nodes = enc.prefix_node[:, :-1]
    shared = torch.from_numpy(dataset.trie.ambiguous)[nodes.clamp_min(0)]
    obj = torch.zeros_like(loss_mask)
    obj[torch.arange(len(enc)), enc.object_pos - 1] = True                   # predicts object
    return loss_mask, loss_mask & ~shared, obj


def router_margins(model, dataset, positions: str = "all", split: str = "test",
                   batch_size: int = 512) -> RouterMargins:
    """Δ(x) of the model's router at the ``positions`` of the ``split`` sentences of
    ``dataset`` (the model's training dataset): ``'all'`` predicted positions, only the
    ``'object'``-predicting ones, or only those of kind ``'determined'`` / ``'shared'``."""
    _model(model)
    _dataset(dataset, model)
    positions = check.choice("positions", positions, POSITIONS)
    batch_size = check.integer("batch_size", batch_size, low=1)
    enc = _split(dataset, split, model)
    loss_mask, determined, obj = _position_masks(dataset, enc)
    sel = {"all": loss_mask, "object": obj, "determined": determined,
           "shared": loss_mask & ~determined}[positions]
    check.require(bool(sel.any()), "positions", positions,
                  f"a kind of position that occurs in the {split} split")
    model.eval()
    _, logits = _layer_parts(model, enc.inputs, batch_size)
    a = logits[sel].double().cpu().numpy()                                   # (n, K)
    rows, cols = sel.nonzero(as_tuple=True)
    s = np.sort(a, axis=1)
    return RouterMargins(
        margins=s[:, -1] - s[:, -2], logits=a, determined=determined[sel].cpu().numpy(),
        is_object=obj[sel].cpu().numpy(), sentence=rows.cpu().numpy(),
        position=cols.cpu().numpy(), task=enc.task[rows].cpu().numpy(),
        router_temperature=float(model.config.router_temperature), split=split,
        positions=positions)


# ----------------------------------------------------------------------------- boundary mass
@dataclass(frozen=True)
class RouterBoundaryMass:
    """Empirical BM(w) = #{Δ_i ≤ w}/n of a router's margins, with its power-law fit.

    ``widths``, ``estimate``, ``lower``, ``upper`` (Wilson intervals at ``confidence``),
    ``counts`` -- all (m,).  ``alpha`` (``alpha_ci``), ``prefactor`` C (``prefactor_ci``): the
    fit BM(w) ≈ C w^α over the widths ``fitted`` (bootstrap of the bin counts,
    :func:`moe_routing.boundary.fits.bootstrap_bm_fit`).  ``C_m`` = sup_w BM(w)/w^α of the
    empirical law at the fitted α (:func:`moe_routing.boundary.mass.tail_constant`), the
    constant the risk bound needs; ``min_margin`` the smallest margin (C_m is infinite when it
    is 0).
    """

    widths: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    counts: np.ndarray
    n: int
    confidence: float
    fitted: np.ndarray
    alpha: float
    alpha_ci: tuple[float, float]
    prefactor: float
    prefactor_ci: tuple[float, float]
    C_m: float
    min_margin: float


def boundary_mass_of_router(margins, w_grid, confidence: float = 0.95,
                            fit_max_mass: float = 0.5, n_boot: int = 400,
                            rng=0) -> RouterBoundaryMass:
    """BM(w) on ``w_grid`` from ``margins`` (a :class:`RouterMargins` or an array of Δ ≥ 0),
    the fitted α and C_m.

    The power law is a small-w statement (BM bends to 1 once the slab holds most positions), so
    α is fitted on the widths whose count is ≥ 1 and whose BM is ≤ ``fit_max_mass``; at least
    two distinct such widths are needed (a ValueError says so).  C_m is the supremum over
    *every* w of the empirical BM(w)/w^α: a step function right-continuous at the sorted
    margins, so the supremum is attained at a margin, and the margins themselves are the grid
    given to ``tail_constant`` (a log grid would miss the steps and underestimate it).
    """
    d = margins.margins if isinstance(margins, RouterMargins) else margins
    d = check.finite_array("margins", d, ndim=1, low=0)
    w = check.widths("w_grid", w_grid, positive=True)
    check.require(bool(np.all(np.diff(w) > 0)), "w_grid", w_grid, "increasing widths")
    confidence = check.probability("confidence", confidence)
    fit_max_mass = check.number("fit_max_mass", fit_max_mass, low=0, low_open=True, high=1)
    bm = boundary_mass_from_margins(d, w, confidence)
    fitted = (bm.counts >= 1) & (bm.estimate <= fit_max_mass)
    check.require(int(np.unique(w[fitted]).size) >= 2, "w_grid", w_grid,
                  f"≥ 2 widths with at least one margin Δ ≤ w and BM(w) ≤ "
                  f"fit_max_mass={fit_max_mass} (the smallest margin is {d.min():.3g}, the "
                  f"median {np.median(d):.3g})")
    fit = bootstrap_bm_fit(w[fitted], bm.counts[fitted], bm.n, n_boot=n_boot, rng=rng,
                           confidence=confidence)
    alpha = fit.slope
    check.require(alpha > 0, "alpha (fitted)", alpha,
                  "a positive slope (a boundary mass grows with w)")
    return RouterBoundaryMass(w, bm.estimate, bm.lower, bm.upper, bm.counts, bm.n, confidence,
                              fitted, alpha, fit.slope_ci, fit.prefactor, fit.prefactor_ci,
                              margin_tail_constant(d, alpha), float(d.min()))


def margin_tail_constant(margins, alpha: float) -> float:
    """C_m = sup_{w>0} BM(w)/w^α of the empirical law of ``margins`` (inf when a margin is 0).

    The empirical BM is a right-continuous step function and w^α increases, so on each step
    [Δ_(i), Δ_(i+1)) the ratio is largest at its left end: the sorted margins are the exact
    grid for :func:`moe_routing.boundary.mass.tail_constant`.  With this C_m the bound of
    :func:`bound_check` is a theorem for the positions measured, at *any* α > 0 (a fitted α
    or the α = 1 of a transversal router).
    """
    d = margins.margins if isinstance(margins, RouterMargins) else margins
    srt = np.sort(check.finite_array("margins", d, ndim=1, low=0))
    alpha = check.positive("alpha", alpha)
    if srt[0] == 0:
        return float("inf")

    def ecdf(x):
        return np.searchsorted(srt, x, side="right") / srt.size

    return float(tail_constant(ecdf, alpha, w_grid=np.unique(srt)))


# ----------------------------------------------------------------------------- soft vs hard
def mixture_logits(model, inputs, select, taus):
    """Vocabulary logits at the ``select``-ed positions of ``inputs`` (M, t) for the hard
    router, each soft mixture at ``taus`` and the trained (Switch) model, in float64.

    Returns a dict of tensors: ``hard`` (n, V); ``soft`` (T, n, V); ``switch`` (n, V);
    ``router_logits`` (n, K); ``expert_logits`` (n, K, V) -- the logits with expert k alone
    (unit gate), for the mixture of losses.  The model is copied, never changed.
    """
    import torch

    _model(model)
    t = check.temperatures("taus", taus)
    m = _float64(model)
    check.instance("select", select, torch.Tensor, "a bool tensor (M, t)")
    check.require(select.dtype == torch.bool and tuple(select.shape) == tuple(inputs.shape),
                  "select", tuple(select.shape), f"a bool tensor of shape {tuple(inputs.shape)}")
    with torch.no_grad():
        a1_all, logits_all = _layer_parts(m, inputs)
        switch = m(inputs).logits[select]                                     # (n, V)
        a1, a = a1_all[select], logits_all[select]                           # (n, d), (n, K)
        ff = _expert_outputs(m, m.ln_moe(a1))                                # (n, K, d)
        k_star = a.argmax(-1)
        hard = _head(m, a1, ff[torch.arange(a.shape[0]), k_star])
        soft = torch.stack([
            _head(m, a1, (torch.softmax(a / float(tau), -1)[..., None] * ff).sum(1))
            for tau in t])
        experts = _head(m, a1[:, None, :], ff)                                # (n, K, V)
    return dict(hard=hard, soft=soft, switch=switch, router_logits=a, expert_logits=experts)


@dataclass(frozen=True)
class SoftHard:
    """Soft mixture against hard routing at the object position of every ``split`` sentence.

    Per τ (arrays (T,)): ``ce_soft`` L_τ, ``em_soft`` exact match, ``gap`` |L_τ − L_0|;
    ``ce_losses`` the mixture of losses E[Σ_k π_{k,τ} ℓ_k] and ``gap_losses`` its |· − L_0|.
    ``ce_hard`` L_0 and ``em_hard`` (unit-gate top-1), ``ce_switch``, ``em_switch`` (the
    trained model as it is).  ``slope``, ``slope_ci``: log–log fit of ``gap`` against τ over
    the τ with a positive gap (NaN when fewer than 3).  ``margins``: Δ at the same positions
    (their boundary mass is the one the bound of these gaps needs).  Constants for
    :func:`bound_check`: ``loss_range`` = max over positions of max_k ℓ_k − min_k ℓ_k (the
    mixture of losses' pointwise gap is ≤ (1 − π_{k*,τ})·loss_range); ``envelope`` = max over
    positions and τ (with 1 − π_{k*,τ} > 1e-9, above rounding) of |ℓ_τ − ℓ_0| / (1 − π_{k*,τ}),
    the same constant *measured* for the mixture of predictions (not known a priori: a bound
    with it tests only the margin-tail step of the proof).
    """

    taus: np.ndarray
    ce_soft: np.ndarray
    em_soft: np.ndarray
    gap: np.ndarray
    ce_losses: np.ndarray
    gap_losses: np.ndarray
    ce_hard: float
    em_hard: float
    ce_switch: float
    em_switch: float
    slope: float
    slope_ci: tuple[float, float]
    margins: np.ndarray
    n_experts: int
    loss_range: float
    envelope: float
    n: int


def _loglog_slope(taus, gap):
    ok = gap > 0
    if int(np.unique(taus[ok]).size) < 3:
        return float("nan"), (float("nan"), float("nan"))
    fit = fit_loglog(taus[ok], gap[ok])
    return fit.slope, fit.slope_ci


def soft_vs_hard(model, dataset, taus, split: str = "test") -> SoftHard:
    """L_τ (soft mixture at each τ of ``taus``) against L_0 (hard top-1) at the object position
    of every ``split`` sentence of ``dataset``: cross-entropy, exact match, the gaps and their
    log–log slope (see the module docstring for what soft and hard are)."""
    import torch
    import torch.nn.functional as F

    _model(model)
    _dataset(dataset, model)
    t = check.temperatures("taus", taus)
    enc = _split(dataset, split, model)
    _, _, obj = _position_masks(dataset, enc)
    rows, cols = obj.nonzero(as_tuple=True)
    target = enc.tokens[rows, cols + 1]                                       # the objects
    out = mixture_logits(model, enc.inputs, obj, t)
    a = out["router_logits"]

    def ce(z):                          # z (..., n, V) -> per-position cross-entropy (..., n)
        reps = z.numel() // (z.shape[-1] * target.numel())      # leading dims, row-major
        return F.cross_entropy(z.reshape(-1, z.shape[-1]), target.repeat(reps),
                               reduction="none").reshape(z.shape[:-1])

    l0 = ce(out["hard"])                                                      # (n,)
    lt = ce(out["soft"])                                                      # (T, n)
    lk = ce(out["expert_logits"].transpose(0, 1)).transpose(0, 1)            # (n, K)
    pi = torch.stack([torch.softmax(a / float(tau), -1) for tau in t])      # (T, n, K)
    l_loss = (pi * lk).sum(-1)                                                # (T, n)
    gap = (lt - l0).mean(1).abs().numpy()        # pointwise differences, then the mean
    gap_l = (l_loss - l0).mean(1).abs().numpy()
    off = 1 - pi.max(-1).values                                               # 1 − π_{k*,τ}
    # where 1 − π_{k*,τ} is below 1e-9 the two losses agree to rounding, and their difference
    # over it would measure the rounding, not the loss: those (position, τ) are left out
    ratio = torch.where(off > 1e-9, (lt - l0).abs() / off.clamp_min(1e-9),
                        torch.zeros_like(off))
    em = lambda z: (z.argmax(-1) == target).double().mean(-1)               # noqa: E731
    slope, slope_ci = _loglog_slope(t, gap)
    srt = a.sort(-1).values
    return SoftHard(
        taus=t, ce_soft=lt.mean(1).numpy(), em_soft=em(out["soft"]).numpy(), gap=gap,
        ce_losses=l_loss.mean(1).numpy(), gap_losses=gap_l, ce_hard=float(l0.mean()),
        em_hard=float(em(out["hard"])), ce_switch=float(ce(out["switch"]).mean()),
        em_switch=float(em(out["switch"])), slope=slope, slope_ci=slope_ci,
        margins=(srt[:, -1] - srt[:, -2]).numpy(), n_experts=int(a.shape[1]),
        loss_range=float((lk.max(-1).values - lk.min(-1).values).max()),
        envelope=float(ratio.max()), n=int(target.numel()))


# ----------------------------------------------------------------------------- bound
@dataclass(frozen=True)
class BoundCheck:
    """Measured gaps against paper B's bound (K − 1)·M·C_m·Γ(1 + α)·τ^α (all arrays (T,)).

    ``bound`` per τ, ``ratio`` = gap / bound; ``below``: every gap ≤ its bound.  ``slope``
    (``slope_ci``): the log–log slope of the gaps (over the τ with a positive gap); ``alpha``
    the measured boundary-mass exponent; ``rate_matches``: α lies in the slope's interval.
    ``M`` the pointwise constant used and ``form`` where it came from.
    """

    taus: np.ndarray
    gap: np.ndarray
    bound: np.ndarray
    ratio: np.ndarray
    below: bool
    slope: float
    slope_ci: tuple[float, float]
    alpha: float
    rate_matches: bool
    C_m: float
    M: float
    form: str


def bound_check(gap, alpha: float, C_m: float, constants: dict, taus=None) -> BoundCheck:
    """Is the measured gap below paper B's bound, and does it fall at the rate τ^α?

    The bound (the soft-to-hard risk bound of the ``soft_to_hard`` chapter, constants ours):
    if the pointwise gap of the loss obeys |ℓ_τ(x) − ℓ_0(x)| ≤ M·(1 − π_{k*,τ}(x)) and
    BM(w) ≤ C_m w^α at every w, then, since 1 − π_{k*,τ} ≤ (K − 1) e^{−Δ/τ} and
    E[e^{−Δ/τ}] ≤ C_m Γ(1+α) τ^α (layer cake),

        |L_τ − L_0| ≤ (K − 1) · M · C_m · Γ(1 + α) · τ^α.

    ``constants`` holds ``n_experts`` K and one of: ``B``, ``B_star`` -- squared loss, mixture
    of predictions, |f_k| ≤ B, |f*| ≤ B*: M = 4B(B + B*) (the book's
    :func:`~moe_routing.boundary.risk.risk_bound`); ``loss_range`` R -- a mixture of losses
    with every ℓ_k(x) in an interval of length R: M = R (for cross-entropy,
    :attr:`SoftHard.loss_range` of the positions measured); ``M`` -- any other pointwise
    constant (e.g. :attr:`SoftHard.envelope`, measured).  ``gap`` is a :class:`SoftHard`
    (its ``gap`` and ``taus``; pass ``constants`` with ``loss_range`` to check its
    ``gap_losses`` instead, which that constant bounds) or an array with ``taus``.
    The bound holds for the law of the positions measured only if C_m is the supremum over
    every w of *their* empirical BM (:func:`boundary_mass_of_router` of the same positions).
    """
    if not isinstance(constants, dict):
        check.fail("constants", type(constants).__name__,
                   "a dict with n_experts and one of: B and B_star, loss_range, M")
    K = check.integer("constants['n_experts']", constants.get("n_experts"), low=2)
    forms = [f for f in (("B", "B_star"), ("loss_range",), ("M",))
             if all(k in constants for k in f)]
    unknown = set(constants) - {"n_experts", "B", "B_star", "loss_range", "M"}
    check.require(len(forms) == 1 and not unknown, "constants", constants,
                  "n_experts and exactly one of: B and B_star (squared loss), loss_range "
                  "(mixture of losses), M (a pointwise constant)")
    (form,) = forms
    if isinstance(gap, SoftHard):
        check.require(taus is None, "taus", taus, "None when gap is a SoftHard (its taus)")
        t = gap.taus
        g = gap.gap_losses if form == ("loss_range",) else gap.gap
    else:
        t = check.temperatures("taus", taus)
        g = np.abs(check.finite_array("gap", gap, shape=t.shape))
    alpha = check.positive("alpha", alpha)
    C_m = check.number("C_m", C_m, low=0, low_open=True)
    if form == ("B", "B_star"):
        B = check.positive("constants['B']", constants["B"])
        Bs = check.positive("constants['B_star']", constants["B_star"])
        M = 4 * B * (B + Bs)
        bound = risk_bound(t, K, B, Bs, C_m, alpha)
        name = f"squared loss, mixture of predictions: M = 4B(B+B*) with B = {B:g}, B* = {Bs:g}"
    else:
        key = form[0]
        M = check.number(f"constants[{key!r}]", constants[key], low=0)
        from scipy import special

        bound = (K - 1) * M * C_m * special.gamma(1 + alpha) * t ** alpha
        name = ("mixture of losses: M = loss range" if key == "loss_range"
                else "pointwise constant M given")
    slope, slope_ci = _loglog_slope(t, g)
    ratio = np.divide(g, bound, out=np.zeros_like(g), where=bound > 0)
    return BoundCheck(taus=t, gap=g, bound=bound, ratio=ratio, below=bool(np.all(g <= bound)),
                      slope=slope, slope_ci=slope_ci, alpha=alpha,
                      rate_matches=bool(slope_ci[0] <= alpha <= slope_ci[1]), C_m=C_m,
                      M=float(M), form=name)
