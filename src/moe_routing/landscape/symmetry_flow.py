"""The gradient flow of the two-expert Gaussian model (paper B, Proposition 6.3): the soft
risk ``L_τ`` and its closed-form population gradients for B parameter sets at once, RK4
integration of ``ż = −∇L_τ(z)`` from near-symmetric starts, and the fits of the growth rate
and its power law in τ that the chapter reads the ``1/τ`` amplification from.

The model, the operator ``M`` and the linear rates it predicts are :mod:`.symmetry`'s (its
docstring has the derivation); this module is the nonlinear dynamics they are checked
against, kept apart so each can be read on its own.  Importable from :mod:`.symmetry` as
before.  Shapes: ``n`` samples, ``d`` input dimension, ``B`` trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._internal import validation as check


def _flow_state(X, Y, theta1, theta2, w, tau) -> torch.Tensor:
    """Check the sample (X (n, d), Y (n,)) and B parameter sets ((B, d) each, τ (B,)) of the
    flow; returns τ as a tensor of X's dtype."""
    check.finite_tensor("X", X, ndim=2)
    n, d = X.shape
    check.finite_tensor("Y", Y, shape=(n,))
    check.finite_tensor("w", w, shape=(None, d))
    B = w.shape[0]
    check.finite_tensor("theta1", theta1, shape=(B, d))
    check.finite_tensor("theta2", theta2, shape=(B, d))
    taus = check.temperatures("tau", tau)
    check.require(taus.shape == (B,), "tau.shape", taus.shape, f"({B},): one temperature per trajectory")
    return torch.as_tensor(taus, dtype=X.dtype)


# --------------------------------------------------------------------------------------------
# Population gradient flow (vectorised over B trajectories)
# --------------------------------------------------------------------------------------------

def soft_risk(X, Y, theta1, theta2, w, tau):
    """``L_τ = E[(Y − m_τ)²]`` for B parameter sets at once. X (n,d), Y (n,), params (B,d),
    tau (B,). Returns (B,). The reference that the closed-form gradients are tested against."""
    check.finite_tensor("tau", tau, ndim=1, low=0, low_open=True)
    _flow_state(X, Y, theta1, theta2, w, tau)
    F1, F2 = X @ theta1.T, X @ theta2.T                                 # (n, B)
    P = torch.sigmoid((X @ w.T) / tau)                                  # (n, B)
    r = Y[:, None] - (F2 + P * (F1 - F2))
    return (r * r).mean(0)


def population_gradients(X, Y, theta1, theta2, w, tau, Xt=None):
    """Closed-form gradients of :func:`soft_risk` for B trajectories at once (no autograd).

    Works in a trajectory-major layout, ``(B, n)``: each trajectory's row is contiguous, which is
    ~1.5× faster than ``(n, B)`` for these memory-bound element-wise passes. ``Xt`` is
    ``X.T.contiguous()`` (pass it to avoid one copy per call). The tensors are small: run with
    one intra-op thread (``torch.set_num_threads(1)``) — on shared cores two threads spend far
    more on synchronisation than they gain. Returns ``(g_theta1, g_theta2, g_w)``, each (B, d).
    """
    taus = _flow_state(X, Y, theta1, theta2, w, tau)
    if Xt is not None:
        check.finite_tensor("Xt", Xt, shape=(X.shape[1], X.shape[0]))
    return _gradients(X, Y, theta1, theta2, w, taus, Xt)


def _gradients(X, Y, theta1, theta2, w, tau, Xt=None):
    """:func:`population_gradients` on checked arguments (the RK4 loop calls it four times a step).

    Two matrix products carry all the work with the sample: one (3B, d) @ (d, n) gives the
    second expert's prediction, the contrast's ``δ·X`` (formed from δ itself, not as the
    difference of two O(1) predictions, so it keeps its relative precision when |δ| ≪ 1) and
    the router's logit; one (3B, n) @ (n, d) gives the three gradients.  The element-wise
    passes in between write into one preallocated (3B, n) buffer (nine passes in all).
    """
    n, B = X.shape[0], w.shape[0]
    Xt = X.T.contiguous() if Xt is None else Xt                         # (d, n)
    tau = torch.as_tensor(tau, dtype=X.dtype)[:, None]                  # (B, 1)
    A = torch.cat([theta2, theta1 - theta2, w / tau]) @ Xt              # (3B, n)
    F2, D, P = A[:B], A[B:2 * B], A[2 * B:]                             # (B, n) views
    P.sigmoid_()                                                        # gate π_1
    G = torch.empty_like(A)                                             # (3B, n)
    r, rP, q = G[:B], G[B:2 * B], G[2 * B:]
    torch.sub(Y[None, :], F2, out=r)
    r.addcmul_(P, D, value=-1.0)                                        # r = Y − F2 − P·D
    torch.mul(r, P, out=rP)                                             # r·π_1
    torch.sub(1.0, P, out=q)
    q.mul_(rP).mul_(D)                                                  # r·π_1(1 − π_1)·δ·X
    S = G @ X                                                           # (3B, d)
    c = -2.0 / n
    g1 = c * S[B:2 * B]
    g2 = c * (S[:B] - S[B:2 * B])
    gw = (c * S[2 * B:]) / tau
    return g1, g2, gw


def _gradients_reference(X, Y, theta1, theta2, w, tau, Xt=None):
    """The previous, unfused form of :func:`_gradients` (F1 − F2 as a difference, one product
    per gradient): kept for the test that the fused form agrees with it and for the benchmark."""
    n = X.shape[0]
    Xt = X.T.contiguous() if Xt is None else Xt                         # (d, n)
    tau = torch.as_tensor(tau, dtype=X.dtype)[:, None]                  # (B, 1)
    F1, F2 = theta1 @ Xt, theta2 @ Xt                                   # (B, n)
    P = torch.sigmoid((w @ Xt) / tau)                                   # (B, n)
    D = F1 - F2
    r = Y[None, :] - F2 - P * D                                         # (B, n)
    rP = r * P
    g1 = (-2.0 / n) * (rP @ X)
    g2 = (-2.0 / n) * ((r - rP) @ X)
    gw = (-2.0 / n) * ((rP * (1.0 - P) * D / tau) @ X)
    return g1, g2, gw


@dataclass
class FlowResult:
    """Trajectory summaries: times (in units of each trajectory's τ) and norms per step."""

    tau: np.ndarray            # (B,)
    t_over_tau: np.ndarray     # (steps+1,)
    w_norm: np.ndarray         # (steps+1, B)
    delta_norm: np.ndarray     # (steps+1, B)
    w_final: np.ndarray        # (B, d)
    delta_final: np.ndarray    # (B, d)
    w_path: np.ndarray | None = None   # (steps+1, B, d) when recorded


def gradient_flow(X, Y, theta1, theta2, w, tau, *, steps: int, h: float = 0.05,
                  train_experts: bool = True, record_path: bool = False,
                  progress=None, reference: bool = False) -> FlowResult:
    """Integrate ``ż = −∇L_τ`` with classical RK4 for B trajectories at once.

    The step is ``dt = h·τ_b`` for trajectory b: because the unstable rates scale as ``1/τ``, the
    same number of steps takes every temperature through the same number of e-folds, and the
    RK4 error per e-fold is the same for all τ. ``train_experts=False`` freezes the experts
    (router-only flow), used to show that with identical experts the router never moves.
    ``progress``: ``None`` or a callable ``progress(i, steps)`` called after step i (a
    :class:`moe_routing._internal.progress.Progress`'s ``update`` reports "i of n, ETA" lines from it).
    ``reference=True`` uses the previous, unfused gradients (for the tests and the benchmark).
    """
    taus = _flow_state(X, Y, theta1, theta2, w, tau)
    if progress is not None:
        check.function("progress", progress)
    steps = check.integer("steps", steps, low=1)
    h = check.number("h", h, low=0, high=0.5, low_open=True)
    train_experts = check.flag("train_experts", train_experts)
    record_path = check.flag("record_path", record_path)
    grads = _gradients_reference if check.flag("reference", reference) else _gradients
    dt = (h * taus)[:, None]                                            # (B, 1)
    z = [theta1.clone(), theta2.clone(), w.clone()]
    mask = 1.0 if train_experts else 0.0

    Xt = X.T.contiguous()

    def field_(s):
        g1, g2, gw = grads(X, Y, s[0], s[1], s[2], taus, Xt)
        return [-mask * g1, -mask * g2, -gw]

    wn, dn = [z[2].norm(dim=1)], [(z[0] - z[1]).norm(dim=1)]
    path = [z[2].clone()] if record_path else None
    for i in range(steps):
        k1 = field_(z)
        k2 = field_([a + 0.5 * dt * k for a, k in zip(z, k1)])
        k3 = field_([a + 0.5 * dt * k for a, k in zip(z, k2)])
        k4 = field_([a + dt * k for a, k in zip(z, k3)])
        z = [a + dt / 6.0 * (q1 + 2 * q2 + 2 * q3 + q4) for a, q1, q2, q3, q4 in zip(z, k1, k2, k3, k4)]
        wn.append(z[2].norm(dim=1))
        dn.append((z[0] - z[1]).norm(dim=1))
        if record_path:
            path.append(z[2].clone())
        if progress is not None:
            progress(i + 1, steps)
    return FlowResult(tau=taus.numpy(), t_over_tau=h * np.arange(steps + 1),
                      w_norm=torch.stack(wn).numpy(), delta_norm=torch.stack(dn).numpy(),
                      w_final=z[2].numpy(), delta_final=(z[0] - z[1]).numpy(),
                      w_path=torch.stack(path).numpy() if record_path else None)


def naive_gradient_flow_step(X, Y, theta1, theta2, w, tau, h: float = 0.05):
    """The readable reference path: one RK4 step, one trajectory at a time, gradients by autograd.

    Kept beside :func:`gradient_flow` for the benchmark and for a correctness test (both must give
    the same state after a step).
    """
    tau = _flow_state(X, Y, theta1, theta2, w, tau).numpy()
    h = check.number("h", h, low=0, high=0.5, low_open=True)
    out = []
    for b in range(w.shape[0]):
        tb = float(tau[b])

        def field_(p, tb=tb):    # called within this pass only; tb bound for clarity
            p = [q.detach().requires_grad_(True) for q in p]
            tau_b = torch.tensor([tb], dtype=X.dtype)
            loss = soft_risk(X, Y, p[0][None], p[1][None], p[2][None], tau_b)[0]
            grads = torch.autograd.grad(loss, p)
            return [-g for g in grads]

        z = [theta1[b], theta2[b], w[b]]
        dt = h * tb
        k1 = field_(z)
        k2 = field_([a + 0.5 * dt * k for a, k in zip(z, k1)])
        k3 = field_([a + 0.5 * dt * k for a, k in zip(z, k2)])
        k4 = field_([a + dt * k for a, k in zip(z, k3)])
        out.append([a + dt / 6.0 * (q1 + 2 * q2 + 2 * q3 + q4)
                    for a, q1, q2, q3, q4 in zip(z, k1, k2, k3, k4)])
    return tuple(torch.stack([o[i] for o in out]) for i in range(3))


def symmetric_start(X, Y, B: int, *, scale_w: float, scale_delta: float, seed: int,
                    tau=None, scale_with_tau: bool = False, shared: bool = True):
    """A near-symmetric state for B trajectories: both experts at the sample least-squares fit
    ``θ̄_n`` (the symmetric fixed point of the sample flow) plus a contrast ``δ`` of norm
    ``scale_delta``, and a router of norm ``scale_w`` (times ``τ_b`` if ``scale_with_tau``).

    Why ``shared`` (default): in the time ``s = t/τ`` the linearised system
    ``dw/ds = Mδ/2, dδ/ds = Mw`` does not involve τ, so trajectories that start from the *same*
    ``(w, δ)`` are the same curve in ``s`` at every temperature — comparing temperatures then
    compares rates, not lucky initial directions (a random δ nearly orthogonal to the fastest
    mode delays its dominance by many e-folds).
    """
    check.finite_tensor("X", X, ndim=2)
    check.finite_tensor("Y", Y, shape=(X.shape[0],))
    B = check.integer("B", B, low=1)
    scale_w = check.number("scale_w", scale_w, low=0)
    scale_delta = check.number("scale_delta", scale_delta, low=0)
    seed = check.integer("seed", seed, low=0)
    scale_with_tau, shared = check.flag("scale_with_tau", scale_with_tau), check.flag("shared", shared)
    d = X.shape[1]
    g = torch.Generator().manual_seed(seed)
    tb = torch.ones(B, dtype=X.dtype) if tau is None else torch.as_tensor(check.temperatures("tau", tau),
                                                                          dtype=X.dtype)
    check.require(tb.shape == (B,), "tau.shape", tuple(tb.shape), f"({B},): one temperature per trajectory")
    theta_bar = torch.linalg.lstsq(X, Y[:, None]).solution[:, 0]
    nb = 1 if shared else B
    rw = torch.randn(nb, d, generator=g, dtype=X.dtype).expand(B, d)
    rd = torch.randn(nb, d, generator=g, dtype=X.dtype).expand(B, d)
    sw = scale_w * (tb[:, None] if scale_with_tau else torch.ones_like(tb)[:, None])
    w = sw * rw / rw.norm(dim=1, keepdim=True)
    delta = scale_delta * rd / rd.norm(dim=1, keepdim=True)
    th1 = theta_bar[None].repeat(B, 1) + 0.5 * delta
    th2 = theta_bar[None].repeat(B, 1) - 0.5 * delta
    return th1, th2, w.clone()


def fit_growth_rate(res: FlowResult, lo: float, hi: float, relative_to_tau: bool = False):
    """Least-squares slope of ``log |w|`` against time over the window ``lo ≤ |w| ≤ hi``
    (``lo·τ ≤ |w| ≤ hi·τ`` if ``relative_to_tau``).

    Returns ``(rate·τ, rate)`` per trajectory (B,) each.  The window must sit in the linear
    regime (``|w|/τ ≪ 1``) after the slower modes have decayed, and hold ≥ 5 steps of every
    trajectory (fewer: a ValueError naming the trajectory — widen the window or run more steps).
    """
    check.instance("res", res, FlowResult, "a FlowResult (from gradient_flow)")
    lo = check.positive("lo", lo)
    hi = check.number("hi", hi, low=lo, low_open=True)
    relative_to_tau = check.flag("relative_to_tau", relative_to_tau)
    rate_tau = np.empty(res.tau.shape)
    for b, t in enumerate(res.tau):
        rel = res.w_norm[:, b] / (t if relative_to_tau else 1.0)
        sel = (rel >= lo) & (rel <= hi)
        check.require(int(sel.sum()) >= 5, "hi", hi, f"a window [lo, hi] = [{lo:g}, {hi:g}] that holds ≥ 5 "
                      f"steps of every trajectory (trajectory {b}, τ = {t:g}, has {int(sel.sum())})")
        slope = np.polyfit(res.t_over_tau[sel], np.log(rel[sel]), 1)[0]
        rate_tau[b] = slope              # d log|w| / d(t/τ) = rate·τ
    return rate_tau, rate_tau / res.tau


def fit_power_law(x, y):
    """Fit ``y = C x^p`` by least squares in log–log; returns ``(p, C)``.  Needs ≥ 2 points at
    ≥ 2 distinct x, all x > 0 and y > 0 (logarithms are taken)."""
    x = check.finite_array("x", x, ndim=1, low=0, low_open=True)
    y = check.finite_array("y", y, shape=(x.size,), low=0, low_open=True)
    check.require(x.size >= 2, "x.size", x.size, "≥ 2 points (a slope and a prefactor)")
    check.require(bool(np.ptp(x) > 0), "x", x, "at least 2 distinct values (a slope needs a spread in x)")
    p, logc = np.polyfit(np.log(x), np.log(y), 1)
    return float(p), float(np.exp(logc))
