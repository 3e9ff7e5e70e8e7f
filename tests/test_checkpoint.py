"""A checkpoint's price counts the steps after it (`analysis/checkpoint.py`, the io.checkpoint rule)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.checkpoint import AFTER_STEPS, save_cost
from pinchpoint.analysis.steps import step_stats
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import facts
from pinchpoint.report.phrases import say
from pinchpoint.stats.ranks import slower_p
from pinchpoint.trace.run import Interval, Phase, RankData, Step, StepKind

MS = 1_000_000


def _steps(
    n: int, every: int, save_ms: float, after_ms: tuple[float, ...], jitter: bool = True
) -> list[Step]:
    """50 ms steps (a little jitter); every `every`-th also saves for `save_ms`, and the steps after a
    save run `after_ms[k]` longer (the write-back)."""
    out, t = [], 0
    last_save = None
    for i in range(n):
        dur = 50 * MS + ((i * 7919) % 5) * MS // 10 if jitter else 50 * MS
        intervals = [Interval(phase=Phase.FORWARD, start_ns=t, end_ns=t + 20 * MS)]
        saving = i % every == every - 1
        if last_save is not None and 0 < i - last_save <= len(after_ms):
            dur += round(after_ms[i - last_save - 1] * MS)
        if saving:
            intervals.append(
                Interval(phase=Phase.CHECKPOINT_IO, start_ns=t + dur, end_ns=t + dur + round(save_ms * MS))
            )
            dur += round(save_ms * MS)
            last_save = i
        out.append(Step(index=i, kind=StepKind.TRAIN, start_ns=t, end_ns=t + dur, intervals=tuple(intervals)))
        t += dur
    return out


def test_the_steps_after_a_save_are_its_cost_too() -> None:
    steps = _steps(80, 8, 100, (60, 30, 10))
    cost = save_cost(steps)
    assert cost is not None and cost.saves == 10 and cost.every == 8
    assert cost.save_ns == 100 * MS and cost.p_slower < 0.001
    assert cost.after_ns == pytest.approx(100 * MS, rel=0.05)  # 60 + 30 + 10 ms over the typical step
    # the run's time: 80 steps of 50 ms, 10 saves of 100 ms and their 100 ms after
    assert cost.after_share == pytest.approx(1000 / (4000 + 2000), rel=0.05)


def test_steps_after_a_save_as_fast_as_the_others_add_nothing() -> None:
    cost = save_cost(_steps(80, 8, 100, ()))
    assert cost is not None and cost.after_ns == 0 and cost.p_slower > 0.05


def test_nothing_to_compare_when_every_step_saves_or_none_does() -> None:
    assert save_cost(_steps(40, 1, 100, ())) is None
    assert save_cost(_steps(40, 1000, 100, ())) is None
    assert save_cost(_steps(2 * (AFTER_STEPS + 1), 2, 100, (50,))) is None  # no step far from a save


def test_the_rank_test_reads_ranks() -> None:
    assert slower_p([10, 11, 12], [1, 2, 3, 4, 5]) < 0.05
    assert slower_p([1, 2, 3], [10, 11, 12, 13]) > 0.95
    assert slower_p([5], [5, 5, 5]) == pytest.approx(0.5)
    assert slower_p([], [1]) == 1.0


def test_the_finding_prices_the_save_and_its_aftermath() -> None:
    steps = _steps(80, 8, 100, (60, 30, 10))
    rank = RankData(rank=0, steps=tuple(steps))
    stats = step_stats(rank)
    assert stats is not None
    base = make_rank_analysis({"forward": 20}, 30)
    analysis = replace(base, steps=stats, saves=save_cost(steps))
    found = diagnose(make_run_analysis(make_env(cores=2), [analysis])).findings
    (f,) = [f for f in found if f.id == "io.checkpoint"]
    inside = stats.share(Phase.CHECKPOINT_IO.value)
    assert f.share > inside + 0.1  # the aftermath (100 ms per save) counted, not only torch.save's
    assert f.estimated_speedup == pytest.approx(1 / (1 - f.share))
    line = say(facts(f)["io.checkpoint.after"])
    assert "after each of the 10 saves" in line and "one every 8 steps" in line, line
