"""Neuron and parameter counts of the constructions against the paper's bound L·|T(k)| + N."""

from __future__ import annotations


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


def parameter_counts(model, report) -> dict:
    """Total and active parameters.  Active = what one token uses: embeddings rows are looked
    up (counted as d_model each for one token and one position), attention, router and the
    *one* chosen expert (its live neurons only); unembedding in full.  Expert parameters are
    counted over live neurons (``expert_sizes``), not the padded storage."""
    cfg = model.config
    d = cfg.d_model
    per_neuron = 2 * d + 1                                  # w1 column, w2 row, b1
    experts_total = sum(cfg.neurons_per_expert) * per_neuron + cfg.n_experts * d
    attn = sum(p.numel() for p in model.attn.parameters())
    router = sum(p.numel() for p in model.router.parameters())
    emb = model.tok_emb.weight.numel() + model.pos_emb.weight.numel()
    unemb = sum(p.numel() for p in model.unembed.parameters())
    total = emb + attn + router + experts_total + unemb
    largest = max(cfg.neurons_per_expert) * per_neuron + d
    active = 2 * d + attn + router + largest + unemb
    return dict(total=total, active_max=active, experts_total=experts_total,
                expert_largest=largest, attention=attn, router=router, embeddings=emb,
                unembedding=unemb, d_model=d, stored_expert_params=model.experts.w1.numel()
                + model.experts.w2.numel() + model.experts.b1.numel() + model.experts.b2.numel())
