"""Which steps ran beside other processes' work, from the system samples.

A program measured beside a passing load (a cron job, a colleague's build) has steps of two kinds: those
that had the machine to themselves and those that shared it. Mixed, their shares and estimates describe
neither machine. Each sampler interval gives the cores other processes kept busy (machine-wide busy
cores minus the program's process tree); each steady step gets the time-weighted mean over the intervals
it overlaps. When enough steps ran clean, the statistics and the findings come from those alone
(`split_by_load`), and the report says how many were left out and how much slower they ran.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pinchpoint.analysis.steps import steady_steps
from pinchpoint.trace.run import RankData, Step, SystemSample

CLEAN_FOREIGN_CORES = 0.25
"""A step ran clean when other processes kept under a quarter of a core busy during it (pinchpoint's
own sampler and an idle desktop stay far below; a compile job on the other core reads ~0.8-1.0)."""
LOADED_MIN_FRACTION = 0.1
"""The loaded steps are left out when at least a tenth of the steady steps were loaded (fewer: a blip,
which the medians the rules read already pass over)."""
CLEAN_MIN_STEPS = 5
"""At least this many clean steady steps to judge from (fewer: the run is read as it was, loaded). Few,
yet better than mixing in steps ×3 as slow: an LBFGS fit of 11 steady steps, 2 of them in a burst
(×3.2), had its per-op overhead judged inside their spread and not reported."""
CLEAN_MIN_FRACTION = 0.2
"""...and at least a fifth of the steady steps (a few quiet moments in a loaded run are not the run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    start_ns: int
    end_ns: int
    foreign_cores: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSplit:
    """How a rank's steady steps divide between a quiet machine and a shared one."""

    steps: int
    clean: int
    """Steady steps during which other processes kept under `CLEAN_FOREIGN_CORES` busy."""
    foreign_loaded: float
    """Mean cores other processes kept busy during the other (loaded) steps."""
    clean_median_ns: int
    loaded_median_ns: int
    used: bool
    """The statistics and findings come from the clean steps alone (enough of them, in a run that was
    shared): the loaded steps are marked `disturbed` and left out."""
    trials_dropped: tuple[str, ...] = ()
    """Trials (`thread`, `alloc`, `worker`) left unread: their steps ran under another load."""
    window_steps_dropped: int = 0
    """Op-window steps whose ops were left out: they ran under another load than the steps kept. Negative
    when the whole window did: then its ops' times were divided by the loaded steps' slowdown."""

    @property
    def loaded(self) -> int:
        return self.steps - self.clean

    @property
    def slowdown(self) -> float:
        """How much slower the loaded steps ran than the clean ones (median against median)."""
        return self.loaded_median_ns / max(1, self.clean_median_ns)


def foreign_intervals(samples: Sequence[SystemSample]) -> list[Interval]:
    """Per sampler interval: the cores other programs kept busy. Where the sampler recorded the machine's
    user time, other programs' user time (the machine's less the program's tree's): kernel threads'
    work is left out, since writeback after a checkpoint and reclaim are work done for the program
    itself. Else every busy core less the tree's (older run directories)."""
    out: list[Interval] = []
    for prev, cur in itertools.pairwise(samples):
        dt = (cur.t_ns - prev.t_ns) / 1e9
        if dt <= 0 or not cur.cpu_percent_per_core:
            continue
        before = {p.pid: p for p in prev.procs}
        if cur.machine_user_s is not None and prev.machine_user_s is not None:
            busy = (cur.machine_user_s - prev.machine_user_s) / dt
            own = sum(max(0.0, p.user_s - (b.user_s if (b := before.get(p.pid)) else 0.0)) for p in cur.procs)
            own += ended_children(prev, cur) + tool_cpu_s(prev, cur, user_only=True)
        else:
            busy = sum(cur.cpu_percent_per_core) / 100.0
            own = sum(
                max(0.0, p.user_s + p.sys_s - ((b.user_s + b.sys_s) if (b := before.get(p.pid)) else 0.0))
                for p in cur.procs
            )  # (a process new since the last sample started in the interval: all its CPU is in it)
            own += tool_cpu_s(prev, cur)
        if math.isfinite(busy):
            out.append(Interval(start_ns=prev.t_ns, end_ns=cur.t_ns, foreign_cores=max(0.0, busy - own / dt)))
    return out


def tool_cpu_s(prev: SystemSample, cur: SystemSample, *, user_only: bool = False) -> float:
    """CPU seconds pinchpoint itself used outside the program's tree between two samples (its sampler,
    and `run --load`'s requests from the launcher): counted with the program's, not as another's."""
    if cur.tool_user_s is None or prev.tool_user_s is None:
        return 0.0
    used = cur.tool_user_s - prev.tool_user_s
    if not user_only and cur.tool_sys_s is not None and prev.tool_sys_s is not None:
        used += cur.tool_sys_s - prev.tool_sys_s
    return max(0.0, used)


def ended_children(prev: SystemSample, cur: SystemSample) -> float:
    """User time the tree's processes' children that ended in the interval ran and no sample saw: the
    parents' waited-for children's time (`cuser_s`) less what the samples had already counted of those
    that were seen (inductor's compiler processes live well under a sampling interval: their work read
    as another program's, a core's worth beside a compiled model's recompiles)."""
    before = {p.pid: p for p in prev.procs}
    now = {p.pid for p in cur.procs}
    grown = sum(
        max(0.0, (p.cuser_s or 0.0) - ((b.cuser_s or 0.0) if (b := before.get(p.pid)) else 0.0))
        for p in cur.procs
        if p.cuser_s is not None
    )
    seen = sum(q.user_s + (q.cuser_s or 0.0) for q in prev.procs if q.pid not in now and q.ppid in now)
    return max(0.0, grown - seen)


def step_foreign(step: Step, intervals: Sequence[Interval]) -> float | None:
    """Time-weighted mean foreign cores over the intervals the step overlaps (None: no sample covers it)."""
    weight = total = 0.0
    for iv in intervals:
        overlap = min(iv.end_ns, step.end_ns) - max(iv.start_ns, step.start_ns)
        if overlap > 0:
            weight += overlap
            total += overlap * iv.foreign_cores
    return total / weight if weight > 0 else None


def split_by_load(rank: RankData, samples: Sequence[SystemSample]) -> tuple[RankData, LoadSplit | None]:
    """The rank with its loaded steady steps marked `disturbed` when enough ran clean in a shared run,
    and without the trials whose steps ran under another load than the steps they are priced against
    (a worker trial timed during a burst read x0.78 for a fix worth x1.6); else the rank unchanged. The
    split is None when the samples cannot tell (too few, or no step covered)."""
    steady = steady_steps(rank.steps)
    intervals = foreign_intervals(samples)
    foreign = {id(s): step_foreign(s, intervals) for s in rank.steps}
    known = {s.index: f for s in steady if (f := foreign[id(s)]) is not None}
    if len(known) < CLEAN_MIN_STEPS:
        return rank, None
    durs = {s.index: s.dur_ns for s in steady}
    clean = [i for i, f in known.items() if f < CLEAN_FOREIGN_CORES]
    loaded = [i for i, f in known.items() if f >= CLEAN_FOREIGN_CORES]
    used = len(loaded) >= LOADED_MIN_FRACTION * len(known) and len(clean) >= max(
        CLEAN_MIN_STEPS, CLEAN_MIN_FRACTION * len(known)
    )
    if used:
        out = {id(s) for s in steady if known.get(s.index, 0.0) >= CLEAN_FOREIGN_CORES}
        rank = replace(
            rank, steps=tuple(replace(s, disturbed=True) if id(s) in out else s for s in rank.steps)
        )
    split = LoadSplit(
        steps=len(known),
        clean=len(clean),
        foreign_loaded=statistics.fmean(known[i] for i in loaded) if loaded else 0.0,
        clean_median_ns=int(statistics.median(durs[i] for i in clean)) if clean else 0,
        loaded_median_ns=int(statistics.median(durs[i] for i in loaded)) if loaded else 0,
        used=used,
    )
    reference = statistics.fmean(known[i] for i in (clean if used else known))
    rank, dropped = _drop_disturbed_trials(rank, foreign, reference)
    rank, window_left = _drop_disturbed_window_steps(
        rank, foreign, reference, split.slowdown if used else 1.0
    )
    split = replace(split, trials_dropped=dropped, window_steps_dropped=window_left)
    return rank, split


def _drop_disturbed_window_steps(
    rank: RankData, foreign: dict[int, float | None], reference: float, slowdown: float
) -> tuple[RankData, int]:
    """The rank with the op window's ops recorded in a step that ran `CLEAN_FOREIGN_CORES` more or less
    loaded than the steps the statistics keep left out (and the window's step count lowered to match),
    while at least one window step remains: an LBFGS fit's window step taken by a burst ran 1665 ms
    against 150, and its ops' time hid the per-op overhead the clean steps had."""
    window = rank.opwindow
    profiled = [s for s in rank.steps if s.profiled and not s.partial]
    if window is None or not profiled:
        return rank, 0
    spans = [
        (s.start_ns, s.end_ns)
        for s in profiled
        if (f := foreign[id(s)]) is not None and abs(f - reference) >= CLEAN_FOREIGN_CORES
    ]
    if not spans:
        return rank, 0
    if len(spans) >= min(len(profiled), window.steps):
        # The whole window ran beside the load: its ops' times are read at the clean steps' pace, as
        # the loaded steps ran `slowdown` times as long (allocator_churn's window in a burst read its
        # elementwise ops at 88% of a clean step, and an optimizer's chains led the planted churn)
        if slowdown <= 1.0:
            return rank, 0
        ops = tuple(replace(o, dur_ns=round(o.dur_ns / slowdown)) for o in window.ops)
        return replace(rank, opwindow=replace(window, ops=ops)), -len(spans)
    ops = tuple(o for o in window.ops if not any(a <= o.start_ns < b for a, b in spans))
    return replace(rank, opwindow=replace(window, ops=ops, steps=window.steps - len(spans))), len(spans)


def _drop_disturbed_trials(
    rank: RankData, foreign: dict[int, float | None], reference: float
) -> tuple[RankData, tuple[str, ...]]:
    """The rank without the trials one of whose measured steps ran `CLEAN_FOREIGN_CORES` more or less
    loaded than the steps the statistics keep (`reference`: their mean foreign cores)."""
    by_index = {s.index: foreign[id(s)] for s in rank.steps if s.trial}

    def disturbed(steps: Sequence[int]) -> bool:
        seen = [f for i in steps if (f := by_index.get(i)) is not None]
        return any(abs(f - reference) >= CLEAN_FOREIGN_CORES for f in seen)

    dropped = []
    if rank.thread_trial is not None and disturbed(rank.thread_trial.steps):
        rank = replace(rank, thread_trial=None)
        dropped.append("thread")
    if rank.alloc_trial is not None and disturbed(rank.alloc_trial.steps):
        rank = replace(rank, alloc_trial=None)
        dropped.append("alloc")
    if rank.worker_trial is not None and disturbed(rank.worker_trial.steps):
        rank = replace(rank, worker_trial=None)
        dropped.append("worker")
    return rank, tuple(dropped)
