"""Neuron and parameter counts of the constructions against the paper's bound L·|T(k)| + N."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.parameters import parameter_count
from ..model.transformer import MoETransformer
from .._internal.validation import fail


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


@dataclass(frozen=True)
class DatasetSize:
    """The construction on one dataset of a nested sweep: its experts and its whole size."""

    tasks: int              # relations (= tasks) of the dataset
    V: int                  # vocabulary size
    entities: int
    word_types: int         # one-hot word coordinates of the output block
    d_model: int
    live_params: int        # weights over live neurons (:func:`parameter_counts`)
    bound_neurons: int      # Σ_k of the uniform bound L·|T(k)| + N
    junction: int           # neurons of the junction expert
    experts: dict           # task name -> its :func:`expert_table` row


@dataclass(frozen=True)
class NestedGrowth:
    """The construction on nested datasets (the first n relations of one base, so a task has
    the very same templates and dictionary in each): does an expert's size depend on its own
    task only (A-Thm 4.2)?  ``sizes`` by increasing number of tasks."""

    sizes: tuple

    @property
    def common(self) -> list:
        """The tasks of the smallest dataset (present in all)."""
        return list(self.sizes[0].experts)

    def _rows(self, field_name: str):
        return [[s.experts[t][field_name] for s in self.sizes] for t in self.common]

    @property
    def same_tasks(self) -> bool:
        """Every common task has the same dictionary size and template tokens everywhere."""
        return all(len(set(r)) == 1 for f in ("n_pairs", "template_tokens")
                   for r in self._rows(f))

    @property
    def semantic_unchanged(self) -> bool:
        return all(len(set(r)) == 1 for r in self._rows("semantic"))

    @property
    def syntactic_never_grows(self) -> bool:
        return all(b <= a for r in self._rows("syntactic") for a, b in zip(r, r[1:]))

    @property
    def n_unchanged(self) -> int:
        """Common tasks whose expert has the same number of neurons in every dataset."""
        return sum(len(set(r)) == 1 for r in self._rows("neurons"))

    def expert_frame(self):
        """One row per common task: neurons and semantic neurons per dataset (pandas)."""
        import pandas as pd

        return pd.DataFrame([{"task": t,
                              **{f"neurons ({s.tasks} tasks)": s.experts[t]["neurons"]
                                 for s in self.sizes},
                              **{f"semantic ({s.tasks})": s.experts[t]["semantic"]
                                 for s in self.sizes}}
                             for t in self.common])

    def size_frame(self):
        """One row per dataset: vocabulary, widths, live weights, bound (pandas)."""
        import pandas as pd

        return pd.DataFrame([{k: getattr(s, k) for k in
                              ("tasks", "V", "entities", "word_types", "d_model",
                               "live_params", "bound_neurons")} for s in self.sizes])


def nested_growth(relations, seed: int, eps: float, *, built=None) -> NestedGrowth:
    """:func:`~moe_routing.construction.build.build_moe` at ``eps`` on the datasets of the first
    n relations of the embedded base (``build_dataset(n_relations=n, seed=seed)``) for each n
    in ``relations``.  ``built``: ``(dataset, model, report)`` already built for one of them
    (reused, not rebuilt).  Models are dropped as soon as they are counted: only the largest
    needs to fit in memory at a time."""
    from ..knowledge import build_dataset
    from .._internal.validation import integer, number, require
    from .build import build_moe

    require(isinstance(relations, (list, tuple)) and len(relations) > 0, "relations",
            relations, "a non-empty list of relation counts")
    ns = sorted({integer(f"relations[{i}]", n, low=1) for i, n in enumerate(relations)})
    seed = integer("seed", seed, low=0)
    eps = number("eps", eps, low=0, high=1, low_open=True, high_open=True)
    if built is not None:
        require(isinstance(built, tuple) and len(built) == 3, "built", built,
                "None or a (dataset, model, report) triple")
    out = []
    for n in ns:
        if built is not None and built[0].n_tasks == n:
            ds, mdl, rep = built
        else:
            ds = build_dataset(n_relations=n, seed=seed)
            mdl, rep = build_moe(ds, eps=eps)
        out.append(DatasetSize(
            tasks=n, V=ds.vocab_size, entities=ds.tokenizer.n_entity,
            word_types=rep.layout.n_out_syn, d_model=rep.layout.d_model,
            live_params=parameter_counts(mdl)["total"], bound_neurons=int(sum(rep.bounds)),
            junction=int(rep.junction_neurons),
            experts={row["task"]: row for row in expert_table(rep, ds)}))
        del mdl
    return NestedGrowth(tuple(out))
