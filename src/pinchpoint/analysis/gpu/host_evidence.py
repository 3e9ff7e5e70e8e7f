"""Facts from a rank's events that GPU rules quote: what the DataLoader wait holds, and host→device
copies with no kernel beside them. Computed with the rest of the rank's analysis, so that rules and
reports never need the events themselves (a rank can be analysed on another process or machine)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import HOST_RANGE_KINDS, gpu_busy, name_mask
from pinchpoint.analysis.gpu.breakdown import GpuBreakdown
from pinchpoint.analysis.gpu.idle import GpuIdle
from pinchpoint.analysis.gpu.steps import STEP_NAME, StepStats, dataloader_intervals, is_dataloader_wait
from pinchpoint.trace.kineto import I64, CopyKind, EventTable, Kind


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


IDLE_OP_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME, Kind.DRIVER)
TOP_IDLE_OPS = 3
MIN_IDLE_OP_SHARE = 0.05


def idle_host_ops(ev: EventTable, idle: GpuIdle | None) -> tuple[tuple[str, float], ...]:
    """The host ranges the GPU waited on: each range's self time (its own, less its children's on the
    same thread) while no GPU event ran, summed by name on the host thread busiest then, as shares of
    that idle time; the top few at ≥ 5% each. Steps and DataLoader waits are left out (they hold
    everything, or are their own finding)."""
    if idle is None or idle.end_ns <= idle.start_ns:
        return ()
    gaps = iv.subtract(iv.union(np.array([idle.start_ns]), np.array([idle.end_ns])), gpu_busy(ev))
    idle_total = iv.total(gaps)
    rows = np.flatnonzero(np.isin(ev.kind, [int(k) for k in IDLE_OP_KINDS]))
    if idle_total <= 0 or rows.size == 0:
        return ()
    starts, ends = gaps
    cum = np.concatenate(([0], np.cumsum(ends - starts)))

    def idle_before(t: I64) -> I64:
        i = np.searchsorted(starts, t, side="right")  # gaps starting at or before t
        inside = np.minimum(t, ends[np.maximum(i - 1, 0)]) - starts[np.maximum(i - 1, 0)]
        return np.where(i > 0, cum[np.maximum(i - 1, 0)] + np.maximum(inside, 0), 0)

    own = idle_before(ev.end_ns[rows]) - idle_before(ev.start_ns[rows])  # inclusive idle overlap
    own = own.astype(np.int64)
    _charge_children(ev, rows, own)
    skip = set(ev.name_ids(lambda s: STEP_NAME.match(s) is not None or is_dataloader_wait(s)).tolist())
    threads: dict[tuple[int, int], dict[int, int]] = {}
    for pid, tid, name, t in zip(
        ev.pid[rows].tolist(), ev.tid[rows].tolist(), ev.name[rows].tolist(), own.tolist(), strict=True
    ):
        if t > 0 and name not in skip:
            by = threads.setdefault((pid, tid), {})
            by[name] = by.get(name, 0) + t
    if not threads:
        return ()
    by_name = threads[_waited_on(ev, rows, threads)]
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_IDLE_OPS]
    return tuple((ev.names[n], t / idle_total) for n, t in top if t / idle_total >= MIN_IDLE_OP_SHARE)


def _waited_on(ev: EventTable, rows: I64, threads: dict[tuple[int, int], dict[int, int]]) -> tuple[int, int]:
    """The thread whose ranges to quote (one thread's self times are disjoint, so its shares add up to at
    most 1): of the threads with framework ranges, the one that launched the most GPU work (a PyTorch
    loop's main thread, not a monitor thread sleeping beside it); without launches, the one busiest
    while the GPU idled (of JAX's threads, the one the GPU waited on)."""
    host = ev.kind[rows]
    api = (host == Kind.RUNTIME) | (host == Kind.DRIVER)
    keys = list(zip(ev.pid[rows].tolist(), ev.tid[rows].tolist(), strict=True))
    framework = {k for k, a in zip(keys, api.tolist(), strict=True) if not a}
    launches: dict[tuple[int, int], int] = {}
    for k, a in zip(keys, api.tolist(), strict=True):
        if a and k in framework:
            launches[k] = launches.get(k, 0) + 1
    if launches:
        return max(launches, key=lambda k: launches[k])
    return max(threads, key=lambda k: sum(threads[k].values()))


def _charge_children(ev: EventTable, rows: I64, own: I64) -> None:
    """`own[i] -= own[child]` for each direct child of row i on its thread (rows are in (start, -dur)
    order): inclusive overlaps become self overlaps."""
    stacks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    pids, tids, st, en = (
        ev.pid[rows].tolist(),
        ev.tid[rows].tolist(),
        ev.start_ns[rows].tolist(),
        ev.end_ns[rows].tolist(),
    )
    inclusive = own.copy()
    for i in range(rows.size):
        stack = stacks.setdefault((pids[i], tids[i]), [])
        while stack and stack[-1][0] <= st[i]:
            stack.pop()
        # its parent: the innermost open range that holds it whole (`ProfilerStep#N` opens inside
        # `record_function`'s enter call and outlives it: that call is crossed, not its parent)
        for end, j in reversed(stack):
            if end >= en[i]:
                own[j] -= inclusive[i]
                break
        stack.append((en[i], i))
    np.maximum(own, 0, out=own)
