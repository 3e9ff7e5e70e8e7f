"""Synthetic Kineto traces from a compact description of the steps, for the GPU rule tests.

A step is a sequence of phases laid end to end on one timeline (host thread and GPU together); steps
follow each other with no gap, each inside its own `ProfilerStep#k` range. Phase lengths are integer
microseconds, stored as integer nanoseconds, so every share is a ratio of whole microseconds.

Every GPU event is launched by a host call joined by `correlation`. By default the call starts
`LAUNCH_LEAD_US` before its kernel: the host issued the work just in time, so the idle gap before the
kernel is the GPU waiting for the host. `Queued` idle is the other case: the next kernel was issued long
before and the GPU waits for something else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pinchpoint.trace.kineto import (
    CopyKind,
    DeviceInfo,
    HostMemory,
    Kind,
    KinetoTrace,
    MemoryTable,
    TraceMeta,
    empty_memory,
    events_from_rows,
)

US = 1_000
GIB = 1 << 30
LAUNCH_LEAD_US = 2
LAUNCH_CALL_US = 1
HOST = {"pid": 1, "tid": 1}
STREAM = 7
SIDE_STREAM = 8
COMM_STREAM = 20

A100 = DeviceInfo(
    index=0,
    name="NVIDIA A100-SXM4-80GB",
    compute_capability=(8, 0),
    total_memory_bytes=80 * GIB,
    vendor="nvidia",
)
V100 = DeviceInfo(
    index=0,
    name="Tesla V100-SXM2-32GB",
    compute_capability=(7, 0),
    total_memory_bytes=32 * GIB,
    vendor="nvidia",
)
A100_UNLISTED = DeviceInfo(
    index=0, name="NVIDIA A800 80GB", compute_capability=(8, 0), total_memory_bytes=80 * GIB, vendor="nvidia"
)
"""An Ampere part the datasheet table does not list."""
P40 = DeviceInfo(
    index=0, name="Tesla P40", compute_capability=(6, 1), total_memory_bytes=24 * GIB, vendor="nvidia"
)

TC_GEMM = (
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize96x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
)
"""A bf16 GEMM on the Tensor Cores: the default kernel, so compute.math stays quiet unless asked."""
SGEMM_AMPERE = "ampere_sgemm_128x64_nn"
SGEMM_VOLTA = "volta_sgemm_128x64_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
SINGLE_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI_LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


@dataclass(frozen=True)
class Load:
    """The host waits in DataLoader `__next__`; `ops_us` of framework ops (transforms) run inside it, and a
    kernel issued before the wait keeps the GPU busy for its first `hidden_us`."""

    us: int
    ops_us: int = 0
    multi: bool = False
    hidden_us: int = 0


@dataclass(frozen=True)
class Gpu:
    """One kernel on stream 7, launched just before it starts."""

    us: int
    name: str = TC_GEMM


@dataclass(frozen=True)
class Gap:
    """Host work the trace does not name (Python): the GPU idles until the next launch."""

    us: int


@dataclass(frozen=True)
class Queued:
    """The GPU idles although the next kernel was issued long ago (waits on another stream or event).
    `host_op` keeps the host thread busy in a CPU op meanwhile."""

    us: int
    host_op: bool = False


@dataclass(frozen=True)
class Sync:
    """A kernel runs while the host blocks in a sync call under the CPU op `op` (`.item()`)."""

    us: int
    api: str = "cudaStreamSynchronize"
    op: str | None = "aten::item"


@dataclass(frozen=True)
class Copy:
    """`parallel` memcpys at once (streams 7, 9, 10, ...), each issued by a `cudaMemcpyAsync` call that
    lasts `call_us` (the whole copy when the call blocks); `hidden` runs a compute kernel on stream 8 beside."""

    us: int
    nbytes: int = 1_000_000
    kind: CopyKind = CopyKind.H2D
    pinned: bool = False
    hidden: bool = False
    parallel: int = 1
    call_us: int = LAUNCH_CALL_US


@dataclass(frozen=True)
class Comm:
    """An all-reduce kernel on stream 20; a compute kernel on stream 7 overlaps its first `hidden_us`."""

    us: int
    hidden_us: int = 0


@dataclass(frozen=True)
class Tiny:
    """`n` kernels of `kernel_us`, one launch (`launch_us` long) every `period_us`, all inside one CPU op:
    the launch-bound pattern when kernels are shorter than launches and the GPU mostly idles."""

    n: int
    kernel_us: int = 2
    period_us: int = 5
    launch_us: int = 3
    host_op: bool = True

    @property
    def us(self) -> int:
        return self.n * self.period_us


@dataclass(frozen=True)
class Compile:
    """dynamo compiling frame `frame` (its compilation `compile`) on the host for the whole phase."""

    us: int
    frame: int = 0
    compile: int = 0


@dataclass(frozen=True)
class Graphs:
    """A compiled step on the host: a forward region of frame 0 (compilation `compile`) in the first half,
    holding a nested region of frame 1 when `broken` (a graph break resumed), then one compiled backward
    per region in the second half. `inside_us` is split evenly among the graph runs; `gpu_us` is one
    kernel from the phase's start."""

    us: int
    inside_us: int
    broken: bool = False
    compile: int = 0
    gpu_us: int = 0


Phase = Load | Gpu | Gap | Queued | Sync | Copy | Comm | Tiny | Compile | Graphs


@dataclass
class TraceBuilder:
    rank: int = 0
    devices: tuple[DeviceInfo, ...] = (A100,)
    rows: list[dict[str, Any]] = field(default_factory=list)
    memory_rows: list[tuple[int, int, int]] = field(default_factory=list)
    """(t_ns, total allocated, total reserved) on CUDA device 0."""
    _corr: int = 0
    _early_launch: int | None = None
    """Set by `Queued`: the next GPU event was issued at this time, long before it starts."""

    def host(self, kind: Kind, name: str, start: int, dur: int, **kw: Any) -> None:
        self.rows.append({**HOST, "kind": kind, "name": name, "start_ns": start, "dur_ns": dur, **kw})

    def gpu(self, kind: Kind, name: str, start: int, dur: int, *, stream: int = STREAM, **kw: Any) -> None:
        """A GPU event and the host call that issued it (at `launch_at`, default just before it)."""
        self._corr += 1
        launch_at = start - LAUNCH_LEAD_US * US
        if self._early_launch is not None:
            launch_at, self._early_launch = self._early_launch, None
        api = kw.pop("api", "cudaLaunchKernel" if kind == Kind.KERNEL else "cudaMemcpyAsync")
        launch_dur = kw.pop("launch_dur", LAUNCH_CALL_US * US)
        self.host(Kind.RUNTIME, api, launch_at, launch_dur, correlation=self._corr)
        self.rows.append(
            {
                "kind": kind,
                "name": name,
                "start_ns": start,
                "dur_ns": dur,
                "pid": 0,
                "tid": stream,
                "device": 0,
                "stream": stream,
                "correlation": self._corr,
                **kw,
            }
        )

    def kernel(self, name: str, start: int, dur: int, **kw: Any) -> None:
        self.gpu(Kind.KERNEL, name, start, dur, **kw)

    def phase(self, p: Phase, t: int) -> int:
        """Lay one phase out from `t` (ns); returns where it ends."""
        d = p.us * US
        if isinstance(p, Load):
            self.host(Kind.USER_ANNOTATION, MULTI_LOADER if p.multi else SINGLE_LOADER, t, d)
            if p.ops_us:
                self.host(Kind.CPU_OP, "aten::stack", t, p.ops_us * US)
            if p.hidden_us:
                self.kernel(ELEMENTWISE, t, p.hidden_us * US)
        elif isinstance(p, Gpu):
            self.kernel(p.name, t, d)
        elif isinstance(p, Queued):
            self._early_launch = t - LAUNCH_LEAD_US * US
            if p.host_op:
                self.host(Kind.CPU_OP, "aten::cat", t, d)
        elif isinstance(p, Sync):
            self.kernel(TC_GEMM, t, d)
            if p.op is not None:
                self.host(Kind.CPU_OP, p.op, t, d)
            self.host(Kind.RUNTIME, p.api, t, d)
        elif isinstance(p, Copy):
            memory = HostMemory.PINNED if p.pinned else HostMemory.PAGEABLE
            name = {CopyKind.H2D: "Memcpy HtoD", CopyKind.D2H: "Memcpy DtoH"}.get(p.kind, "Memcpy DtoD")
            kw = {"copy_kind": p.kind, "host_memory": memory, "bytes": p.nbytes, "launch_dur": p.call_us * US}
            for i in range(p.parallel):
                stream = STREAM if i == 0 else STREAM + 1 + i
                self.gpu(Kind.MEMCPY, f"{name} ({memory.name.title()} -> Device)", t, d, stream=stream, **kw)
            if p.hidden:
                self.kernel(ELEMENTWISE, t, d, stream=SIDE_STREAM)
        elif isinstance(p, Comm):
            self.kernel(ALLREDUCE, t, d, stream=COMM_STREAM)
            if p.hidden_us:
                self.kernel(TC_GEMM, t, p.hidden_us * US)
        elif isinstance(p, Compile):
            self.host(Kind.USER_ANNOTATION, f"dynamo_data: compile_id={p.frame}/{p.compile}", t, 0)
            self.host(Kind.CPU_OP, "_compile.compile_inner (dynamo_timed)", t, d)
        elif isinstance(p, Graphs):
            self.graphs(p, t)
        elif isinstance(p, Tiny):
            if p.host_op:
                self.host(Kind.CPU_OP, "aten::add_", t, d)
            for i in range(p.n):
                at = t + i * p.period_us * US
                self._corr += 1
                self.host(Kind.RUNTIME, "cudaLaunchKernel", at, p.launch_us * US, correlation=self._corr)
                self.rows.append(
                    {
                        "kind": Kind.KERNEL,
                        "name": ELEMENTWISE,
                        "start_ns": at + LAUNCH_LEAD_US * US,
                        "dur_ns": p.kernel_us * US,
                        "pid": 0,
                        "tid": STREAM,
                        "device": 0,
                        "stream": STREAM,
                        "correlation": self._corr,
                    }
                )
        return t + d

    def graphs(self, p: Graphs, t: int) -> None:
        half, runs = p.us * US // 2, 4 if p.broken else 2
        each = p.inside_us * US // runs
        self.host(Kind.CPU_OP, f"Torch-Compiled Region: 0/{p.compile}", t, half)
        self.host(Kind.CPU_OP, "CompiledFunction", t, each)
        if p.broken:
            self.host(Kind.CPU_OP, f"Torch-Compiled Region: 1/{p.compile}", t + half // 2, half // 2)
            self.host(Kind.CPU_OP, "CompiledFunction", t + half // 2, each)
        for i in range(runs // 2):
            self.host(Kind.CPU_OP, "CompiledFunctionBackward", t + half + i * half // 2, each)
        if p.gpu_us:
            self.kernel(TC_GEMM, t, p.gpu_us * US)

    def memory(self, t_ns: int, allocated: int, reserved: int) -> None:
        self.memory_rows.append((t_ns, allocated, reserved))

    def trace(self) -> KinetoTrace:
        return KinetoTrace(
            meta=TraceMeta(path="synthetic", rank=self.rank, rank_known=True, devices=self.devices),
            events=events_from_rows(self.rows),
            memory=self._memory_table(),
        )

    def _memory_table(self) -> MemoryTable:
        if not self.memory_rows:
            return empty_memory()
        t, alloc, res = (np.array(c, dtype=np.int64) for c in zip(*sorted(self.memory_rows), strict=True))
        n = t.size
        return MemoryTable(
            t_ns=t,
            bytes_delta=np.diff(alloc, prepend=0),
            total_allocated=alloc,
            total_reserved=res,
            device_type=np.ones(n, dtype=np.int8),
            device_id=np.zeros(n, dtype=np.int32),
        )


def build(
    *phases: Phase,
    steps: int = 3,
    rank: int = 0,
    devices: tuple[DeviceInfo, ...] = (A100,),
    profiler_steps: bool = True,
    step_list: Sequence[Sequence[Phase]] | None = None,
    prologue: Sequence[Phase] = (),
    memory: Sequence[tuple[int, int, int]] = (),
) -> KinetoTrace:
    """`steps` identical steps made of `phases` (or one step per entry of `step_list`), from t = 0, after
    `prologue` phases outside any step; `memory` rows are (t_ns, total allocated, total reserved)."""
    b = TraceBuilder(rank=rank, devices=devices)
    b.memory_rows.extend(memory)
    steps_ = step_list if step_list is not None else [phases] * steps
    lay_out(b, steps_, profiler_steps=profiler_steps, t=lay_out(b, [prologue], profiler_steps=False))
    return b.trace()


def lay_out(
    b: TraceBuilder, steps: Sequence[Sequence[Phase]], *, profiler_steps: bool = True, t: int = 0
) -> int:
    for k, phases in enumerate(steps, start=1):
        start = t
        for p in phases:
            t = b.phase(p, t)
        if profiler_steps:
            b.host(Kind.USER_ANNOTATION, f"ProfilerStep#{k}", start, t - start)
    return t
