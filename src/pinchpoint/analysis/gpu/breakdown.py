"""Where one rank's GPU time went: compute, exposed communication, exposed memory traffic, idle.

Over the span of GPU activity of one trace (from the first GPU event's start to the last one's end,
across every stream and device of the trace), each instant gets exactly one label, by priority:

- `compute`: at least one compute kernel runs;
- `communication`: a communication kernel runs and no compute kernel does (exposed communication);
- `memory`: a memcpy/memset runs and neither compute nor communication does;
- `idle`: no GPU event runs at all.

The four durations add up to the span exactly (integer ns), so the fractions sum to 1. `comm_overlap` is
the share of the communication time (union of communication kernels) during which compute also runs.

Against HTA's `get_temporal_breakdown`: HTA's idle is ours (span minus the union of everything it sees),
its compute is ours, and its non-compute is our communication + memory (union of all events minus the
union of compute). The numbers differ only where HTA sees other events or classifies them otherwise; see
`benchmarks/README.md`, "GPU breakdown vs HTA".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu.kernels import GpuWork, classify
from pinchpoint.trace.kineto import EventTable


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuBreakdown:
    start_ns: int
    end_ns: int
    span_ns: int
    """end_ns - start_ns: the GPU-activity span, or the requested window."""
    compute_ns: int
    communication_ns: int
    """Communication not overlapped by compute."""
    memory_ns: int
    """Copies and memsets not overlapped by compute or communication."""
    idle_ns: int
    busy_ns: int
    """Union of all GPU work (= span - idle)."""
    communication_total_ns: int
    """Union of communication kernels, hidden or not."""
    memory_total_ns: int
    """Union of memcpy/memset events, hidden or not."""
    compute: float
    communication: float
    memory: float
    idle: float
    comm_overlap: float | None
    """Share of communication time overlapped by compute; None when there is no communication."""

    @property
    def non_compute(self) -> float:
        """HTA's "non-compute": busy time with no compute kernel running (communication + memory)."""
        return self.communication + self.memory


def gpu_breakdown(events: EventTable, window: tuple[int, int] | None = None) -> GpuBreakdown | None:
    """Split the GPU-activity span (or `window` = [start_ns, end_ns), e.g. one step) by what runs.

    In a window, events are clipped to it and idle is measured against the whole window. Returns None when
    there is no GPU work (in the window).
    """
    work = classify(events)
    start, end = events.start_ns, events.end_ns

    def sel(w: GpuWork) -> iv.Intervals:
        m = work == w
        return start[m], end[m]

    comp, comm, mem = sel(GpuWork.COMPUTE), sel(GpuWork.COMMUNICATION), sel(GpuWork.MEMORY)
    any_work = work >= 0
    if window is not None:
        lo, hi = window
        comp, comm, mem = (iv.clip(x, lo, hi) for x in (comp, comm, mem))
    else:
        if not any_work.any():
            return None
        lo, hi = int(start[any_work].min()), int(end[any_work].max())
    comp_u = iv.union(*comp)
    comm_u = iv.union(*comm)
    mem_u = iv.union(*mem)
    busy = iv.total(_concat(comp_u, comm_u, mem_u))
    if busy == 0 or hi <= lo:
        return None
    compute_ns = iv.total(comp_u)
    comm_total = iv.total(comm_u)
    comm_exposed = iv.total(iv.subtract(comm_u, comp_u))
    compute_or_comm = iv.union(*_concat(comp_u, comm_u))
    mem_exposed = iv.total(iv.subtract(mem_u, compute_or_comm))
    span = hi - lo
    idle = span - busy
    return GpuBreakdown(
        start_ns=lo,
        end_ns=hi,
        span_ns=span,
        compute_ns=compute_ns,
        communication_ns=comm_exposed,
        memory_ns=mem_exposed,
        idle_ns=idle,
        busy_ns=busy,
        communication_total_ns=comm_total,
        memory_total_ns=iv.total(mem_u),
        compute=compute_ns / span,
        communication=comm_exposed / span,
        memory=mem_exposed / span,
        idle=idle / span,
        comm_overlap=(comm_total - comm_exposed) / comm_total if comm_total else None,
    )


def _concat(*sets: iv.Intervals) -> iv.Intervals:
    return np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets])
