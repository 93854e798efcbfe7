"""Build and exhaustively verify the hand-built MoE transformer of Theorem 4.2 on the default
50-task dataset; print the prefix count, wall and CPU time of each stage and the peak memory.

    .venv/bin/python benchmarks/bench_construction.py [n_relations] [threads]

Target: build + verification ≤ 30 s on 2 CPU cores.  The machine may be shared: CPU time is
reported beside wall time so that contention is visible.  The dense layer of Theorem 4.1 is
built and verified afterwards on the same dataset (through its silence certificate).
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
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)   # before any worker thread starts: see verify._flush_denormals
    from moe_routing.construction import build_dense, build_moe
    from moe_routing.construction.verify import verify
    from moe_routing.knowledge import build_dataset

    print(f"torch intra-op threads: {threads}")

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
    print("fits finished by the LP: " + ("; ".join(rep.notes) if rep.notes else "none"))
    print(f"build + verify: wall {w_b + w_v:.1f} s (target 30 s: ratio {(w_b + w_v) / 30:.2f}), "
          f"cpu {c_b + c_v:.1f} s; prefixes/s {ver.n_prefixes / w_v:,.0f}; peak RSS {peak:,.0f} MB")
    cfg = model.config
    weights = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    print(f"MoE weights {weights:,.0f} MB (experts padded to {cfg.d_expert} neurons)")
    model = None                     # free the MoE weights before the dense build

    (dm, drep), w_db, _ = stage("build_dense (ε = 1e-8)", lambda: build_dense(ds, 1e-8))
    dver, w_dv, _ = stage("verify dense (certified)",
                          lambda: verify(dm, drep, ds, eps_list=[1e-2, 1e-4, 1e-8]))
    cs = dver.certificate
    print(f"dense FFN {drep.expert_sizes[0]} neurons; neuron evaluations "
          f"{100 * cs.evaluated_fraction:.1f} % of the full layer's; foreign candidates "
          f"{cs.foreign_candidates}; max P(invalid) " + ", ".join(
              f"ε={e:.0e}: {v:.2e}" for e, v in dver.max_invalid_by_eps.items()))
    print(f"dense build + verify: wall {w_db + w_dv:.1f} s (ratio to the 30 s target "
          f"{(w_db + w_dv) / 30:.2f})")


if __name__ == "__main__":
    main()
