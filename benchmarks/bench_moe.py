"""Speed of the paper-A MoE transformer: training throughput, model FLOP utilisation, dispatch.

Everything is a *ratio measured in one run*: the machine's own fp32 GEMM rate (a square
``--gemm-size`` matmul) is timed in rounds interleaved with the model, so that load from other
processes on shared cores hits both sides of each ratio alike.

1. Training throughput (tokens/s) with the real training loop (``moe_routing.model.train``,
   objective CE+LB, AdamW, clipping) and model FLOP utilisation

       MFU = 3 · (forward matmul FLOPs per token) · tokens/s  /  GEMM FLOP/s,

   forward matmul FLOPs per token = 2·d·3hc (q, k, v) + 2·2·hc·(t+1)/2 (causal scores and
   values) + 2·hc·d (W_O) + 2·d·E (router) + k·2·2·d·f (experts) + 2·d·V (unembedding);
   backward ≈ 2× forward.  Embedding look-ups, softmaxes, norms and the optimiser are not
   counted (they are overhead the utilisation has to absorb).
2. Dispatch backends (forward + backward of the expert layer alone, same routing) side by side
   with the per-expert loop reference: time ratio loop / backend (> 1 = faster than the loop).

Usage: ``python benchmarks/bench_moe.py [--device cpu|cuda] [--threads 2] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from moe_routing.model import MoEConfig, MoETransformer, TrainConfig, TrainData, train
from moe_routing.model.dispatch import dispatch, grouped_mm_available


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def gemm_rate(n: int, reps: int, device: str, dtype=torch.float32) -> float:
    """FLOP/s of an (n × n) @ (n × n) matmul."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return reps * 2 * n ** 3 / (time.perf_counter() - t0)


def forward_flops_per_token(cfg: MoEConfig, seq: int) -> float:
    d, h, c, e, f, v, k = (cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_experts, cfg.d_expert,
                           cfg.vocab_size, cfg.top_k)
    return (2 * d * 3 * h * c + 2 * 2 * h * c * (seq + 1) / 2 + 2 * h * c * d + 2 * d * e
            + k * 2 * 2 * d * f + 2 * d * v)


def bench_training(args, device: str) -> dict:
    cfg = MoEConfig(vocab_size=args.vocab, max_len=args.seq, d_model=args.d_model,
                    n_heads=args.heads, n_experts=args.experts, d_expert=args.d_expert,
                    top_k=args.top_k)
    g = torch.Generator().manual_seed(0)
    n = args.batch * (args.steps + 1)
    tokens = torch.randint(0, args.vocab, (n, args.seq + 1), generator=g)
    data = TrainData(tokens[:, :-1], tokens[:, 1:].clone(), torch.randint(0, 10, (n,), generator=g))
    torch.manual_seed(0)
    model = MoETransformer(cfg)
    tcfg = TrainConfig(objective="ce+lb", steps=args.steps, batch_size=args.batch,
                       warmup_steps=0, progress=False, device=device, amp=args.amp)
    train(model, data, TrainConfig(**{**tcfg.as_dict(), "steps": 1}))       # warm-up
    fwd = forward_flops_per_token(cfg, args.seq)
    rounds = []
    for r in range(args.rounds):
        gemm = gemm_rate(args.gemm_size, args.gemm_reps, device)
        hist = train(model, data, tcfg)
        gemm2 = gemm_rate(args.gemm_size, args.gemm_reps, device)
        tps = hist.tokens_per_s
        ref = (gemm + gemm2) / 2
        rounds.append({"gemm_gflops": ref / 1e9, "tokens_per_s": tps,
                       "model_gflops": 3 * fwd * tps / 1e9, "mfu": 3 * fwd * tps / ref})
        print(f"  round {r}: GEMM {ref / 1e9:7.1f} GFLOP/s | training {tps:9.0f} tokens/s = "
              f"{3 * fwd * tps / 1e9:7.1f} GFLOP/s | MFU {3 * fwd * tps / ref:6.1%}", flush=True)
    return {"config": cfg.as_dict(), "batch": args.batch, "seq": args.seq,
            "steps_per_round": args.steps, "forward_flops_per_token": fwd, "rounds": rounds,
            "mfu_median": statistics.median(x["mfu"] for x in rounds),
            "mfu_best": max(x["mfu"] for x in rounds),
            "tokens_per_s_median": statistics.median(x["tokens_per_s"] for x in rounds)}


def bench_dispatch(args, device: str) -> dict:
    n, d, f, e = args.batch * args.seq, args.d_model, args.d_expert, args.experts
    dtype = torch.float32
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g).to(device, dtype).requires_grad_()
    w1 = (torch.randn(e, d, f, generator=g) * 0.05).to(device, dtype).requires_grad_()
    w2 = (torch.randn(e, f, d, generator=g) * 0.05).to(device, dtype).requires_grad_()
    b1 = torch.zeros(e, f, device=device, dtype=dtype, requires_grad=True)
    b2 = torch.zeros(e, d, device=device, dtype=dtype, requires_grad=True)
    # An uneven, router-like assignment: softmax of random logits with per-expert offsets.
    logits = torch.randn(n, e, generator=g) + torch.linspace(0, 1.5, e)
    top_p, top_i = logits.softmax(-1).topk(args.top_k, -1)
    top_p, top_i = top_p.to(device, dtype), top_i.to(device)
    backends = ["loop", "sorted", "dense"]
    if grouped_mm_available(device, dtype):
        backends.insert(2, "grouped")
    times = {b: [] for b in backends}

    def run(b):
        y = dispatch(b, x, top_i, top_p, w1, b1, w2, b2)
        (y * y).mean().backward()

    for b in backends:
        run(b)
    for _ in range(args.rounds):
        for b in backends:                       # interleaved: every round times every backend
            sync(device)
            t0 = time.perf_counter()
            for _ in range(args.dispatch_reps):
                run(b)
            sync(device)
            times[b].append((time.perf_counter() - t0) / args.dispatch_reps)
    med = {b: statistics.median(times[b]) for b in backends}
    ratios = {b: statistics.median(lt / bt for lt, bt in zip(times["loop"], times[b]))
              for b in backends}
    counts = torch.bincount(top_i.reshape(-1).cpu(), minlength=e).tolist()
    for b in backends:
        print(f"  {b:8s} {1e3 * med[b]:8.2f} ms/fwd+bwd   speed vs loop ×{ratios[b]:.2f}")
    return {"tokens": n, "top_k": args.top_k, "tokens_per_expert": counts,
            "median_s": med, "speed_vs_loop": ratios}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--d-expert", type=int, default=256)
    p.add_argument("--top-k", type=int, default=1)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=3, help="training steps per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--gemm-size", type=int, default=2048)
    p.add_argument("--gemm-reps", type=int, default=4)
    p.add_argument("--dispatch-reps", type=int, default=3)
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast (CUDA only)")
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
          f"d_model {args.d_model}, experts {args.experts}×{args.d_expert}, top-{args.top_k}, "
          f"V {args.vocab}, seq {args.seq}, batch {args.batch}", flush=True)
    out = {"args": vars(args), "torch": torch.__version__}
    if not args.skip_training:
        print("training throughput and model FLOP utilisation (GEMM-rate rounds interleaved):")
        out["training"] = bench_training(args, args.device)
        tr = out["training"]
        print(f"  median: {tr['tokens_per_s_median']:.0f} tokens/s, MFU {tr['mfu_median']:.1%} "
              f"(best round {tr['mfu_best']:.1%}; rounds disturbed by other load pull it down)")
    print("dispatch backends, expert layer forward+backward (rounds interleaved):")
    out["dispatch"] = bench_dispatch(args, args.device)
    if args.json:
        from moe_routing._internal.atomic import atomic_write_json
        atomic_write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
