"""What the GPU spent its time on: each GPU event's class (compute, communication, memory) and per-kernel stats.

Only events of kind KERNEL, MEMCPY and MEMSET are GPU work. Runtime/driver calls are host events, and
`gpu_user_annotation` ranges and `cuda_sync` markers only label GPU time; none of them counts here.

Classes:
- MEMORY: every MEMCPY and MEMSET event (copies and fills done by the copy engines or the driver).
- COMMUNICATION: kernels that move data between GPUs. Recognised by the kernel's function name (the
  identifier before the template arguments, so a `...Allreduce<...>` template argument of a compute
  kernel does not count): NCCL/RCCL/MSCCL kernels (`ncclDevKernel_*`, `ncclKernel_*`), NVSHMEM,
  PyTorch symmetric-memory collectives (`multimem_all_reduce_kernel`, one-/two-shot all-reduce,
  all-gather, reduce-scatter, all-to-all), vLLM's custom all-reduce (`cross_device_reduce_*`),
  quick-reduce, Transformer Engine userbuffers and DeepEP dispatch/combine.
- COMPUTE: every other kernel.

HTA differs on purpose in two places: it calls only `nccl...Kernel` names communication (so the
symmetric-memory all-reduce of a B200 vLLM trace is compute there), and it counts non-work rows that
carry a stream (`cuda_sync` "Stream Wait Event" is compute there, "Stream Sync" non-compute).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.trace.kineto import EventTable, Kind

I8 = npt.NDArray[np.int8]
Mask = npt.NDArray[np.bool_]


class GpuWork(IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMORY = 2


NOT_GPU_WORK = -1
"""The class array's value for rows that are not GPU work (host events, annotations, syncs)."""

COMM_KERNEL = re.compile(
    r"""^(?:nccl|rccl|msccl)            # NCCL and its AMD/Microsoft forks
    | nvshmem                            # NVSHMEM-based kernels (DeepEP, custom collectives)
    | multimem_                          # PyTorch symmetric memory: multimem_all_reduce_kernel, ...
    | (?:one|two)_?shot_?all_?reduce     # symmetric-memory / TRT-LLM one-shot and two-shot all-reduce
    | all_?reduce | all_?gather | reduce_?scatter | all_?to_?all
    | cross_device_reduce                # vLLM custom all-reduce
    | quick_?reduce                      # vLLM/ROCm quick all-reduce
    | userbuffers                        # Transformer Engine comm-overlap kernels
    | deep_ep::                          # DeepEP expert-parallel dispatch/combine
    """,
    re.IGNORECASE | re.VERBOSE,
)


_ANON = "\x00anon"
_TAIL_NAME = re.compile(r"[\w:~\x00]+$")


def _opening(s: str, close_at: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket that opens the one at `close_at`, scanning back; (...) groups are skipped whole
    (so `(8)>(0)` inside template arguments does not count as a `>`). -1 when unbalanced."""
    depth = 0
    i = close_at
    while i >= 0:
        c = s[i]
        if c == close_ch:
            depth += 1
        elif c == open_ch:
            depth -= 1
            if depth == 0:
                return i
        elif c == ")" and open_ch != "(":
            i = _opening(s, i, "(", ")")
            if i < 0:
                return -1
        i -= 1
    return -1


def kernel_function_name(name: str) -> str:
    """The function part of a demangled kernel name: drops return type, template arguments and parameters.

    'void at::native::foo<float, 4>(int, float*)' -> 'at::native::foo';
    'void (anonymous namespace)::bar<c10::Half, 16>(...)' -> '(anonymous)::bar'.
    """
    s = name.replace("(anonymous namespace)", _ANON).rstrip()
    if s.endswith(")"):
        i = _opening(s, len(s) - 1, "(", ")")
        if i > 0:
            s = s[:i].rstrip()
    if s.endswith(">"):
        i = _opening(s, len(s) - 1, "<", ">")
        if i > 0:
            s = s[:i].rstrip()
    m = _TAIL_NAME.search(s)
    return (m.group(0) if m else s).replace(_ANON, "(anonymous)")


XLA_COLLECTIVE = re.compile(
    r"^(?:all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast"
    r"|send|recv)(?:-start|-done)?(?:[.-]\d+)*$"
)
"""XLA's HLO collectives, as TPU op rows name them (`all-reduce.1`, `all-gather-start.2`): not C++ names."""


def is_communication_kernel(name: str) -> bool:
    """Whether a kernel name marks a collective or point-to-point transfer (see the module docstring)."""
    if XLA_COLLECTIVE.match(name):
        return True
    fn = kernel_function_name(name)
    return COMM_KERNEL.search(fn) is not None


def gpu_work_mask(events: EventTable) -> Mask:
    """Rows that are GPU work: KERNEL, MEMCPY or MEMSET events."""
    return np.isin(events.kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))


def classify(events: EventTable) -> I8:
    """Per row: a GpuWork value, or NOT_GPU_WORK (-1) for rows that are not GPU work."""
    out = np.full(len(events), NOT_GPU_WORK, dtype=np.int8)
    k = events.kind
    is_kernel = k == Kind.KERNEL
    out[is_kernel] = GpuWork.COMPUTE
    out[is_kernel & events.mask_names(is_communication_kernel)] = GpuWork.COMMUNICATION
    out[(k == Kind.MEMCPY) | (k == Kind.MEMSET)] = GpuWork.MEMORY
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelStat:
    """One distinct GPU event name (a kernel, or a memcpy/memset kind) over the whole table."""

    name: str
    work: GpuWork
    count: int
    total_ns: int
    mean_ns: float
    max_ns: int
    share_of_busy: float
    """total_ns over the GPU's busy time (union of all GPU work); concurrent streams can push the sum of
    all shares past 1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelBreakdown:
    busy_ns: int
    """Time at least one GPU event ran (union over all streams and devices)."""
    event_count: int
    distinct_names: int
    total_ns: dict[GpuWork, int]
    """Summed durations per class (not a union: overlapping events each count)."""
    count: dict[GpuWork, int]
    top: tuple[KernelStat, ...]
    """The `top_n` names by total time, longest first."""
    rest_count: int
    """Events whose name is outside `top`."""
    rest_total_ns: int


def kernel_breakdown(events: EventTable, top_n: int = 20) -> KernelBreakdown:
    """Per-name totals of GPU work and the top-N names by total time."""
    work = classify(events)
    rows = work != NOT_GPU_WORK
    name = events.name[rows]
    dur = events.dur_ns[rows]
    cls = work[rows]
    busy = iv.total((events.start_ns[rows], events.end_ns[rows]))
    n_names = len(events.names)
    counts = np.bincount(name, minlength=n_names)
    totals = np.bincount(name, weights=dur, minlength=n_names).astype(np.int64)
    maxes = np.zeros(n_names, dtype=np.int64)
    np.maximum.at(maxes, name, dur)
    # A name is one class except in malformed input (a kernel named like a memcpy); take the first row's.
    name_cls = np.zeros(n_names, dtype=np.int8)
    name_cls[name[::-1]] = cls[::-1]
    present = np.flatnonzero(counts)
    order = present[np.lexsort((present, -totals[present]))]
    top_ids = order[:top_n]
    top = tuple(
        KernelStat(
            name=events.names[i],
            work=GpuWork(int(name_cls[i])),
            count=int(counts[i]),
            total_ns=int(totals[i]),
            mean_ns=float(totals[i]) / float(counts[i]),
            max_ns=int(maxes[i]),
            share_of_busy=float(totals[i]) / busy if busy else 0.0,
        )
        for i in top_ids.tolist()
    )
    rest = order[top_n:]
    return KernelBreakdown(
        busy_ns=busy,
        event_count=int(rows.sum()),
        distinct_names=int(present.size),
        total_ns={w: int(dur[cls == w].sum()) for w in GpuWork},
        count={w: int((cls == w).sum()) for w in GpuWork},
        top=top,
        rest_count=int(counts[rest].sum()),
        rest_total_ns=int(totals[rest].sum()),
    )
