"""Periodic stalls found and explained by what the slow steps have in common (`analysis/stalls.py`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_steps
from pinchpoint.analysis.stalls import stalls
from pinchpoint.trace.run import Interval, Phase, Step

MS = 1_000_000


def _with_stall(steps: tuple[Step, ...], every: int, stall_ms: float, how: str) -> list[Step]:
    """Every `every`-th step runs `stall_ms` longer; the extra time is `how`'s."""
    out, shift = [], 0
    for s in steps:
        s = replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift,
                    intervals=tuple(replace(iv, start_ns=iv.start_ns + shift, end_ns=iv.end_ns + shift) for iv in s.intervals),
                    loader=0)  # fmt: skip
        if s.index % every == every - 1:
            extra = round(stall_ms * MS)
            end = s.end_ns + extra
            if how == "gc":
                s = replace(s, end_ns=end, gc_ns=extra)
            elif how in ("checkpoint", "loader"):
                phase = Phase.CHECKPOINT_IO if how == "checkpoint" else Phase.DATA_WAIT
                iv = Interval(phase=phase, start_ns=s.end_ns, end_ns=end)
                s = replace(
                    s, end_ns=end, intervals=(*s.intervals, iv), loader=s.index if how == "loader" else 0
                )
            else:
                s = replace(s, end_ns=end)
            shift += extra
        out.append(s)
    return out


@pytest.mark.parametrize(
    ("how", "cause"),
    [("gc", "gc"), ("checkpoint", "checkpoint"), ("loader", "loader"), ("python", "host_other")],
)
def test_a_stall_every_seven_steps_is_found_and_explained(how: str, cause: str) -> None:
    steps = _with_stall(make_steps(70, {"forward": 2}), 7, 150, how)
    found = stalls(steps)
    assert found is not None and found.stalls == 10 and found.every == 7 and found.cause == cause
    assert found.median_ns == 2 * MS and found.share == pytest.approx(1500 / (140 + 1500), rel=0.01)


def test_steps_that_only_spread_have_no_stall() -> None:
    steps = list(make_steps(40, {"forward": 10}))
    steps = [replace(s, end_ns=s.end_ns + (s.index % 3) * 5 * MS) for s in steps]  # 10-20 ms
    assert stalls(steps) is None
    assert stalls(_with_stall(make_steps(8, {"forward": 2}), 4, 150, "gc")) is None  # too few to tell
