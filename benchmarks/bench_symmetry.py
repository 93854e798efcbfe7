"""Gradient-flow throughput of the two-expert symmetry-breaking simulation.

Compares, in one run and on the same sample, RK4 steps per second of
* the vectorised integrator (`gradient_flow`: B trajectories share every sweep over the sample,
  closed-form gradients), and
* the readable reference (`naive_gradient_flow_step`: one trajectory at a time, autograd),
and prints the ratio. Usage:
python benchmarks/bench_symmetry.py [--n 100000] [--B 5] [--steps 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from moe_routing.landscape.symmetry import TwoExpertGaussian
from moe_routing.landscape.symmetry_flow import (gradient_flow, naive_gradient_flow_step,
                                                 symmetric_start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="sample size")
    ap.add_argument("--d", type=int, default=3, help="input dimension")
    ap.add_argument("--B", type=int, default=5, help="trajectories (temperatures)")
    ap.add_argument("--steps", type=int, default=20, help="RK4 steps per timing")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (best of)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads (1 is fastest for these sizes)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = TwoExpertGaussian.abs_teacher(args.d)
    X, Y = model.sample(args.n, seed=0)
    taus = np.geomspace(1.0, 0.05, args.B)
    th1, th2, w = symmetric_start(X, Y, args.B, scale_w=1e-3, scale_delta=1e-3, seed=1, tau=taus)

    def run_vectorised():
        gradient_flow(X, Y, th1, th2, w, taus, steps=args.steps)

    def run_naive():
        state = (th1, th2, w)
        for _ in range(args.steps):
            state = tuple(s.detach() for s in naive_gradient_flow_step(X, Y, *state, taus))
        return state

    # interleaved repeats, best of each: the cores may be shared, and the minimum is the least
    # disturbed measurement of either path
    t_vec, t_naive = float("inf"), float("inf")
    run_vectorised()
    state = run_naive()
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run_vectorised()
        t_vec = min(t_vec, time.perf_counter() - t0)
        t0 = time.perf_counter()
        state = run_naive()
        t_naive = min(t_naive, time.perf_counter() - t0)

    ref = gradient_flow(X, Y, th1, th2, w, taus, steps=args.steps)
    agree = float(np.abs(ref.w_final - state[2].numpy()).max())
    vec_sps, naive_sps = args.steps / t_vec, args.steps / t_naive
    print(f"n = {args.n}, d = {args.d}, B = {args.B} trajectories, {args.steps} RK4 steps, "
          f"{torch.get_num_threads()} threads")
    print(f"vectorised (all B at once, closed-form gradients): {vec_sps:8.2f} steps/s "
          f"({vec_sps * args.B:8.2f} trajectory-steps/s)")
    print(f"naive loop (one trajectory at a time, autograd):   {naive_sps:8.2f} steps/s")
    print(f"speed-up: {vec_sps / naive_sps:.1f}x; "
          f"max |w_vec - w_naive| after {args.steps} steps = {agree:.1e}")


if __name__ == "__main__":
    main()
