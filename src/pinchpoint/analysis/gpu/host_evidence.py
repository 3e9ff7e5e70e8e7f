"""Facts from a rank's events that GPU rules quote: what the DataLoader wait holds, and host→device
copies with no kernel beside them. Computed with the rest of the rank's analysis, so that rules and
reports never need the events themselves (a rank can be analysed on another process or machine)."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import HOST_RANGE_KINDS, gpu_busy, name_mask
from pinchpoint.analysis.gpu.breakdown import GpuBreakdown
from pinchpoint.analysis.gpu.idle import GpuIdle
from pinchpoint.analysis.gpu.steps import StepStats, dataloader_intervals, is_dataloader_wait
from pinchpoint.trace.kineto import CopyKind, EventTable, Kind


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderEvidence:
    op_share: float
    """Share of the DataLoader wait during which framework ops (transforms) run on the host."""
    in_process: bool
    """The loader runs in the training process (`_SingleProcessDataLoaderIter`)."""
    idle_wait_ns: int
    """DataLoader wait with the GPU idle, inside the GPU-idle analysis window."""


def loader_evidence(ev: EventTable, idle: GpuIdle | None) -> LoaderEvidence:
    loader = dataloader_intervals(ev)
    ops = ev.kind == Kind.CPU_OP
    waits = name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)
    not_loader = ~waits
    op_cover = iv.intersect(loader, iv.union(ev.start_ns[ops & not_loader], ev.end_ns[ops & not_loader]))
    names = {ev.names[i] for i in set(ev.name[waits].tolist())}
    idle_wait = 0
    if idle is not None:
        exposed = iv.subtract(loader, gpu_busy(ev))
        idle_wait = iv.total(iv.clip(exposed, idle.start_ns, idle.end_ns))
    return LoaderEvidence(
        op_share=iv.total(op_cover) / max(iv.total(loader), 1),
        in_process=any("SingleProcess" in n for n in names),
        idle_wait_ns=idle_wait,
    )


def h2d_exposed_ns(ev: EventTable, steps: StepStats, bd: GpuBreakdown | None) -> int:
    """Wall time inside the steps (else the GPU span) in which an H2D copy runs and no kernel on its
    device does. A union, unlike `DirectionStats.exposed_ns` (whole trace, summed per copy): copies
    before or after the steps do not count, and two copies at once count once."""
    if steps.steps:
        lo, hi = min(s.start_ns for s in steps.steps), max(s.end_ns for s in steps.steps)
    elif bd is not None:
        lo, hi = bd.start_ns, bd.end_ns
    else:
        return 0
    copies = (ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.H2D)
    total = 0
    for dev in set(ev.device[copies].tolist()):
        c, k = copies & (ev.device == dev), (ev.kind == Kind.KERNEL) & (ev.device == dev)
        exposed = iv.subtract((ev.start_ns[c], ev.end_ns[c]), (ev.start_ns[k], ev.end_ns[k]))
        total += iv.total(iv.clip(exposed, lo, hi))
    return total


def step_kind(ev: EventTable) -> str:
    """ "train" when any event name mentions backward, else "inference"."""
    return "train" if any("backward" in n.lower() for n in ev.names) else "inference"
