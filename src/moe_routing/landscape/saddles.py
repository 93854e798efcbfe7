"""Which non-teacher critical points of the soft objective are strict saddles (paper B,
Theorem 5.17, second conclusion), and which are explained by a failure of its hypothesis.

The theorem is conditional: *if* the hard profiled problem has favourable geometry (no
spurious minimum, strict saddles away from the teacher), *then* for small τ every critical
point of ``L̄_τ`` that does not match the teacher's partition has a direction of negative
curvature. A :class:`SaddleTally` counts, at the smallest temperature searched, the non-teacher
critical points found, those with ``λ_min < 0`` (strict saddles; local maxima count), and, for
the two-region model where the hard critical points are known exactly, those without negative
curvature that continue a spurious local minimum of the *hard* objective — the hypothesis fails
there, so the theorem says nothing about them. Any other point without negative curvature at
small τ is a counter-example to the conclusion.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._internal import validation as check
from .critical_points import TWO_REGION, CriticalPoint, SoftCriticalPoint
from .multi_critical import MultiCriticalPoint


@dataclass(frozen=True)
class SaddleTally:
    """Non-teacher critical points of ``L̄_τ`` (a result record): counts at the smallest
    temperature searched ``tau``, and over all temperatures the τ with a point without negative
    curvature and the largest τ at and below which points were found and every one has one
    (``None``: no such τ)."""

    name: str
    tau: float
    n_points: int              # non-teacher critical points found at tau
    n_strict: int              # ... with λ_min < 0
    n_inherited: int           # ... with λ_min ≥ 0 that continue a spurious hard minimum
    nonstrict_taus: tuple      # every τ with a non-teacher point with λ_min ≥ 0
    strict_below: float | None

    @property
    def n_unexplained(self) -> int:
        return self.n_points - self.n_strict - self.n_inherited


def _tally(name, taus, rows) -> SaddleTally:
    """rows: (τ, strict?, inherited?) per non-teacher point."""
    tau = min(taus)
    small = [r for r in rows if r[0] == tau]
    nonstrict = sorted({r[0] for r in rows if not r[1]}, reverse=True)
    clean = [t for t in taus if any(r[0] <= t for r in rows) and all(r[1] for r in rows if r[0] <= t)]
    return SaddleTally(name=name, tau=tau, n_points=len(small), n_strict=sum(r[1] for r in small),
                       n_inherited=sum((not r[1]) and r[2] for r in small),
                       nonstrict_taus=tuple(nonstrict), strict_below=max(clean) if clean else None)


def track_hard_points(points, hard_points, taus, radius: float = 0.25) -> list[list]:
    """For each critical point of the hard objective, the nearest non-teacher critical point of
    ``L̄_τ`` within ``radius`` (chart distance) at each τ, or ``None``: how the hard critical
    points continue as soft ones. Returns one list (len(taus)) per hard point."""
    pts = _points("points", points, SoftCriticalPoint)
    hard = _points("hard_points", hard_points, CriticalPoint)
    taus = sorted(check.temperatures("taus", taus).tolist(), reverse=True)
    radius = check.positive("radius", radius)
    tracks = []
    for c in hard:
        row = []
        for t in taus:
            near = [(TWO_REGION.distance(r.point.phi, c.phi), i) for i, r in enumerate(pts)
                    if r.tau == t and not r.point.teacher]
            near = [x for x in near if x[0] < radius]
            row.append(pts[min(near)[1]] if near else None)
        tracks.append(row)
    return tracks


def _points(name, points, kind):
    ok = isinstance(points, (list, tuple)) and all(isinstance(c, kind) for c in points)
    check.require(ok, name, points, f"a list of {kind.__name__}")
    return list(points)


def two_region_tally(points, hard_points, taus, radius: float = 0.25,
                     name: str = "K = 2, d = 2") -> SaddleTally:
    """:class:`SaddleTally` of the two-region model: a point without negative curvature is
    *inherited* when it lies within ``radius`` of a spurious local minimum of ``L̄_0`` (where
    hypothesis (i) of the theorem fails)."""
    pts = _points("points", points, SoftCriticalPoint)
    hard = _points("hard_points", hard_points, CriticalPoint)
    taus = sorted(check.temperatures("taus", taus).tolist(), reverse=True)
    radius = check.positive("radius", radius)
    check.instance("name", name, str, "a teacher's name, a string")
    spurious = [c for c in hard if not c.teacher and c.hess_eigs[0] > 0]
    rows = []
    for r in pts:
        if r.point.teacher:
            continue
        inherited = any(TWO_REGION.distance(r.point.phi, c.phi) < radius for c in spurious)
        rows.append((r.tau, bool(r.point.hess_eigs[0] < 0), inherited))
    return _tally(name, taus, rows)


def multi_region_tally(points, taus, name: str) -> SaddleTally:
    """:class:`SaddleTally` of a K-region teacher (the hard landscape is not known there, so no
    point counts as inherited: the hypothesis is not checked)."""
    pts = _points("points", points, MultiCriticalPoint)
    taus = sorted(check.temperatures("taus", taus).tolist(), reverse=True)
    check.instance("name", name, str, "a teacher's name, a string")
    rows = [(c.tau, c.kind in ("strict saddle", "local maximum"), False)
            for c in pts if not c.teacher]
    return _tally(name, taus, rows)
