"""Is a critical point's index a property of ``L̄_τ`` or of the sample? (ours)

The K-region objective is an average over one fixed sample of ``n`` points, and at temperature
τ only a fraction O(τ) of them lies in the boundary layers where the router's curvature comes
from.  At the smallest temperatures of the `paper` profile that is a few hundred points in
d = 3, and a critical point of the sample's objective can have an index that the population
objective ``L̄_τ`` does not: measured on the three-region teacher in space at τ = 0.003, a
saddle family of the 131,072-point objective became a local minimum (λ_min = +0.65), while
Newton from that point on an independent sample of the same size, and of 4 and 8 times the
size, converged within 0.006 to strict saddles (λ_min = −3.3, −7.3, −8.5).

:func:`check_index` re-solves each point on an independent sample ``factor`` times larger and
reads its index there; the chapter's saddle verdict uses that index, and shows both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._internal import validation as check
from .charts import MultiRegionChart, newton
from .multi_critical import EIG_TOL, MIN_CELL_MASS, MultiCriticalPoint, TeacherSearch
from .profiled import ProfiledObjective


@dataclass(frozen=True)
class IndexCheck:
    """One critical point of the search's sample, re-solved on an independent larger one."""

    point: MultiCriticalPoint
    n: int                 # the independent sample's size
    converged: bool        # Newton on the independent sample reached |∇L̄_τ| < tol
    moved: float           # chart distance from the point found to the re-solved one
    lam_min: float         # smallest Hessian eigenvalue there (NaN when not converged)
    lam_scale: float       # max(1, max |λ|) there: the scale of "zero curvature"

    @property
    def strict(self) -> bool:
        """A direction of negative curvature on the independent sample (a strict saddle or a
        local maximum there, as :attr:`MultiCriticalPoint.kind` decides on the search's)."""
        return self.converged and self.lam_min < -EIG_TOL * self.lam_scale

    @property
    def agrees(self) -> bool:
        """The same answer to "strict?" on both samples."""
        found = self.point.kind in ("strict saddle", "local maximum")
        return self.converged and self.strict == found


def check_index(search: TeacherSearch, tau: float, seed: int, *, factor: int = 4,
                steps: int = 25, tol: float = 1e-7, radius: float = 0.05) -> tuple:
    """Every non-teacher critical point of ``search`` at ``tau``, re-solved by capped Newton on
    an independent scrambled-Sobol sample of ``factor`` × the search's size (``seed``: not the
    search's own nor its evaluation sample's), as :class:`IndexCheck` records (in the order
    found).  The re-solved point is the same critical point when Newton converges within
    ``radius`` of it (chart distance; the default is above the displacements measured between
    the `paper` profile's samples and the 4× ones, 0.006–0.028); otherwise the point is not
    ``converged``: its index is not resolved on that sample.  Two points of the search's
    sample may be found again as one (measured: two saddles 0.003 apart at τ = 0.003 that the
    4× sample resolves as a single strict saddle)."""
    check.instance("search", search, TeacherSearch, "a TeacherSearch")
    tau = check.temperature("tau", tau)
    seed = check.integer("seed", seed, low=0)
    factor = check.integer("factor", factor, low=1)
    steps = check.integer("steps", steps, low=1)
    tol, radius = check.positive("tol", tol), check.positive("radius", radius)
    pts = [c for c in search.points if c.tau == tau and not c.teacher]
    if not pts:
        return ()
    obj = ProfiledObjective(search.teacher, factor * len(search.obj.X), seed)
    chart = MultiRegionChart(obj.K, obj.d)
    phi, ok, _, _, H = newton(chart.second(obj, tau, min_cell_mass=MIN_CELL_MASS),
                              np.stack([c.phi for c in pts]), chart, steps=steps,
                              step_cap=min(0.2, max(0.02, 3 * tau)), tol=tol)
    out = []
    for i, c in enumerate(pts):
        moved = float(chart.distance(c.phi, phi[i]))
        good = bool(ok[i]) and moved <= radius
        ev = np.linalg.eigvalsh(H[i]) if good else np.array([np.nan])
        out.append(IndexCheck(point=c, n=len(obj.X), converged=good, moved=moved,
                              lam_min=float(ev[0]),
                              lam_scale=max(1.0, float(np.abs(ev).max())) if good else 1.0))
    return tuple(out)
