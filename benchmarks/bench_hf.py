"""Training step time of a small Hugging Face Mixtral under paper A's three objectives.

The model is ``MixtralForCausalLM`` from random initialisation (vocab 600, hidden 128, expert
width 128, 2 layers, 4 heads, 8 experts, top-2: 1.07 M parameters; nothing is downloaded),
trained by ``moe_routing.hf.train_hf_moe`` on a synthetic knowledge dataset whose sentences
fill 12 positions ([BOS], 10 words, [EOS]), in batches of 128 sentences (128 × 12 tokens).  One
step is forward, loss, backward and AdamW; the time is the mean over the run's steps (the first
``--warmup`` runs' steps are discarded with their run).  The objectives differ only in the
auxiliary term: ``ce+lb`` adds transformers' load-balancing function, ``ce+router`` the
task-router cross-entropy on each layer's router logits.

With ``--measure``, one longer run per objective on the embedded knowledge base (8 relations ×
40 pairs × 5 templates, 300 steps, same model with ``vocab_size`` = max(600, the dataset's))
reports what the run measured: exact match at the object on the test split and, per layer, the
NMI and diagonal accuracy of the top-1 routing at the predicting test tokens.

Usage: ``python benchmarks/bench_hf.py [--steps 20] [--threads 1] [--measure] [--json out.json]``.
Needs the ``hf`` extra (transformers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from moe_routing import hf
from moe_routing.knowledge import KnowledgeDataset, KnowledgeTask

CONFIG = dict(vocab_size=600, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=4, num_local_experts=8,
              num_experts_per_tok=2, max_position_embeddings=32, router_aux_loss_coef=0.02)


def dataset(n_tasks: int = 8, n_pairs: int = 40) -> KnowledgeDataset:
    """K tasks, one 10-token template each (8 words and the two slots): 12 positions."""
    tasks = []
    for k in range(n_tasks):
        words = " ".join(f"w{k}x{j}" for j in range(8))
        pairs = {f"s{k}_{i}": f"o{k}_{i % 10}" for i in range(n_pairs)}
        tasks.append(KnowledgeTask(f"task{k}", [f"⋆1 {words} ⋆2"], pairs))
    return KnowledgeDataset(tasks, seed=0)


def measure(steps: int = 300) -> dict:
    """Exact match and per-layer routing of one run per objective on the embedded facts."""
    from moe_routing.knowledge import build_dataset

    ds = build_dataset(n_relations=8, n_pairs=40, n_templates=5, seed=0)
    cfg = {**CONFIG, "vocab_size": max(CONFIG["vocab_size"], ds.vocab_size)}
    out = {}
    for objective in ("ce", "ce+lb", "ce+router"):
        r = hf.train_hf_moe(cfg, ds, objective, steps=steps, seed=0, batch_size=128,
                            log_every=steps)
        out[objective] = dict(exact_match=r.exact_match, train_exact_match=r.train_exact_match,
                              nmi=[x.summary["nmi"] for x in r.routing],
                              diagonal_accuracy=[x.summary["diagonal_accuracy"] for x in r.routing],
                              lb_coef=r.lb_coef, seconds_per_step=r.seconds_per_step)
        print(f"{objective:10s} exact match {r.exact_match:.3f}  NMI per layer "
              + ", ".join(f"{v:.3f}" for v in out[objective]["nmi"]))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    ds = dataset()
    assert ds.seq_len == 12, ds.seq_len
    out = dict(config=CONFIG, tokens_per_step=[128, ds.seq_len], threads=args.threads,
               steps=args.steps, seconds_per_step={})
    for objective in ("ce", "ce+lb", "ce+router"):
        times = []
        for r in range(args.warmup + args.repeats):
            res = hf.train_hf_moe(CONFIG, ds, objective, steps=args.steps, seed=r,
                                  batch_size=128, log_every=args.steps)
            if r >= args.warmup:
                times.append(res.seconds_per_step)
        out["seconds_per_step"][objective] = dict(median=statistics.median(times), runs=times)
        print(f"{objective:10s} {statistics.median(times):.3f} s/step "
              f"(runs: {', '.join(f'{t:.3f}' for t in times)})")
    out["parameters"] = sum(p.numel() for p in res.model.parameters())
    if args.measure:
        out["measured"] = measure()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
