"""The model of one rank's PyTorch profiler (Kineto) trace: columnar arrays, integer nanoseconds.

`ingest/kineto.py` builds a `KinetoTrace` from a Chrome-trace JSON file (2021 and current schemas, CUDA
and ROCm); `analysis/gpu/` reads only this. No per-event Python objects are kept: each column is one
numpy array over the trace's complete ("X") events, sorted by `start_ns` (ties: longer first), so an
analysis works with masks and vectorised interval arithmetic.

Times are integer nanoseconds on the trace's own clock (Kineto's microsecond stamps, with their
sub-microsecond digits kept exactly, times 1000). Missing integers are -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

MISSING = -1


class Kind(IntEnum):
    """What an event is, from its `cat` (one declarative table in `ingest/kineto.py` maps every schema)."""

    CPU_OP = 0
    """A framework op on the host (`cpu_op`; 2021: `Operator`)."""
    USER_ANNOTATION = 1
    """`record_function` ranges on the host: `ProfilerStep#N`, `enumerate(DataLoader)#...`, user labels."""
    GPU_USER_ANNOTATION = 2
    """The same annotations projected onto a GPU stream."""
    KERNEL = 3
    MEMCPY = 4
    MEMSET = 5
    RUNTIME = 6
    """CUDA/HIP runtime API calls on the host (`cuda_runtime`, 2021: `Runtime`): launches, syncs, copies."""
    DRIVER = 7
    """CUDA driver API calls (`cuda_driver`), e.g. `cuLaunchKernel` from Triton."""
    PYTHON_FUNCTION = 8
    OTHER = 9

    @property
    def on_gpu(self) -> bool:
        return self in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class CopyKind(IntEnum):
    """Direction of a GPU memcpy, from its name (`Memcpy HtoD (Pageable -> Device)`) or `args`."""

    NONE = 0
    H2D = 1
    D2H = 2
    D2D = 3
    OTHER = 4


class HostMemory(IntEnum):
    """Host side of a copy: pageable memory forces a staging copy and blocks the host."""

    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EventTable:
    """Complete ("X") events, one row each, sorted by (start_ns, -dur_ns). All arrays have one length."""

    kind: I8
    name: I32
    """Index into `names`."""
    names: tuple[str, ...]
    pid: I64
    """Kineto's `pid`: a host process id, or a device index for GPU events."""
    tid: I64
    """Kineto's `tid`: a host thread id, or a stream for GPU events."""
    start_ns: I64
    dur_ns: I64
    correlation: I64
    """Links a RUNTIME/DRIVER launch to the KERNEL/MEMCPY/MEMSET it enqueued (`args.correlation`)."""
    external_id: I64
    """Links a CPU_OP/annotation to the runtime calls it made (`args["External id"]`)."""
    device: I32
    """GPU index of a GPU event (`args.device`, else its pid when that is a small int)."""
    stream: I64
    """GPU stream of a GPU event (`args.stream`, else its tid)."""
    copy_kind: I8
    """CopyKind of MEMCPY events (NONE elsewhere)."""
    host_memory: I8
    """HostMemory of MEMCPY events (UNKNOWN elsewhere)."""
    bytes: I64
    """Bytes moved by MEMCPY/MEMSET (`args.bytes`), else -1."""
    end_ns: I64 = field(init=False)
    """start_ns + dur_ns, computed once (analyses read it often)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "end_ns", self.start_ns + self.dur_ns)

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    def name_ids(self, predicate: Any) -> I32:
        """Indices into `names` whose string satisfies `predicate(str) -> bool`."""
        return np.array([i for i, s in enumerate(self.names) if predicate(s)], dtype=np.int32)

    def mask_names(self, predicate: Any) -> npt.NDArray[np.bool_]:
        """Rows whose name satisfies `predicate(str) -> bool` (evaluated once per distinct name)."""
        return np.isin(self.name, self.name_ids(predicate))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class MemoryTable:
    """`[memory]` instant events (profile_memory=True), sorted by time."""

    t_ns: I64
    bytes_delta: I64
    """Allocation (+) or free (-) size."""
    total_allocated: I64
    """Allocator's total allocated bytes after this event (-1 when absent)."""
    total_reserved: I64
    device_type: I8
    """0 = CPU, 1 = CUDA/HIP (Kineto's `Device Type`)."""
    device_id: I32

    def __len__(self) -> int:
        return int(self.t_ns.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceInfo:
    """One entry of `deviceProperties`."""

    index: int
    name: str
    compute_capability: tuple[int, int] | None = None
    """(major, minor) for NVIDIA; None for AMD/unknown."""
    total_memory_bytes: int | None = None
    sm_count: int | None = None
    vendor: str = "unknown"
    """'nvidia', 'amd' or 'unknown' (from the name and the runtime API names)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceMeta:
    path: str
    rank: int
    """`distributedInfo.rank`; 0 when absent (`rank_known` False)."""
    rank_known: bool = False
    world_size: int | None = None
    backend: str | None = None
    devices: tuple[DeviceInfo, ...] = ()
    schema: str = "current"
    """'2021' (Operator/Runtime/Kernel categories) or 'current' (cpu_op/cuda_runtime/kernel)."""
    base_time_ns: int | None = None
    """`baseTimeNanoseconds`: wall-clock origin of the stamps, when the trace has it."""
    pytorch_version: str | None = None
    trace_bytes: int = 0
    """Size of the JSON text (after gunzip)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class KinetoTrace:
    meta: TraceMeta
    events: EventTable
    memory: MemoryTable
    warnings: tuple[str, ...] = field(default=())
    """What was skipped or repaired while reading (bad events, clipped durations), for the report."""


def empty_events() -> EventTable:
    i64 = np.zeros(0, dtype=np.int64)
    return EventTable(
        kind=np.zeros(0, dtype=np.int8),
        name=np.zeros(0, dtype=np.int32),
        names=(),
        pid=i64,
        tid=i64,
        start_ns=i64,
        dur_ns=i64,
        correlation=i64,
        external_id=i64,
        device=np.zeros(0, dtype=np.int32),
        stream=i64,
        copy_kind=np.zeros(0, dtype=np.int8),
        host_memory=np.zeros(0, dtype=np.int8),
        bytes=i64,
    )


def empty_memory() -> MemoryTable:
    i64 = np.zeros(0, dtype=np.int64)
    return MemoryTable(
        t_ns=i64,
        bytes_delta=i64,
        total_allocated=i64,
        total_reserved=i64,
        device_type=np.zeros(0, dtype=np.int8),
        device_id=np.zeros(0, dtype=np.int32),
    )


def events_from_rows(rows: list[dict[str, Any]]) -> EventTable:
    """Build a table from plain rows (tests and tiny synthetic traces; not the ingest path).

    Each row: kind (Kind), name, start_ns, dur_ns, and optionally pid, tid, correlation, external_id,
    device, stream, copy_kind, host_memory, bytes. Rows are sorted as the ingest sorts them.
    """
    rows = sorted(rows, key=lambda r: (r["start_ns"], -r["dur_ns"]))
    names: dict[str, int] = {}
    for r in rows:
        names.setdefault(r["name"], len(names))

    def col(key: str, dtype: Any, default: int = MISSING) -> Any:
        return np.array([int(r.get(key, default)) for r in rows], dtype=dtype)

    return EventTable(
        kind=col("kind", np.int8),
        name=np.array([names[r["name"]] for r in rows], dtype=np.int32),
        names=tuple(names),
        pid=col("pid", np.int64, 0),
        tid=col("tid", np.int64, 0),
        start_ns=col("start_ns", np.int64),
        dur_ns=col("dur_ns", np.int64),
        correlation=col("correlation", np.int64),
        external_id=col("external_id", np.int64),
        device=col("device", np.int32),
        stream=col("stream", np.int64),
        copy_kind=col("copy_kind", np.int8, 0),
        host_memory=col("host_memory", np.int8, 0),
        bytes=col("bytes", np.int64),
    )
