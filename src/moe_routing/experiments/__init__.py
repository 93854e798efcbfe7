"""The experiments of the book, run end to end from a configuration to JSON artifacts: one
sub-package per experiment, each exporting what the chapters call.

``task_routing`` — paper A's experiments: one-layer MoE transformers on knowledge tasks trained
with cross-entropy, CE + load balancing or CE + the task-router loss (A-Fig. 2 and the accuracy
grid): a run's configuration (``config``), data and measurements (``data``), result and weights
files (``store``), the runs and their grid (``runs``), the chapter's plan (``plan``), the
verdicts of paper A's experimental claims (``claims``) and the rules' power (``power``).
``two_hop`` — one- and two-layer MoEs trained on single-hop facts and their two-hop
compositions: do held-out compositions come out, do the hops' experts compose? (ours)
``bridge`` — paper B's quantities measured on paper A's trained routers: margins and boundary
mass (``margins``), the soft-to-hard gap against B's bound (``soft_hard``), on the model's
layer parts (``layers``); training at several router temperatures (``temperature``, its fits in
``temperature_fits``) (ours).
``hf_routing`` — the training chapter's routing contrast on a Mixtral-style Hugging Face model
(the ``hf`` extra; ours).
``grid`` — where a grid's independent runs go (``executor``: worker processes, a Ray cluster or
SLURM jobs, one module per backend), the one grid runner (``runner``: cached results first),
a chapter's grids for its whole execution (``session``) and the cached-result reader
(``cache``).
``accuracy`` — the statistics the verdicts share: intervals of a cell's mean accuracy (the seed
spread and the test set's error clustered by fact, a Student quantile) and differences paired
by seed.
"""
