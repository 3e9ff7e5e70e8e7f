"""The model of one profiled run: what `capture/` recorded, as typed, immutable records.

Every time is an integer number of nanoseconds on CLOCK_MONOTONIC (`*_ns`), shared by all processes
of the machine. `ingest/rundir.py` builds a `Run` from a run directory; analyses read only this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum

from pinchpoint.trace.compiles import CompileRecord
from pinchpoint.trace.generation import ContextCost
from pinchpoint.trace.parallel import FsdpConfig, PipelineConfig, TensorParallelConfig
from pinchpoint.trace.serving import BatchCosts, ModelCall, ServedLoad
from pinchpoint.trace.stacks import Stacks
from pinchpoint.trace.step import (
    HOST_OTHER as HOST_OTHER,
)
from pinchpoint.trace.step import (
    PHASE_DISPLAY as PHASE_DISPLAY,
)
from pinchpoint.trace.step import (
    PHASE_PRIORITY as PHASE_PRIORITY,
)
from pinchpoint.trace.step import (
    Interval as Interval,
)
from pinchpoint.trace.step import (  # re-exported: the step records are part of the run's model
    Phase as Phase,
)
from pinchpoint.trace.step import (
    Role as Role,
)
from pinchpoint.trace.step import (
    Step as Step,
)
from pinchpoint.trace.step import (
    StepKind as StepKind,
)
from pinchpoint.trace.trials import AllocTrial, GcRecord, ThreadTrial, TrialCut, WorkerTrial


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchBuild:
    version: str
    cuda: str | None = None
    hip: str | None = None
    mkl: bool | None = None
    mkldnn: bool | None = None
    openmp: bool | None = None
    config_flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadSettings:
    intra_op: int | None = None
    inter_op: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    """Thread-related environment variables that were set, as (name, value)."""


class FrameworkName(str, Enum):
    LIGHTNING = "lightning"
    TRANSFORMERS = "transformers"


@dataclass(frozen=True, slots=True, kw_only=True)
class Framework:
    """The training framework driving the loop (`capture/frameworks.py`) and the settings a fix names."""

    name: FrameworkName
    version: str | None = None
    settings: tuple[tuple[str, str | int | float | bool | None], ...] = ()
    via: str = "stack"
    """How it was found: `stack` (pinchpoint's own look at the loop) or `callback` (pinchpoint.integrations)."""

    def setting(self, key: str) -> str | int | float | bool | None:
        return dict(self.settings).get(key)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSite:
    """The program's `for`/`while` statement around its steps: lines `first_line`..`last_line` of
    `function` in `file` (`capture/loop_site.py`)."""

    file: str
    function: str
    qualname: str
    first_line: int
    last_line: int

    def holds(self, file: str, function: str, line: int | None) -> bool:
        """A stack frame at `line` of `function` in `file` is inside the loop's body."""
        if line is None or not self.first_line <= line <= self.last_line:
            return False
        if function not in (self.function, self.qualname) and function.rpartition(".")[2] != self.function:
            return False
        return file == self.file or os.path.realpath(file) == os.path.realpath(self.file)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessInfo:
    pid: int
    ppid: int | None
    rank: int
    role: Role
    torch: TorchBuild | None = None
    threads: ThreadSettings = field(default_factory=ThreadSettings)
    autocast_dtype: str | None = None
    """The low-precision dtype autocast was seen enabled with during a step (e.g. "bfloat16")."""
    cuda_devices: tuple[CudaDevice, ...] = ()
    loop: LoopSite | None = None
    framework: Framework | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CudaDevice:
    name: str
    capability: str | None = None
    total_memory_bytes: int | None = None
    multiprocessor_count: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderConfig:
    t_ns: int
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    batch_size: int | None
    dataset: str
    worker_pids: tuple[int, ...] = ()
    serial: int | None = None
    """The iterator's number in the process (steps name the one that fed them: `Step.loader`)."""
    site: str | None = None
    """file:line where the program built its DataLoader."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DdpConfig:
    """A model wrapped in DistributedDataParallel, as constructed (and the comm hook registered on it)."""

    t_ns: int
    backend: str
    world_size: int
    devices: tuple[str, ...]
    params: int
    grad_bytes: int
    """Bytes of gradients all-reduced per synchronised backward."""
    bucket_cap_bytes: int | None = None
    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    comm_hook: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetch:
    """One batch fetched by a loading process (dataset items plus collate)."""

    pid: int
    start_ns: int
    end_ns: int
    cpu_ns: int
    runq_ns: int | None = None
    worker_id: int | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class OpEvent:
    """One framework op from the op window (a CPU-side `torch.profiler` event)."""

    name: str
    start_ns: int
    dur_ns: int
    tid: int
    depth: int
    """Nesting depth among ops of the same thread: 0 for ops called from Python."""
    input_types: tuple[str, ...] = ()
    input_dims: tuple[tuple[int, ...], ...] = ()
    flops: int | None = None
    device_ns: int | None = None
    """GPU kernel time this op launched itself (Kineto: via `External id`); None on a CPU window."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpWindow:
    steps: int
    """How many steps the window covered."""
    start_ns: int
    end_ns: int
    ops: tuple[OpEvent, ...] = ()
    device_name: str | None = None
    """The first GPU's name in the trace's `deviceProperties` (None on a CPU program's window)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MatmulProbe:
    shape: tuple[int, int, int]
    dtype: str
    ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorGroup:
    """Live tensors with autograd history of one shape, dtype and grad_fn."""

    shape: tuple[int, ...]
    dtype: str
    grad_fn: str
    count: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveTensors:
    """Tensors reachable as Python objects at one instant between steps."""

    count: int
    bytes: int
    with_graph: int
    """Of them, tensors that carry autograd history (grad_fn): each keeps its graph alive."""
    graph_bytes: int
    graph_groups: tuple[TensorGroup, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvProbe:
    """The window's heaviest 2-D convolution (forward), timed in one dtype on this machine."""

    input: tuple[int, ...]
    weight: tuple[int, ...]
    dtype: str
    ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderTransfer:
    """One DataLoader worker passing batches shaped like the program's (`capture/loader_probe.py`)."""

    batch_bytes: int
    worker_ns: int
    """Per batch at the worker's pace (fetch a prebuilt batch, copy to shared memory, send)."""
    receive_ns: int
    """Per batch in the training process, for a batch already waiting."""
    batched_ns: int | None = None
    """One indexing call per tensor with a list of the batch's indices (a whole-batch fetch)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Probes:
    dispatch_ns_per_op: int | None = None
    matmul: tuple[MatmulProbe, ...] = ()
    page_fault_ns: int | None = None
    """Wall-clock cost of one minor page fault on a fresh tensor, with the program's threads."""
    memory_bytes_per_s: float | None = None
    """Bytes read + written per second copying a large tensor on this machine, at the op window."""
    live_before: LiveTensors | None = None
    """Tensors alive when the op window began (between two steps)."""
    live_after: LiveTensors | None = None
    """... and when it ended, `window_steps` steps later."""
    window_steps: int | None = None
    loader_transfer: LoaderTransfer | None = None
    conv: tuple[ConvProbe, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RankData:
    rank: int
    steps: tuple[Step, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    loaders: tuple[LoaderConfig, ...] = ()
    fetches: tuple[Fetch, ...] = ()
    opwindow: OpWindow | None = None
    probes: Probes = field(default_factory=Probes)
    ddp: tuple[DdpConfig, ...] = ()
    fsdp: FsdpConfig | None = None
    pipeline: PipelineConfig | None = None
    tensor_parallel: TensorParallelConfig | None = None
    thread_trial: ThreadTrial | None = None
    alloc_trial: AllocTrial | None = None
    worker_trial: WorkerTrial | None = None
    trial_cut: TrialCut | None = None
    gc: GcRecord | None = None
    compiles: CompileRecord | None = None
    batch_costs: BatchCosts | None = None
    """A served model's call at batch 1, 2, 4, ... (`run --load`'s batch probe, at the server's exit)."""
    other_calls: tuple[ModelCall, ...] = ()
    """Under `run --load`: top-level model calls on threads other than the main one, in time order."""
    context_cost: ContextCost | None = None
    """A generation loop's call with its context and with one token (the context probe, at exit)."""

    @property
    def main(self) -> ProcessInfo | None:
        return next((p for p in self.processes if p.role is Role.MAIN), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcSample:
    pid: int
    ppid: int | None
    name: str
    user_s: float
    sys_s: float
    rss_bytes: int
    threads: int
    ctx_vol: int | None = None
    ctx_invol: int | None = None
    read_bytes: int | None = None
    write_bytes: int | None = None
    runq_s: float | None = None
    """Seconds its threads have waited, runnable, for a CPU so far (all threads' schedstat)."""
    cuser_s: float | None = None  # user time of its children that ended (a compiler inductor ran)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    index: int
    util_percent: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSample:
    t_ns: int
    cpu_percent_per_core: tuple[float, ...] = ()
    machine_user_s: float | None = None  # user + nice CPU seconds of the whole machine, so far
    tool_user_s: float | None = None
    """pinchpoint's own CPU outside the program's tree so far (user seconds; `tool_sys_s` system): the
    sampler and the launcher, which sends `run --load`'s requests. Not other programs' work."""
    tool_sys_s: float | None = None
    procs: tuple[ProcSample, ...] = ()
    gpus: tuple[GpuSample, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuInfo:
    model: str
    logical_cores: int
    physical_cores: int | None
    usable_cores: int
    flags: tuple[str, ...] = ()
    matrix_units: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    cpu: CpuInfo
    memory_bytes: int | None = None
    os: str = ""
    python: str = ""
    hostname: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attach:
    """`pinchpoint attach`: the program ran before and after; this run covers `duration_s` of it."""

    pid: int
    duration_s: float
    ended: str | None
    """"detached" (it runs on), "exited" (it ended during the attach), "interrupted", None (in progress)."""
    restored: int | None  # patches the agent put back when it detached (None: it did not confirm)
    left: tuple[str, ...] = ()  # what stayed: hooks left registered and inert, attributes not put back


@dataclass(frozen=True, slots=True, kw_only=True)
class RunMeta:
    command: tuple[str, ...]
    started_at: str
    cwd: str = ""
    wall_time_ns: int = 0
    monotonic_ns: int = 0
    ended_at: str | None = None
    ended_ns: int | None = None
    """When the program ended, on the monotonic clock (the launcher's reading)."""
    exit_code: int | None = None
    signal: str | None = None
    world_size: int = 1
    mode: str = "run"
    attach: Attach | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    meta: RunMeta
    environment: Environment
    ranks: tuple[RankData, ...] = ()
    system: tuple[SystemSample, ...] = ()
    stacks: Stacks | None = None
    """Python stack samples of the whole process tree (`pinchpoint run --stacks`)."""
    native: Stacks | None = None
    """Native stack samples (perf: symbol as `Frame.function`, DSO as `Frame.file`, thread id as
    `StackSample.thread`, weight the sample's period) of the process tree (`pinchpoint run --native`)."""
    warnings: tuple[str, ...] = ()
    """Problems met while reading the run directory (truncated files, missing parts)."""
    served: ServedLoad | None = None
    """The load `run --load` sent the program (a server), request by request."""
