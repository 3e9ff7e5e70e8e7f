"""Exposed time per phase, the steps used for statistics, and the step statistics themselves."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MS, make_step, make_steps, ns
from pinchpoint.analysis.steps import WARMUP_STEPS, exposed_by_phase, steady_steps, step_stats
from pinchpoint.trace.run import HOST_OTHER, PHASE_PRIORITY, Interval, Phase, RankData, Step, StepKind


def _step(start: int, end: int, *intervals: tuple[str, int, int]) -> Step:
    return Step(
        index=0,
        kind=StepKind.TRAIN,
        start_ns=start,
        end_ns=end,
        intervals=tuple(Interval(phase=Phase(p), start_ns=s, end_ns=e) for p, s, e in intervals),
    )


# ------------------------------------------------------------------------------------ exposed_by_phase


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        pytest.param(_step(0, 100), {HOST_OTHER: 100}, id="no-intervals-all-host-other"),
        pytest.param(
            _step(0, 100, ("data_wait", 0, 20), ("forward", 20, 50), ("backward", 50, 90)),
            {"data_wait": 20, "forward": 30, "backward": 40, HOST_OTHER: 10},
            id="back-to-back-remainder-is-host-other",
        ),
        pytest.param(
            _step(0, 100, ("forward", 0, 100), ("checkpoint_io", 40, 60)),
            {"forward": 80, "checkpoint_io": 20, HOST_OTHER: 0},
            id="nested-checkpoint-beats-forward",
        ),
        pytest.param(
            _step(0, 100, ("data_wait", 0, 30), ("forward", 20, 60)),
            {"data_wait": 30, "forward": 30, HOST_OTHER: 40},
            id="overlap-goes-to-data-wait",
        ),
        pytest.param(
            _step(0, 100, ("backward", 10, 90), ("sync_wait", 30, 40), ("h2d_copy", 35, 50)),
            {"backward": 60, "sync_wait": 10, "h2d_copy": 10, HOST_OTHER: 20},
            id="sync-beats-h2d-beats-backward",
        ),
        pytest.param(
            _step(100, 200, ("data_wait", 50, 130), ("optimizer", 180, 260)),
            {"data_wait": 30, "optimizer": 20, HOST_OTHER: 50},
            id="clipped-to-the-step",
        ),
        pytest.param(
            _step(100, 200, ("forward", 0, 90), ("forward", 210, 300)),
            {HOST_OTHER: 100},
            id="intervals-outside-the-step-ignored",
        ),
        pytest.param(
            _step(0, 100, ("forward", 10, 40), ("forward", 20, 60)),
            {"forward": 50, HOST_OTHER: 50},
            id="same-phase-overlap-counted-once",
        ),
        pytest.param(
            _step(0, 100, ("forward", 30, 30), ("backward", 30, 70)),
            {"backward": 40, HOST_OTHER: 60},
            id="zero-length-interval-ignored",
        ),
        pytest.param(
            _step(0, 100, ("optimizer", 0, 100), ("backward", 0, 100), ("forward", 0, 100)),
            {"backward": 100, HOST_OTHER: 0},
            id="identical-spans-highest-priority-wins",
        ),
        pytest.param(
            # optimizer.step(closure): the closure's forward and backward inside the optimizer's call
            _step(0, 100, ("optimizer", 0, 100), ("forward", 10, 30), ("backward", 30, 70)),
            {"optimizer": 40, "forward": 20, "backward": 40, HOST_OTHER: 0},
            id="a-closure-inside-the-optimizer-is-forward-and-backward",
        ),
    ],
)
def test_exposed_by_phase(step: Step, expected: dict[str, int]) -> None:
    got = exposed_by_phase(step)
    assert got == expected
    assert sum(got.values()) == step.dur_ns


def test_phase_priority_covers_every_phase_once() -> None:
    assert sorted(p.value for p in PHASE_PRIORITY) == sorted(p.value for p in Phase)
    # Blocking waits come before the work they interrupt.
    order = [p.value for p in PHASE_PRIORITY]
    assert order.index("sync_wait") < order.index("forward")
    assert order.index("data_wait") < order.index("forward")
    assert order.index("checkpoint_io") < order.index("optimizer")


def test_exposed_by_phase_keeps_exact_nanoseconds() -> None:
    start = 1_796_038_565_138_964_113  # wall-clock-sized, odd: would not survive a float or a µs round
    step = _step(start, start + 1_000_001, ("forward", start + 1, start + 333_334))
    got = exposed_by_phase(step)
    assert got == {"forward": 333_333, HOST_OTHER: 666_668}
    assert all(isinstance(v, int) for v in got.values())


_phases = st.sampled_from([p.value for p in Phase])
_iv = st.tuples(_phases, st.integers(-50, 1050), st.integers(0, 400))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(_iv, max_size=8), st.integers(0, 1000))
def test_exposed_by_phase_properties(raw: list[tuple[str, int, int]], dur: int) -> None:
    step = _step(0, dur, *[(p, s, s + d) for p, s, d in raw])
    got = exposed_by_phase(step)
    assert sum(got.values()) == dur
    assert all(v >= 0 for v in got.values())
    # Each phase's exposed time is at most the length of its own clipped union, and the
    # highest-priority phase present keeps all of its union.
    unions: dict[str, int] = {}
    for phase in {p for p, _, _ in raw}:
        covered = {t for p, s, d in raw if p == phase for t in range(max(0, s), min(dur, s + d))}
        unions[phase] = len(covered)
    for phase, exposed in got.items():
        if phase != HOST_OTHER:
            assert exposed <= unions[phase]
    present = [p for p in PHASE_PRIORITY if unions.get(p.value)]
    if present:
        assert got.get(present[0].value, 0) == unions[present[0].value]
    all_covered = {t for _, s, d in raw for t in range(max(0, s), min(dur, s + d))}
    assert got[HOST_OTHER] == dur - len(all_covered)


# -------------------------------------------------------------------------------------- steady_steps


def _indices(steps: list[Step]) -> list[int]:
    return [s.index for s in steps]


def test_steady_steps_drops_warmup() -> None:
    steps = make_steps(6, {"forward": 10})
    assert _indices(steady_steps(steps)) == list(range(WARMUP_STEPS, 6))


def test_steady_steps_drops_profiled_and_partial_and_empty() -> None:
    base = make_steps(10, {"forward": 10})
    steps = list(base)
    steps[5] = make_step(5, base[5].start_ns, {"forward": 10}, profiled=True)
    steps[6] = make_step(6, base[6].start_ns, {"forward": 10}, profiled=True)
    steps[8] = Step(index=8, kind=StepKind.TRAIN, start_ns=base[8].start_ns, end_ns=base[8].start_ns)
    steps[9] = make_step(9, base[9].start_ns, {"forward": 3}, partial=True)
    assert _indices(steady_steps(steps)) == [2, 3, 4, 7]


def test_steady_steps_warmup_counts_whole_steps_only() -> None:
    # A zero-length step is not a warm-up step: the first two *whole* steps are dropped.
    steps = [Step(index=0, kind=StepKind.TRAIN, start_ns=0, end_ns=0), *make_steps(5, {"forward": 10})]
    steps = [Step(index=i, kind=s.kind, start_ns=s.start_ns, end_ns=s.end_ns) for i, s in enumerate(steps)]
    assert _indices(steady_steps(steps)) == [3, 4, 5]


def test_steady_steps_keeps_the_dominant_kind() -> None:
    train = make_steps(8, {"forward": 10}, kind=StepKind.TRAIN)
    t = train[-1].end_ns
    evals = [make_step(8 + i, t + i * 10 * MS, {"forward": 10}, kind=StepKind.INFERENCE) for i in range(3)]
    got = steady_steps([*train, *evals])
    assert {s.kind for s in got} == {StepKind.TRAIN}
    assert _indices(got) == list(range(2, 8))


def test_steady_steps_falls_back_when_only_warmup_exists() -> None:
    steps = make_steps(2, {"forward": 10})
    assert _indices(steady_steps(steps)) == [0, 1]


def test_steady_steps_falls_back_when_every_step_is_profiled() -> None:
    steps = make_steps(4, {"forward": 10}, profiled=True)
    assert _indices(steady_steps(steps)) == [0, 1, 2, 3]


def test_steady_steps_only_partial_steps() -> None:
    steps = [make_step(0, 0, {"forward": 10}, partial=True)]
    assert _indices(steady_steps(steps)) == [0]


def test_steady_steps_empty() -> None:
    assert steady_steps([]) == []
    assert steady_steps([Step(index=0, kind=StepKind.TRAIN, start_ns=5, end_ns=5)]) == []


# ---------------------------------------------------------------------------------------- step_stats


def test_step_stats_breakdown_sums_to_one_and_matches_phases() -> None:
    steps = make_steps(
        12, {"data_wait": 41, "forward": 20, "backward": 25, "optimizer": 6}, 8, cpu_ms=50, runq_ms=5
    )
    stats = step_stats(RankData(rank=0, steps=steps))
    assert stats is not None
    assert math.fsum(stats.breakdown.values()) == pytest.approx(1.0, abs=1e-9)
    assert stats.breakdown == pytest.approx(
        {"data_wait": 0.41, "forward": 0.20, "backward": 0.25, "optimizer": 0.06, HOST_OTHER: 0.08}, abs=1e-12
    )
    assert stats.phase_ns == pytest.approx(
        {"data_wait": ns(41), "forward": ns(20), "backward": ns(25), "optimizer": ns(6), HOST_OTHER: ns(8)}
    )
    assert stats.kind is StepKind.TRAIN
    assert (stats.total_steps, stats.count) == (12, 12 - WARMUP_STEPS)
    assert stats.median_ns == stats.p90_ns == ns(100)
    assert stats.mean_ns == pytest.approx(ns(100))
    assert stats.main_cpu_fraction == pytest.approx(0.5)
    assert stats.main_runq_fraction == pytest.approx(0.05)
    assert stats.start_ns == steps[WARMUP_STEPS].start_ns
    assert stats.end_ns == steps[-1].end_ns


def test_step_stats_breakdown_is_time_weighted() -> None:
    # A 100 ms step that is all data wait and a 300 ms step that is all forward: 25% / 75%.
    a = make_step(2, 0, {"data_wait": 100})
    b = make_step(3, a.end_ns, {"forward": 300})
    warm = make_steps(2, {"forward": 1}, start_ns=-10 * MS)
    stats = step_stats(RankData(rank=0, steps=(*warm, a, b)))
    assert stats is not None
    assert stats.breakdown["data_wait"] == pytest.approx(0.25, abs=1e-12)
    assert stats.breakdown["forward"] == pytest.approx(0.75, abs=1e-12)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(*(st.integers(0, 50) for _ in range(6))), min_size=3, max_size=15))
def test_step_stats_breakdown_sums_to_one_property(rows: list[tuple[int, ...]]) -> None:
    steps = []
    t = 0
    for i, (dw, fw, bw, op, ck, other) in enumerate(rows):
        s = make_step(
            i,
            t,
            {"data_wait": dw, "forward": fw, "backward": bw, "optimizer": op, "checkpoint_io": ck},
            other,
        )
        steps.append(s)
        t = s.end_ns
    stats = step_stats(RankData(rank=0, steps=tuple(steps)))
    if stats is None:
        assert all(s.dur_ns == 0 for s in steps)
        return
    if stats.breakdown:
        assert math.fsum(stats.breakdown.values()) == pytest.approx(1.0, abs=1e-9)
        assert all(0.0 <= v <= 1.0 for v in stats.breakdown.values())


@pytest.mark.parametrize(
    ("durations_ms", "median_ms", "p90_ms"),
    [
        pytest.param([10, 20, 30, 40, 50], 30, 50, id="five"),
        pytest.param([50, 10, 40, 20, 30], 30, 50, id="unsorted"),
        pytest.param([7], 7, 7, id="one"),
        pytest.param(list(range(1, 12)), 6, 10, id="eleven"),
        pytest.param([10] * 9 + [1000], 10, 10, id="one-outlier-of-ten"),
        pytest.param([10] * 8 + [1000, 1000], 10, 1000, id="two-outliers-of-ten"),
    ],
)
def test_step_stats_median_and_p90(durations_ms: list[int], median_ms: int, p90_ms: int) -> None:
    warm = make_steps(WARMUP_STEPS, {"forward": 1})
    t = warm[-1].end_ns
    steps = list(warm)
    for i, d in enumerate(durations_ms):
        s = make_step(WARMUP_STEPS + i, t, {"forward": d})
        steps.append(s)
        t = s.end_ns
    stats = step_stats(RankData(rank=0, steps=tuple(steps)))
    assert stats is not None
    assert stats.count == len(durations_ms)
    assert stats.median_ns == ns(median_ms)
    assert stats.p90_ns == ns(p90_ms)
    assert stats.mean_ns == pytest.approx(ns(sum(durations_ms) / len(durations_ms)))


def test_step_stats_cpu_fractions_need_every_step() -> None:
    steps = list(make_steps(6, {"forward": 10}, cpu_ms=5))
    steps[4] = make_step(4, steps[4].start_ns, {"forward": 10})  # no cpu_ns recorded
    stats = step_stats(RankData(rank=0, steps=tuple(steps)))
    assert stats is not None
    assert stats.main_cpu_fraction is None
    assert stats.main_runq_fraction is None


def test_step_stats_none_without_steps() -> None:
    assert step_stats(RankData(rank=0)) is None
