"""The two-region model of :mod:`.teacher_student`: the teacher and the student router's chart.

The teacher (:class:`TeacherStudentConfig`: a line ``{n(α*)·x = b*}`` of the plane, an affine
expert on each side, noise σ) and the fixed-scale linear router's chart ``φ = (α, b)``
(:func:`normal`, :func:`normal_perp`; :func:`wrap_phi` picks one of the two coordinates of a
partition; :func:`routers` is the argument check of a batch of routers), with the checks of a
configuration and of a router that every objective of the model shares.  Why this chart, and
the rest of the setting: :mod:`.teacher_student`.  The objectives are in
:mod:`.teacher_student` (soft, on a fixed sample), :mod:`.hard_quadrature` (hard) and
:mod:`.soft_quadrature` (soft, by quadrature); they all import this module, which imports none
of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .._internal import validation as check
from .common import features


def normal(alpha) -> np.ndarray:
    """``n(α) = (cos α, sin α)``: the unit normal of the router line at angle α, (2,)."""
    alpha = check.number("alpha", alpha)
    return np.array([math.cos(alpha), math.sin(alpha)])


def normal_perp(alpha) -> np.ndarray:
    """``d n(α)/dα``: the unit vector along the router line, (2,)."""
    alpha = check.number("alpha", alpha)
    return np.array([-math.sin(alpha), math.cos(alpha)])


def routers(phi, *, name: str = "phi", allow_empty: bool = False) -> np.ndarray:
    """Routers ``(α, b)`` of this chart as a finite (S, 2) float array (one router (2,) gives
    S = 1): the argument check of every function that takes a batch of routers."""
    check.instance("name", name, str, "the argument's name, a string")
    a = check.finite_array(name, phi, ndim=(1, 2), nonempty=not check.flag("allow_empty", allow_empty))
    check.require(a.shape[-1] == 2 or a.size == 0, f"{name}.shape", a.shape, "(S, 2) or (2,): routers (α, b)")
    return a.reshape(-1, 2)


def _phi_point(phi) -> np.ndarray:
    """One router ``(α, b)`` as a finite (2,) array."""
    return check.finite_array("phi", phi, shape=(2,))


def _phi_batch(phi: torch.Tensor) -> torch.Tensor:
    """S routers as a finite torch tensor (S, 2) (one router (2,) is reshaped)."""
    check.finite_tensor("phi", phi, ndim=(1, 2))
    check.require(phi.shape[-1] == 2, "phi.shape", tuple(phi.shape), "(S, 2) or (2,): routers (α, b)")
    return phi.reshape(-1, 2)


@dataclass(frozen=True)
class TeacherStudentConfig:
    """The teacher: line ``{n(α*)·x = b*}``, experts ``β_1`` (on ``n·x > b*``) and ``β_2``
    (rows ``(w_1, w_2, intercept)``), noise std σ.

    A teacher whose two experts coincide has no partition to recover (ValueError); so has one
    whose line leaves (nearly) all the Gaussian mass on one side, |b*| > 3.
    """

    teacher_angle: float = 0.0
    teacher_offset: float = 0.3
    beta1: tuple = (1.0, 1.0, 0.8)
    beta2: tuple = (-1.0, -0.5, -0.4)
    noise_std: float = 0.1

    def __post_init__(self):
        b1 = check.finite_array("beta1", self.beta1, shape=(3,))
        b2 = check.finite_array("beta2", self.beta2, shape=(3,))
        check.require(not np.allclose(b1, b2, rtol=0, atol=1e-12), "beta2", self.beta2,
                      "an expert different from beta1 (degenerate teacher: beta1 == beta2 leaves no "
                      "partition to recover)")
        object.__setattr__(self, "teacher_angle", check.number("teacher_angle", self.teacher_angle))
        object.__setattr__(self, "teacher_offset", check.number(
            "teacher_offset", self.teacher_offset, low=-3.0, high=3.0))
        object.__setattr__(self, "noise_std", check.number("noise_std", self.noise_std, low=0))
        object.__setattr__(self, "beta1", tuple(b1.tolist()))
        object.__setattr__(self, "beta2", tuple(b2.tolist()))

    @property
    def beta(self) -> np.ndarray:
        return np.array([self.beta1, self.beta2], dtype=float)           # (2, 3)

    @property
    def teacher_phi(self) -> np.ndarray:
        return np.array([self.teacher_angle, self.teacher_offset])

    def teacher_equivalents(self) -> np.ndarray:
        """Both chart coordinates of the teacher partition: (2, 2)."""
        a, b = self.teacher_angle, self.teacher_offset
        return np.array([[a, b], [a + math.pi, -b]])

    def fstar(self, X: torch.Tensor) -> torch.Tensor:
        """Teacher regression function ``f*(x) = E[Y | x]`` at X (n, 2) → (n,)."""
        check.finite_tensor("X", X, shape=(None, 2))
        u = torch.tensor(normal(self.teacher_angle), dtype=X.dtype)
        Xt = features(X)
        b = torch.tensor(self.beta, dtype=X.dtype)
        return torch.where(X @ u > self.teacher_offset, Xt @ b[0], Xt @ b[1])


def wrap_phi(phi) -> np.ndarray:
    """Canonical chart coordinates: α ∈ [0, π), using (α, b) ≡ (α + π, −b)."""
    phi = _phi_point(phi)
    a, b = float(phi[0]), float(phi[1])
    k = math.floor(a / math.pi)
    a -= k * math.pi
    if k % 2:
        b = -b
    return np.array([a, b])


def _config(cfg) -> TeacherStudentConfig:
    return check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
