"""Every analysis of a set of Kineto traces (one per rank): the one input the GPU rules read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import gpu_busy
from pinchpoint.analysis.gpu.breakdown import GpuBreakdown, gpu_breakdown
from pinchpoint.analysis.gpu.collectives import CollectiveUse, collective_use
from pinchpoint.analysis.gpu.compiled import CompiledTrace, compiled_trace
from pinchpoint.analysis.gpu.host_evidence import (
    LoaderEvidence,
    h2d_exposed_ns,
    idle_host_ops,
    loader_evidence,
    step_kind,
)
from pinchpoint.analysis.gpu.idle import GpuIdle, gpu_idle
from pinchpoint.analysis.gpu.kernels import KernelBreakdown, kernel_breakdown
from pinchpoint.analysis.gpu.launch import LaunchStats, launch_stats
from pinchpoint.analysis.gpu.memcpy import MemcpyStats, memcpy_stats
from pinchpoint.analysis.gpu.memory import MemoryStats, memory_stats
from pinchpoint.analysis.gpu.ranks import (
    RankCollectives,
    RankComparison,
    compare_collectives,
    rank_collectives,
)
from pinchpoint.analysis.gpu.steps import StepStats, dataloader_intervals, step_stats
from pinchpoint.analysis.gpu.sync import SyncStats, sync_stats
from pinchpoint.analysis.gpu.tensor_cores import TensorCoreUse, tensor_core_use
from pinchpoint.trace.kineto import KinetoTrace, TraceMeta

STEP_BREAKDOWN_KEYS = ("data_wait", "gpu_compute", "gpu_communication", "gpu_memory", "gpu_idle")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeSplit:
    """Where the steps' wall time goes, seen from the GPU, each instant counted once (sums to 1).

    `data_wait` is the DataLoader wait during which the GPU is idle too (exposed input time); `gpu_idle`
    is the rest of the GPU's idle time (host overhead, syncs, launch gaps).
    """

    window_ns: int
    fractions: dict[str, float]
    over_steps: bool
    """True when measured over the ProfilerStep ranges, False over the GPU-activity span."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRankAnalysis:
    """One rank's analysis: small and picklable (no events), so ranks can be analysed apart."""

    meta: TraceMeta
    warnings: tuple[str, ...]
    """What was skipped or repaired while reading the trace."""
    kind: str
    """"train" or "inference"."""
    loader: LoaderEvidence
    h2d_exposed_ns: int
    collectives: RankCollectives
    breakdown: GpuBreakdown | None
    idle: GpuIdle | None
    kernels: KernelBreakdown
    launch: LaunchStats
    memcpy: MemcpyStats
    sync: SyncStats
    steps: StepStats
    memory: MemoryStats
    tensor_cores: TensorCoreUse
    split: StepTimeSplit | None
    idle_host_ops: tuple[tuple[str, float], ...] = ()
    """The host ranges the GPU idled on (name, share of the idle time, self time): `idle_host_ops`."""
    compiled: CompiledTrace = field(default_factory=CompiledTrace)
    collective_use: tuple[CollectiveUse, ...] = ()
    """Collectives by kind and the phase that issued them, with their exposed time."""
    """torch.compile as the trace records it: regions, compilations, graph breaks, graph launches."""

    @property
    def rank(self) -> int:
        return self.meta.rank


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRunAnalysis:
    ranks: tuple[GpuRankAnalysis, ...]
    comparison: RankComparison | None
    matmul_flops: Mapping[str, float] | None = None
    """This machine's measured matmul FLOP/s per dtype on the GPU (`pinchpoint calibrate`), when known."""


def step_time_split(trace: KinetoTrace, steps: StepStats) -> StepTimeSplit | None:
    ev = trace.events
    if steps.steps:
        lo = min(s.start_ns for s in steps.steps)
        hi = max(s.start_ns + s.dur_ns for s in steps.steps)
    else:
        whole = gpu_breakdown(ev)
        if whole is None:
            return None
        lo, hi = whole.start_ns, whole.end_ns
    bd = gpu_breakdown(ev, (lo, hi))
    window = hi - lo
    if bd is None or window <= 0:
        return None
    loader = iv.clip(dataloader_intervals(ev), lo, hi)
    exposed = iv.total(iv.subtract(loader, gpu_busy(ev)))
    exposed = min(exposed, bd.idle_ns)
    ns = {
        "data_wait": exposed,
        "gpu_compute": bd.compute_ns,
        "gpu_communication": bd.communication_ns,
        "gpu_memory": bd.memory_ns,
        "gpu_idle": bd.idle_ns - exposed,
    }
    return StepTimeSplit(
        window_ns=window,
        fractions={k: v / window for k, v in ns.items()},
        over_steps=bool(steps.steps),
    )


def analyze_trace(trace: KinetoTrace) -> GpuRankAnalysis:
    steps = step_stats(trace)
    ev = trace.events
    breakdown, idle = gpu_breakdown(ev), gpu_idle(ev)
    return GpuRankAnalysis(
        meta=trace.meta,
        warnings=trace.warnings,
        kind=step_kind(ev),
        loader=loader_evidence(ev, idle),
        h2d_exposed_ns=h2d_exposed_ns(ev, steps, breakdown),
        collectives=rank_collectives(trace),
        breakdown=breakdown,
        idle=idle,
        kernels=kernel_breakdown(trace.events),
        launch=launch_stats(trace),
        memcpy=memcpy_stats(trace),
        sync=sync_stats(trace),
        steps=steps,
        memory=memory_stats(trace),
        tensor_cores=tensor_core_use(trace),
        split=step_time_split(trace, steps),
        idle_host_ops=idle_host_ops(ev, idle),
        compiled=compiled_trace(trace),
        collective_use=collective_use(trace),
    )


def analyze_traces(
    traces: Sequence[KinetoTrace], *, matmul_flops: Mapping[str, float] | None = None
) -> GpuRunAnalysis:
    return combine_ranks([analyze_trace(t) for t in traces], matmul_flops=matmul_flops)


def combine_ranks(
    ranks: Sequence[GpuRankAnalysis], *, matmul_flops: Mapping[str, float] | None = None
) -> GpuRunAnalysis:
    """The cross-rank reduce: ranks analysed one by one (anywhere), compared here."""
    ordered = tuple(sorted(ranks, key=lambda r: r.rank))
    comparison = None
    if len(ordered) > 1:
        try:
            comparison = compare_collectives([r.collectives for r in ordered])
        except ValueError:
            comparison = None
    return GpuRunAnalysis(ranks=ordered, comparison=comparison, matmul_flops=matmul_flops)
