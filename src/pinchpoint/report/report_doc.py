"""`report.json` (schema `pinchpoint.report/1`) as typed, frozen documents: what `pinchpoint run`,
`report`, `analyze` and `pinchpoint.profile()` hand back, and what every renderer reads.

Built once by `report/build.py`; `to_dict()` is the JSON, `ReportDoc.from_dict` reads a file back, and
`pinchpoint schema report` prints the JSON Schema the files validate against (DESIGN.md, "Report
contract"). A field made with `optional()` appears only in reports that have it (`run_time` in runs
pinchpoint ran, `gpu` where a device timeline was read); the others are always there, null when unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pinchpoint.report.document import Document, JsonSchema, json_schema, named, optional
from pinchpoint.report.serving_doc import ServingInfo
from pinchpoint.trace.run import Attach

SCHEMA = "pinchpoint.report/1"
SCHEMA_ID = "https://pinchpoint.dev/schema/report-1.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """The program (or the traces) the report is of, and how its run ended."""

    mode: str | None = optional(doc="`analyze` for a report of profiler files")
    command: tuple[str, ...]
    source: str | None = optional()
    traces: tuple[str, ...] | None = optional()
    exit_code: int | None
    signal: str | None
    started_at: str | None
    ended_at: str | None
    world_size: int
    complete: bool
    attach: Attach | None = optional(
        doc="`pinchpoint attach`: the process, how long, how it ended, what stayed"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuInfo:
    model: str
    logical_cores: int
    physical_cores: int | None
    usable_cores: int
    flags: tuple[str, ...]
    matrix_units: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuInfo:
    name: str
    capability: str | None
    memory_bytes: int | None
    sm_count: int | None
    vendor: str | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchBuild:
    """The program's torch, as its process saw it."""

    version: str
    cuda: str | None
    hip: str | None
    mkl: bool | None
    mkldnn: bool | None
    openmp: bool | None
    config: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchVersion:
    """A trace's torch: its version alone."""

    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadsInfo:
    intra_op: int | None
    inter_op: int | None
    env: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkInfo:
    name: str
    version: str | None
    settings: Mapping[str, Any]
    via: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderSettings:
    """The settings of the DataLoader that fed the steady steps."""

    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    batch_size: int | None
    site: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderUse:
    """One DataLoader by the place it was built: its settings, iterators made, whether it fed steps."""

    site: str | None
    dataset: str | None
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    iterators: int
    feeds_steps: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    cpu: CpuInfo | None
    memory_bytes: int | None = optional()
    gpus: tuple[GpuInfo, ...]
    torch: TorchBuild | TorchVersion | None
    threads: ThreadsInfo | None
    autocast: str | None
    python: str | None
    os: str | None = optional()
    framework: FrameworkInfo | None = optional()
    dataloader: LoaderSettings | None
    dataloaders: tuple[LoaderUse, ...] | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsInfo:
    """The steady steps: their kind, how many, their time (ms)."""

    kind: str | None
    count: int
    total: int | None = optional()
    median_ms: float | None
    mean_ms: float | None = optional()
    p90_ms: float | None
    eval_count: int | None = optional()
    timed_on: str | None = optional(doc="`gpu` when the steps were timed on the device")
    host_median_ms: float | None = optional()
    host_mean_ms: float | None = optional()
    missing: str | None = optional(doc="why no step was recorded, and how to mark them")


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentHot:
    function: str
    share: float
    inside: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentCode:
    on_cpu: float
    imports: float
    top: tuple[SegmentHot, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    name: str
    s: float
    share: float
    steps: int
    code: SegmentCode | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTimeInfo:
    """The whole run's wall clock by segment."""

    wall_s: float
    ended: bool
    segments: tuple[Segment, ...]
    checkpoint_s: float
    pinchpoint_s: float
    unattributed_share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RssInfo:
    first_mib: float
    last_mib: float
    slope_mib_per_step: float
    r2: float
    steps: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CudaMemoryInfo:
    peak_allocated_mib: float
    peak_reserved_mib: float
    last_allocated_mib: float
    device_total_mib: float | None
    steps: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryInfo:
    rss: RssInfo | None = optional()
    cuda: CudaMemoryInfo | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class HotFunction:
    function: str
    share: float
    calls_into: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StackScope:
    samples: int
    seconds: float | None
    top: tuple[HotFunction, ...]
    within: str | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeKernel:
    kernel: str
    isa: str | None
    share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeInfo:
    samples_weight: int
    shares: Mapping[str, float]
    threads: int
    busy_threads: int
    kernels: tuple[NativeKernel, ...]
    isa_shares: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadInfo:
    """Which steady steps ran beside other processes' work, and whether the statistics left them out."""

    steps: int
    clean_steps: int
    foreign_cores_loaded: float
    loaded_slowdown: float | None
    clean_only: bool
    trials_not_read: tuple[str, ...]
    window_steps_not_read: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineOp:
    op: str
    shape: tuple[int, ...]
    dtype: str
    calls_per_step: float
    ms_per_step: float
    gflop_per_step: float
    mb_per_step: float
    flops_per_byte: float
    achieved_gflops: float
    attainable_gflops: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Roofline:
    source: str
    timed_by: str
    matmul_peak_gflops: Mapping[str, float]
    memory_gb_per_s: float | None
    ops: tuple[RooflineOp, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankInfo:
    rank: int
    steps: StepsInfo
    breakdown: Mapping[str, float]
    memory: MemoryInfo | None
    stacks: Mapping[str, StackScope] | None = optional()
    native: NativeInfo | None = optional()
    load: LoadInfo | None = optional()
    roofline: Roofline | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleCauses:
    host_wait: float
    kernel_wait: float
    other: float


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRow:
    name: str
    work: str = named("class")
    count: int
    total_ms: float
    share_of_busy: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorCores:
    status: str
    gemm_conv_share: float
    on_tensor_cores_share: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledRegion:
    region: str = named("region", doc="`X/Y`: frame X's compilation Y (Y > 0: a recompile)")
    calls: int
    host_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledInfo:
    """torch.compile as the trace records it."""

    regions: tuple[CompiledRegion, ...]
    compilations: int
    recompilations: int
    compiling_ms: float
    graph_breaks: int
    resumed_frames: tuple[int, ...]
    fell_back: tuple[str, ...] = named(
        "fell_back", doc="compilations that never ran, after which their frame ran eagerly"
    )
    cache_lookups: int
    cache_lookup_ms: float
    graph_launches: int
    graph_kernels: int = named(
        "graph_kernels", doc="kernels replayed by the graph launches (each counted as a kernel)"
    )
    graph_kernel_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRow:
    kind: str
    phase: str
    count: int
    total_ms: float
    exposed_ms: float = named("exposed_ms", doc="the part no compute kernel overlapped")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSection:
    """One rank's device timeline: where the GPU's time went, its top kernels."""

    rank: int
    span_ms: float
    compute: float
    communication: float
    memory: float
    idle: float
    comm_overlap: float | None
    no_gpu_activity: bool | None = optional()
    idle_causes: IdleCauses | None = optional()
    top_kernels: tuple[KernelRow, ...] | None = optional()
    tensor_cores: TensorCores | None = optional()
    window_steps: StepsInfo | None = optional()
    window_breakdown: Mapping[str, float] | None = optional()
    compiled: CompiledInfo | None = optional()
    collectives: tuple[CollectiveRow, ...] | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class Range:
    low: float
    high: float
    basis: str | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class FindingInfo:
    """One bottleneck: its share of the step, what its fix gains, the evidence, the fix."""

    id: str
    title: str
    share: float
    estimated_speedup: float
    estimate_basis: str
    confidence: str
    evidence: tuple[str, ...]
    fix: str
    ranks: tuple[int, ...]
    snippet: str | None = optional()
    next_limit: str | None = optional()
    fix_kind: str | None = optional()
    fix_params: Mapping[str, int] | None = optional()
    framework_fix: str | None = optional()
    estimate_without_load: Range | None = optional()
    estimate_as_was: Range | None = optional()
    share_of: str | None = optional(
        doc="`run` when the share is of the whole run, `request` of a served request's time (and the gain its "
        "throughput's), not of a step"
    )
    estimated_run_speedup: float | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class OpWindowTaken:
    rank: int
    request: int
    start_step: int | None
    steps: int | None
    at_s: float | None
    kept: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpWindowRefused:
    rank: int
    request: int
    refused: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportDoc(Document):
    """pinchpoint's report of one run or one set of profiler files."""

    schema: str
    run: RunInfo
    environment: Environment
    steps: StepsInfo
    breakdown: Mapping[str, float]
    run_time: RunTimeInfo | None = optional()
    serving: ServingInfo | None = optional(doc="a server's load (`run --load`) and its model calls meanwhile")
    ranks: tuple[RankInfo, ...]
    gpu: tuple[GpuSection, ...] | None = optional()
    findings: tuple[FindingInfo, ...]
    notes: tuple[str, ...]
    warnings: tuple[str, ...]
    stack_files: tuple[str, ...] | None = optional()
    op_windows: tuple[OpWindowTaken | OpWindowRefused, ...] | None = optional()
    history_id: int | None = optional(doc="the run's id in the history database (not in the file)")

    @property
    def title(self) -> str:
        return " ".join(self.run.command) or "program"


def report_schema() -> JsonSchema:
    """The JSON Schema of report.json."""
    return json_schema(ReportDoc, title="pinchpoint report", schema_id=SCHEMA_ID)
