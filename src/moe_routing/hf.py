"""The book's routing measurements on Hugging Face MoE language models (ours; the ``hf`` extra).

Paper A measures how a router splits tokens by task (task × expert counts, NMI, purity,
utilisation: :mod:`moe_routing.routing_metrics`); paper B measures how close tokens sit to a
routing boundary (top-two margin Δ, boundary mass BM(w) = P(Δ ≤ w) and its power-law fit:
:mod:`moe_routing.boundary`).  This module applies *the same functions* to the MoE models people
train with ``transformers`` (Mixtral, OLMoE, Qwen2-MoE, Qwen3-MoE, …), so that a number measured
here and one measured on the library's own transformer mean the same thing:

* :func:`collect_router_logits` — the router logits of every MoE layer at the non-padding
  tokens of a batch;
* :func:`routing_measurements` — per layer: the top-k choice as the model routes, the routing
  summary against per-token task ids, the margins and BM(w) on a grid with its fit;
* :func:`knowledge_batch` — a :class:`~moe_routing.knowledge.KnowledgeDataset` split as
  ``input_ids`` / ``attention_mask`` / ``labels`` in the library's own token ids, with the task
  of each token and the positions that predict the object;
* :func:`train_hf_moe` — a small ``MixtralForCausalLM`` trained from random initialisation on
  the dataset under paper A's three objectives ``ce``, ``ce+lb``, ``ce+router``.

What ``outputs.router_logits`` holds.  In transformers 5.2 the routers of the Mixtral family
(Mixtral, MiniMax, OLMoE, FlexOlmo, Qwen2-MoE, Qwen3-MoE, Qwen3-Next, …) overwrite their logits
with their softmax before returning them, so the tensors the model records under the name
``router_logits`` are *probabilities* (huggingface/transformers issue #45120, fixed after 5.2
by pull request #45131).  A top-two margin of probabilities is not the margin Δ of paper B
(its units are not the logits', and it is bounded by 1), and the model's own load-balancing loss
takes a second softmax of them.  This module therefore never trusts the name: it reads the
input of each router module (the class transformers itself records, from the model's
``_can_record_outputs``) and applies that module's linear map, ``a = W x (+ b)`` — the exact
pre-softmax logits — and checks, on the first batch, that what the model records is either
``a`` or ``softmax(a)`` (anything else is refused: this module does not know that router).
Routers that are not a linear map with a ``weight`` of shape (experts, hidden) are refused by
name.  The top-k choice itself does not depend on whether it is read from the logits or their
softmax (softmax is increasing, and the renormalised top-k probabilities are the softmax over
the k chosen logits); the margins, the entropies and the task-router loss do.

Load-balancing losses compared (conventions differ by top-k; E experts, n tokens, top-k):

* the library's LB (:func:`moe_routing.model.losses.load_balancing_loss`):
  ``α · E · Σ_i f_i P_i`` with ``f_i = count_i / (n k)`` (Σ f = 1), per layer, **averaged**
  over layers — α at uniform routing;
* transformers' ``load_balancing_loss_func`` (Mixtral's, the one ``ce+lb`` uses here):
  ``E · Σ_i F_i P_i`` with ``F_i = count_i / n`` (Σ F = k), counts and mean probabilities
  **pooled** over the tokens of all layers — k at uniform routing, so it is k times the
  library's normalisation (with α = 1) on the pooled tokens; the model adds it times
  ``config.router_aux_loss_coef``.  Here it is fed the exact logits (one softmax, as its
  docstring intends), not 5.2's recorded probabilities.

Everything here imports ``transformers`` only when called, and says which extra to install
when it is missing (:func:`routing_measurements` and :func:`knowledge_batch` need no
transformers at all).  Batches are moved to the device of the model's parameters and the
collected logits come back to the CPU as float32; the tests run on the CPU.
"""

from __future__ import annotations

import inspect
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import routing_metrics as rm
from .boundary.fits import LogLogFit, bootstrap_bm_fit
from .boundary.margin import top_two_margin
from .boundary.mass import BoundaryMass, boundary_mass_from_margins
from .model.losses import OBJECTIVES, task_router_loss, task_to_expert
from .validation import choice, fail, flag, integer, number, require, widths as check_widths

#: the optional dependency group of pyproject.toml that installs transformers
EXTRA = "hf"
#: the transformers releases this module is written against (the extra's range)
TRANSFORMERS_RANGE = (">=5.2", "<6")
#: causal LMs of transformers 5.2 this module is tested on (tests/test_hf.py, tiny random
#: configurations); the first four record probabilities as router_logits in 5.2, the last two
#: logits.  Any other model with the same structure (forward taking output_router_logits, linear
#: routers recorded by class) is accepted too: FlexOlmo, Qwen3-Next, MiniMax, … are built so.
#: Refused, by name: models whose forward has no output_router_logits (dense models) and those
#: without a single linear router class (GraniteMoE and JetMoE in 5.2, for instance).
TESTED_MOE_CAUSAL_LMS = ("MixtralForCausalLM", "OlmoeForCausalLM", "Qwen2MoeForCausalLM",
                         "Qwen3MoeForCausalLM", "PhimoeForCausalLM", "GptOssForCausalLM")
#: the default width grid of BM(w), in logit units: 10⁻³ … 10, four widths per decade; fixed
#: (not fitted to the data) so that layers, models and runs are read on the same grid
DEFAULT_WIDTHS = np.geomspace(1e-3, 1e1, 17)
IGNORE_INDEX = -100


def require_transformers():
    """The ``transformers`` module, or an ImportError naming the extra that installs it."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            f"moe_routing.hf needs Hugging Face transformers {','.join(TRANSFORMERS_RANGE)}, the "
            f"library's {EXTRA!r} extra: pip install 'moe_routing[{EXTRA}]' (in a checkout: "
            f"pip install -e '.[{EXTRA}]')") from err
    from packaging.version import Version

    v = Version(transformers.__version__)
    require(Version("5.2") <= v < Version("6"), "transformers.__version__",
            transformers.__version__, f"a release {','.join(TRANSFORMERS_RANGE)} (the "
            f"{EXTRA!r} extra); its routers are recorded differently in other series")
    return transformers



# ------------------------------------------------------------------------ the extra's size
@dataclass(frozen=True)
class InstallSize:
    """What the ``extra`` adds to the base install: ``packages`` ``(name, version, bytes)``,
    largest first, ``total_bytes``, and ``base_packages`` (how many the base install has)."""

    extra: str
    packages: tuple[tuple[str, str, int], ...]
    total_bytes: int
    base_packages: int

    @property
    def total_mib(self) -> float:
        return self.total_bytes / 2 ** 20


def _closure(requirements) -> set[str]:
    """Canonical names of the installed distributions ``requirements`` (packaging
    Requirements) pull in, themselves included; environment markers are evaluated, extras of
    a requirement followed, requirements not installed skipped (they are not on disk)."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, names, todo = set(), set(), list(requirements)
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        names.add(key[0])
        envs = [dict(default_environment(), extra=e) for e in (req.extras or {""})]
        for line in dist.requires or []:
            r = Requirement(line)
            if r.marker is None or any(r.marker.evaluate(env) for env in envs):
                todo.append(r)
    return names


def extra_install_size(extra: str = EXTRA, package: str = "moe_routing") -> InstallSize:
    """The on-disk size of what the library's ``extra`` adds to its base install: the
    distributions the extra's requirements pull in (read from the installed ``package``'s
    metadata, markers evaluated) that its base requirements do not, each measured as the sum
    of the files its ``RECORD`` lists (what ``pip uninstall`` removes: its folders in
    site-packages, metadata, scripts).  Refused, naming the extra, when it is not installed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        fail("package", package, "an installed distribution (pip install -e .)")
    reqs = [Requirement(r) for r in dist.requires or []]
    base = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    wanted = [r for r in reqs if r.marker is not None and not r.marker.evaluate({"extra": ""})
              and r.marker.evaluate({"extra": extra})]
    require(len(wanted) > 0, "extra", extra, f"an extra of {package} with requirements")
    added = _closure(wanted) - _closure(base)
    for r in wanted:
        try:
            metadata.distribution(r.name)
        except metadata.PackageNotFoundError:
            fail("extra", extra, f"an installed extra ({r.name} is missing: pip install -e "
                 f"'.[{extra}]')")
    sizes = []
    for name in added:
        d = metadata.distribution(name)
        total = 0
        for f in d.files or []:
            path = d.locate_file(f)
            if path.is_file():
                total += path.stat().st_size
        sizes.append((name, d.version, total))
    sizes.sort(key=lambda t: (-t[2], t[0]))
    return InstallSize(extra, tuple(sizes), sum(t[2] for t in sizes), len(_closure(base)))


# ------------------------------------------------------------------------------ the routers
def _accepted_models() -> str:
    return ("a transformers causal LM whose forward takes output_router_logits=True and returns "
            "router_logits, with linear routers (" + ", ".join(TESTED_MOE_CAUSAL_LMS) + ", …)")


def router_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """The router modules of ``model``, in forward (layer) order, as ``(name, module)``.

    They are the modules of the class transformers records as ``router_logits`` (the model's
    ``_can_record_outputs``), each a linear map with a 2-D ``weight`` (experts, hidden).  A
    model whose forward does not take ``output_router_logits`` is refused, naming its class.
    """
    require_transformers()
    name = type(model).__name__
    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if callable(forward) else {}
    require(isinstance(model, torch.nn.Module) and "output_router_logits" in params, "model",
            f"a {name} (its forward takes no output_router_logits)", _accepted_models())
    spec = None
    for m in model.modules():
        recorded = getattr(type(m), "_can_record_outputs", None)
        if isinstance(recorded, dict) and "router_logits" in recorded:
            spec = recorded["router_logits"]
            break
    require(spec is not None, "model", f"a {name} (it records no router_logits)",
            _accepted_models())
    require(not isinstance(spec, (list, tuple)), "model",
            f"a {name} (it records router_logits from several kinds of module)",
            _accepted_models())
    target = getattr(spec, "target_class", spec)
    layer_name = getattr(spec, "layer_name", None)
    found = [(n, m) for n, m in model.named_modules()
             if isinstance(target, type) and isinstance(m, target)
             and (layer_name is None or layer_name in n)]
    require(len(found) > 0, "model", f"a {name} without {getattr(target, '__name__', target)} "
            "modules", _accepted_models())
    for n, m in found:
        w = getattr(m, "weight", None)
        require(isinstance(w, torch.Tensor) and w.dim() == 2, f"{name}: router {n}",
                type(m).__name__, "a linear router with a weight of shape (experts, hidden)")
    return found


def _router_logits_of(module, x: torch.Tensor) -> torch.Tensor:
    """``W x (+ b)`` of a linear router for its input ``x`` (..., hidden): (tokens, experts)."""
    w = module.weight
    b = getattr(module, "bias", None)
    return F.linear(x.reshape(-1, w.shape[1]).to(w.dtype), w,
                    b if isinstance(b, torch.Tensor) else None)


class _RouterTap:
    """Forward hooks on the routers that keep their exact logits, one tensor per call (kept in
    the autograd graph: the task-router loss trains through them)."""

    def __init__(self, routers):
        self.routers = [m for _, m in routers]
        self.logits: list[torch.Tensor] = []
        self._handles = []

    def __enter__(self) -> "_RouterTap":
        self.logits = []
        self._handles = [m.register_forward_hook(self._hook) for m in self.routers]
        return self

    def _hook(self, module, args, _output):
        self.logits.append(_router_logits_of(module, args[0]))

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []

    def take(self, model) -> list[torch.Tensor]:
        """The logits of one forward, one tensor per router (refused if a router ran more or
        fewer times than once, e.g. under gradient checkpointing)."""
        got, self.logits = self.logits, []
        require(len(got) == len(self.routers), f"{type(model).__name__}: router calls",
                len(got), f"{len(self.routers)}: one call per router and forward (gradient "
                "checkpointing re-runs them: turn it off)")
        return got


def _recorded_kind(model, recorded, exact: list[torch.Tensor]) -> str:
    """Whether the model's ``router_logits`` are the exact logits or their softmax."""
    name = type(model).__name__
    require(isinstance(recorded, (tuple, list)) and len(recorded) == len(exact),
            f"{name}: outputs.router_logits", type(recorded).__name__,
            f"a tuple of {len(exact)} tensors (one per router)")
    kinds = set()
    for l, (r, a) in enumerate(zip(recorded, exact)):
        # float32 and float64 routers agree to rounding; half-precision ones to their 8-11 bits
        wide = r.dtype in (torch.float32, torch.float64) and a.dtype in (torch.float32, torch.float64)
        tol = dict(rtol=1e-3, atol=1e-5) if wide else dict(rtol=2e-2, atol=2e-3)
        r = r.detach().reshape(a.shape).float()
        a = a.detach().float()
        if torch.allclose(r, a, **tol):
            kinds.add("logits")
        elif torch.allclose(r, torch.softmax(a, -1), **tol):
            kinds.add("probabilities")
        else:
            fail(f"{name}: outputs.router_logits[{l}]", "neither W·x nor softmax(W·x) of its router",
                 "a model whose recorded router outputs are its routers' logits or their softmax")
    require(len(kinds) == 1, f"{name}: outputs.router_logits", sorted(kinds),
            "the same kind in every layer")
    return kinds.pop()


def _batch_arguments(model, input_ids, attention_mask, batch_size):
    require(isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2
            and not input_ids.dtype.is_floating_point and input_ids.dtype != torch.bool
            and input_ids.numel() > 0, "input_ids",
            getattr(input_ids, "shape", type(input_ids).__name__),
            "a non-empty (batch, seq) integer tensor of token ids")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    require(isinstance(attention_mask, torch.Tensor)
            and tuple(attention_mask.shape) == tuple(input_ids.shape), "attention_mask.shape",
            tuple(getattr(attention_mask, "shape", ())), f"{tuple(input_ids.shape)} (one entry "
            "per token)")
    am = attention_mask.long()
    require(bool(((am == 0) | (am == 1)).all()), "attention_mask", "values other than 0/1",
            "1 at tokens, 0 at padding")
    require(bool(am.any()), "attention_mask", "all 0", "at least one token")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None:
        lo, hi = int(input_ids.min()), int(input_ids.max())
        require(lo >= 0 and hi < vocab, "input_ids range", f"{lo}..{hi}",
                f"token ids 0..{vocab - 1} (the model's vocab_size)")
    return am, integer("batch_size", batch_size, low=1)


def _forward_kwargs(model) -> dict:
    """Skip the unembedding where the model allows it (routing needs no vocabulary logits)."""
    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def recorded_router_output(model, input_ids, attention_mask=None) -> str:
    """``"logits"`` or ``"probabilities"``: what ``model(..., output_router_logits=True)
    .router_logits`` holds for this model and transformers release (module docstring)."""
    routers = router_modules(model)
    am, _ = _batch_arguments(model, input_ids, attention_mask, 1)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        with torch.no_grad(), _RouterTap(routers) as tap:
            out = model(input_ids=input_ids.to(device), attention_mask=am.to(device),
                        output_router_logits=True, use_cache=False, **_forward_kwargs(model))
            return _recorded_kind(model, getattr(out, "router_logits", None), tap.take(model))
    finally:
        model.train(was)


@torch.no_grad()
def collect_router_logits(model, input_ids, attention_mask=None, batch_size: int = 256
                          ) -> list[torch.Tensor]:
    """The exact router logits of every MoE layer at the non-padding tokens.

    model: a transformers causal LM with linear routers (Mixtral, OLMoE, Qwen2-MoE, Qwen3-MoE,
    …; :func:`router_modules`); input_ids (b, t) integer; attention_mask (b, t) 1 at tokens, 0
    at padding (default: no padding); batch_size: sequences per forward.  Returns one float32
    CPU tensor (n_tokens, n_experts) per MoE layer, layer 1 first, its rows the tokens where
    ``attention_mask`` is 1 in row-major order (sequence by sequence, position by position).
    These are pre-softmax logits whatever the model records as ``router_logits`` (checked on
    the first batch: module docstring).  The model is run in eval mode (no router jitter) and
    left in the mode it was in.
    """
    routers = router_modules(model)
    am, batch_size = _batch_arguments(model, input_ids, attention_mask, batch_size)
    device = next(model.parameters()).device
    kwargs = _forward_kwargs(model)
    was = model.training
    model.eval()
    per_layer: list[list[torch.Tensor]] = [[] for _ in routers]
    try:
        with _RouterTap(routers) as tap:
            for s in range(0, input_ids.shape[0], batch_size):
                ids, m = input_ids[s:s + batch_size].to(device), am[s:s + batch_size].to(device)
                out = model(input_ids=ids, attention_mask=m, output_router_logits=True,
                            use_cache=False, **kwargs)
                logits = tap.take(model)
                if s == 0:
                    _recorded_kind(model, getattr(out, "router_logits", None), logits)
                keep = m.reshape(-1).bool()
                for l, a in enumerate(logits):
                    require(a.shape[0] == keep.numel(), f"{type(model).__name__}: router "
                            f"{l} rows", a.shape[0], f"{keep.numel()} (one per token of the batch)")
                    per_layer[l].append(a[keep].float().cpu())
    finally:
        model.train(was)
    return [torch.cat(parts) for parts in per_layer]


# -------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class LayerRouting:
    """The routing of one layer at the measured tokens (n tokens, E experts, k = top_k).

    experts (n, k) int64 — the top-k experts of softmax(logits), most probable first (the
        order and the set Mixtral routes to); weights (n, k) — their gate weights, the top-k
        probabilities renormalised to sum to 1 (Mixtral's; = softmax over the k chosen logits);
    summary — :func:`moe_routing.routing_metrics.routing_summary` of the top-1 expert against
        the task of each token, with the router distribution (the library's convention for its
        own model: counts, P(E|T), purity, NMI, diagonal accuracy, utilisation, entropies);
    assignments — the count matrix and utilisation over all n·k routing assignments (each
        token counted once per chosen expert: the ``f`` of the load-balancing losses);
    margins (n,) — top-two margins Δ of the logits (paper B); boundary_mass — BM(w) at the
        widths with Wilson intervals; bm_fit — BM(w) ≈ C·w^α fitted by the library's bootstrap
        over the widths where 1 ≤ #{Δ ≤ w} and BM(w) ≤ ``bm_fit_max`` (None when fewer than 3).
    """

    experts: np.ndarray
    weights: np.ndarray
    summary: dict
    assignments: dict
    margins: np.ndarray
    boundary_mass: BoundaryMass
    bm_fit: LogLogFit | None

    def as_dict(self) -> dict:
        """JSON-ready scalars and small arrays (not the per-token arrays)."""
        bm = self.boundary_mass
        fit = None if self.bm_fit is None else dict(
            slope=self.bm_fit.slope, slope_ci=list(self.bm_fit.slope_ci),
            prefactor=self.bm_fit.prefactor, prefactor_ci=list(self.bm_fit.prefactor_ci))
        return dict(summary=self.summary, assignments=self.assignments,
                    margin_median=float(np.median(self.margins)),
                    boundary_mass=dict(widths=bm.widths.tolist(), estimate=bm.estimate.tolist(),
                                       lower=bm.lower.tolist(), upper=bm.upper.tolist(), n=bm.n),
                    bm_fit=fit)


def _positions(positions, n: int) -> np.ndarray:
    """Token indices from None (all), an index array or a boolean mask of length n."""
    if positions is None:
        return np.arange(n)
    p = np.asarray(positions.detach().cpu() if hasattr(positions, "detach") else positions)
    if p.dtype == np.bool_:
        require(p.shape == (n,), "positions.shape", p.shape, f"({n},): a mask over the tokens")
        p = np.flatnonzero(p)
    else:
        require(p.ndim == 1 and np.issubdtype(p.dtype, np.integer), "positions",
                f"an array of dtype {p.dtype} and shape {p.shape}",
                "None, a 1-D integer array of token indices or a boolean mask over the tokens")
        if p.size:
            require(int(p.min()) >= 0 and int(p.max()) < n, "positions range",
                    f"{int(p.min())}..{int(p.max())}", f"token indices 0..{n - 1}")
    require(p.size > 0, "positions", "no token", "at least one measured token")
    return p.astype(np.int64)


def routing_measurements(router_logits_per_layer, task_ids_per_token, top_k: int,
                         positions=None, *, n_tasks: int | None = None, widths=None,
                         bm_fit_max: float = 0.1, seed: int = 0) -> list[LayerRouting]:
    """Paper A's and paper B's routing measurements of each layer (see :class:`LayerRouting`).

    router_logits_per_layer: one (n, E) array or tensor of router logits per layer (e.g.
    :func:`collect_router_logits`; pre-softmax logits, not probabilities: the margins are
    read in logit units); task_ids_per_token (n,) integer task of each token; top_k: experts
    per token (the model's ``num_experts_per_tok``); positions: which tokens to measure (None:
    all; an index array or a boolean mask of length n); n_tasks: K (default: largest id + 1);
    widths: the BM grid (default :data:`DEFAULT_WIDTHS`); bm_fit_max: the largest BM(w) a fit
    point may have (the small-w regime of paper B); seed: of the fit's bootstrap.
    """
    if isinstance(router_logits_per_layer, (torch.Tensor, np.ndarray)):
        fail("router_logits_per_layer", type(router_logits_per_layer).__name__,
             "a list of (n, E) logits, one per layer (a list even of one)")
    layers = list(router_logits_per_layer) if isinstance(router_logits_per_layer,
                                                         (list, tuple)) else None
    require(bool(layers), "router_logits_per_layer", router_logits_per_layer,
            "a non-empty list of (n, E) logits, one per layer")
    tasks = rm._ids("task_ids_per_token", task_ids_per_token)
    require(int(tasks.min()) >= 0, "task_ids_per_token.min()", int(tasks.min()), "task ids ≥ 0")
    n_tasks = int(tasks.max()) + 1 if n_tasks is None else integer("n_tasks", n_tasks, low=1)
    w = DEFAULT_WIDTHS if widths is None else check_widths("widths", widths)
    bm_fit_max = number("bm_fit_max", bm_fit_max, low=0, low_open=True, high=1)
    out = []
    for l, raw in enumerate(layers):
        a = np.asarray(raw.detach().cpu().double() if hasattr(raw, "detach") else raw,
                       dtype=np.float64)
        require(a.ndim == 2 and a.shape[0] == tasks.size and a.shape[1] >= 2,
                f"router_logits_per_layer[{l}].shape", a.shape,
                f"({tasks.size}, E ≥ 2): one row per token of task_ids_per_token")
        require(bool(np.isfinite(a).all()), f"router_logits_per_layer[{l}]", "non-finite entries",
                "finite logits")
        n_exp = a.shape[1]
        k = integer("top_k", top_k, low=1, high=n_exp)
        sel = _positions(positions, tasks.size)
        a, t = a[sel], tasks[sel]
        z = a - a.max(1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(1, keepdims=True)                   # (n, E) float64
        # top-k of the softmax, most probable first, ties to the lower index (stable sort)
        experts = np.argsort(-probs, axis=1, kind="stable")[:, :k]            # (n, k)
        top = np.take_along_axis(probs, experts, 1)
        weights = top / top.sum(1, keepdims=True)
        summary = rm.routing_summary(t, experts[:, 0], n_tasks, n_exp, probs)
        assign = rm.task_expert_counts(np.repeat(t, k), experts.reshape(-1), n_tasks, n_exp)
        assignments = dict(counts=assign.tolist(),
                           utilisation=rm.expert_utilisation(experts.reshape(-1), n_exp).tolist(),
                           load_entropy_normalised=rm.load_entropy(assign.sum(0)),
                           nmi=rm.normalized_mutual_info(assign))
        margins = top_two_margin(a)
        bm = boundary_mass_from_margins(margins, w)
        fit_at = (bm.counts >= 1) & (bm.estimate <= bm_fit_max) & (bm.widths > 0)
        fit = None
        if np.unique(bm.widths[fit_at]).size >= 3:
            fit = bootstrap_bm_fit(bm.widths[fit_at], bm.counts[fit_at], bm.n, rng=seed)
        out.append(LayerRouting(experts, weights, summary, assignments, margins, bm, fit))
    return out


# ---------------------------------------------------------------------- knowledge as HF input
@dataclass(frozen=True)
class KnowledgeBatch:
    """One split of a knowledge dataset as input of an HF causal LM (M sentences, n = L + 2
    positions, N non-padding tokens); token ids are the dataset's own.

    input_ids (M, n) long — [BOS, w1 … w|τ|, EOS, PAD …] (the dataset's ``seqs``);
    attention_mask (M, n) long — 1 on the sentence, 0 on padding;
    labels (M, n) long — input_ids with −100 on padding (the model shifts them: position i
        predicts token i + 1, as the library's ``targets``);
    task (M,), object_pos (M,), lengths (M,), index (M,) — as in ``EncodedSplit``;
    task_per_token (N,) — the task of each non-padding token, in the row order of
        :func:`collect_router_logits`;
    predicting (N,) bool — tokens that predict a next token (all but EOS: the positions the
        library's routing metrics and task-router loss use, ``EncodedSplit.loss_mask``);
    object_query (M,) — for each sentence, the index among the N tokens of the position that
        predicts its object (``object_pos − 1``: exact-match completion reads its argmax there).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    task: torch.Tensor
    object_pos: torch.Tensor
    lengths: torch.Tensor
    index: torch.Tensor
    task_per_token: torch.Tensor
    predicting: torch.Tensor
    object_query: torch.Tensor = field(repr=False)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def predicting_mask(self) -> torch.Tensor:
        """(M, n) bool: ``predicting`` in the padded layout (for losses on (b, t) tensors)."""
        pos = torch.arange(self.input_ids.shape[1])
        return pos[None, :] < (self.lengths[:, None] - 1)

    def rows(self, idx) -> "KnowledgeBatch":
        """The batch of some sentences (index tensor), flat token fields recomputed."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        return _batch(self.input_ids[idx], self.lengths[idx], self.task[idx],
                      self.object_pos[idx], self.index[idx])


def _batch(tokens, lengths, task, object_pos, index) -> KnowledgeBatch:
    n = tokens.shape[1]
    am = (torch.arange(n)[None, :] < lengths[:, None]).long()
    keep = am.bool()
    offsets = torch.cumsum(lengths, 0) - lengths
    predicting = (torch.arange(n)[None, :] < (lengths[:, None] - 1))[keep]
    return KnowledgeBatch(input_ids=tokens, attention_mask=am,
                          labels=tokens.masked_fill(~keep, IGNORE_INDEX), task=task,
                          object_pos=object_pos, lengths=lengths, index=index,
                          task_per_token=task[:, None].expand(-1, n)[keep],
                          predicting=predicting, object_query=offsets + object_pos - 1)


def _vocab_of(value) -> int:
    for v in (value, getattr(value, "vocab_size", None),
              getattr(getattr(value, "config", None), "vocab_size", None)):
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return int(v)
    fail("tokenizer_vocab", type(value).__name__,
         "the HF model's vocabulary size: an int, a config or a model with vocab_size")


def knowledge_batch(dataset, tokenizer_vocab, split: str = "train") -> KnowledgeBatch:
    """A split of ``dataset`` (a :class:`~moe_routing.knowledge.KnowledgeDataset`) as HF model
    input, in the dataset's own token ids (no HF tokenizer is involved).

    tokenizer_vocab: the model's vocabulary size (an int, or its config or the model), which
    must hold the dataset's ids (≥ ``dataset.vocab_size``; ids beyond are never produced, so a
    pretrained model's embedding rows of those ids are simply unused).  ``split``: "train",
    "test" or "all".
    """
    from .knowledge import KnowledgeDataset

    require(isinstance(dataset, KnowledgeDataset), "dataset", type(dataset).__name__,
            "a moe_routing.knowledge.KnowledgeDataset")
    vocab = _vocab_of(tokenizer_vocab)
    require(vocab >= dataset.vocab_size, "tokenizer_vocab", vocab,
            f"≥ {dataset.vocab_size}, the dataset's vocabulary (its ids are 0..{dataset.vocab_size - 1})")
    enc = dataset.encode_split(split)
    return _batch(enc.tokens, enc.lengths, enc.task, enc.object_pos, enc.index)


@torch.no_grad()
def object_exact_match(model, batch: KnowledgeBatch, batch_size: int = 512) -> float:
    """Fraction of sentences whose object is the argmax next token at ``object_pos − 1``.

    Under causal attention this is greedy completion of the truncated prefix
    ``tokens[:object_pos]`` (what ``moe_routing.model.exact_match`` scores for the library's
    model, for the object token)."""
    require(isinstance(batch, KnowledgeBatch), "batch", type(batch).__name__,
            "a KnowledgeBatch (knowledge_batch(...))")
    batch_size = integer("batch_size", batch_size, low=1)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    hits = 0
    try:
        for s in range(0, len(batch), batch_size):
            ids = batch.input_ids[s:s + batch_size].to(device)
            out = model(input_ids=ids, attention_mask=batch.attention_mask[s:s + batch_size]
                        .to(device), use_cache=False)
            rows = torch.arange(ids.shape[0], device=device)
            q = batch.object_pos[s:s + batch_size].to(device)
            pred = out.logits[rows, q - 1].argmax(-1)
            hits += int((pred == ids[rows, q]).sum())
    finally:
        model.train(was)
    return hits / len(batch)


# --------------------------------------------------------------------------------- training
@dataclass
class HFTrainResult:
    """A trained model and what its run measured.

    history: one dict per logged step (step, total, ce, lb, router — lb the unscaled
    transformers load-balancing value, router the mean over layers of the task-router
    cross-entropy, both 0 where the objective does not use them); exact_match / train_exact_match:
    :func:`object_exact_match` on the test / training split; routing: per layer
    :class:`LayerRouting` of the test split at the predicting tokens; lb_coef, router_alpha: the
    coefficients the objective used; seconds_per_step: mean wall time of an optimiser step.
    """

    model: torch.nn.Module
    objective: str
    history: list[dict]
    exact_match: float
    train_exact_match: float
    routing: list[LayerRouting]
    lb_coef: float
    router_alpha: float
    seconds_per_step: float


def _mixtral_config(config):
    tr = require_transformers()
    if isinstance(config, dict):
        return tr.MixtralConfig(**config)
    require(isinstance(config, tr.MixtralConfig), "config", type(config).__name__,
            "a transformers.MixtralConfig or a dict of its arguments")
    return tr.MixtralConfig.from_dict(config.to_dict())                   # a copy


def own_load_balancing_loss(model):
    """The load-balancing function of ``model``'s own modelling module (transformers'
    ``load_balancing_loss_func``: normalisation in the module docstring)."""
    fn = getattr(sys.modules.get(type(model).__module__), "load_balancing_loss_func", None)
    require(callable(fn), "model", type(model).__name__,
            "a model whose modelling module defines load_balancing_loss_func")
    return fn


def train_hf_moe(config, dataset, objective: str, steps: int, seed: int = 0, *,
                 batch_size: int = 128, lr: float = 3e-3, weight_decay: float = 0.0,
                 lb_coef: float | None = None, router_alpha: float = 1.0,
                 log_every: int = 10, measure_routing: bool = True) -> HFTrainResult:
    """Train a ``MixtralForCausalLM`` from random initialisation on the training sentences.

    config: a ``MixtralConfig`` (or a dict of its arguments; copied, never modified) with
    ``vocab_size`` ≥ the dataset's and ``max_position_embeddings`` ≥ its sentence length;
    objective (paper A's three):

    * ``"ce"`` — next-token cross-entropy only (the copy's ``router_aux_loss_coef`` set to 0);
    * ``"ce+lb"`` — CE + ``lb_coef`` × transformers' own ``load_balancing_loss_func`` fed the
      exact router logits with the batch's attention mask (``lb_coef`` defaults to the config's
      ``router_aux_loss_coef``, which must then be > 0);
    * ``"ce+router"`` — CE + ``router_alpha`` × paper A's task-router loss
      (:func:`moe_routing.model.losses.task_router_loss`, each layer's router logits against
      the designated expert ``task mod E`` of the sentence, at the predicting tokens), averaged
      over layers as the library's ``objective_loss`` does.

    The CE is the model's own (``labels`` with −100 on padding: the mean over predicted
    tokens, EOS included, as the library's).  AdamW with ``lr`` and ``weight_decay``, batches of
    ``batch_size`` sentences drawn without replacement epoch by epoch; ``seed`` drives the
    initialisation and the batches.  Returns :class:`HFTrainResult`; with
    ``measure_routing=False`` its ``routing`` is empty (a caller that measures the routing at
    positions of its own skips a forward over the test split and the fits).
    """
    tr = require_transformers()
    from .knowledge import KnowledgeDataset

    cfg = _mixtral_config(config)
    objective = choice("objective", objective, OBJECTIVES)
    require(isinstance(dataset, KnowledgeDataset), "dataset", type(dataset).__name__,
            "a moe_routing.knowledge.KnowledgeDataset")
    steps = integer("steps", steps, low=1)
    seed = integer("seed", seed, low=0)
    batch_size = integer("batch_size", batch_size, low=1)
    lr = number("lr", lr, low=0, low_open=True)
    weight_decay = number("weight_decay", weight_decay, low=0)
    router_alpha = number("router_alpha", router_alpha, low=0)
    log_every = integer("log_every", log_every, low=1)
    measure_routing = flag("measure_routing", measure_routing)
    require(cfg.max_position_embeddings >= dataset.seq_len, "config.max_position_embeddings",
            cfg.max_position_embeddings, f"≥ {dataset.seq_len}, the dataset's sentence length")
    if objective == "ce+lb":
        coef = cfg.router_aux_loss_coef if lb_coef is None else lb_coef
        lb_coef = number("lb_coef", coef, low=0, low_open=True)
    else:
        require(lb_coef is None, "lb_coef", lb_coef, f"None (objective {objective!r} has no LB)")
        lb_coef = 0.0
    cfg.router_aux_loss_coef = lb_coef
    cfg.output_router_logits = False      # the exact logits come from the routers (docstring)
    train = knowledge_batch(dataset, cfg.vocab_size, "train")
    test = knowledge_batch(dataset, cfg.vocab_size, "test")

    torch.manual_seed(seed)
    model = tr.MixtralForCausalLM(cfg)
    routers = router_modules(model)
    lb_fn = own_load_balancing_loss(model)
    n_exp, k = cfg.num_local_experts, cfg.num_experts_per_tok
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(len(train), generator=gen), 0
    zero = torch.zeros(())
    history, elapsed = [], 0.0
    model.train()
    with _RouterTap(routers) as tap:
        for step in range(1, steps + 1):
            if cursor + batch_size > len(train) and cursor > 0:
                order, cursor = torch.randperm(len(train), generator=gen), 0
            rows = order[cursor:cursor + batch_size]
            cursor += batch_size
            b = train.rows(rows)
            t0 = time.perf_counter()
            out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, labels=b.labels,
                        use_cache=False)
            logits = tap.take(model)
            ce, lb, rt = out.loss, zero, zero
            if objective == "ce+lb":
                lb = lb_fn(tuple(logits), n_exp, k, b.attention_mask)
            elif objective == "ce+router":
                shape = tuple(b.input_ids.shape)
                target = task_to_expert(b.task, n_exp)[:, None].expand(shape)
                mask = b.predicting_mask
                rt = torch.stack([task_router_loss(a.reshape(*shape, n_exp), target, mask)
                                  for a in logits]).mean()
            total = ce + lb_coef * lb + router_alpha * rt
            value = float(total.detach())
            require(bool(np.isfinite(value)), f"loss at step {step}", value,
                    "a finite loss (a lower lr)")
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            elapsed += time.perf_counter() - t0
            if step % log_every == 0 or step == steps:
                history.append(dict(step=step, total=value, ce=float(ce.detach()),
                                    lb=float(lb.detach()), router=float(rt.detach())))
    routing = routing_measurements(
        collect_router_logits(model, test.input_ids, test.attention_mask),
        test.task_per_token, k, positions=test.predicting,
        n_tasks=dataset.n_tasks) if measure_routing else []
    return HFTrainResult(model=model, objective=objective, history=history,
                         exact_match=object_exact_match(model, test),
                         train_exact_match=object_exact_match(model, train), routing=routing,
                         lb_coef=lb_coef, router_alpha=router_alpha,
                         seconds_per_step=elapsed / steps)
