"""Host↔device copies: direction, bytes, time, bandwidth, pageable vs pinned, blocking and exposed time.

- A copy is *synchronous* (the host waits for it) when its API call is a non-async memcpy (`cudaMemcpy`,
  `hipMemcpy`, `cudaMemcpy2D`, ...), when it touches pageable memory (the driver stages it while the call
  waits: "async" in name only), both except H2D copies ≤ 64 KB, which return once staged (as in nsys); or
  when it is D2H and its API call lasts until the copy has finished (the host is about to read the data).
- A copy's time is *exposed* where no kernel runs on its device at the same moment (nothing hides it).
- Pageable H2D copies cannot overlap with compute and run at a fraction of pinned bandwidth: the
  `transfer.h2d` fix is `pin_memory=True` plus `.to(device, non_blocking=True)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    HOST_API_KINDS,
    I64,
    Mask,
    busy_within,
    join_by_key,
    kind_mask,
    name_mask,
)
from pinchpoint.trace.kineto import CopyKind, EventTable, HostMemory, Kind, KinetoTrace

SYNC_COPY_SMALL_H2D_BYTES = 64 * 1024
"""nsys `cuda_memcpy_sync` ignores H2D copies ≤ 64 KB: the call returns once the data is staged."""


def is_copy_api(name: str) -> bool:
    n = name.lower()
    return n.startswith(("cudamemcpy", "hipmemcpy", "cumemcpy"))


def is_sync_copy_api(name: str) -> bool:
    """A memcpy API without `Async` in its name (`cudaMemcpy`, `cudaMemcpy2D`, `hipMemcpyDtoH`, ...)."""
    return is_copy_api(name) and "async" not in name.lower()


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectionStats:
    direction: CopyKind
    count: int
    bytes: int
    """Sum over copies that report their size."""
    time_ns: int
    """Sum of copy durations."""
    bandwidth_gbps: float | None
    """Bytes ÷ time over the copies that report bytes (GB/s = bytes per ns); None without sizes."""
    pageable: int
    pinned: int
    pageable_time_ns: int
    exposed_ns: int
    """Time of these copies not overlapped by any kernel on the same device."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemcpyStats:
    by_direction: tuple[DirectionStats, ...]
    """One entry per direction present (H2D, D2H, D2D, OTHER), in that order."""
    copies: int
    time_ns: int
    exposed_ns: int
    """Union of copy time not overlapped by kernels on the same device (summed over devices)."""
    sync_copies: int
    """Copies whose host call blocked until they finished (see the module docstring)."""
    sync_host_ns: int
    """Host time in the API calls of synchronous copies."""
    pageable_async: int
    """`*MemcpyAsync` calls whose copy touched pageable memory: async in name, synchronous in effect."""
    unjoined: int
    """Copies with no API call found by correlation."""

    def direction(self, kind: CopyKind) -> DirectionStats | None:
        return next((d for d in self.by_direction if d.direction == kind), None)


def memcpy_stats(trace: KinetoTrace) -> MemcpyStats:
    ev = trace.events
    copies, api_row = _copies_and_calls(ev)
    sync = _synchronous(ev, copies, api_row)
    joined = api_row >= 0
    sync_api = np.unique(api_row[sync & joined])
    pageable = ev.host_memory[copies] == HostMemory.PAGEABLE
    async_api = joined & ~ev.mask_names(is_sync_copy_api)[np.maximum(api_row, 0)]

    exposed_each = _exposed_per_copy(ev, copies)
    by_dir = []
    for kind in (CopyKind.H2D, CopyKind.D2H, CopyKind.D2D, CopyKind.OTHER):
        sel = ev.copy_kind[copies] == kind
        if kind == CopyKind.OTHER:
            sel |= ev.copy_kind[copies] == CopyKind.NONE
        if not sel.any():
            continue
        by_dir.append(_direction(ev, kind, copies[sel], pageable[sel], exposed_each[sel]))

    return MemcpyStats(
        by_direction=tuple(by_dir),
        copies=int(copies.size),
        time_ns=int(ev.dur_ns[copies].sum()),
        exposed_ns=_exposed_union(ev, copies),
        sync_copies=int(np.count_nonzero(sync)),
        sync_host_ns=int(ev.dur_ns[sync_api].sum()) if sync_api.size else 0,
        pageable_async=int(np.count_nonzero(pageable & async_api)),
        unjoined=int(np.count_nonzero(~joined)),
    )


def blocking_copy_calls(ev: EventTable) -> I64:
    """Rows of the copy API calls that blocked the host until their copy finished."""
    copies, api_row = _copies_and_calls(ev)
    return np.unique(api_row[_synchronous(ev, copies, api_row) & (api_row >= 0)]).astype(np.int64)


def blocking_h2d_calls(ev: EventTable) -> I64:
    """Rows of the blocking copy API calls whose copy went host→device."""
    copies, api_row = _copies_and_calls(ev)
    h2d = _synchronous(ev, copies, api_row) & (api_row >= 0) & (ev.copy_kind[copies] == CopyKind.H2D)
    return np.unique(api_row[h2d]).astype(np.int64)


def _copies_and_calls(ev: EventTable) -> tuple[I64, I64]:
    """MEMCPY rows and, for each, the row of its API call by correlation (-1 when not found)."""
    copies = np.flatnonzero(kind_mask(ev, Kind.MEMCPY))
    apis = np.flatnonzero(name_mask(ev, is_copy_api, *HOST_API_KINDS))
    if apis.size == 0:
        return copies, np.full(copies.size, -1, dtype=np.int64)
    hit = join_by_key(ev.correlation[copies], ev.correlation[apis])
    return copies, np.where(hit >= 0, apis[np.maximum(hit, 0)], -1).astype(np.int64)


def _synchronous(ev: EventTable, copies: I64, api_row: I64) -> Mask:
    joined = api_row >= 0
    safe = np.maximum(api_row, 0)
    small_h2d = (ev.copy_kind[copies] == CopyKind.H2D) & (ev.bytes[copies] >= 0)
    small_h2d &= ev.bytes[copies] <= SYNC_COPY_SMALL_H2D_BYTES
    by_name = joined & ev.mask_names(is_sync_copy_api)[safe] & ~small_h2d
    # The driver stages a pageable copy through a pinned buffer while the call waits (ResNet-50 2021 trace:
    # a 19 MB H2D `cudaMemcpyAsync` call lasts 2.02 ms of the copy's 1.94 ms + queueing).
    pageable = joined & (ev.host_memory[copies] == HostMemory.PAGEABLE) & ~small_h2d
    # A D2H whose call lasts until the copy is done: the host is about to read the data.
    d2h = joined & (ev.copy_kind[copies] == CopyKind.D2H) & (ev.end_ns[safe] >= ev.end_ns[copies])
    return np.asarray(by_name | pageable | d2h, dtype=bool)


def _direction(ev: EventTable, kind: CopyKind, rows: I64, pageable: Mask, exposed: I64) -> DirectionStats:
    sized = ev.bytes[rows] >= 0
    nbytes = int(ev.bytes[rows][sized].sum())
    sized_ns = int(ev.dur_ns[rows][sized].sum())
    return DirectionStats(
        direction=kind,
        count=int(rows.size),
        bytes=nbytes,
        time_ns=int(ev.dur_ns[rows].sum()),
        bandwidth_gbps=nbytes / sized_ns if sized.any() and sized_ns > 0 else None,
        pageable=int(np.count_nonzero(pageable)),
        pinned=int(np.count_nonzero(ev.host_memory[rows] == HostMemory.PINNED)),
        pageable_time_ns=int(ev.dur_ns[rows][pageable].sum()),
        exposed_ns=int(exposed.sum()),
    )


def _kernels_on(ev: EventTable, device: int) -> iv.Intervals:
    m = kind_mask(ev, Kind.KERNEL) & (ev.device == device)
    return iv.union(ev.start_ns[m], ev.end_ns[m])


def _exposed_per_copy(ev: EventTable, copies: I64) -> I64:
    """Each copy's duration minus its overlap with kernels on its device (copies may overlap each other)."""
    out = ev.dur_ns[copies].copy()
    for dev in np.unique(ev.device[copies]):
        sel = ev.device[copies] == dev
        out[sel] -= busy_within(_kernels_on(ev, int(dev)), ev.start_ns[copies][sel], ev.end_ns[copies][sel])
    return out


def _exposed_union(ev: EventTable, copies: I64) -> int:
    total = 0
    for dev in np.unique(ev.device[copies]):
        sel = copies[ev.device[copies] == dev]
        total += iv.total(iv.subtract((ev.start_ns[sel], ev.end_ns[sel]), _kernels_on(ev, int(dev))))
    return total
