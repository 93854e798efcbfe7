"""Build and exhaustively verify the hand-built MoE transformer of Theorem 4.2 on the default
50-task dataset; print the prefix count, wall and CPU time of each stage and the peak memory.

    .venv/bin/python benchmarks/bench_construction.py [n_relations]

Target (issue): build + verification ≤ 30 s on 2 CPU cores.  The machine may be shared: CPU
time is reported beside wall time so that contention is visible.
"""

import resource
import sys
import time

import torch


def stage(name, fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    w, c = time.perf_counter() - w0, time.process_time() - c0
    print(f"{name:<28s} wall {w:7.1f} s   cpu {c:7.1f} s")
    return out, w, c


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    torch.set_num_threads(2)
    torch.set_flush_denormal(True)   # before any worker thread starts: see verify._flush_denormals
    from moe_routing.construction import build_moe
    from moe_routing.construction.verify import verify
    from moe_routing.knowledge import build_dataset

    ds, w_ds, _ = stage("dataset", lambda: build_dataset(n_relations=n))
    (model, rep), w_b, c_b = stage("build_moe (ε = 1e-8)", lambda: build_moe(ds, 1e-8))
    ver, w_v, c_v = stage("verify (3 ε, every prefix)",
                          lambda: verify(model, rep, ds, eps_list=[1e-2, 1e-4, 1e-8]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tasks {ds.n_tasks}, V = {ds.vocab_size}, distinct prefixes {ver.n_prefixes}, "
          f"d_model {rep.layout.d_model}, experts {model.config.n_experts}")
    print("max P(invalid): " + ", ".join(f"ε={e:.0e}: {v:.2e}"
                                         for e, v in ver.max_invalid_by_eps.items()))
    print(f"routing {100 * ver.routed_ok:.2f} %, junction {100 * ver.junction_ok:.2f} %")
    print(f"build + verify: wall {w_b + w_v:.1f} s (target 30 s: ratio {(w_b + w_v) / 30:.2f}), "
          f"cpu {c_b + c_v:.1f} s; prefixes/s {ver.n_prefixes / w_v:,.0f}; peak RSS {peak:,.0f} MB")


if __name__ == "__main__":
    main()
