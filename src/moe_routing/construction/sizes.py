"""Neuron and parameter counts of the constructions against the paper's bound L·|T(k)| + N."""

from __future__ import annotations

from ..model.parameters import parameter_count
from ..model.transformer import MoETransformer
from ..validation import fail


def expert_table(report, dataset) -> list[dict]:
    """Per task: |T(k)|, |Δ_k|, Σ|τ|, syntactic and semantic neurons, total, the uniform bound
    L·|T(k)| + N and the task's own bound L_k·|T(k)| + |Δ_k|."""
    rows = []
    for k, t in enumerate(dataset.tasks):
        n_syn, n_sem = report.syntactic_neurons[k], report.semantic_neurons[k]
        rows.append(dict(task=t.name, n_templates=t.n_templates, n_pairs=t.n_pairs,
                         template_tokens=sum(len(x) for x in t.templates),
                         syntactic=n_syn, semantic=n_sem, neurons=n_syn + n_sem,
                         bound=report.bounds[k], bound_own=t.complexity_bound(),
                         complexity=t.complexity))
    return rows


def parameter_counts(model) -> dict:
    """Total and active parameters of a constructed model, from the one count of
    :func:`moe_routing.model.parameter_count`.  Active = what one token uses: one row of each
    embedding table, attention, router and the *one* chosen expert (its live neurons only),
    unembedding in full; ``active_max`` takes the largest expert.  Expert parameters are counted
    over live neurons (``expert_sizes``), not the padded storage (``stored_expert_params``)."""
    if not isinstance(model, MoETransformer):
        fail("model", type(model).__name__, "a MoETransformer")
    pc = parameter_count(model.config)
    return dict(total=pc.total, active_max=int(pc.active), experts_total=pc.experts_total,
                expert_largest=max(pc.per_expert), attention=pc.attention, router=pc.router,
                embeddings=pc.embeddings, unembedding=pc.unembedding,
                d_model=model.config.d_model, stored_expert_params=pc.stored_experts)
