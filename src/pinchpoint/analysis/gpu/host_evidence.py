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
        g = np.maximum(i - 1, 0)
        inside = np.minimum(t, ends[g]) - starts[g]
        return np.where(i > 0, cum[g] + np.maximum(inside, 0), 0)

    own = np.empty(rows.size, dtype=np.int64)  # each range's inclusive idle overlap, in slices (memory)
    for lo in range(0, rows.size, SLICE_ROWS):
        r = rows[lo : lo + SLICE_ROWS]
        own[lo : lo + r.size] = idle_before(ev.end_ns[r]) - idle_before(ev.start_ns[r])
    # Only ranges that overlap the idle time can hold any of it, and each one's parent (which holds it
    # whole) overlaps it too: the rest are dropped before the walk (half the rows of a 1 GB trace).
    launching = _launching(ev, rows)
    overlapping = own > 0
    rows, own = rows[overlapping], own[overlapping]
    _charge_children(ev, rows, own)
    skip = ev.name_ids(lambda s: STEP_NAME.match(s) is not None or is_dataloader_wait(s))
    keep = (own > 0) & ~np.isin(ev.name[rows], skip)
    if not keep.any():
        return ()
    if launching is None:
        busy = _thread_sums(ev, rows[keep], own[keep])
        launching = max(busy, key=lambda k: busy[k][0])
    pid, tid = launching
    mine = keep & (ev.pid[rows] == pid) & (ev.tid[rows] == tid)
    names, first, inverse = np.unique(ev.name[rows[mine]], return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=own[mine].astype(np.float64), minlength=names.size)
    order = sorted(range(names.size), key=lambda k: (-sums[k], first[k]))[:TOP_IDLE_OPS]
    return tuple(
        (ev.names[int(names[k])], float(sums[k]) / idle_total)
        for k in order
        if sums[k] / idle_total >= MIN_IDLE_OP_SHARE
    )


def _thread_sums(ev: EventTable, rows: I64, *values: np.ndarray) -> dict[tuple[int, int], list[float]]:
    """Each of `values` summed per thread (pid, tid) of `rows`, threads in the order they first appear;
    a slice of rows at a time (one pass over a 1 GB trace's 2.2 M host rows at once peaked 145 MB above
    it)."""
    out: dict[tuple[int, int], list[float]] = {}
    for lo in range(0, rows.size, SLICE_ROWS):
        r = rows[lo : lo + SLICE_ROWS]
        pairs, first, inverse = np.unique(
            np.stack([ev.pid[r], ev.tid[r]], axis=1), axis=0, return_index=True, return_inverse=True
        )
        inverse = inverse.reshape(-1)
        sums = [np.bincount(inverse, weights=v[lo : lo + r.size], minlength=len(pairs)) for v in values]
        for k in np.argsort(first, kind="stable").tolist():
            acc = out.setdefault((int(pairs[k, 0]), int(pairs[k, 1])), [0.0] * len(values))
            for i, s in enumerate(sums):
                acc[i] += float(s[k])
    return out


def _launching(ev: EventTable, rows: I64) -> tuple[int, int] | None:
    """The thread whose ranges to quote (one thread's self times are disjoint, so its shares add up to at
    most 1): of the threads with framework ranges, the one that launched the most GPU work (a PyTorch
    loop's main thread, not a monitor thread sleeping beside it); None without launches (then the
    caller takes the one busiest while the GPU idled: of JAX's threads, the one the GPU waited on).
    Ties: the thread seen first."""
    host = ev.kind[rows]
    api = (host == Kind.RUNTIME) | (host == Kind.DRIVER)
    sums = _thread_sums(ev, rows, api, ~api)  # (launches, framework ranges) per thread
    counted = {k: launches for k, (launches, framework) in sums.items() if launches > 0 and framework > 0}
    return max(counted, key=lambda k: counted[k]) if counted else None


CHARGE_CHUNK = 1 << 16
"""Rows turned into Python lists at a time by the walk (a whole 1 GB trace's at once held ~350 MB)."""
SLICE_ROWS = 4 * CHARGE_CHUNK
"""Rows per slice of the vectorised passes (the idle overlap, the per-thread sums)."""


def _charge_children(ev: EventTable, rows: I64, own: I64) -> None:
    """`own[i] -= own[child]` for each direct child of row i on its thread (rows are in (start, -dur)
    order): inclusive overlaps become self overlaps."""
    parent = _parents(ev, rows)
    has = parent >= 0
    charged = np.zeros(own.size, dtype=np.int64)
    np.add.at(charged, parent[has], own[has])
    own -= charged
    np.maximum(own, 0, out=own)


def _parents(ev: EventTable, rows: I64) -> I64:
    """Each row's parent (its index in `rows`, -1 for none): the innermost range open on its thread
    that holds it whole (`ProfilerStep#N` opens inside `record_function`'s enter call and outlives it:
    that call is crossed, not its parent). One walk, `CHARGE_CHUNK` rows of Python values at a time."""
    parent = np.full(rows.size, -1, dtype=np.int64)
    stacks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for lo in range(0, rows.size, CHARGE_CHUNK):
        chunk = rows[lo : lo + CHARGE_CHUNK]
        pids, tids, st, en = (a[chunk].tolist() for a in (ev.pid, ev.tid, ev.start_ns, ev.end_ns))
        found = []
        for k in range(len(st)):
            stack = stacks.setdefault((pids[k], tids[k]), [])
            while stack and stack[-1][0] <= st[k]:
                stack.pop()
            p = -1
            for end, j in reversed(stack):
                if end >= en[k]:
                    p = j
                    break
            found.append(p)
            stack.append((en[k], lo + k))
        parent[lo : lo + len(found)] = found
    return parent
