"""The whole run's wall clock by segment (`analysis/run_time.py`): start-up, steps by kind, pinchpoint's
probes, the gaps no step covered, shutdown."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pinchpoint.analysis.run_time import run_time
from pinchpoint.trace.run import Interval, Phase, RankData, RunMeta, Step, StepKind

MS = 1_000_000
T0 = 1_000 * MS


def _meta(**kw: object) -> RunMeta:
    return RunMeta(command=("python", "rl.py"), started_at="", monotonic_ns=T0, **kw)  # type: ignore[arg-type]


def _rollouts_and_updates() -> list[Step]:
    """After 2 s of start-up: 10 iterations of a 300 ms rollout (inference steps) then 10 updates of 10 ms
    with a 50 ms gap no step covers."""
    out, t, i = [], T0 + 2_000 * MS, 0
    for _ in range(10):
        for _ in range(3):
            out.append(Step(index=i, kind=StepKind.INFERENCE, start_ns=t, end_ns=t + 100 * MS))
            t, i = t + 100 * MS, i + 1
        t += 50 * MS
        for _ in range(10):
            save = (
                (Interval(phase=Phase.CHECKPOINT_IO, start_ns=t + 5 * MS, end_ns=t + 8 * MS),)
                if i % 13 == 0
                else ()
            )
            out.append(Step(index=i, kind=StepKind.TRAIN, start_ns=t, end_ns=t + 10 * MS, intervals=save))
            t, i = t + 10 * MS, i + 1
    return out


def test_a_run_whose_rollouts_outweigh_its_updates() -> None:
    steps = _rollouts_and_updates()
    end = steps[-1].end_ns + 500 * MS
    whole = run_time(_meta(ended_ns=end), RankData(rank=0, steps=tuple(steps)))
    assert whole is not None and whole.ended
    assert whole.wall_ns == end - T0
    names = [g.name for g in whole.segments]
    # (no-grad calls of a model that trains, before or after its updates: rollouts, not inference)
    assert names == ["start-up", "training steps", "evaluation and rollouts", "between steps", "shutdown"]
    assert sum(g.ns for g in whole.segments) == whole.wall_ns  # a partition of the run
    rollouts = "evaluation and rollouts"
    assert whole.share(rollouts) == pytest.approx(3000 / 7000) and whole.largest.name == rollouts
    assert whole.share("training steps") == pytest.approx(1000 / 7000)
    assert [g.count for g in whole.segments if g.count] == [100, 30]
    assert whole.share("between steps") == pytest.approx(500 / 7000)
    assert whole.checkpoint_ns == 3 * MS * sum(1 for s in steps if s.intervals)


def test_the_gaps_before_pinchpoints_window_are_its_own_and_a_killed_run_ends_at_its_last_step() -> None:
    steps = _rollouts_and_updates()
    steps = [replace(s, profiled=True) if s.index in (42, 43) else s for s in steps]
    whole = run_time(_meta(), RankData(rank=0, steps=tuple(steps)))
    assert whole is not None and not whole.ended and whole.wall_ns == steps[-1].end_ns - T0
    assert "shutdown" not in [g.name for g in whole.segments]
    # the 50 ms gap before step 42 (the first update of the 4th iteration) was pinchpoint's
    assert whole.share("pinchpoint's own work") == pytest.approx(50 / 6500)
    assert whole.share("between steps") == pytest.approx(450 / 6500)


def test_nothing_to_say_without_the_launchers_clock_steps_or_a_start() -> None:
    steps = tuple(_rollouts_and_updates())
    assert run_time(_meta(), RankData(rank=0)) is None
    assert run_time(replace(_meta(), monotonic_ns=0), RankData(rank=0, steps=steps)) is None
    assert run_time(replace(_meta(), mode="attach"), RankData(rank=0, steps=steps)) is None
    assert run_time(replace(_meta(), monotonic_ns=steps[5].start_ns), RankData(rank=0, steps=steps)) is None
