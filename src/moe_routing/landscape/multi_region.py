"""Teacher–student MoE regression with K ≥ 2 regions in R^d (paper B, Theorem 5.17).

The K = 2, d = 2 model of :mod:`.teacher_student` computes every population quantity by exact
quadrature. Beyond two regions that is no longer practical, so here population expectations are
averages over a **fixed** scrambled-Sobol normal sample (common random numbers: every router,
expert and temperature sees the same points, so the soft landscape is a smooth function of the
parameters that autograd differentiates twice).

The setting (ours, as a concrete instance of the paper's teacher–student model):

* input ``X ~ N(0, I_d)``, features ``x̃ = (x, 1) ∈ R^{d+1}`` (affine experts);
* teacher: K regions ``T_k = {k = argmax_j (w*_j·x + c*_j)}`` (the hard limit of a linear softmax
  router), affine expert ``β_k`` on ``T_k``, independent noise of variance σ² (carried
  analytically: it adds σ² to every risk and drops out of every gradient);
* student: K affine experts ``θ_k`` and a linear softmax router ``π_τ(x) = softmax(a(x)/τ)``,
  ``a_k(x) = w_k·x + b_k``; soft objective ``L_τ(θ, φ) = E[(Y − Σ_k π_k θ_k·x̃)²]``;
* profiled objective ``L̄_τ(φ) = min_θ L_τ(θ, φ)``: least squares on the features
  ``z = (π_1 x̃, …, π_K x̃)`` (closed form).

This module holds the teacher family and the router chart; the gates, risks, refits and the
errors of a student against the teacher are in :mod:`.multi_fit`.

**The router chart (ours).** The logits have two invariances that would make the landscape
degenerate: a common shift ``a_k → a_k + h(x)`` of all logits (softmax is unchanged) and, for
the hard router only, a common positive scale (``s·a`` at temperature ``τ`` is ``a`` at ``τ/s``,
so with a free scale τ would mean nothing). The chart removes both:

* the logits are centred, ``Σ_k w_k = 0`` and ``Σ_k b_k = 0``, written ``W = H V``, ``b = H e``
  with ``H`` the K×(K−1) Helmert basis of the centred vectors;
* the scale is fixed by ``‖W‖_F² = Σ_k |w_k|² = (K − 1)/2``, which is the same as
  ``mean_{j<k} |w_j − w_k|² = 1``: the logit *differences* (which alone decide the routing) have
  unit root-mean-square gradient, so τ is the boundary-layer width in input units on average
  over the interfaces (an interface with ``|w_j − w_k| = r`` has width ``τ/r``).

For K = 2 the chart is exactly the ``|∇g| = 1`` chart of :mod:`.teacher_student`:
``a_1 − a_2 = n(α)·x − b`` with ``V = n(α)/√2``, ``e = −b/√2``. A router is the point
``φ = (vec V, e) ∈ R^{(K−1)d} × R^{K−1}`` with ``|vec V| = √((K−1)/2)``, a manifold of dimension
``D = (K−1)(d+1) − 1``. Derivatives are taken in local coordinates ``z ∈ R^D`` around a point
(a tangent basis of the sphere for ``V``, plus ``e``), through the second-order retraction
``V(z) = r (V_0 + T z_V)/|V_0 + T z_V|``: at ``z = 0`` its gradient and Hessian are the
Riemannian gradient and Hessian of ``L̄_τ`` on the chart (for the Euclidean metric of ``φ``).

A permutation of the student's labels maps φ to another point with the same partition; the
teacher-equivalent set is the K! relabellings of the teacher's own (normalised) scores.

Shapes: ``n`` sample points, ``S`` routers evaluated at once, ``K`` experts, ``d`` input
dimension, ``p = d + 1`` features, ``M = (K−1)(d+1)`` ambient chart coordinates, ``D = M − 1``
local coordinates.  Every public function checks its arguments with :mod:`moe_routing._internal.validation`
(finite arrays and tensors of these shapes, τ > 0, K ≥ 2, d ≥ 1) before any work starts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from scipy.optimize import linprog

from .._internal import validation as check
from .common import features, sobol_normal

_BOX = 6.0             # interfaces are looked for inside |x|_∞ ≤ 6 (Gaussian mass outside < 1e-8·d)
_MASS_CHECK_N = 2 ** 14


def _dims(K, d) -> tuple[int, int]:
    """The number of experts K ≥ 2 and the input dimension d ≥ 1."""
    return check.integer("K", K, low=2), check.integer("d", d, low=1)


def chart_points(phi, K: int, d: int, *, name: str = "phi", single: bool = False,
                 allow_empty: bool = False) -> np.ndarray:
    """Routers of the chart as a finite float array (S, M), M = (K−1)(d+1) — one router (M,)
    gives S = 1; with ``single``, exactly one router, returned as (M,) — whose weight part V is
    non-zero (V = 0 makes every logit equal: no partition, and no direction to normalise).
    The argument check of every function that takes routers of this chart."""
    K, d = _dims(K, d)
    check.instance("name", name, str, "the argument's name, a string")
    M, m = (K - 1) * (d + 1), (K - 1) * d
    if check.flag("single", single):
        a = check.finite_array(name, phi, shape=(M,))
    else:
        a = check.finite_array(name, phi, ndim=(1, 2), nonempty=not check.flag("allow_empty", allow_empty))
        check.require(a.shape[-1] == M or a.size == 0, f"{name}.shape", a.shape,
                      f"(S, {M}) or ({M},): chart points for K = {K}, d = {d}")
    nv = np.linalg.norm(a.reshape(-1, M)[:, :m], axis=1)
    check.require(bool(np.all(nv > 0)), name, phi,
                  "chart points with non-zero weights V (V = 0 has no partition)")
    return a if single else a.reshape(-1, M)


def _chart_tensor(name: str, phi, K: int, d: int) -> torch.Tensor:
    """S chart points as a finite torch tensor (S, M)."""
    return check.finite_tensor(name, phi, shape=(None, (K - 1) * (d + 1)))


def helmert(K: int) -> np.ndarray:
    """Orthonormal basis of ``{v ∈ R^K: Σ v = 0}``, (K, K−1); column j ∝ (1, …, 1, −j, 0, …).

    The centred logits ``W = H V`` are then parametrised without the shift redundancy.  (The
    returned array is cached: do not modify it.)
    """
    return _helmert(check.integer("K", K, low=2))


@lru_cache(maxsize=16)
def _helmert(K: int) -> np.ndarray:
    H = np.zeros((K, K - 1))
    for j in range(1, K):
        H[:j, j - 1] = 1.0
        H[j, j - 1] = -float(j)
        H[:, j - 1] /= math.sqrt(j * (j + 1))
    return H


def chart_radius(K: int) -> float:
    """``‖W‖_F = √((K−1)/2)``, i.e. unit RMS of the pairwise gradients ``|w_j − w_k|``."""
    K = check.integer("K", K, low=2)
    return math.sqrt((K - 1) / 2)


# --------------------------------------------------------------------------------------------
# The teacher
# --------------------------------------------------------------------------------------------

def adjacent_pairs(W: np.ndarray, c: np.ndarray, box: float = _BOX) -> list[tuple[int, int]]:
    """Pairs ``(j, k)`` whose argmax regions share an interface piece of positive (d−1)-volume
    inside ``|x|_∞ ≤ box``: the linear programme ``max t`` s.t. ``a_j(x) = a_k(x)``,
    ``a_j(x) − a_l(x) ≥ t`` (l ≠ j, k) has ``t > 0``."""
    W = check.finite_array("W", W, ndim=2)
    check.require(W.shape[0] >= 2, "W.shape", W.shape, "(K, d) with K ≥ 2 regions")
    c = check.finite_array("c", c, shape=(W.shape[0],))
    box = check.positive("box", box)
    K, d = W.shape
    out = []
    for j, k in itertools.combinations(range(K), 2):
        others = [l for l in range(K) if l not in (j, k)]
        cost = np.zeros(d + 1)
        cost[-1] = -1.0                                                 # maximise t
        A_eq = np.concatenate([W[j] - W[k], [0.0]])[None]
        b_eq = [c[k] - c[j]]
        if others:
            A_ub = np.stack([np.concatenate([-(W[j] - W[l]), [1.0]]) for l in others])
            b_ub = np.array([c[j] - c[l] for l in others])
        else:
            A_ub, b_ub = None, None
        res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq,
                      bounds=[(-box, box)] * d + [(None, 1.0)], method="highs")
        if res.status == 0 and -res.fun > 1e-9:
            out.append((j, k))
    return out


@dataclass(frozen=True)
class MultiRegionTeacher:
    """Teacher with K regions ``argmax_k (w*_k·x + c*_k)`` of R^d and affine experts ``β_k``
    (rows ``(weights (d), intercept)``), noise std σ.

    Validation (ValueError): K ≥ 2, d ≥ 2, finite entries, σ ≥ 0; every region must carry
    probability mass ≥ ``min_mass`` under N(0, I_d) (estimated on 2^14 scrambled-Sobol points:
    a nearly empty region is a partition nobody can recover from data); experts in adjacent
    regions must differ (otherwise the two regions are one, and the partition is not
    identifiable).
    """

    scores_w: tuple          # (K, d)
    scores_b: tuple          # (K,)
    experts: tuple           # (K, d+1)
    noise_std: float = 0.1
    min_mass: float = 0.02

    def __post_init__(self):
        W = check.finite_array("scores_w", self.scores_w, ndim=2)
        K, d = W.shape
        check.require(K >= 2, "scores_w.shape", W.shape, "(K, d) with K >= 2 regions")
        check.require(d >= 2, "scores_w.shape", W.shape, "(K, d) with input dimension d >= 2")
        c = check.finite_array("scores_b", self.scores_b, shape=(K,))
        B = check.finite_array("experts", self.experts, shape=(K, d + 1))
        # stored as plain tuples and floats: hashable, and a NumPy scalar σ gives the same model
        object.__setattr__(self, "scores_w", tuple(map(tuple, W.tolist())))
        object.__setattr__(self, "scores_b", tuple(c.tolist()))
        object.__setattr__(self, "experts", tuple(map(tuple, B.tolist())))
        object.__setattr__(self, "noise_std", check.number("noise_std", self.noise_std, low=0))
        object.__setattr__(self, "min_mass", check.number("min_mass", self.min_mass, low=0, high=1.0 / K,
                                                          low_open=True))
        check.require(np.linalg.norm(W - W.mean(0)) >= 1e-12, "scores_w", self.scores_w,
                      "scores of different directions (all equal: the argmax partition has a single region)")
        mass = self.region_masses(_MASS_CHECK_N)
        k = int(mass.argmin())
        check.require(mass[k] >= self.min_mass, "scores_b", self.scores_b,
                      f"scores whose every region carries mass ≥ min_mass = {self.min_mass} (teacher "
                      f"region {k} carries probability mass {mass[k]:.4f})")
        for j, k in adjacent_pairs(W, c):
            check.require(not np.allclose(B[j], B[k], rtol=0, atol=1e-9), "experts", self.experts,
                          f"different experts in adjacent regions (degenerate teacher: adjacent regions "
                          f"{j} and {k} have the same expert {B[j].tolist()}; "
                          "the partition is not identifiable)")

    # -- arrays ---------------------------------------------------------------------------------
    @property
    def W(self) -> np.ndarray:
        return np.asarray(self.scores_w, dtype=float)                   # (K, d)

    @property
    def c(self) -> np.ndarray:
        return np.asarray(self.scores_b, dtype=float)                   # (K,)

    @property
    def beta(self) -> np.ndarray:
        return np.asarray(self.experts, dtype=float)                    # (K, d+1)

    @property
    def K(self) -> int:
        return self.W.shape[0]

    @property
    def d(self) -> int:
        return self.W.shape[1]

    def region(self, X: torch.Tensor) -> torch.Tensor:
        """Teacher region index of each input: (n, d) → (n,) long."""
        check.finite_tensor("X", X, shape=(None, self.d))
        A = X @ torch.tensor(self.W.T, dtype=X.dtype) + torch.tensor(self.c, dtype=X.dtype)
        return A.argmax(1)

    def fstar(self, X: torch.Tensor) -> torch.Tensor:
        """``f*(x) = E[Y | x] = β_{region(x)}·x̃``: (n, d) → (n,)."""
        check.finite_tensor("X", X, shape=(None, self.d))
        B = torch.tensor(self.beta, dtype=X.dtype)
        return (features(X) * B[self.region(X)]).sum(1)

    def region_masses(self, n: int = 2 ** 16, seed: int = 12345) -> np.ndarray:
        """``P(X ∈ T_k)`` estimated on ``n`` scrambled-Sobol points: (K,)."""
        X = sobol_normal(n, self.d, seed)
        return np.bincount(self.region(X).numpy(), minlength=self.K) / X.shape[0]

    def phi(self) -> np.ndarray:
        """The teacher's partition as a point of the student's chart: (M,)."""
        return phi_from_logits(self.W, self.c)

    def teacher_equivalents(self) -> np.ndarray:
        """All K! relabellings of :meth:`phi`: (K!, M)."""
        W, c = self.W, self.c
        return np.stack([phi_from_logits(W[list(p)], c[list(p)])
                         for p in itertools.permutations(range(self.K))])

    @classmethod
    def from_arrays(cls, W, c, B, noise_std: float = 0.1, min_mass: float = 0.02) -> "MultiRegionTeacher":
        """The teacher from arrays: scores W (K, d) and c (K,), experts B (K, d+1)."""
        W = check.finite_array("W", W, ndim=2)
        K, d = W.shape
        c = check.finite_array("c", c, shape=(K,))
        B = check.finite_array("B", B, shape=(K, d + 1))
        return cls(W, c, B, noise_std, min_mass)


def three_region_plane(noise_std: float = 0.1) -> MultiRegionTeacher:
    """Ours: K = 3 regions of R^2 meeting at a triple junction off the origin (score directions
    at 90°, 215° and 335°, so the three interfaces are not symmetric), with experts that jump
    across every interface."""
    ang = np.deg2rad([90.0, 215.0, 335.0])
    W = np.stack([np.cos(ang), np.sin(ang)], 1)
    c = np.array([0.15, -0.1, 0.0])
    B = np.array([[1.0, 0.5, 0.8], [-0.8, 0.6, -0.4], [0.3, -1.0, 0.1]])
    return MultiRegionTeacher.from_arrays(W, c, B, noise_std)


def three_region_space(noise_std: float = 0.1) -> MultiRegionTeacher:
    """Ours: K = 3 regions of R^3, wedges around a junction line that is tilted against every
    axis (score directions at 90°, 215°, 335° in a tilted plane), experts that use all three
    inputs and jump across every interface."""
    ang = np.deg2rad([90.0, 215.0, 335.0])
    e1 = np.array([1.0, 0.0, 0.3]) / math.sqrt(1.09)
    e2 = np.array([-0.1, 1.0, 0.4])
    e2 = e2 - (e2 @ e1) * e1
    e2 /= np.linalg.norm(e2)
    W = np.cos(ang)[:, None] * e1 + np.sin(ang)[:, None] * e2
    c = np.array([0.15, -0.1, 0.0])
    B = np.array([[1.0, 0.5, -0.3, 0.8], [-0.8, 0.6, 0.4, -0.4], [0.3, -1.0, 0.5, 0.1]])
    return MultiRegionTeacher.from_arrays(W, c, B, noise_std)


def four_region_space(noise_std: float = 0.1) -> MultiRegionTeacher:
    """Ours: K = 4 regions of R^3 (score directions near the vertices of a regular tetrahedron,
    perturbed so that no two interfaces are congruent), experts that jump across every
    interface."""
    W = np.array([[1.0, 1.0, 1.0], [1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]]) / math.sqrt(3)
    W = W + np.array([[0.1, 0.0, -0.05], [0.0, 0.1, 0.0], [-0.05, 0.0, 0.1], [0.0, -0.05, 0.0]])
    c = np.array([0.1, -0.1, 0.05, 0.0])
    B = np.array([[1.0, 0.5, -0.3, 0.8], [-0.8, 0.6, 0.4, -0.4], [0.3, -1.0, 0.5, 0.1],
                  [-0.2, -0.4, -1.0, 0.6]])
    return MultiRegionTeacher.from_arrays(W, c, B, noise_std)


def from_two_region(cfg) -> MultiRegionTeacher:
    """The K = 2 teacher of :class:`.two_region.TeacherStudentConfig` in this module's
    terms: scores ``(n·x − b*)/2`` and ``−(n·x − b*)/2``."""
    from .two_region import TeacherStudentConfig

    check.instance("cfg", cfg, TeacherStudentConfig, "a TeacherStudentConfig")
    n = np.array([math.cos(cfg.teacher_angle), math.sin(cfg.teacher_angle)])
    W = np.stack([n / 2, -n / 2])
    c = np.array([-cfg.teacher_offset / 2, cfg.teacher_offset / 2])
    return MultiRegionTeacher.from_arrays(W, c, cfg.beta, cfg.noise_std, min_mass=0.01)


# --------------------------------------------------------------------------------------------
# The chart
# --------------------------------------------------------------------------------------------

def phi_from_logits(W, b) -> np.ndarray:
    """Project logits ``(W (K,d), b (K,))`` onto the chart (centre, fix the scale): (M,).

    The same positive factor rescales W and b, so the hard partition is unchanged."""
    W = check.finite_array("W", W, ndim=2)
    K = W.shape[0]
    check.require(K >= 2, "W.shape", W.shape, "(K, d) with K ≥ 2 experts")
    b = check.finite_array("b", b, shape=(K,))
    H = helmert(K)
    V, e = H.T @ W, H.T @ b                                             # (K−1, d), (K−1,)
    nv = np.linalg.norm(V)
    check.require(nv >= 1e-12, "W", W, "weights not all equal (all equal: no partition, the scale "
                  "cannot be normalised)")
    s = chart_radius(K) / nv
    return np.concatenate([(s * V).ravel(), s * e])


def logits_from_phi(phi: torch.Tensor, K: int, d: int):
    """``φ (S, M) → W (S, K, d), b (S, K)`` (centred logits of unit RMS pairwise gradient)."""
    K, d = _dims(K, d)
    _chart_tensor("phi", phi, K, d)
    H = torch.tensor(helmert(K), dtype=phi.dtype)
    m = (K - 1) * d
    V = phi[:, :m].reshape(-1, K - 1, d)
    W = torch.einsum("kj,sjd->skd", H, V)
    b = phi[:, m:] @ H.T
    return W, b


def tangent_basis(phi: np.ndarray, K: int, d: int) -> np.ndarray:
    """Orthonormal basis of the sphere's tangent space at ``V``: (S, m, m−1), ``m = (K−1)d``."""
    K, d = _dims(K, d)
    m = (K - 1) * d
    v = chart_points(phi, K, d, name="phi")[:, :m]
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    P = np.eye(m)[None] - v[:, :, None] * v[:, None, :]
    _, Q = np.linalg.eigh(P)                                            # eigenvalues 0, 1, …, 1
    return Q[:, :, 1:]


def retract(phi0: torch.Tensor, T: torch.Tensor, z: torch.Tensor, K: int, d: int) -> torch.Tensor:
    """``R_φ0(z)``: local coordinates z (S, D) around φ0 (S, M) → points (S, M) on the chart."""
    K, d = _dims(K, d)
    S = _chart_tensor("phi0", phi0, K, d).shape[0]
    m = (K - 1) * d
    check.finite_tensor("T", T, shape=(S, m, m - 1))
    check.finite_tensor("z", z, shape=(S, chart_dim(K, d)))
    v = phi0[:, :m] + torch.einsum("smj,sj->sm", T, z[:, :m - 1])
    v = chart_radius(K) * v / v.norm(dim=1, keepdim=True)
    return torch.cat([v, phi0[:, m:] + z[:, m - 1:]], dim=1)


def normalise(phi: np.ndarray, K: int, d: int) -> np.ndarray:
    """Put (a batch of) ambient points back on the sphere ``|vec V| = r``: (S, M)."""
    K, d = _dims(K, d)
    phi = chart_points(phi, K, d, name="phi")
    m = (K - 1) * d
    phi[:, :m] *= chart_radius(K) / np.linalg.norm(phi[:, :m], axis=1, keepdims=True)
    return phi


def chart_dim(K: int, d: int) -> int:
    """``D = (K−1)(d+1) − 1``: the dimension of the router manifold (the sphere removes one)."""
    K, d = _dims(K, d)
    return (K - 1) * (d + 1) - 1


@lru_cache(maxsize=16)
def _perm_mats(K: int) -> np.ndarray:
    """``Hᵀ Π H`` for every permutation Π of the K labels: (K!, K−1, K−1)."""
    H = helmert(K)
    return np.stack([H.T @ np.eye(K)[list(p)] @ H for p in itertools.permutations(range(K))])


def relabel_all(phi: np.ndarray, K: int, d: int) -> np.ndarray:
    """All K! relabellings of one router: (M,) → (K!, M)."""
    K, d = _dims(K, d)
    phi = chart_points(phi, K, d, name="phi", single=True)
    m = (K - 1) * d
    V, e = phi[:m].reshape(K - 1, d), phi[m:]
    A = _perm_mats(K)
    return np.concatenate([np.einsum("pij,jd->pid", A, V).reshape(len(A), m), A @ e], axis=1)


def random_routers(S: int, K: int, d: int, rng: np.random.Generator, offset_scale: float = 0.5) -> np.ndarray:
    """S random points of the chart: Gaussian directions, centred Gaussian offsets: (S, M)."""
    S = check.integer("S", S, low=1)
    K, d = _dims(K, d)
    rng = check.generator("rng", rng)
    offset_scale = check.number("offset_scale", offset_scale, low=0)
    m = (K - 1) * d
    phi = np.concatenate([rng.standard_normal((S, m)), offset_scale * rng.standard_normal((S, K - 1))], 1)
    return normalise(phi, K, d)
