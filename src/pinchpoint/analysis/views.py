"""What the report's charts and timelines draw, computed once from a run: each step's exposed time by
phase, the waits, cores busy and GPU use over time, memory per step, each rank's mean step, the op
window on the roofline, and the Python stacks to draw. Renderers draw these; they analyse nothing."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.analysis.cpu import cores_busy
from pinchpoint.analysis.roofline import Ceilings, RooflinePoint, roofline_points, window_ceilings
from pinchpoint.analysis.stacks import display_path, loop_samples
from pinchpoint.analysis.steps import WARMUP_STEPS, exposed_by_phase, steady_steps
from pinchpoint.trace.run import OpWindow, Run
from pinchpoint.trace.stacks import Stacks

WAIT_PHASES = ("data_wait", "checkpoint_io", "sync_wait", "comm")
"""Phases shaded on the timelines: the program waiting rather than computing."""
WAIT_SHADE_MIN = 0.02
"""A wait is shaded when it takes at least this share of its step (shorter ones are noise at this scale)."""
MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    """One complete step of rank 0 (the lead rank)."""

    index: int
    end_ns: int
    dur_ns: int
    phases_ns: tuple[tuple[str, int], ...]
    """Exposed time per phase (each instant once)."""
    profiled: bool
    """Inside the op window."""
    trial: bool
    """Run by pinchpoint's thread trial."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    start_ns: int
    end_ns: int
    phase: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    """(x, y): monotonic ns for timelines, the step index for per-step series."""
    pid: int | None = None
    process: str = ""
    """The process's own name (its command), for a per-process series."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPhases:
    rank: int
    phase_ms: tuple[tuple[str, float], ...]
    """Mean exposed ms per phase over the rank's steady steps outside the op window."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineView:
    points: tuple[RooflinePoint, ...]
    ceilings: Ceilings
    on_device: bool
    """Ops timed by the GPU kernels they launched (against the device's ceilings), not on the CPU."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackView:
    stacks: Stacks
    in_loop: str | None
    """Where the loop is ("lines 10-30 of train.py") when only its own samples are drawn."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunViews:
    steps: tuple[StepView, ...]
    scale_ns: float
    """The typical steady step (its 90th percentile): what the steps chart is scaled to."""
    waits: tuple[Wait, ...]
    cores: tuple[Series, ...]
    gpu_util: tuple[Series, ...]
    memory: tuple[Series, ...]
    ranks: tuple[RankPhases, ...]
    roofline: RooflineView | None
    stacks: StackView | None
    process_names: dict[int, str]
    wall_offset_ns: int | None
    """Wall clock minus the monotonic clock at the run's start (None when not recorded)."""
    multi_rank: bool


def process_names(run: Run) -> dict[int, str]:
    """pid -> what the process is (training process, DataLoader worker), for the charts and stack views."""
    names: dict[int, str] = {}
    for r in run.ranks:
        rank = f"rank {r.rank} " if len(run.ranks) > 1 else ""
        for c in r.loaders:
            for i, pid in enumerate(c.worker_pids):
                names[pid] = f"{rank}DataLoader worker {i} (pid {pid})"
        if r.main is not None:
            names[r.main.pid] = f"{rank}training process (pid {r.main.pid})"
    return names


def run_views(run: Run, device_ceilings: Ceilings | None = None) -> RunViews:
    names = process_names(run)
    steps = _steps(run)
    steady = sorted(s.dur_ns for s in steps[WARMUP_STEPS:] if not s.profiled and not s.trial) or sorted(
        s.dur_ns for s in steps
    )
    return RunViews(
        steps=steps,
        scale_ns=float(steady[min(len(steady) - 1, int(0.9 * len(steady)))]) if steady else 0.0,
        waits=_waits(run),
        cores=tuple(
            Series(label=names.get(pid, f"{name} (pid {pid})"), points=tuple(pts), pid=pid, process=name)
            for (pid, name), pts in cores_busy(run.system).items()
        ),
        gpu_util=_gpu_util(run),
        memory=_memory(run),
        ranks=_rank_phases(run) if len(run.ranks) > 1 else (),
        roofline=_roofline(run, device_ceilings),
        stacks=_stacks(run),
        process_names=names,
        wall_offset_ns=run.meta.wall_time_ns - run.meta.monotonic_ns if run.meta.wall_time_ns else None,
        multi_rank=len(run.ranks) > 1,
    )


def _steps(run: Run) -> tuple[StepView, ...]:
    rank = run.ranks[0] if run.ranks else None
    return tuple(
        StepView(
            index=s.index,
            end_ns=s.end_ns,
            dur_ns=s.dur_ns,
            phases_ns=tuple(exposed_by_phase(s).items()),
            profiled=s.profiled,
            trial=s.trial,
        )
        for s in (rank.steps if rank is not None else ())
        if not s.partial
    )


def _waits(run: Run) -> tuple[Wait, ...]:
    """Every rank's waits (data, checkpoint, sync, communication) of at least WAIT_SHADE_MIN of their step."""
    return tuple(
        Wait(start_ns=iv.start_ns, end_ns=iv.end_ns, phase=iv.phase.value)
        for rank in run.ranks
        for s in rank.steps
        for iv in s.intervals
        if iv.phase.value in WAIT_PHASES and iv.dur_ns >= WAIT_SHADE_MIN * s.dur_ns
    )


def _gpu_util(run: Run) -> tuple[Series, ...]:
    series: dict[str, list[tuple[float, float]]] = {}
    for sample in run.system:
        for g in sample.gpus:
            if g.util_percent is not None:
                series.setdefault(f"GPU {g.index} busy (%)", []).append((sample.t_ns, g.util_percent))
    return tuple(Series(label=k, points=tuple(v)) for k, v in series.items())


def _memory(run: Run) -> tuple[Series, ...]:
    """Each rank's memory at the end of every step: RSS, and CUDA allocated/reserved when recorded (MiB)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for rank in run.ranks:
        tag = f"rank {rank.rank} " if len(run.ranks) > 1 else ""
        for s in rank.steps:
            for label, value in (("RSS", s.rss_bytes), ("CUDA allocated", s.cuda_allocated_bytes),
                                 ("CUDA reserved", s.cuda_reserved_bytes)):  # fmt: skip
                if value is not None:
                    series.setdefault(f"{tag}{label} (MiB)", []).append((s.index, value / MIB))
    return tuple(Series(label=k, points=tuple(v)) for k, v in series.items())


def _rank_phases(run: Run) -> tuple[RankPhases, ...]:
    rows = []
    for rank in run.ranks:
        steps = [s for s in steady_steps(rank.steps) if not s.profiled]
        if not steps:
            continue
        sums: dict[str, float] = {}
        for s in steps:
            for name, ns in exposed_by_phase(s).items():
                sums[name] = sums.get(name, 0.0) + ns / 1e6
        rows.append(RankPhases(rank=rank.rank, phase_ms=tuple((k, v / len(steps)) for k, v in sums.items())))
    return tuple(rows)


def _roofline(run: Run, device_ceilings: Ceilings | None) -> RooflineView | None:
    """Rank 0's op window on the roofline: a CPU window against its probes' ceilings, a CUDA window (ops
    timed by their kernels) against `device_ceilings`."""
    rank = run.ranks[0] if run.ranks else None
    if rank is None or rank.opwindow is None:
        return None
    ceilings = window_ceilings(rank.opwindow, rank.probes, device_ceilings)
    return roofline_view(rank.opwindow, ceilings, on_device=ceilings is device_ceilings) if ceilings else None


def roofline_view(window: OpWindow, ceilings: Ceilings, *, on_device: bool) -> RooflineView | None:
    """A window's kinds of op against `ceilings`; None when nothing can be placed."""
    points = roofline_points(window)
    if not points or not ceilings.matmul_flops:
        return None
    return RooflineView(points=tuple(points), ceilings=ceilings, on_device=on_device)


def _stacks(run: Run) -> StackView | None:
    """The Python stacks to draw: a short run's samples are mostly imports and building the model and
    data, so where the loop is known only its own samples (and the DataLoader workers') are drawn."""
    if run.stacks is None or not run.stacks.samples:
        return None
    loops = {r.main.pid: r.main.loop for r in run.ranks if r.main is not None and r.main.loop is not None}
    in_loop = loop_samples(run.stacks, loops) if loops else None
    if in_loop is None or not in_loop.samples:
        return StackView(stacks=run.stacks, in_loop=None)
    first = next(iter(loops.values()))
    where = f"lines {first.first_line}-{first.last_line} of {display_path(first.file, run.meta.cwd)}"
    return StackView(stacks=in_loop, in_loop=where)
