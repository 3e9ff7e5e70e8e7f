"""Quantiles and the typical step, one definition for runs and traces alike."""

from __future__ import annotations

from collections.abc import Sequence


def nearest_rank(sorted_values: Sequence[int], q: float) -> int:
    """The value at rank round(q * (n - 1)) of values sorted ascending: a step that happened, never an
    interpolation between two."""
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


PAUSE_X = 3.0
"""A step over 3x the median is a pause (a collection, a moment the process was not scheduled): left
out of `typical_ns`."""


def typical_ns(durs: Sequence[int]) -> int:
    """The mean step, pauses left out. Not the median: beside a busy process a step that spins
    OpenMP barriers alternates fast and slow, and the median of such steps is either mode, while the
    time the run takes is their mean."""
    if not durs:
        return 0
    ordered = sorted(durs)
    median = ordered[len(ordered) // 2]
    kept = [d for d in ordered if d <= PAUSE_X * median]
    return round(sum(kept) / len(kept))
