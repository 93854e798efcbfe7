"""Gradients and Hessians of the soft and hard objectives of the teacher–student model.

* soft, joint: the 8×8 Hessian of the population ``L_τ(θ, φ)`` in ``(θ_1, θ_2, α, b)`` by
  autograd through the quadrature of :func:`soft_moments` (the matrix whose smallest eigenvalue
  decides "strict saddle" in Theorem 5.17);
* soft, profiled: gradient and 2×2 Hessian of ``L̄_τ(φ)`` (experts refitted in closed form) by
  autograd, for S routers at once;
* hard, profiled: the exact gradient of ``L̄_0`` from the shape derivative (envelope theorem) and
  its Hessian by central differences of that gradient.

At a critical point the joint Hessian is indefinite iff the profiled one is (the θ-block is
positive definite and the profiled Hessian is its Schur complement), so the profiled 2×2 matrix
is enough to classify, and the joint one is reported because it is the theorem's object.
"""

from __future__ import annotations

import numpy as np
import torch

from .._internal import validation as check
from .shape_derivative import boundary_integral_gradient
from .two_region import TeacherStudentConfig, routers
from .hard_quadrature import hard_refit, profiled_hard
from .soft_quadrature import soft_refit_quad, soft_risk_quad


def _flat_point(theta, phi) -> torch.Tensor:
    """``(θ_1, θ_2, α, b)`` as one float64 tensor (8,), from θ (2, 3) and φ (2,), finite."""
    theta = check.finite_array("theta", theta, shape=(2, 3))
    phi = check.finite_array("phi", phi, shape=(2,))
    return torch.cat([torch.as_tensor(theta, dtype=torch.float64).reshape(6),
                      torch.as_tensor(phi, dtype=torch.float64).reshape(2)])


def joint_hessian(cfg: TeacherStudentConfig, theta, phi, tau: float, nodes: int = 48) -> np.ndarray:
    """Hessian of the population ``L_τ`` in the flat parameters ``(θ_1 (3), θ_2 (3), α, b)``: (8, 8)."""
    tau = check.temperature("tau", tau)
    p0 = _flat_point(theta, phi)

    def f(p):
        return soft_risk_quad(cfg, p[:6].reshape(1, 2, 3), p[6:].reshape(1, 2), tau, nodes)[0]

    H = torch.autograd.functional.hessian(f, p0)
    return (0.5 * (H + H.T)).detach().numpy()


def joint_gradient(cfg: TeacherStudentConfig, theta, phi, tau: float, nodes: int = 48) -> np.ndarray:
    """Gradient of the population ``L_τ`` in ``(θ_1, θ_2, α, b)``: (8,)."""
    tau = check.temperature("tau", tau)
    p = _flat_point(theta, phi).requires_grad_(True)
    loss = soft_risk_quad(cfg, p[:6].reshape(1, 2, 3), p[6:].reshape(1, 2), tau, nodes)[0]
    return torch.autograd.grad(loss, p)[0].numpy()


def profiled_soft_grad_hess(cfg: TeacherStudentConfig, phi, tau: float, nodes: int = 48):
    """Value (S,), gradient (S, 2) and Hessian (S, 2, 2) of ``L̄_τ`` at S routers, by autograd.

    The S routers are independent, so one backward pass of the summed value gives every
    gradient, and two more passes (one per coordinate) give every Hessian.
    """
    tau = check.temperature("tau", tau)
    p = torch.as_tensor(routers(phi), dtype=torch.float64).clone().requires_grad_(True)
    val = soft_refit_quad(cfg, p, tau, nodes)[1]                        # (S,)
    (g,) = torch.autograd.grad(val.sum(), p, create_graph=True)         # (S, 2)
    rows = [torch.autograd.grad(g[:, i].sum(), p, retain_graph=i == 0)[0] for i in range(2)]
    H = torch.stack(rows, dim=1)                                        # (S, 2, 2)
    H = 0.5 * (H + H.transpose(1, 2))
    return val.detach().numpy(), g.detach().numpy(), H.detach().numpy()


def soft_refit_np(cfg: TeacherStudentConfig, phi, tau: float, nodes: int = 48) -> np.ndarray:
    """``θ_τ(φ)`` for one router, numpy (2, 3)."""
    p = torch.as_tensor(check.finite_array("phi", phi, shape=(2,)), dtype=torch.float64).reshape(1, 2)
    with torch.no_grad():
        return soft_refit_quad(cfg, p, tau, nodes)[0][0].numpy()


def profiled_hard_gradient(cfg: TeacherStudentConfig, phi, nodes: int = 96) -> np.ndarray:
    """``∇L̄_0(φ)`` exactly (up to quadrature): the shape derivative at the refitted experts."""
    phi = check.finite_array("phi", phi, shape=(2,))
    return boundary_integral_gradient(cfg, hard_refit(cfg, phi, nodes), phi, nodes)


def profiled_hard_hessian(cfg: TeacherStudentConfig, phi, h: float = 1e-4, nodes: int = 96) -> np.ndarray:
    """Central differences of :func:`profiled_hard_gradient` (symmetrised), (2, 2).

    Valid where ``L̄_0`` is twice differentiable: away from the teacher partition, whose hard
    objective has a kink (a jump of the teacher across Σ makes ``L̄_0`` grow linearly there).
    Step 0 < h < 0.1.
    """
    h = check.number("h", h, low=0, high=0.1, low_open=True, high_open=True)
    phi = check.finite_array("phi", phi, shape=(2,))
    H = np.zeros((2, 2))
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        H[:, i] = (profiled_hard_gradient(cfg, phi + e, nodes)
                   - profiled_hard_gradient(cfg, phi - e, nodes)) / (2 * h)
    return 0.5 * (H + H.T)


def profiled_soft_grad(cfg: TeacherStudentConfig, phi, tau: float, nodes: int = 48):
    """Value (S,) and gradient (S, 2) of ``L̄_τ`` (one backward pass for S routers)."""
    tau = check.temperature("tau", tau)
    p = torch.as_tensor(routers(phi), dtype=torch.float64).clone().requires_grad_(True)
    val = soft_refit_quad(cfg, p, tau, nodes)[1]
    (g,) = torch.autograd.grad(val.sum(), p)
    return val.detach().numpy(), g.numpy()


def profiled_hard_grad_hess(cfg: TeacherStudentConfig, phi, nodes: int = 96):
    """Batched (value, gradient, Hessian) of ``L̄_0`` for the generic critical-point search."""
    phi = routers(phi)
    v = np.array([profiled_hard(cfg, p, nodes) for p in phi])
    g = np.stack([profiled_hard_gradient(cfg, p, nodes) for p in phi])
    H = np.stack([profiled_hard_hessian(cfg, p, nodes=nodes) for p in phi])
    return v, g, H
