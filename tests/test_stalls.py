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


def test_the_stalled_steps_code_is_named_from_the_stack_samples() -> None:
    """Samples every 10 ms on the main thread: inside the stalls they sit in the epoch-end function,
    elsewhere in the loop; the stalls' code names the former, by its share of the stalls' samples."""
    from pinchpoint.trace.stacks import Frame, StackSample, TimedSample

    steps = _with_stall(make_steps(70, {"forward": 2}), 7, 150, "python")
    loop = StackSample(
        frames=(Frame("<module>", "/w/train.py", 30), Frame("train_step", "/w/train.py", 12)), count=0
    )
    epoch = StackSample(
        frames=(Frame("<module>", "/w/train.py", 31), Frame("end_epoch", "/w/train.py", 20)), count=0
    )
    slow = [(s.start_ns, s.end_ns) for s in steps if s.dur_ns > 100 * MS]
    t0, t1 = steps[0].start_ns, steps[-1].end_ns
    samples = [
        TimedSample(
            t_ns=t, stack=epoch if any(a <= t < b for a, b in slow) else loop, cpu_ns=0, wall_ns=10 * MS
        )
        for t in range(t0, t1, 10 * MS)
    ]
    found = stalls(steps, samples, "/w")
    assert found is not None and found.code is not None
    assert found.code.top[0].label == "end_epoch (train.py:20)" and found.code.top[0].share == 1.0
    assert stalls(steps).code is None  # (no samples: nothing named)


def test_a_named_cause_is_kept_beside_more_stalls_of_another() -> None:
    """Beside a busy core, barrier waits stretched other steps too: the epochs' new DataLoader
    iterators (10 of 24 stalls) are still named beside the python-held majority."""
    steps = _with_stall(make_steps(70, {"forward": 2}), 7, 150, "loader")
    held = {3, 4, 5, 12, 13, 18, 25, 26, 33, 38, 45, 46, 59, 66}
    steps = [replace(s, end_ns=s.end_ns + 100 * MS) if s.index in held else s for s in steps]
    found = stalls(steps)
    assert found is not None and found.cause == "host_other"
    assert found.also == "loader" and found.also_stalls == 10


def test_a_named_cause_that_leads_without_explaining_half_is_kept() -> None:
    """Beside a load the stalls split three ways: the epochs' new iterators lead (10 of 23) but explain
    less than half, so no single cause is named; they are still said as the one with a fix."""
    steps = _with_stall(make_steps(70, {"forward": 2}), 7, 150, "loader")
    held = {3, 4, 5, 12, 13, 18, 25}
    gc_held = {26, 33, 38, 45, 46, 59, 66}
    steps = [replace(s, end_ns=s.end_ns + 100 * MS) if s.index in held else s for s in steps]
    steps = [replace(s, end_ns=s.end_ns + 100 * MS, gc_ns=60 * MS) if s.index in gc_held else s for s in steps]
    found = stalls(steps)
    assert found is not None and found.cause == "mixed" and found.explained == pytest.approx(10 / 23)
    assert found.also == "loader" and found.also_stalls == 10
