"""GPU memory from the profiler's `[memory]` events: peak, timeline, growth per step, fraction of capacity.

Newer traces carry the allocator's `Total Allocated` / `Total Reserved` after each event. The 2021 schema
carries only the size of each allocation (+) or free (−); then the allocated curve is the running sum of
the deltas, which is known only up to the (unseen) amount allocated before profiling began: the result
says `absolute=False` and its peak is the rise above the lowest point seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu._common import I64
from pinchpoint.analysis.gpu.steps import step_windows
from pinchpoint.trace.kineto import KinetoTrace, MemoryTable

MAX_POINTS = 500
"""Timeline points per device (enough for a chart; the peak of each bucket is kept)."""
CUDA_DEVICE_TYPE = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceMemory:
    device: int
    events: int
    absolute: bool
    """True when the trace reports allocator totals; False when reconstructed from deltas."""
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None
    """None when the trace has no reserved totals."""
    capacity_bytes: int | None
    """`deviceProperties[].totalGlobalMem`, when present."""
    peak_fraction: float | None
    """max(peak reserved, peak allocated) ÷ capacity; None without capacity or absolute numbers."""
    timeline_ns: tuple[int, ...]
    """Bucket end times (≤ MAX_POINTS), and the peak allocated / reserved bytes in each bucket."""
    timeline_allocated: tuple[int, ...]
    timeline_reserved: tuple[int, ...]
    step_end_allocated: tuple[int, ...]
    """Allocated bytes at the end of each ProfilerStep (empty without steps)."""
    growth_bytes_per_step: float | None
    """Least-squares slope of `step_end_allocated` (needs ≥ 3 steps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryStats:
    devices: tuple[DeviceMemory, ...]
    note: str | None = None


def memory_stats(trace: KinetoTrace) -> MemoryStats:
    mem = trace.memory
    gpu = mem.device_type == CUDA_DEVICE_TYPE
    if not gpu.any():
        return MemoryStats(devices=(), note="no GPU [memory] events (profile with profile_memory=True)")
    _, _, s_ends = step_windows(trace.events)
    capacity = {d.index: d.total_memory_bytes for d in trace.meta.devices}
    out = []
    for dev in np.unique(mem.device_id[gpu]).tolist():
        rows = np.flatnonzero(gpu & (mem.device_id == dev))
        out.append(_device(mem, int(dev), rows, s_ends, capacity.get(int(dev))))
    return MemoryStats(devices=tuple(out))


def _device(mem: MemoryTable, dev: int, rows: I64, step_ends: I64, cap: int | None) -> DeviceMemory:
    t = mem.t_ns[rows]
    absolute = bool(np.all(mem.total_allocated[rows] >= 0))
    if absolute:
        alloc = mem.total_allocated[rows]
    else:
        running = np.cumsum(mem.bytes_delta[rows])
        alloc = running - min(int(running.min()), 0)
    has_reserved = bool(np.all(mem.total_reserved[rows] >= 0))
    reserved = mem.total_reserved[rows] if has_reserved else None
    peak_alloc = int(alloc.max())
    peak_res = int(reserved.max()) if reserved is not None else None
    fraction = None
    if cap and absolute:
        fraction = max(peak_alloc, peak_res or 0) / cap
    tl_t, tl_a, tl_r = _downsample(t, alloc, reserved)
    at_end = _value_at(t, alloc, step_ends)
    return DeviceMemory(
        device=dev,
        events=int(rows.size),
        absolute=absolute,
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=peak_res,
        capacity_bytes=cap,
        peak_fraction=fraction,
        timeline_ns=tl_t,
        timeline_allocated=tl_a,
        timeline_reserved=tl_r,
        step_end_allocated=tuple(int(x) for x in at_end),
        growth_bytes_per_step=_slope(at_end) if at_end.size >= 3 else None,
    )


def _value_at(t: I64, values: I64, points: I64) -> I64:
    """The value after the last event at or before each point (the first value before any event)."""
    i = np.searchsorted(t, points, side="right") - 1
    return np.asarray(values[np.maximum(i, 0)], dtype=np.int64)


def _slope(y: I64) -> float:
    x = np.arange(y.size, dtype=np.float64)
    return float(np.polyfit(x, y.astype(np.float64), 1)[0])


def _downsample(t: I64, alloc: I64, reserved: I64 | None) -> tuple[tuple[int, ...], ...]:
    """Split the time span into ≤ MAX_POINTS buckets and keep each bucket's last time and peak values."""
    edges = np.linspace(int(t[0]), int(t[-1]) + 1, num=min(MAX_POINTS, t.size) + 1)
    bucket = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, edges.size - 2)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], t.size] - 1
    res = reserved if reserved is not None else np.zeros(0, dtype=np.int64)
    return (
        tuple(int(x) for x in t[ends]),
        tuple(int(x) for x in np.maximum.reduceat(alloc, starts)),
        tuple(int(x) for x in np.maximum.reduceat(res, starts)) if res.size else (),
    )
