"""Profiled-objective Hessians of the K-region landscape model: closed form vs autograd.

Times, in one run and on the same sample and routers, the D×D Hessian of ``L̄_τ`` by
* the closed form of :mod:`moe_routing.landscape.profiled` (envelope and Schur complement, the
  default of ``ProfiledObjective``),
* autograd (gradient, then one backward pass per coordinate) through ``soft_refit`` (Gram matrix
  from the K(K+1)/2 gate products and the p(p+1)/2 feature products), and
* autograd through ``soft_refit_reference`` (the (S, n, K·p) design matrix), and
* the closed form as it was first written (:func:`point_major`: the points along dim 1, the
  cells last, the whole sample at once), against which the library's blocked rows are timed,
checks that all of them give the same Hessian, and prints the ratios.
Usage: python benchmarks/bench_landscape_multi.py [--n 16384] [--S 16] [--teacher 4] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from moe_routing.landscape import multi_critical as mc
from moe_routing.landscape import multi_fit as mf
from moe_routing.landscape import multi_region as mr
from moe_routing.landscape.common import features
from moe_routing.landscape.multi_region import helmert
from moe_routing.landscape.profiled import (_CLOSED_FORM_ELEMENTS, ProfiledObjective,
                                            _local_gradient, _local_hessian)
from moe_routing.landscape.multi_fit import soft_refit


def hessians(obj: ProfiledObjective, phi: np.ndarray, tau: float, refit) -> np.ndarray:
    T = torch.as_tensor(mr.tangent_basis(phi, obj.K, obj.d))
    p0 = torch.as_tensor(phi)
    z = torch.zeros(len(p0), obj.D, dtype=torch.float64, requires_grad=True)
    v = refit(mr.retract(p0, T, z, obj.K, obj.d), tau, obj.X, obj.fstar, obj.K)[1]
    (g,) = torch.autograd.grad(v.sum(), z, create_graph=True)
    rows = [torch.autograd.grad(g[:, j].sum(), z, retain_graph=j < obj.D - 1)[0] for j in range(obj.D)]
    return torch.stack(rows, 1).numpy()


@torch.no_grad()
def point_major(obj: ProfiledObjective, phi: np.ndarray, T: np.ndarray, tau: float,
                order: int = 2):
    """The library's closed form before the blocked rows, kept here as the timing reference:
    the same formulas, with the points along dim 1 and the cells last, so that the softmax and
    every per-point product run over a last dimension of K or K−1, the whole sample at once
    (the chart part, ``profiled._local_hessian``, is shared)."""
    K, d, n = obj.K, obj.d, obj.X.shape[0]
    Hk = torch.tensor(helmert(K), dtype=torch.float64)                  # (K, K−1)
    Xt = features(obj.X)                                               # (n, p)
    Q = obj.moments[0]                                                 # (n, p(p+1)/2)
    step = max(1, min(obj.chunk, _CLOSED_FORM_ELEMENTS // (n * K * K)))
    vals, grads, hess = [], [], []
    for s0 in range(0, len(phi), step):
        ph = torch.as_tensor(phi[s0:s0 + step])
        S, Tt = len(ph), torch.as_tensor(T[s0:s0 + step])               # Tt: (S, m, m−1)
        theta, risk, P, G = soft_refit(ph, tau, obj.X, obj.fstar, K, moments=obj.moments,
                                       return_gram=True)
        F = torch.einsum("np,skp->snk", Xt, theta)                      # (S, n, K)
        mix = (P * F).sum(-1, keepdim=True)                             # (S, n, 1)
        r = obj.fstar[None, :, None] - mix                             # (S, n, 1)
        q = P * (F - mix)                                               # (S, n, K)
        da = (-2.0 / tau) * r * q                                       # (S, n, K)
        gPhi = Hk.T @ (da.transpose(1, 2) @ Xt) / n                     # (S, K−1, p)
        g_phi, g_loc = _local_gradient(gPhi, Tt, K, d)
        vals.append(risk + obj.noise_var)
        grads.append(g_loc)
        if order < 2:
            continue
        # ∂²_aa and ∂²_{aθ} (without the x̃ factor), already through the Helmert basis:
        # Hᵀ(q qᵀ − r(diag q − q πᵀ − π qᵀ))H and Hᵀ[π_k (q_j − r(δ_jk − π_j))]_jk, built
        # from K−1-vectors so that no per-point K×K matrix is formed
        hq, hp = q @ Hk, P @ Hk                                         # (S, n, K−1)
        HH = (Hk[:, :, None] * Hk[:, None, :]).reshape(K, -1)           # (K, (K−1)²)
        outer = hq[..., :, None] * hq[..., None, :] + r[..., None] * (
            hq[..., :, None] * hp[..., None, :] + hp[..., :, None] * hq[..., None, :])
        HA = (2.0 / tau ** 2) * (outer.reshape(S, n, -1) - r * (q @ HH))
        HB = (2.0 / tau) * P[..., None, :] * ((hq + r * hp)[..., :, None]
                                              - r[..., None] * Hk.T)   # (S, n, K−1, K)
        HB = HB.reshape(S, n, -1)
        U = torch.cat([HA, HB], 2).transpose(1, 2) @ Q / n              # (S, ·, p(p+1)/2)
        hess.append(_local_hessian(U, G, g_phi, ph, Tt, K, d))
    return (torch.cat(vals).numpy(), torch.cat(grads).numpy(),
            torch.cat(hess).numpy() if order > 1 else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384, help="sample size")
    ap.add_argument("--S", type=int, default=16, help="routers per batch")
    ap.add_argument("--teacher", choices=["3", "3d3", "4"], default="4",
                    help="3: K = 3 in d = 2; 3d3: K = 3 in d = 3; 4: K = 4 in d = 3")
    ap.add_argument("--tau", type=float, default=0.05)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (best of)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    teachers = {"3": mr.three_region_plane, "3d3": mr.three_region_space, "4": mr.four_region_space}
    teacher = teachers[args.teacher]()
    obj = ProfiledObjective(teacher, args.n, seed=0)
    phi = mr.normalise(mc.start_routers(obj, args.S, seed=0, tau=args.tau), obj.K, obj.d)
    # the routers as the objective normalises them: a local Hessian depends on the tangent
    # basis, and eigh's basis of the sphere's (degenerate) tangent space moves with the last ulp
    phi, _, _, _, H_closed = obj.grad_hess(phi, args.tau)

    fast = lambda p, t, X, f, K: mf.soft_refit(p, t, X, f, K, moments=obj.moments)  # noqa: E731
    H_fast = hessians(obj, phi, args.tau, fast)
    H_ref = hessians(obj, phi, args.tau, mf.soft_refit_reference)
    err = float(np.abs(H_fast - H_ref).max() / max(1.0, np.abs(H_ref).max()))
    err_c = float(np.abs(H_closed - 0.5 * (H_fast + H_fast.transpose(0, 2, 1))).max()
                  / max(1.0, np.abs(H_ref).max()))
    T = mr.tangent_basis(phi, obj.K, obj.d)
    H_pm = point_major(obj, phi, T, args.tau)[2]
    err_pm = float(np.abs(H_pm - H_closed).max() / max(1.0, np.abs(H_ref).max()))
    routes = (("closed", lambda: obj.grad_hess(phi, args.tau)),
              ("point-major", lambda: point_major(obj, phi, T, args.tau)),
              ("fast", lambda: hessians(obj, phi, args.tau, fast)),
              ("reference", lambda: hessians(obj, phi, args.tau, mf.soft_refit_reference)))
    best = {name: float("inf") for name, _ in routes}
    for _ in range(args.repeats):
        for name, fn in routes:
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    print(f"K = {obj.K}, d = {obj.d}, D = {obj.D}, n = {obj.X.shape[0]}, S = {args.S}, τ = {args.tau}, "
          f"threads = {args.threads}")
    print(f"max relative |H_fast − H_reference| = {err:.1e}, |H_closed − H_fast| = {err_c:.1e}, "
          f"|H_closed − H_point-major| = {err_pm:.1e}")
    for name, t in best.items():
        print(f"{name:>9}: {t:.3f} s per batch, {1e3 * t / args.S:.1f} ms per router Hessian")
    print(f"speed-up of the fast Gram assembly: {best['reference'] / best['fast']:.2f}x; "
          f"of the closed form over it: {best['fast'] / best['closed']:.2f}x; of the blocked rows "
          f"over the point-major closed form: {best['point-major'] / best['closed']:.2f}x")


if __name__ == "__main__":
    main()
