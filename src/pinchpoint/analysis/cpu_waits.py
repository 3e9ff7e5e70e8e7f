"""How long a step would take without the other processes' load, when that load lasted the whole run.

Beside a passing load the clean steps answer (`analysis/load.py`); beside one that never stops (a
colleague's build, a shared node) no step ran alone. What the run does record is how long the training
process's threads waited, runnable, for a CPU: the main thread's per step (`Step.runq_ns`), all of its
threads' from the system sampler (`ProcSample.runq_s`, each thread's schedstat). Without the load those
waits go. Where they fall on the step's critical path is not recorded: the step loses at least the
largest of the main thread's and the other threads' waits (when one waits the other does too, at an
OpenMP barrier) and at most their sum (one after the other). That bounds the unloaded step.

Measured here (AMD EPYC, 2 vCPU, `examples/host_python.py` beside a byte-compile loop holding ~0.7 of a
core): 148 ms a step, of which the main thread waited 28 ms and all its threads 75 ms; the bounds,
73-101 ms, held the idle run's 84.5 ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.trace.run import Step, SystemSample

WAITS_MIN_SHARE = 0.05
"""Threads that waited under 5% of the step: the load cost the step too little to model."""
WAITS_MAX_SHARE = 0.9
"""Threads that waited as long as the step or longer are waiting for each other, not only for the load
(16 intra-op threads on 2 cores waited 598 ms in a 166 ms step): no model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuWaits:
    step_ns: int
    """Mean steady step, as measured (beside the load)."""
    main_ns: int
    """Of it, the main thread's wait for a CPU (mean per step)."""
    all_ns: int
    """All the training process's threads' waits for a CPU in a step's time (their rate over the steady
    steps' span, times the mean step)."""
    foreign_cores: float
    """Cores the other processes kept busy meanwhile."""

    @property
    def idle_low_ns(self) -> int:
        """The unloaded step if every wait was on the critical path, one after another."""
        return max(1, self.step_ns - self.all_ns)

    @property
    def idle_high_ns(self) -> int:
        """...and if the threads waited at the same time (the longest wait alone)."""
        return max(1, self.step_ns - max(self.main_ns, self.all_ns - self.main_ns))


def cpu_waits(
    steady: Sequence[Step], samples: Sequence[SystemSample], pid: int, foreign: float
) -> CpuWaits | None:
    """The waits of process `pid`'s threads over the steady steps; None without the sampler's per-thread
    waits (older run directories, another OS) or when the threads hardly waited."""
    if len(steady) < 3:
        return None
    start, end = min(s.start_ns for s in steady), max(s.end_ns for s in steady)
    seen = [
        (x.t_ns, p.runq_s)
        for x in samples
        if start <= x.t_ns <= end
        for p in x.procs
        if p.pid == pid and p.runq_s is not None
    ]
    if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
        return None
    rate = max(0.0, (seen[-1][1] - seen[0][1]) * 1e9 / (seen[-1][0] - seen[0][0]))
    step = statistics.fmean(s.dur_ns for s in steady)
    main = statistics.fmean(s.runq_ns or 0 for s in steady)
    waits = CpuWaits(
        step_ns=int(step), main_ns=int(main), all_ns=int(max(main, rate * step)), foreign_cores=foreign
    )
    if waits.all_ns < WAITS_MIN_SHARE * step or waits.all_ns >= WAITS_MAX_SHARE * step:
        return None
    return waits
