"""Boundary-mass Monte Carlo: throughput against a plain NumPy baseline, and error vs n.

Run:  .venv/bin/python benchmarks/bench_boundary.py [--quick]

1. Throughput (samples/s) of ``boundary_mass_mc`` against a straightforward NumPy version (all
   inputs at once, logits, full sort, one pass over the sample per width), in the same run and
   on the same sizes; the ratio is printed.  The package samples the K logits directly from
   their Gaussian law N(Wμ + b, WΣWᵀ) when K < d (exact: the router sees X only through them),
   works in chunks (bounded memory) and counts every width from one sorted sample.
2. Error of the estimator BM(w)/(2w) of the coarea constant S against the closed form, for
   growing n: the root-mean-square error should follow n^(−1/2) (fitted slope printed), and
   match the binomial prediction sqrt(BM(1 − BM)/n)/(2w).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from moe_routing.boundary import (GaussianLaw, LinearRouter, boundary_mass_linear_gaussian,
                                  boundary_mass_mc, coarea_constant, fit_loglog)


def baseline_bm(router: LinearRouter, law: GaussianLaw, widths, n: int, rng) -> np.ndarray:
    """Plain NumPy: sample everything, sort all logits, one comparison pass per width."""
    x = rng.standard_normal((n, law.dim)) @ np.linalg.cholesky(law.cov).T + law.mean
    a = x @ router.weight.T + router.bias
    s = np.sort(a, axis=1)
    delta = s[:, -1] - s[:, -2]
    return np.array([np.mean(delta <= w) for w in widths])


def best_of(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def throughput(quick: bool) -> None:
    print("1. Monte Carlo throughput (best of 3, same sizes, same process)")
    print(f"{'K':>3} {'d':>4} {'n':>10} {'widths':>7} {'baseline samples/s':>20} "
          f"{'package samples/s':>19} {'ratio':>7}")
    n = 500_000 if quick else 2_000_000
    widths = np.geomspace(1e-3, 0.5, 32)
    for K, d in ((2, 8), (8, 16), (32, 64)):
        router = LinearRouter.random(K, d, rng=K)
        law = GaussianLaw.standard(d)
        # best_of calls the lambdas at once, but bind the loop variables anyway (B023)
        t_base = best_of(lambda router=router, law=law: baseline_bm(router, law, widths, n,
                                                                    np.random.default_rng(0)), 3)
        t_pkg = best_of(lambda router=router, law=law: boundary_mass_mc(router, law, widths, n, rng=0), 3)
        print(f"{K:>3} {d:>4} {n:>10,} {widths.size:>7} {n / t_base:>20,.0f} {n / t_pkg:>19,.0f} "
              f"{t_base / t_pkg:>7.2f}")


def error_vs_n(quick: bool) -> None:
    print("\n2. Error of BM(w)/(2w) as an estimate of S (linear router, Gaussian input, d = 4)")
    law = GaussianLaw.standard(4, mean=[0.2, 0, 0, 0])
    router = LinearRouter.binary([1.0, 0.5, -0.5, 0.0], b=0.1)
    S = coarea_constant(router, law).value
    w = 0.01
    exact_bm = boundary_mass_linear_gaussian(router, law, [w]).estimate[0]
    ns = [1_000, 10_000, 100_000] + ([] if quick else [1_000_000])
    reps = 100 if quick else 200
    rng = np.random.default_rng(1)
    rmse = []
    print(f"S = {S:.6f}, w = {w}, bias of the estimator BM(w)/(2w) − S = {exact_bm / (2 * w) - S:.2e}")
    print(f"{'n':>10} {'reps':>5} {'RMSE':>10} {'binomial prediction':>20}")
    for n in ns:
        r = max(20, reps // (n // 10_000 + 1))
        est = np.array([boundary_mass_mc(router, law, [w], n, rng=rng).estimate[0] / (2 * w)
                        for _ in range(r)])
        e = float(np.sqrt(np.mean((est - exact_bm / (2 * w)) ** 2)))
        rmse.append(e)
        print(f"{n:>10,} {r:>5} {e:>10.5f} {np.sqrt(exact_bm * (1 - exact_bm) / n) / (2 * w):>20.5f}")
    fit = fit_loglog(np.array(ns, float), np.array(rmse))
    print(f"fitted RMSE ∝ n^{fit.slope:.3f}  (95% CI [{fit.slope_ci[0]:.3f}, {fit.slope_ci[1]:.3f}]; "
          "Monte Carlo predicts −0.5)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = ap.parse_args()
    throughput(args.quick)
    error_vs_n(args.quick)
