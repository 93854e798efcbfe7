"""A trained one-layer router taken apart for :mod:`.margins` (ours): the checks of a model,
a dataset and a split, and the layer's parts -- the residual after attention A', the router
logits, every expert's output FF_k, the unembedding head and a float64 copy.

Shared by the margins and boundary mass (:mod:`.margins`) and the soft-versus-hard mixture
(:mod:`.soft_hard`), so both read the model the same way; the conventions are
:mod:`.margins`'s docstring.
"""

from __future__ import annotations

import copy

from ..._internal import validation as check

#: the splits of a dataset the measurements run on
SPLITS = ("test", "train")


# ----------------------------------------------------------------------------- checks
def _model(model, top_1: bool = False):
    """``model``, checked: one layer, ≥ 2 experts, all alive; ``top_1``: also top-1 routing
    (the soft mixture at τ → 0 is the top-1 hard router, paper B's setting: a top-k model's
    hard forward is not that limit, so comparing the two would measure something else)."""
    from ...model import MoETransformer

    check.instance("model", model, MoETransformer, "a MoETransformer (e.g. from load_model)")
    cfg = model.config
    check.require(not top_1 or cfg.top_k == 1, "model.config.top_k", cfg.top_k,
                  "1 (the soft mixture's τ → 0 limit is top-1 routing; a top-k model's "
                  "margins are measured by router_margins at its k-th boundary)")
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
    from ...knowledge import KnowledgeDataset

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


def _position_masks(dataset, enc):
    """(M, t) bool each: every predicted position, the task-determined ones (the training
    experiment's :func:`~moe_routing.experiments.task_routing.data.determined_mask`, one
    definition for every experiment) and the one that predicts the object."""
    import torch

    from ..task_routing.data import determined_mask

    loss_mask = enc.loss_mask                                                 # (M, t)
    obj = torch.zeros_like(loss_mask)
    obj[torch.arange(len(enc)), enc.object_pos - 1] = True                   # predicts object
    return loss_mask, determined_mask(dataset, enc), obj
