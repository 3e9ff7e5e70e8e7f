"""Vectorised arithmetic on sets of half-open time intervals [start, end) in integer nanoseconds.

An interval set is a pair of int64 arrays (starts, ends). `union` returns the canonical form: sorted,
disjoint, non-touching, non-empty intervals; the other functions accept any form and normalise.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Intervals = tuple[I64, I64]


def empty() -> Intervals:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def union(starts: I64, ends: I64) -> Intervals:
    """Merge overlapping or touching intervals; drops empty ones. O(n log n)."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new merged interval begins where the start lies past every earlier end.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first].astype(np.int64), run_end[last].astype(np.int64)


def total(iv: Intervals) -> int:
    """Length of the union of the intervals."""
    s, e = union(*iv)
    return int((e - s).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two interval sets (each normalised first)."""
    a_s, a_e = union(*a)
    b_s, b_e = union(*b)
    if a_s.size == 0 or b_s.size == 0:
        return empty()
    # Sweep over the 2(n+m) boundaries: covered by both where the running depth reaches 2.
    pts = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate(
        [np.ones(a_s.size), -np.ones(a_e.size), np.ones(b_s.size), -np.ones(b_e.size)]
    ).astype(np.int64)
    order = np.lexsort((delta, pts))  # at equal times, ends (-1) before starts: half-open
    pts, delta = pts[order], delta[order]
    depth = np.cumsum(delta)
    enter = np.flatnonzero(depth == 2)
    return union(pts[enter], pts[enter + 1])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of `a` not covered by `b`."""
    a_s, a_e = union(*a)
    if a_s.size == 0:
        return empty()
    b_s, b_e = union(*b)
    if b_s.size == 0:
        return a_s, a_e
    pts = np.concatenate([a_s, a_e, b_s, b_e])
    # depth_a in {0,1}, depth_b in {0,1}: encode a as +1/-1 and b as +2/-2; "a and not b" is sum == 1.
    delta = np.concatenate(
        [np.ones(a_s.size), -np.ones(a_e.size), 2 * np.ones(b_s.size), -2 * np.ones(b_e.size)]
    ).astype(np.int64)
    order = np.lexsort((delta, pts))
    pts, delta = pts[order], delta[order]
    depth = np.cumsum(delta)
    enter = np.flatnonzero(depth[:-1] == 1)
    return union(pts[enter], pts[enter + 1])


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of the intervals inside [lo, hi)."""
    s, e = iv
    return union(np.clip(s, lo, hi), np.clip(e, lo, hi))


def covered_by(points: I64, iv: Intervals) -> npt.NDArray[np.bool_]:
    """For each time point, whether it lies inside the (normalised) interval set."""
    s, e = union(*iv)
    if s.size == 0:
        return np.zeros(points.shape, dtype=bool)
    i = np.searchsorted(s, points, side="right") - 1
    ok = i >= 0
    out = np.zeros(points.shape, dtype=bool)
    out[ok] = points[ok] < e[i[ok]]
    return out
