"""Steps beside a passing load (analysis/load.py): which ran clean, and the statistics from those alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_env, make_process, make_steps, ns
from pinchpoint.analysis.load import CLEAN_MIN_STEPS, foreign_intervals, split_by_load
from pinchpoint.analysis.run_analysis import analyze_rank
from pinchpoint.analysis.steps import step_stats
from pinchpoint.diagnosis.finding import NoteKind
from pinchpoint.diagnosis.notes import context_notes
from pinchpoint.trace.run import (
    OpEvent,
    OpWindow,
    ProcSample,
    RankData,
    Run,
    RunMeta,
    Step,
    SystemSample,
    WorkerTrial,
)

PID = 100
SAMPLE_MS = 500


def _samples(
    end_ms: float, foreign: list[float], program_cores: float = 1.0, cores: int = 2, kernel_cores: float = 0.0
) -> tuple[SystemSample, ...]:
    """Samples every 0.5 s: the program's process uses `program_cores` (user time); other processes
    `foreign[k]` in interval k (user time too), kernel threads `kernel_cores` (busy, not user time)."""
    out, cpu_s, user_s = [], 0.0, 0.0
    n = int(end_ms // SAMPLE_MS) + 2
    for k in range(n):
        other = 0.0 if k == 0 else foreign[(k - 1) % len(foreign)]
        busy = 0.0 if k == 0 else min(cores, program_cores + other + kernel_cores)
        user_s += 0.0 if k == 0 else (program_cores + other) * SAMPLE_MS / 1000
        out.append(
            SystemSample(
                t_ns=ns(k * SAMPLE_MS),
                cpu_percent_per_core=tuple([busy * 100 / cores] * cores),
                machine_user_s=user_s,
                procs=(
                    ProcSample(
                        pid=PID, ppid=1, name="python", user_s=cpu_s, sys_s=0.0, rss_bytes=0, threads=4
                    ),
                ),
            )
        )
        cpu_s += program_cores * SAMPLE_MS / 1000
    return tuple(out)


def _bursty_steps(
    n: int, pattern: list[float], fast_ms: float = 50.0, slow_ms: float = 80.0
) -> tuple[Step, ...]:
    """Steps of `fast_ms` compute in clean intervals and `slow_ms` in loaded ones (pattern per 0.5 s)."""
    steps, t = [], 0
    base = make_steps(n, {"forward": fast_ms})
    for s in base:
        k = t // ns(SAMPLE_MS)
        dur = slow_ms if pattern[k % len(pattern)] >= 0.5 else fast_ms
        (one,) = make_steps(1, {"forward": dur}, start_ns=t)
        steps.append(
            Step(index=s.index, kind=one.kind, start_ns=t, end_ns=one.end_ns, intervals=one.intervals)
        )
        t = one.end_ns
    return tuple(steps)


def _run(steps: tuple[Step, ...], samples: tuple[SystemSample, ...]) -> tuple[Run, RankData]:
    rank = RankData(rank=0, steps=steps, processes=(make_process(PID),))
    run = Run(
        meta=RunMeta(command=("python", "x.py"), started_at="2026-12-05T00:00:00"),
        environment=make_env(),
        ranks=(rank,),
        system=samples,
    )
    return run, rank


BURSTY = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
"""One core busy elsewhere 2 s of every 4 s (the sampler's 0.5 s intervals)."""


def test_foreign_cores_are_the_machine_busy_less_the_programs_tree() -> None:
    samples = _samples(2000, [0.9])
    intervals = foreign_intervals(samples)
    assert intervals and all(abs(iv.foreign_cores - 0.9) < 1e-6 for iv in intervals)


def test_a_bursty_neighbours_steps_are_left_out_and_the_clean_ones_judge() -> None:
    steps = _bursty_steps(120, BURSTY)
    run, rank = _run(steps, _samples(steps[-1].end_ns / 1e6, BURSTY))
    marked, split = split_by_load(rank, run.system)
    assert split is not None and split.used
    assert split.clean >= CLEAN_MIN_STEPS and split.loaded > 0
    assert 1.4 < split.slowdown < 1.8  # 80 ms against 50 ms, interval edges aside
    stats = step_stats(marked)
    assert stats is not None and stats.median_ns == ns(50)  # the loaded 80 ms steps are left out
    assert stats.total_steps == len(steps)  # ...but still counted as steps of the run
    analysis = analyze_rank(run, rank)
    assert analysis.cpu is not None and analysis.cpu.foreign_cores < 0.25  # over the clean intervals
    notes = [n for n in context_notes((analysis,)) if n.kind is NoteKind.CONTEXT]
    assert [n.fact.key for n in notes] == ["note.clean_steps"]


def test_a_load_through_the_whole_run_is_read_as_it_was() -> None:
    steps = _bursty_steps(80, [1.0])
    run, rank = _run(steps, _samples(steps[-1].end_ns / 1e6, [0.9]))
    marked, split = split_by_load(rank, run.system)
    assert split is not None and not split.used and split.clean == 0
    assert marked is rank
    analysis = analyze_rank(run, rank)
    assert analysis.cpu is not None and analysis.cpu.foreign_cores > 0.5
    keys = [n.fact.key for n in context_notes((analysis,))]
    assert "note.shared_machine" in keys and "note.clean_steps" not in keys


def test_an_idle_run_with_a_blip_keeps_every_step() -> None:
    pattern = [0.0] * 7 + [0.6] + [0.0] * 8  # one loaded half second in eight: a blip, not a shared run
    steps = _bursty_steps(150, pattern)
    run, rank = _run(steps, _samples(steps[-1].end_ns / 1e6, pattern))
    marked, split = split_by_load(rank, run.system)
    assert split is not None and not split.used and split.loaded > 0
    assert marked is rank


def test_too_few_clean_steps_leave_the_run_as_it_was() -> None:
    pattern = [1.0] * 9 + [0.0]  # a quiet half second in five: a few steps, not the run
    steps = _bursty_steps(100, pattern)
    run, rank = _run(steps, _samples(steps[-1].end_ns / 1e6, pattern))
    _, split = split_by_load(rank, run.system)
    assert split is not None and not split.used and split.clean > 0


def _with_trial(steps: tuple[Step, ...], at: range) -> RankData:
    """The rank with the steps `at` marked as a worker trial's measured steps."""
    marked = tuple(replace(s, trial=True) if s.index in at else s for s in steps)
    return RankData(
        rank=0,
        steps=marked,
        processes=(make_process(PID),),
        worker_trial=WorkerTrial(workers=2, steps=tuple(at)),
    )


def test_a_trial_timed_during_a_burst_is_not_read() -> None:
    """A worker trial whose steps fell in a burst read x0.78 for a fix worth x1.6 (input_fetch.py beside a
    periodic job): its steps ran under another load than the clean steps it is compared with."""
    steps = _bursty_steps(120, BURSTY)
    samples = _samples(steps[-1].end_ns / 1e6, BURSTY)
    in_burst = [s.index for s in steps if s.dur_ns == ns(80)][2:7]
    marked, split = split_by_load(_with_trial(steps, range(in_burst[0], in_burst[-1] + 1)), samples)
    assert split is not None and split.trials_dropped == ("worker",) and marked.worker_trial is None
    quiet = [s.index for s in steps if s.dur_ns == ns(50)][12:17]
    kept, split = split_by_load(_with_trial(steps, range(quiet[0], quiet[-1] + 1)), samples)
    assert split is not None and split.trials_dropped == () and kept.worker_trial is not None


def test_kernel_threads_working_for_the_program_are_not_a_neighbour() -> None:
    """Writeback after each checkpoint keeps kernel threads busy (system time, not user time): that is
    the program's own cost, never a reason to leave its steps out; older run directories without the
    machine's user time read every busy core."""
    steps = _bursty_steps(120, [0.0])
    samples = _samples(steps[-1].end_ns / 1e6, [0.0], kernel_cores=0.6)
    assert all(iv.foreign_cores < 0.01 for iv in foreign_intervals(samples))
    old = tuple(replace(s, machine_user_s=None) for s in samples)
    assert all(abs(iv.foreign_cores - 0.6) < 1e-6 for iv in foreign_intervals(old))


def test_an_op_window_step_taken_by_a_burst_is_left_out_of_the_op_statistics() -> None:
    """An LBFGS fit's op window: one of its three steps ran in a burst (1665 ms against 150), and its
    ops' time hid the per-op overhead the clean steps had."""
    steps = _bursty_steps(120, BURSTY)
    samples = _samples(steps[-1].end_ns / 1e6, BURSTY)
    slow = next(i for i, s in enumerate(steps) if s.dur_ns == ns(80) and i > 2)
    window_steps = steps[slow - 2 : slow + 1]  # two clean steps, then one in the burst
    marked = tuple(replace(s, profiled=True) if s in window_steps else s for s in steps)
    ops = tuple(
        OpEvent(name="aten::mm", start_ns=s.start_ns, dur_ns=s.dur_ns // 2, tid=1, depth=0)
        for s in window_steps
    )
    window = OpWindow(steps=3, start_ns=window_steps[0].start_ns, end_ns=window_steps[-1].end_ns, ops=ops)
    rank = RankData(rank=0, steps=marked, processes=(make_process(PID),), opwindow=window)
    kept, split = split_by_load(rank, samples)
    assert split is not None and split.window_steps_dropped == 1
    assert kept.opwindow is not None and kept.opwindow.steps == 2 and kept.opwindow.ops == ops[:2]


def test_an_op_window_wholly_in_a_burst_is_read_at_the_clean_steps_pace() -> None:
    """allocator_churn's whole window ran in a burst: its elementwise ops read 88% of a clean step and
    an optimizer's chains led the planted churn. No clean window step is left, so its ops' times are
    divided by how much slower the loaded steps ran."""
    steps = _bursty_steps(120, BURSTY)
    samples = _samples(steps[-1].end_ns / 1e6, BURSTY)
    slow = next(i for i, s in enumerate(steps) if s.dur_ns == ns(80) and i > 2) + 1
    window_steps = steps[slow : slow + 3]
    assert all(s.dur_ns == ns(80) for s in window_steps)
    marked = tuple(replace(s, profiled=True) if s in window_steps else s for s in steps)
    ops = tuple(
        OpEvent(name="aten::mul", start_ns=s.start_ns, dur_ns=ns(40), tid=1, depth=0) for s in window_steps
    )
    window = OpWindow(steps=3, start_ns=window_steps[0].start_ns, end_ns=window_steps[-1].end_ns, ops=ops)
    rank = RankData(rank=0, steps=marked, processes=(make_process(PID),), opwindow=window)
    kept, split = split_by_load(rank, samples)
    assert split is not None and split.used and split.window_steps_dropped == -3
    assert kept.opwindow is not None and kept.opwindow.steps == 3
    assert all(o.dur_ns == pytest.approx(ns(40) / split.slowdown, rel=0.01) for o in kept.opwindow.ops)


def test_children_that_ended_between_samples_are_the_programs_own_work() -> None:
    """inductor compiles with short-lived compiler processes: no sample sees them, and their user time
    lands in the parent's reaped-children time (`cuser_s`). A worker seen alive and then gone moves its
    time there too, and is not counted twice."""

    def sample(t_ms: float, machine: float, procs: tuple[ProcSample, ...]) -> SystemSample:
        return SystemSample(
            t_ns=ns(t_ms), cpu_percent_per_core=(100.0, 100.0), machine_user_s=machine, procs=procs
        )

    def proc(pid: int, ppid: int, user: float, cuser: float | None) -> ProcSample:
        return ProcSample(pid=pid, ppid=ppid, name="python", user_s=user, sys_s=0.0, rss_bytes=0, threads=1,
                          cuser_s=cuser)  # fmt: skip

    # 0.5 s: the program ran 0.5 s, a compiler it spawned another 0.5 s and ended (cuser 0 -> 0.5)
    compiled = [sample(0, 0.0, (proc(PID, 1, 0.0, 0.0),)), sample(500, 1.0, (proc(PID, 1, 0.5, 0.5),))]
    assert foreign_intervals(compiled)[0].foreign_cores == pytest.approx(0.0)
    # without the reaped time recorded (older run directories) it reads as another program's core
    old = [replace(s, procs=tuple(replace(p, cuser_s=None) for p in s.procs)) for s in compiled]
    assert foreign_intervals(old)[0].foreign_cores == pytest.approx(1.0)
    # a worker seen with 0.4 s then gone: the parent's cuser grows by its 0.6 s lifetime, 0.2 s of it new
    worker = [
        sample(0, 0.0, (proc(PID, 1, 0.0, 0.0), proc(PID + 1, PID, 0.4, 0.0))),
        sample(500, 0.7, (proc(PID, 1, 0.5, 0.6),)),
    ]
    assert foreign_intervals(worker)[0].foreign_cores == pytest.approx(0.0)
    # and another program's core still reads as one
    other = [worker[0], replace(worker[1], machine_user_s=1.2)]
    assert foreign_intervals(other)[0].foreign_cores == pytest.approx(1.0)
