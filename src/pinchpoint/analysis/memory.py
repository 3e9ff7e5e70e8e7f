"""Memory growth step over step: a least-squares line through the main process's RSS per step."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.analysis.steps import steady_steps
from pinchpoint.analysis.trial_steps import bracket_steps, measured, reference
from pinchpoint.stats.ranks import faster_p
from pinchpoint.trace.run import Probes, RankData, Step


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTrend:
    steps: int
    first_rss_bytes: int
    last_rss_bytes: int
    slope_bytes_per_step: float
    r2: float
    """Goodness of fit of the line: near 1 for steady growth, near 0 for noise."""
    gap_bytes: int = 0
    """Growth across steps left out of the statistics (the op window, the thread trial: pinchpoint's, a
    new thread count's buffers), taken out of the trend."""
    concentration: float = 0.0
    """Share of the growth in the three largest step-to-step increases: near 1 when RSS rose in a few
    jumps (an allocator's high-water marks, a cache filled once), small when it grows every step."""
    rising: float = 0.0
    """Share of the step-to-step intervals in which RSS rose by at least a quarter of the slope: a leak
    that glibc serves in chunks (its heap grows a few MiB every few steps) rises in half of them, a
    high-water mark in one or two."""
    slope_stderr_bytes: float = 0.0
    """Standard error of the slope (least squares, from the residuals of the fitted series, n - 2
    degrees of freedom): how far RSS's noise alone could move the slope."""

    @property
    def growth_bytes(self) -> int:
        return self.last_rss_bytes - self.first_rss_bytes - self.gap_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PageFaults:
    """Minor page faults per step: the price of memory the allocator returned to the OS and re-asked for."""

    steps: int
    median_per_step: int
    median_step_ns: int
    fault_ns: int | None
    before_window: bool = False
    """Counted on the steps before the op window (the program untouched by the profiler)."""
    growth_pages_per_step: int = 0
    """Pages the process keeps each step (median RSS growth): faults for them are growth, not churn."""
    churn_median: int | None = None
    """Median over steps of (faults - pages the step added to RSS), when RSS was recorded per step."""
    main_sys_ns: int | None = None
    """Median system (kernel) time of the main thread per step, when recorded."""
    sys_ns: int | None = None
    """Median system time of the whole process per step (all threads), when recorded."""

    @property
    def churn_per_step(self) -> int:
        """Faults per step for memory that is given back and asked for again."""
        if self.churn_median is not None:
            return self.churn_median
        return max(0, self.median_per_step - self.growth_pages_per_step)

    @property
    def model_ns(self) -> int | None:
        """Churn faults × the probed cost of one fault (fresh memory, one thread)."""
        return None if self.fault_ns is None else self.churn_per_step * self.fault_ns

    @property
    def kernel_ns(self) -> int | None:
        """The step's time in the kernel that can lengthen it: the main thread's system time (faults on
        OpenMP workers overlap with the main thread's own share of a parallel region), else the
        process's."""
        return self.main_sys_ns if self.main_sys_ns is not None else self.sys_ns

    @property
    def cost_ns(self) -> int | None:
        """What the churn costs a step: the fault model, bounded by the measured kernel time (both are
        upper bounds; the probe's fresh pages fault dearer than memory the kernel just took back)."""
        model, kernel = self.model_ns, self.kernel_ns
        if model is None:
            return None
        return model if kernel is None else min(model, kernel)

    @property
    def step_share(self) -> float | None:
        """Estimated fraction of the step spent faulting pages in."""
        cost = self.cost_ns
        if cost is None or self.median_step_ns <= 0:
            return None
        return min(1.0, cost / self.median_step_ns)


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocTrialResult:
    """Steps pinchpoint ran with glibc's thresholds raised, against the steady step."""

    steps: int
    trial_median_ns: int
    steady_median_ns: int
    mmap_threshold: int
    trim_threshold: int
    faults_before: int
    trial_faults: int
    """Median minor faults of the trial's measured steps."""
    faults_after: int | None = None
    """Median minor faults of the steady steps after the trial (glibc's thresholds set back)."""
    p_faster: float = 1.0
    """One-sided rank test: the chance of trial steps this short if the fix changed nothing."""
    p_slower: float = 1.0
    """The other side: the chance of trial steps this long if the fix changed nothing."""
    kernel_saved_ns: int | None = None
    """The process's kernel (system) time a step saved in the trial against its reference steps (means;
    None where a step did not record it): what removing the faults can save at most."""

    @property
    def speedup(self) -> float:
        return self.steady_median_ns / max(1, self.trial_median_ns)

    @property
    def bounded_speedup(self) -> float:
        """The trial's speedup, its saving held to the kernel time it saved: the fix removes page faults,
        kernel work; a step that saved more wall time than that (io_checkpoint's trial read ×1.19 once,
        saving 23 ms where its faults cost ~16 ms, and its fix measured ×0.99 in whole runs) drifted."""
        saved = self.steady_median_ns - self.trial_median_ns
        if self.kernel_saved_ns is None or saved <= self.kernel_saved_ns:
            return self.speedup
        return self.steady_median_ns / max(1, self.steady_median_ns - max(0, self.kernel_saved_ns))


def alloc_trial(rank: RankData, steady_median_ns: int | None) -> AllocTrialResult | None:
    """The allocator trial's measured steps (whole ones) against the steady median; None without one."""
    trial = rank.alloc_trial
    if trial is None or not steady_median_ns:
        return None
    trial_steps = measured(rank.steps, trial.steps)
    if not trial_steps:
        return None
    durs = sorted(s.dur_ns for s in trial_steps)
    faults = sorted(s.minor_faults or 0 for s in trial_steps)
    steady = steady_steps(rank.steps)
    after = [s.minor_faults for s in steady if s.index > max(trial.steps) and s.minor_faults is not None]
    # the steps between the trial's blocks ran at the program's thresholds: reference steps too
    between = measured(rank.steps, trial.reference_steps)
    ref_ns, ref = reference(steady, trial.steps, steady_median_ns, between)
    return AllocTrialResult(
        steps=len(durs), trial_median_ns=durs[len(durs) // 2], steady_median_ns=ref_ns,
        p_faster=faster_p(durs, ref), p_slower=faster_p(ref, durs),
        mmap_threshold=trial.mmap_threshold, trim_threshold=trial.trim_threshold,
        faults_before=trial.faults_before, trial_faults=faults[len(faults) // 2],
        faults_after=_median(after) if len(after) >= AFTER_MIN_STEPS else None,
        kernel_saved_ns=_kernel_saved(trial_steps, [*between, *bracket_steps(steady, trial.steps, between)]),
    )  # fmt: skip


def _kernel_saved(trial: Sequence[Step], ref: Sequence[Step]) -> int | None:
    """Mean system time of the reference steps less the trial's (means: the kernel charges system time
    by the clock tick, so a 50 ms step's own reading is coarse and its median often 0)."""
    if not ref or any(s.sys_ns is None for s in [*trial, *ref]):
        return None
    return round(statistics.fmean(s.sys_ns or 0 for s in ref) - statistics.fmean(s.sys_ns or 0 for s in trial))


AFTER_MIN_STEPS = 5
"""Steady steps after the trial needed to compare their faults with the ones before."""


PRE_WINDOW_MIN_STEPS = 5


def page_faults(steady: Sequence[Step], window_at: int | None, fault_ns: int | None) -> PageFaults | None:
    """Faults per step, over the steady steps before the op window (first step index `window_at`)
    when there are enough of them: a profiler's own allocations move glibc's thresholds, so later
    steps may fault more or less than the program does on its own."""
    counted = [s for s in steady if s.minor_faults is not None and s.dur_ns > 0]
    before = [s for s in counted if window_at is not None and s.index < window_at]
    if len(before) >= PRE_WINDOW_MIN_STEPS:
        counted = before
    if len(counted) < 5:
        return None
    faults = sorted(s.minor_faults or 0 for s in counted)
    durs = sorted(s.dur_ns for s in counted)
    pairs = _fault_growth_pairs(counted)
    return PageFaults(
        steps=len(counted),
        median_per_step=faults[len(faults) // 2],
        median_step_ns=durs[len(durs) // 2],
        fault_ns=fault_ns,
        before_window=counted is before,
        growth_pages_per_step=_median([g for _, g in pairs]) if pairs else 0,
        churn_median=_median([max(0, f - g) for f, g in pairs]) if pairs else None,
        main_sys_ns=_median_of([s.main_sys_ns for s in counted]),
        sys_ns=_median_of([s.sys_ns for s in counted]),
    )


def _median_of(xs: Sequence[int | None]) -> int | None:
    """Median of the recorded values, None unless every step recorded one."""
    known = [x for x in xs if x is not None]
    return _median(known) if known and len(known) == len(xs) else None


def _fault_growth_pairs(steps: Sequence[Step]) -> list[tuple[int, int]]:
    """(faults, pages added to RSS) for each step whose predecessor's RSS is known: faults that map
    memory the process keeps (a leak, a growing cache) are growth, not churn. Paired per step, so a
    leak that grows in bursts is not mistaken for churn on the steps between bursts."""
    out = []
    for prev, cur in itertools.pairwise(steps):
        if prev.rss_bytes is None or cur.rss_bytes is None or cur.minor_faults is None:
            continue
        if cur.index != prev.index + 1:
            continue
        out.append((cur.minor_faults, max(0, cur.rss_bytes - prev.rss_bytes) // 4096))
    return out


def _median(xs: Sequence[int]) -> int:
    ordered = sorted(xs)
    return ordered[len(ordered) // 2]


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """(slope, intercept, r²) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0:
        return 0.0, my, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, my - slope * mx, r2


def slope_stderr(xs: Sequence[float], ys: Sequence[float], slope: float, intercept: float) -> float:
    """Standard error of a least-squares slope: the residuals' variance (n - 2 degrees of freedom)
    over the spread of x. 0.0 with fewer than three points or no spread in x."""
    n = len(xs)
    mx = sum(xs) / n if n else 0.0
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 3 or sxx == 0:
        return 0.0
    sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return math.sqrt(sse / (n - 2) / sxx)


def memory_trend(steps: Sequence[Step]) -> MemoryTrend | None:
    """RSS per steady step as a line. What RSS gained across steps left out (a gap in the indices: the op
    window, the thread trial) is taken out of the series first: those steps are pinchpoint's."""
    points = [(s.index, s.rss_bytes) for s in steps if s.rss_bytes is not None]
    if len(points) < 5:
        return None
    pairs = list(itertools.pairwise(points))
    rises = [max(0, r1 - r0) for (i0, r0), (i1, r1) in pairs if i1 - i0 == 1]
    usual = int(statistics.median(rises)) if rises else 0
    # Across a gap RSS counts as having risen as much as a usual step; the steps count as one.
    series, gap = [(0, points[0][1])], 0
    for n, ((i0, r0), (i1, r1)) in enumerate(pairs, 1):
        if i1 - i0 > 1:
            gap += r1 - r0 - usual
        series.append((n, r1 - gap))
    xs, ys = [float(x) for x, _ in series], [float(y) for _, y in series]
    slope, intercept, r2 = fit_line(xs, ys)
    grown = sum(rises)
    return MemoryTrend(
        steps=len(points),
        first_rss_bytes=points[0][1],
        last_rss_bytes=points[-1][1],
        slope_bytes_per_step=slope,
        r2=r2,
        slope_stderr_bytes=slope_stderr(xs, ys, slope, intercept),
        gap_bytes=gap,
        concentration=sum(sorted(rises)[-3:]) / grown if grown > 0 else 0.0,
        rising=sum(r >= slope / 4 for r in rises) / len(rises) if rises and slope > 0 else 0.0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupGrowth:
    shape: tuple[int, ...]
    dtype: str
    grad_fn: str
    per_step: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphGrowth:
    """How the tensors that carry autograd history grew across the op window (between-step snapshots)."""

    steps: int
    before: int
    after: int
    bytes_per_step: float
    groups: tuple[GroupGrowth, ...] = ()
    """The groups (shape, dtype, grad_fn) that grew, most per step first."""

    @property
    def per_step(self) -> float:
        return (self.after - self.before) / self.steps


def graph_growth(probes: Probes) -> GraphGrowth | None:
    before, after, steps = probes.live_before, probes.live_after, probes.window_steps
    if before is None or after is None or not steps or steps <= 0:
        return None
    counts: dict[tuple[tuple[int, ...], str, str], int] = {}
    for g in after.graph_groups:
        counts[(g.shape, g.dtype, g.grad_fn)] = counts.get((g.shape, g.dtype, g.grad_fn), 0) + g.count
    for g in before.graph_groups:
        counts[(g.shape, g.dtype, g.grad_fn)] = counts.get((g.shape, g.dtype, g.grad_fn), 0) - g.count
    grew = sorted(((k, n / steps) for k, n in counts.items() if n > 0), key=lambda kv: -kv[1])
    return GraphGrowth(
        steps=steps,
        before=before.with_graph,
        after=after.with_graph,
        bytes_per_step=(after.graph_bytes - before.graph_bytes) / steps,
        groups=tuple(GroupGrowth(shape=k[0], dtype=k[1], grad_fn=k[2], per_step=v) for k, v in grew[:3]),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CudaMemory:
    """The CUDA caching allocator over the steps (counters read at each step's end)."""

    steps: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    last_allocated_bytes: int
    device_total_bytes: int | None = None

    @property
    def reserved_fraction(self) -> float | None:
        """Peak reserved memory as a fraction of the device: near 1 means OOM risk."""
        if not self.device_total_bytes:
            return None
        return self.peak_reserved_bytes / self.device_total_bytes


def cuda_memory(steps: Sequence[Step], device_total_bytes: int | None = None) -> CudaMemory | None:
    seen = [s for s in steps if s.cuda_allocated_bytes is not None and s.cuda_reserved_bytes is not None]
    if not seen:
        return None
    return CudaMemory(
        steps=len(seen),
        peak_allocated_bytes=max(s.cuda_allocated_bytes or 0 for s in seen),
        peak_reserved_bytes=max(s.cuda_reserved_bytes or 0 for s in seen),
        last_allocated_bytes=seen[-1].cuda_allocated_bytes or 0,
        device_total_bytes=device_total_bytes,
    )
