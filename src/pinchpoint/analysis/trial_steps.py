"""The steps a trial is priced against: its own measured steps, and the steady steps around it."""

from __future__ import annotations

from collections.abc import Sequence

from pinchpoint.trace.run import Step

BRACKET = 6
"""Steady steps on each side of a trial that price it."""
BRACKET_MIN = 4
"""Fewer steady steps around the trial: the run's steady median prices it."""


def bracket(steps: Sequence[Step], trial: Sequence[int], n: int = BRACKET) -> list[int]:
    """Durations of the `n` steady steps nearest before and after a trial's steps (fewer at the run's
    ends): a slow drift of the machine or the program moves them with the trial's, unlike the run's
    median."""
    first, last = min(trial), max(trial)
    usable = [s for s in steps if s.dur_ns > 0]
    before = [s.dur_ns for s in usable if s.index < first][-n:]
    after = [s.dur_ns for s in usable if s.index > last][:n]
    return before + after


def bracket_steps(steady: Sequence[Step], trial: Sequence[int], between: Sequence[Step] = ()) -> list[Step]:
    """The steps `bracket` reads around a trial whose blocks have `between` steps among them."""
    indices = [*trial, *(s.index for s in between)]
    first, last = min(indices), max(indices)
    usable = [s for s in steady if s.dur_ns > 0]
    return [s for s in usable if s.index < first][-BRACKET:] + [s for s in usable if s.index > last][:BRACKET]


def measured(steps: Sequence[Step], indices: Sequence[int]) -> list[Step]:
    """The whole steps (not partial, timed) among a trial's `indices`."""
    wanted = set(indices)
    return [s for s in steps if s.index in wanted and not s.partial and s.dur_ns > 0]


def reference(
    steady: Sequence[Step], trial: Sequence[int], steady_median_ns: int, between: Sequence[Step] = ()
) -> tuple[int, list[int]]:
    """(median, durations) a trial is priced against: the steps `between` its blocks and the steady
    steps around it, when there are `BRACKET_MIN` of them; else the run's steady median and steps."""
    near = sorted([s.dur_ns for s in between] + bracket(steady, [*trial, *(s.index for s in between)]))
    if len(near) >= BRACKET_MIN:
        return near[len(near) // 2], near
    return steady_median_ns, [s.dur_ns for s in steady if s.dur_ns > 0]
