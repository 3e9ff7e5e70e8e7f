"""Small builders for synthetic steps and analyses (run directories are written in test_rundir_ingest.py).

Builders go through the real analysis functions where that is cheap (`step_stats`, `loader_activity`,
`memory_trend`), so a test states the raw measurements and the analysis under test does the rest.
Durations are given in milliseconds for readability and stored as integer nanoseconds.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# Runs made by the tests stay out of the developer's history database (tests of the history turn it
# back on, with their own PINCHPOINT_HOME).
os.environ["PINCHPOINT_NO_HISTORY"] = "1"
# Nor do they read or fill the developer's caches (calibrated ceilings, kept machine probes): the suite
# starts from an empty pinchpoint home, as on a fresh machine (tests that need one set their own).
os.environ["PINCHPOINT_HOME"] = tempfile.mkdtemp(prefix="pinchpoint-home-")

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import neighbours
from pinchpoint.analysis.cpu import CpuUsage
from pinchpoint.analysis.gc import GcStats
from pinchpoint.analysis.loader import LoaderActivity, loader_activity
from pinchpoint.analysis.memory import MemoryTrend, PageFaults
from pinchpoint.analysis.ops import OpStats
from pinchpoint.analysis.roofline import MemoryTraffic
from pinchpoint.analysis.run_analysis import RankAnalysis, RunAnalysis
from pinchpoint.analysis.steps import step_stats
from pinchpoint.trace.run import (
    CpuInfo,
    Environment,
    Fetch,
    Interval,
    LoaderConfig,
    MatmulProbe,
    Phase,
    Probes,
    ProcessInfo,
    RankData,
    Role,
    Run,
    RunMeta,
    Step,
    StepKind,
    ThreadSettings,
)

MS = 1_000_000
MIB = 1 << 20

BUSY_ENV = "PINCHPOINT_TEST_BUSY"
"""Set to a number of processes (`scripts/test-loaded` sets 1): the whole session runs beside that many
processes spinning on a core each, as on a laptop or a shared node; or to a mode of tests/neighbours.py
(`bursty`: one core busy 2 s of every 6 s; `compile`: real work throughout). Started here, always
stopped."""


def busy_modes(value: str) -> list[str]:
    """The neighbours `PINCHPOINT_TEST_BUSY` asks for: a count of spinners, or one mode by name."""
    if value in neighbours.MODES:
        return [value]
    try:
        return ["spin"] * max(0, int(value or 0))
    except ValueError:
        return []


@pytest.fixture(scope="session", autouse=True)
def busy_neighbours() -> Iterator[int]:
    procs = [neighbours.start(mode) for mode in busy_modes(os.environ.get(BUSY_ENV, "0"))]
    try:
        yield len(procs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def ns(ms: float) -> int:
    return round(ms * MS)


# ---------------------------------------------------------------------------------------------- steps


def make_step(
    index: int,
    start_ns: int = 0,
    phases: Mapping[str, float] | None = None,
    host_other_ms: float = 0.0,
    *,
    kind: StepKind = StepKind.TRAIN,
    profiled: bool = False,
    partial: bool = False,
    cpu_ms: float | None = None,
    runq_ms: float | None = None,
    rss_bytes: int | None = None,
) -> Step:
    """A step whose phases (name -> ms) lie back to back from `start_ns`, then `host_other_ms` uncovered."""
    t = start_ns
    intervals = []
    for name, dur_ms in (phases or {}).items():
        end = t + ns(dur_ms)
        if end > t:
            intervals.append(Interval(phase=Phase(name), start_ns=t, end_ns=end))
        t = end
    end_ns = t + ns(host_other_ms)
    return Step(
        index=index,
        kind=kind,
        start_ns=start_ns,
        end_ns=end_ns,
        intervals=tuple(intervals),
        profiled=profiled,
        partial=partial,
        cpu_ns=None if cpu_ms is None else ns(cpu_ms),
        runq_ns=None if runq_ms is None else ns(runq_ms),
        rss_bytes=rss_bytes,
    )


def make_steps(
    n: int,
    phases: Mapping[str, float] | None = None,
    host_other_ms: float = 0.0,
    *,
    start_ns: int = 0,
    rss: Sequence[int] | None = None,
    **kw: Any,
) -> tuple[Step, ...]:
    """`n` identical steps, each starting where the previous one ended."""
    out = []
    t = start_ns
    for i in range(n):
        s = make_step(i, t, phases, host_other_ms, rss_bytes=rss[i] if rss else None, **kw)
        out.append(s)
        t = s.end_ns
    return tuple(out)


# ---------------------------------------------------------------------------------------- environment


def make_env(
    cores: int = 2,
    matrix_units: Sequence[str] = (),
    *,
    memory_bytes: int | None = None,
    model: str = "Test CPU",
) -> Environment:
    return Environment(
        cpu=CpuInfo(
            model=model,
            logical_cores=cores,
            physical_cores=cores,
            usable_cores=cores,
            flags=tuple(matrix_units),
            matrix_units=tuple(matrix_units),
        ),
        memory_bytes=memory_bytes,
        os="Linux",
        python="3.11.7",
    )


def make_process(
    pid: int = 100,
    *,
    intra_op: int | None = 2,
    role: Role = Role.MAIN,
    autocast: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ProcessInfo:
    return ProcessInfo(
        pid=pid,
        ppid=1,
        rank=0,
        role=role,
        threads=ThreadSettings(intra_op=intra_op, inter_op=intra_op, env=tuple(sorted((env or {}).items()))),
        autocast_dtype=autocast,
    )


# ---------------------------------------------------------------------------------------------- analyses


def make_loader(
    *,
    batches: int = 10,
    wall_ms: float = 30.0,
    cpu_fraction: float = 0.1,
    runq_fraction: float = 0.0,
    num_workers: int = 0,
    pid: int = 100,
) -> LoaderActivity:
    """Fetch activity of `batches` batches of `wall_ms` each, through the real `loader_activity`."""
    fetches = []
    t = 0
    for _ in range(batches):
        wall = ns(wall_ms)
        fetches.append(
            Fetch(
                pid=pid,
                start_ns=t,
                end_ns=t + wall,
                cpu_ns=round(wall * cpu_fraction),
                runq_ns=round(wall * runq_fraction),
            )
        )
        t += wall
    config = LoaderConfig(
        t_ns=0,
        num_workers=num_workers,
        pin_memory=False,
        prefetch_factor=None,
        persistent_workers=False,
        batch_size=32,
        dataset="Synthetic",
    )
    rank = RankData(rank=0, processes=(make_process(pid=100),), loaders=(config,), fetches=tuple(fetches))
    activity = loader_activity(rank, 0, t)
    assert activity is not None
    return activity


def make_cpu(
    *,
    cores: int = 2,
    process_cores: float = 1.0,
    machine_busy_cores: float | None = None,
    max_threads: int = 4,
    invol_switches_per_s: float = 10.0,
) -> CpuUsage:
    return CpuUsage(
        window_s=1.0,
        usable_cores=cores,
        process_cores=process_cores,
        main_cores=process_cores,
        machine_busy_cores=process_cores if machine_busy_cores is None else machine_busy_cores,
        max_threads=max_threads,
        max_processes=1,
        invol_switches_per_s=invol_switches_per_s,
    )


def make_ops(
    *,
    window_step_ms: float = 100.0,
    fp32_matmul_ms: float = 0.0,
    bf16_matmul_ms: float = 0.0,
    top_level_ops_per_step: float = 100.0,
    median_op_ns: float = 100_000.0,
    dispatch_ns_per_op: int | None = 3_000,
    loose_op_ms: float = 0.0,
    top_ops: tuple[tuple[str, float, int], ...] = (("aten::add", 1e6, 50),),
    small_ops_per_step: float = 0.0,
    large_op_ms: float | None = None,
    phase_ms: float | None = None,
    vector_matmul_ms: float = 0.0,
) -> OpStats:
    """Op-window stats; by default the window's phases are all large-tensor ops (no overhead)."""
    phase = window_step_ms if phase_ms is None else phase_ms
    matmul = {}
    if fp32_matmul_ms:
        matmul["float"] = float(ns(fp32_matmul_ms))
    if bf16_matmul_ms:
        matmul["c10::BFloat16"] = float(ns(bf16_matmul_ms))
    return OpStats(
        window_steps=3,
        window_step_ns=float(ns(window_step_ms)),
        top_level_ops_per_step=top_level_ops_per_step,
        median_top_level_op_ns=median_op_ns,
        op_ns_per_step=top_level_ops_per_step * median_op_ns,
        matmul_ns_per_step=matmul,
        matmul_flops_per_step=2e9,
        dispatch_ns_per_op=dispatch_ns_per_op,
        top_ops=top_ops,
        loose_op_ns_per_step=float(ns(loose_op_ms)),
        small_ops_per_step=small_ops_per_step,
        large_phase_op_ns_per_step=float(ns(phase if large_op_ms is None else large_op_ms)),
        vector_matmul_ns_per_step=float(ns(vector_matmul_ms)),
    )


def make_memory(
    *, slope: float, growth: int, r2: float, steps: int = 20, first: int = 500 * MIB
) -> MemoryTrend:
    return MemoryTrend(
        steps=steps, first_rss_bytes=first, last_rss_bytes=first + growth, slope_bytes_per_step=slope, r2=r2
    )


def matmul_probes(fp32_ns: int, bf16_ns: int, shape: tuple[int, int, int] = (256, 512, 512)) -> Probes:
    return Probes(
        dispatch_ns_per_op=3_000,
        matmul=(
            MatmulProbe(shape=shape, dtype="float32", ns=fp32_ns),
            MatmulProbe(shape=shape, dtype="bfloat16", ns=bf16_ns),
        ),
    )


def make_rank_analysis(
    phases: Mapping[str, float] | None = None,
    host_other_ms: float = 0.0,
    *,
    n_steps: int = 10,
    steps: tuple[Step, ...] | None = None,
    rank: int = 0,
    loader: LoaderActivity | None = None,
    cpu: CpuUsage | None = None,
    ops: OpStats | None = None,
    memory: MemoryTrend | None = None,
    main: ProcessInfo | None = None,
    workers: tuple[ProcessInfo, ...] = (),
    probes: Probes | None = None,
    cpu_ms: float | None = None,
    runq_ms: float | None = None,
    faults: PageFaults | None = None,
    traffic: MemoryTraffic | None = None,
    gc: GcStats | None = None,
    **more: Any,
) -> RankAnalysis:
    """A rank whose step statistics come from `step_stats` over `n_steps` identical synthetic steps."""
    if steps is None:
        steps = make_steps(n_steps, phases, host_other_ms, cpu_ms=cpu_ms, runq_ms=runq_ms)
    stats = step_stats(RankData(rank=rank, steps=steps))
    return RankAnalysis(
        rank=rank,
        steps=stats,
        loader=loader,
        cpu=cpu,
        ops=ops,
        memory=memory,
        main=make_process() if main is None else main,
        workers=workers,
        probes=Probes() if probes is None else probes,
        faults=faults,
        traffic=traffic,
        gc=gc,
        **more,
    )


def make_run_analysis(env: Environment, ranks: Iterable[RankAnalysis]) -> RunAnalysis:
    run = Run(
        meta=RunMeta(command=("python", "train.py"), started_at="2026-01-01T00:00:00+00:00"), environment=env
    )
    return RunAnalysis(run=run, ranks=tuple(ranks))


FINDING_DEFAULTS: dict[str, Any] = {
    "title": "a finding", "share": 0.3, "estimated_speedup": 1.4, "estimate_basis": "model",
    "confidence": "medium", "evidence": [], "fix": "the fix", "ranks": [0],
}  # fmt: skip


def report_doc(partial: Mapping[str, Any]) -> Any:
    """A whole `ReportDoc` from a few of report.json's keys, merged into a golden report's (objects key
    by key, lists replaced; each finding filled in from `FINDING_DEFAULTS`)."""
    import json
    from pathlib import Path

    from pinchpoint.report.report_doc import ReportDoc

    def merged(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, Mapping):
            return {**base, **{k: merged(base.get(k), v) for k, v in over.items()}}
        return over

    data = json.loads((Path(__file__).parent / "golden" / "two_causes.json").read_text())
    findings = partial.get("findings")
    data = merged(data, {k: v for k, v in partial.items() if k != "findings"})
    if findings is not None:
        data["findings"] = [{**FINDING_DEFAULTS, **f} for f in findings]
    return ReportDoc.from_dict(data)
