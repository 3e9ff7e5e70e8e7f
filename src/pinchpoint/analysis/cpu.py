"""How the program used the machine's cores during the steady steps, from the system samples."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.analysis.load import CLEAN_FOREIGN_CORES, ended_children, foreign_intervals, tool_cpu_s
from pinchpoint.analysis.steps import steady_steps
from pinchpoint.analysis.trial_steps import measured, reference
from pinchpoint.stats.quantiles import typical_ns
from pinchpoint.stats.ranks import mean_faster_p
from pinchpoint.trace.run import ProcSample, RankData, Run, Step, SystemSample

CONTENDED_CORES = 0.5
"""Cores' worth of CPU other processes used during the steps from which the steps count as contended:
findings measured there lose confidence, and judgements that compare steps read them as such (the
thread trial counts other processes from the same amount)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuUsage:
    window_s: float
    usable_cores: int
    process_cores: float
    """Cores' worth of CPU the whole process tree used (user + sys) on average."""
    main_cores: float
    """The same for the main (training) process alone."""
    machine_busy_cores: float
    """Cores busy machine-wide (any process), from per-core utilisation."""
    max_threads: int
    """Most threads the process tree had at once."""
    max_processes: int
    invol_switches_per_s: float
    """Involuntary context switches per second across the tree: threads preempted by others."""
    tool_cores: float = 0.0
    """Cores' worth pinchpoint itself used outside the tree (its sampler; `run --load`'s requests)."""

    @property
    def foreign_cores(self) -> float:
        """Cores' worth of CPU other processes (not the program's tree, not pinchpoint) kept busy."""
        return max(0.0, self.machine_busy_cores - self.process_cores - self.tool_cores)

    @property
    def contended(self) -> bool:
        return self.foreign_cores >= CONTENDED_CORES


def cores_busy(samples: tuple[SystemSample, ...]) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """Per process ((pid, name)): the cores it kept busy between each sampler reading and the one
    before, as (t_ns of the later reading, cores)."""
    series: dict[tuple[int, str], list[tuple[int, float]]] = {}
    prev: dict[int, tuple[int, float]] = {}
    for sample in samples:
        for p in sample.procs:
            cpu = p.user_s + p.sys_s
            last = prev.get(p.pid)
            prev[p.pid] = (sample.t_ns, cpu)
            if last is not None and sample.t_ns > last[0]:
                cores = max(0.0, (cpu - last[1]) / ((sample.t_ns - last[0]) / 1e9))
                series.setdefault((p.pid, p.name), []).append((sample.t_ns, cores))
    return series


def _bracket(samples: tuple[SystemSample, ...], start_ns: int, end_ns: int) -> list[SystemSample]:
    inside = [s for s in samples if start_ns <= s.t_ns <= end_ns]
    if len(inside) >= 2:
        return inside
    return list(samples)


def cpu_usage(
    run: Run, start_ns: int, end_ns: int, main_pid: int | None, *, clean_only: bool = False
) -> CpuUsage | None:
    """How the program and the machine used the cores between two instants; with `clean_only`, over
    the sampler intervals in which other processes kept the machine nearly to itself (the steps the
    statistics kept, `analysis/load.py`)."""
    samples = _bracket(run.system, start_ns, end_ns)
    if len(samples) < 2:
        return None
    if clean_only:
        return _clean_usage(run, samples, main_pid)
    first, last = samples[0], samples[-1]
    window_s = (last.t_ns - first.t_ns) / 1e9
    if window_s <= 0:
        return None
    before = {p.pid: p for p in first.procs}
    cpu_s = 0.0
    main_s = 0.0
    invol = 0
    for p in last.procs:
        b = before.get(p.pid)
        used = p.user_s + p.sys_s - ((b.user_s + b.sys_s) if b else 0.0)
        cpu_s += max(0.0, used)
        if p.pid == main_pid:
            main_s = max(0.0, used)
        if p.ctx_invol is not None:
            invol += max(0, p.ctx_invol - ((b.ctx_invol or 0) if b else 0))
    cpu_s += ended_children(first, last)
    busy = [
        b
        for b in (sum(s.cpu_percent_per_core) / 100.0 for s in samples[1:] if s.cpu_percent_per_core)
        if math.isfinite(b)
    ]
    return CpuUsage(
        window_s=window_s,
        usable_cores=run.environment.cpu.usable_cores,
        process_cores=cpu_s / window_s,
        main_cores=main_s / window_s,
        machine_busy_cores=sum(busy) / len(busy) if busy else 0.0,
        max_threads=max(sum(p.threads for p in s.procs) for s in samples),
        max_processes=max(len(s.procs) for s in samples),
        invol_switches_per_s=invol / window_s,
        tool_cores=tool_cpu_s(first, last) / window_s,
    )


TRIAL_RUNQ_MIN = 0.05
"""A thread trial whose main thread still waited for a CPU this share of its steps was contended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadTrialResult:
    """What the thread trial measured: the steady steps around it against its steps at `fit` threads,
    each as its typical step (`typical_ns`: the mean, pauses left out)."""

    threads: int
    fit: int
    steps: int
    trial_ns: int
    steady_ns: int
    p_faster: float = 0.0
    """Exact permutation test of the means: how likely steps this fast are by chance."""
    foreign_cores: float = 0.0
    """Cores' worth of CPU other processes used (the trial's fit left them out)."""
    trial_runq: float | None = None
    """The main thread's wait for a CPU over the trial's measured steps, as a share of them."""
    steady_runq: float | None = None
    """...and over the steady steps, at the program's thread count."""

    @property
    def speedup(self) -> float:
        return self.steady_ns / max(1, self.trial_ns)

    @property
    def contended(self) -> bool:
        """The trial did not give each thread a core: at `fit` threads on an otherwise idle machine the
        main thread still waited for a CPU as it did at the program's count (it waits 0-3% of a step at
        one thread per core, 23-46% at 16 on 2 cores). Something the samples do not attribute held the
        cores (a hypervisor's steal, a burst between samples), and the steps measure that, not the fix."""
        if self.trial_runq is None or self.steady_runq is None or self.foreign_cores >= CLEAN_FOREIGN_CORES:
            return False
        return self.trial_runq >= TRIAL_RUNQ_MIN and self.trial_runq >= self.steady_runq / 2


def thread_trial(rank: RankData, steady_median_ns: int | None) -> ThreadTrialResult | None:
    """The trial's measured steps (whole ones) against the steady steps around it; None without one."""
    trial = rank.thread_trial
    if trial is None or not steady_median_ns:
        return None
    taken = measured(rank.steps, trial.steps)
    durs = [s.dur_ns for s in taken]
    if not durs:
        return None
    steady = steady_steps(rank.steps)
    _, near = reference(steady, trial.steps, steady_median_ns)
    return ThreadTrialResult(
        threads=trial.threads, fit=trial.fit, steps=len(durs), trial_ns=typical_ns(durs),
        steady_ns=typical_ns(near), p_faster=mean_faster_p(durs, near), foreign_cores=trial.foreign_cores,
        trial_runq=_runq_share(taken), steady_runq=_runq_share(steady),
    )  # fmt: skip


def _runq_share(steps: Sequence[Step]) -> float | None:
    """The main thread's wait for a CPU over these steps, as a share of their time (None: not recorded)."""
    if not steps or any(s.runq_ns is None for s in steps):
        return None
    return sum(s.runq_ns or 0 for s in steps) / max(1, sum(s.dur_ns for s in steps))


def _clean_usage(run: Run, samples: list[SystemSample], main_pid: int | None) -> CpuUsage | None:
    """`cpu_usage` summed over the consecutive sample pairs whose interval ran clean."""
    window_s = cpu_s = main_s = busy_s = tool_s = 0.0
    invol = 0
    clean = {iv.end_ns for iv in foreign_intervals(samples) if iv.foreign_cores < CLEAN_FOREIGN_CORES}
    for prev, cur in itertools.pairwise(samples):
        dt = (cur.t_ns - prev.t_ns) / 1e9
        busy = sum(cur.cpu_percent_per_core) / 100.0 if cur.cpu_percent_per_core else math.nan
        if dt <= 0 or not math.isfinite(busy):
            continue
        before = {p.pid: p for p in prev.procs}
        used = {p.pid: max(0.0, p.user_s + p.sys_s - _cpu(before.get(p.pid))) for p in cur.procs}
        if cur.t_ns not in clean:
            continue
        window_s += dt
        cpu_s += sum(used.values()) + ended_children(prev, cur)
        main_s += used.get(main_pid, 0.0) if main_pid is not None else 0.0
        busy_s += busy * dt
        tool_s += tool_cpu_s(prev, cur)
        invol += sum(
            max(0, (p.ctx_invol or 0) - (before[p.pid].ctx_invol or 0)) for p in cur.procs if p.pid in before
        )
    if window_s <= 0:
        return None
    return CpuUsage(
        window_s=window_s,
        usable_cores=run.environment.cpu.usable_cores,
        process_cores=cpu_s / window_s,
        main_cores=main_s / window_s,
        machine_busy_cores=busy_s / window_s,
        max_threads=max(sum(p.threads for p in s.procs) for s in samples),
        max_processes=max(len(s.procs) for s in samples),
        invol_switches_per_s=invol / window_s,
        tool_cores=tool_s / window_s,
    )


def _cpu(before: ProcSample | None) -> float:
    """CPU seconds a process had used at the earlier sample (a process new since then started in the
    interval: all its CPU is the interval's)."""
    return before.user_s + before.sys_s if before is not None else 0.0
