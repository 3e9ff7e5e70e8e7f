"""The whole run's wall clock by segment (`analysis/run_time.py`): start-up, steps by kind, pinchpoint's
own work, the gaps no step covered, shutdown; the calls between updates (`analysis/between_updates.py`)
and each finding's gain on the whole run (`diagnosis/whole_run.py`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pinchpoint.analysis.between_updates import between_updates
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.run_time import run_time
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.whole_run import steps_share, with_run_gains
from pinchpoint.trace.run import Interval, Phase, RankData, RunMeta, Step, StepKind
from pinchpoint.trace.stacks import Frame, StackSample, TimedSample

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


def test_pinchpoints_bookkeeping_before_each_step_is_its_own_segment() -> None:
    steps = [replace(s, start_ns=s.start_ns + MS, agent_ns=MS) for s in _rollouts_and_updates()]
    whole = run_time(_meta(), RankData(rank=0, steps=tuple(steps)))
    assert whole is not None
    # 130 steps, each started 1 ms after the one before it ended: that 1 ms was pinchpoint's
    assert whole.share("pinchpoint's own work") * whole.wall_ns == pytest.approx(129 * MS, rel=1e-6)
    assert whole.share("between steps") * whole.wall_ns == pytest.approx(500 * MS, rel=1e-6)


def _sample(t: int, *files: str) -> TimedSample:
    frames = tuple(Frame(function=f"f{i}", file=f, line=1) for i, f in enumerate(files))
    return TimedSample(t_ns=t, stack=StackSample(frames=frames, count=1), cpu_ns=50 * MS, wall_ns=50 * MS)


def test_the_calls_between_updates_are_rollouts_or_evaluation_passes() -> None:
    steps = _rollouts_and_updates()
    calls = [s for s in steps if s.kind is StepKind.INFERENCE]
    # three samples in each rollout call: inside torch's Python below the loop, on the loop's own line,
    # and in the environment's code the loop calls
    torch_frame, env = "/site-packages/torch/nn/modules/module.py", "env.py"
    samples = [
        _sample(s.start_ns + k * 30 * MS + MS, "rl.py", *where)
        for s in calls
        for k, where in enumerate(((torch_frame,), (), (env,)))
    ]
    got = between_updates(RankData(rank=0, steps=tuple(steps)), samples)
    assert got is not None and got.kind == "rollouts"
    assert (got.calls, got.passes, got.ns) == (30, 10, 3000 * MS)
    assert got.batched_frac == pytest.approx(2 / 3) and got.samples == 90
    # each rollout's first update runs its 10 ms, as the others: nothing after the passes
    assert got.after_pass_ns == 0
    # the same calls, each waiting 20 ms for a DataLoader batch: evaluation passes
    waited = [
        replace(
            s, intervals=(Interval(phase=Phase.DATA_WAIT, start_ns=s.start_ns, end_ns=s.start_ns + 20 * MS),)
        )
        if s.kind is StepKind.INFERENCE
        else s
        for s in steps
    ]
    got = between_updates(RankData(rank=0, steps=tuple(waited)))
    assert got is not None and got.kind == "evaluation" and got.batched_frac is None
    # a program that never trains has no updates to be between
    assert between_updates(RankData(rank=0, steps=tuple(calls))) is None


def test_findings_are_ranked_by_their_gain_on_the_whole_run() -> None:
    whole = run_time(_meta(), RankData(rank=0, steps=tuple(_rollouts_and_updates())))
    assert whole is not None
    share = steps_share(whole)  # 1 s of updates in a 6.5 s run, 4.5 s of it the loop (start-up aside)
    assert share == pytest.approx(1000 / 4500)
    step = lambda cid, x: Finding(  # noqa: E731
        id=cid, title=Fact("rule.title", name="t"), share=0.5, estimated_speedup=x, basis=Basis.MODEL,
        confidence=Confidence.HIGH, evidence=(), fix=Fact("rule.title", name="f"),
    )  # fmt: skip
    run = replace(step(Category.RUN_ROLLOUTS, 1.3), of_run=True, run_speedup=1.3)
    rank = RankAnalysis(
        rank=0, steps=None, loader=None, cpu=None, ops=None, memory=None, main=None, run_time=whole
    )
    got = with_run_gains((step(Category.HOST_PYTHON, 3.0), step(Category.HOST_DISPATCH, 2.0), run), (rank,))
    # x3 on the steps is x1.17 on this run: the rollouts' x1.3 leads; the step findings keep their order
    assert [f.id for f in got] == [Category.RUN_ROLLOUTS, Category.HOST_PYTHON, Category.HOST_DISPATCH]
    assert got[1].run_speedup == pytest.approx(1 / ((1 - share) + share / 3))
    assert got[0].run_speedup == 1.3


def test_torch_compiles_compilations_are_their_own_segment() -> None:
    """A compiled model's first step holds its compilation: cut out as `compiling` (dynamo's records),
    the step still counted, the run still partitioned."""
    from pinchpoint.trace.compiles import Compilation, CompileRecord

    t = T0 + 6_000 * MS
    steps = [Step(index=i, kind=StepKind.TRAIN, start_ns=t + (i - 1) * 10 * MS, end_ns=t + i * 10 * MS) for i in range(1, 10)]
    steps.insert(0, Step(index=0, kind=StepKind.TRAIN, start_ns=t - 5_000 * MS, end_ns=t))  # 5 s, 4 s of it compiling
    compiles = CompileRecord(compilations=(
        Compilation(compile_id="0/0", frame="forward", site=None, start_ns=t - 4_900 * MS, dur_ns=3_000 * MS),
        Compilation(compile_id="0/0", frame=None, site=None, start_ns=t - 1_600 * MS, dur_ns=1_000 * MS),
        Compilation(compile_id="0/0", frame=None, site=None, start_ns=t - 1_100 * MS, dur_ns=500 * MS),  # overlaps
    ))  # fmt: skip
    end = steps[-1].end_ns + 100 * MS
    rank = RankData(rank=0, steps=tuple(sorted(steps, key=lambda s: s.index)), compiles=compiles)
    whole = run_time(_meta(ended_ns=end), rank)
    assert whole is not None and sum(g.ns for g in whole.segments) == whole.wall_ns
    assert [g.name for g in whole.segments] == ["start-up", "compiling", "training steps", "shutdown"]
    assert whole.share("compiling") * whole.wall_ns == pytest.approx(4_000 * MS)
    (train,) = [g for g in whole.segments if g.name == "training steps"]
    assert train.count == 10 and train.ns == 1_000 * MS + 90 * MS
