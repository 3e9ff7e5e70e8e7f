"""Why the GPU sat idle: each idle gap is blamed on the host, on launch latency, or on something else.

A gap ends when a GPU event (kernel, memcpy, memset) starts; that event's launch is the host-side
RUNTIME/DRIVER call with the same correlation id (the earliest one when several share it). Each gap gets
one cause, in this order:

- `host_wait`: the launch call started after the gap began (after the previous GPU work ended). The GPU
  ran dry and waited for the host to enqueue more work: Python, dispatch, data loading, a sync.
- `kernel_wait`: otherwise, when the gap is shorter than `kernel_wait_max_ns` (default 30 µs). The work
  was already queued, so a short gap is the device-side cost of starting the next kernel (launch latency
  between back-to-back kernels). HTA defines it the same way with a 30-unit default that its docs call
  ns but that it compares with microsecond timestamps, so its effective threshold is 30 µs; we use that.
- `other`: the rest: the work was queued early but started late, i.e. it waited on another stream, an
  event or a device-wide sync; also gaps whose next event has no known launch.

Two views:
- per stream (device, stream): gaps between consecutive events on that stream, as HTA's
  `get_idle_time_breakdown` measures them. Summed over streams these double count wall-clock time.
- wall clock: the gaps of the union of GPU work over all streams and devices, each blamed once on the
  first event that ends it. Their total equals `GpuBreakdown.idle_ns` over the same span.

With a window (e.g. one step), gaps are found over the whole trace, blamed, then clipped to the window;
window time before the trace's first or after its last GPU event is `other`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu.kernels import gpu_work_mask
from pinchpoint.trace.kineto import EventTable, Kind

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

KERNEL_WAIT_MAX_NS = 30_000
"""Gaps shorter than this between already-queued GPU events are launch latency (HTA's effective 30 µs)."""

NO_LAUNCH = np.iinfo(np.int64).min
"""Launch time of an event whose launch call is not in the trace."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleSplit:
    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int
    gaps: int
    """Number of idle gaps (before clipping to a window, those that overlap it)."""

    @property
    def total_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamIdle:
    device: int
    stream: int
    events: int
    busy_ns: int
    idle: IdleSplit
    """Gaps between this stream's consecutive events."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuIdle:
    start_ns: int
    end_ns: int
    wall: IdleSplit
    """Idle time of the whole GPU (no event on any stream), each gap counted once."""
    streams: tuple[StreamIdle, ...]
    """Per stream, sorted by (device, stream)."""
    kernel_wait_max_ns: int


def launch_start_ns(events: EventTable) -> I64:
    """Per row: start of the RUNTIME/DRIVER call with the same correlation id (earliest), else NO_LAUNCH."""
    out = np.full(len(events), NO_LAUNCH, dtype=np.int64)
    host = ((events.kind == Kind.RUNTIME) | (events.kind == Kind.DRIVER)) & (events.correlation >= 0)
    if not host.any():
        return out
    corr, st = events.correlation[host], events.start_ns[host]
    order = np.lexsort((st, corr))
    corr, st = corr[order], st[order]
    first = np.ones(corr.size, dtype=bool)
    first[1:] = corr[1:] != corr[:-1]
    corr, st = corr[first], st[first]  # earliest call per correlation id
    gpu = gpu_work_mask(events) & (events.correlation >= 0)
    want = events.correlation[gpu]
    i = np.clip(np.searchsorted(corr, want), 0, corr.size - 1)
    hit = corr[i] == want
    vals = np.where(hit, st[i], NO_LAUNCH)
    out[np.flatnonzero(gpu)] = vals
    return out


def _blame(
    gap_start: I64, gap_end: I64, next_launch: I64, kernel_wait_max_ns: int
) -> tuple[Mask, Mask, Mask]:
    """Masks (host_wait, kernel_wait, other) for gaps [gap_start, gap_end) ended by an event launched then."""
    host = (next_launch != NO_LAUNCH) & (next_launch > gap_start)
    kernel = ~host & (next_launch != NO_LAUNCH) & (gap_end - gap_start < kernel_wait_max_ns)
    return host, kernel, ~host & ~kernel


def _split(
    gap_start: I64, gap_end: I64, next_launch: I64, lo: int, hi: int, kernel_wait_max_ns: int
) -> IdleSplit:
    host, kernel, other = _blame(gap_start, gap_end, next_launch, kernel_wait_max_ns)
    s, e = np.clip(gap_start, lo, hi), np.clip(gap_end, lo, hi)
    length = e - s

    def tot(m: Mask) -> int:
        return int(length[m].sum())

    return IdleSplit(
        host_wait_ns=tot(host), kernel_wait_ns=tot(kernel), other_ns=tot(other), gaps=int((length > 0).sum())
    )


def _stream_idle(
    start: I64, end: I64, launch: I64, lo: int, hi: int, kernel_wait_max_ns: int
) -> tuple[IdleSplit, int]:
    """Gaps between consecutive events of one stream (rows sorted by start)."""
    run_end = np.maximum.accumulate(end)
    gap_start, gap_end = run_end[:-1], start[1:]
    real = gap_end > gap_start
    split = _split(gap_start[real], gap_end[real], launch[1:][real], lo, hi, kernel_wait_max_ns)
    return split, iv.total(iv.clip((start, end), lo, hi))


def gpu_idle(
    events: EventTable,
    window: tuple[int, int] | None = None,
    kernel_wait_max_ns: int = KERNEL_WAIT_MAX_NS,
) -> GpuIdle | None:
    """Idle-time causes per stream and for the whole GPU, over the GPU-activity span or `window`.

    Returns None when the trace has no GPU work.
    """
    gpu = gpu_work_mask(events)
    if not gpu.any():
        return None
    launch_all = launch_start_ns(events)
    start, end, launch = events.start_ns[gpu], events.end_ns[gpu], launch_all[gpu]
    first, last = int(start.min()), int(end.max())
    lo, hi = window if window is not None else (first, last)

    # Wall clock: gaps of the union within [first, last] (zero-length events at the edges widen the span);
    # the event that ends a gap is the earliest starting at the gap's end (rows are sorted by start).
    u_s, u_e = iv.union(start, end)
    gap_start, gap_end = np.append(first, u_e), np.append(u_s, last)
    real = gap_end > gap_start
    gap_start, gap_end = gap_start[real], gap_end[real]
    idx = np.searchsorted(start, gap_end, side="left")
    next_launch = np.append(launch, NO_LAUNCH)[idx]
    wall = _split(gap_start, gap_end, next_launch, lo, hi, kernel_wait_max_ns)
    outside = max(0, min(first, hi) - lo) + max(0, hi - max(last, lo))
    wall = IdleSplit(
        host_wait_ns=wall.host_wait_ns,
        kernel_wait_ns=wall.kernel_wait_ns,
        other_ns=wall.other_ns + outside,
        gaps=wall.gaps + int(lo < first) + int(hi > last),
    )

    dev = events.device[gpu].astype(np.int64)
    stream = events.stream[gpu]
    keys = np.stack([dev, stream], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")  # groups rows by stream, keeping start order inside
    bounds = np.searchsorted(inverse[order], np.arange(uniq.shape[0] + 1))
    streams = []
    for k in range(uniq.shape[0]):
        rows = order[bounds[k] : bounds[k + 1]]
        split, busy = _stream_idle(start[rows], end[rows], launch[rows], lo, hi, kernel_wait_max_ns)
        streams.append(
            StreamIdle(
                device=int(uniq[k, 0]),
                stream=int(uniq[k, 1]),
                events=int(rows.size),
                busy_ns=busy,
                idle=split,
            )
        )
    return GpuIdle(
        start_ns=lo, end_ns=hi, wall=wall, streams=tuple(streams), kernel_wait_max_ns=kernel_wait_max_ns
    )
