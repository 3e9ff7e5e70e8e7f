"""How the program used the machine's cores during the steady steps, from the system samples."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pinchpoint.analysis.rank_test import mean_faster_p, measured, reference, typical_ns
from pinchpoint.analysis.steps import steady_steps
from pinchpoint.trace.run import RankData, Run, SystemSample

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

    @property
    def foreign_cores(self) -> float:
        """Cores' worth of CPU other processes (not the program's tree) kept busy."""
        return max(0.0, self.machine_busy_cores - self.process_cores)

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


def cpu_usage(run: Run, start_ns: int, end_ns: int, main_pid: int | None) -> CpuUsage | None:
    samples = _bracket(run.system, start_ns, end_ns)
    if len(samples) < 2:
        return None
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
    )


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

    @property
    def speedup(self) -> float:
        return self.steady_ns / max(1, self.trial_ns)


def thread_trial(rank: RankData, steady_median_ns: int | None) -> ThreadTrialResult | None:
    """The trial's measured steps (whole ones) against the steady steps around it; None without one."""
    trial = rank.thread_trial
    if trial is None or not steady_median_ns:
        return None
    durs = [s.dur_ns for s in measured(rank.steps, trial.steps)]
    if not durs:
        return None
    _, near = reference(steady_steps(rank.steps), trial.steps, steady_median_ns)
    return ThreadTrialResult(
        threads=trial.threads, fit=trial.fit, steps=len(durs), trial_ns=typical_ns(durs),
        steady_ns=typical_ns(near), p_faster=mean_faster_p(durs, near), foreign_cores=trial.foreign_cores,
    )  # fmt: skip
