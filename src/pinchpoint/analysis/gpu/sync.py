"""Host↔device synchronisation: where the host thread blocks until the GPU catches up.

Two sources, counted separately and summed for the blocked time:
- explicit sync API calls (`cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaEventSynchronize`, their
  HIP and driver twins): `.item()`, `.cpu()`, `print(tensor)`, `nonzero()`, `torch.cuda.synchronize()`;
- synchronous copies (see `memcpy.py`): the copy call itself blocks.

Each sync is attributed to the framework op it happened under on the same thread: the outermost CPU op
(`aten::item`, `aten::to`, `aten::nonzero`: what the user called) and the innermost (e.g.
`aten::_local_scalar_dense`), both by time containment, so a `host.sync` finding can point at the line to change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    HOST_API_KINDS,
    I64,
    busy_within,
    kind_mask,
    name_mask,
)
from pinchpoint.analysis.gpu.memcpy import blocking_copy_calls, blocking_h2d_calls, memcpy_stats
from pinchpoint.analysis.gpu.steps import STEP_NAME, is_dataloader_wait, step_bounds
from pinchpoint.trace.kineto import EventTable, Kind, KinetoTrace

SYNC_APIS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
    }
)
NO_OP = "(no enclosing op)"


def is_sync_api(name: str) -> bool:
    return name in SYNC_APIS or name.split("_v", 1)[0] in SYNC_APIS  # cudaStreamSynchronize_v3020


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncApi:
    name: str
    count: int
    total_ns: int
    max_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncSite:
    op: str
    """Outermost CPU op around the blocking call on its thread (what the program called)."""
    inner_op: str
    """The innermost CPU op around the call. Not by `external_id`: in some traces a runtime call's external
    id names the op that started last on the thread, which may have ended already (HTA's AlexNet trace:
    `cudaStreamSynchronize` → `detach`, `aten::empty`)."""
    count: int
    total_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncStats:
    calls: int
    """Explicit sync API calls."""
    calls_ns: int
    sync_copies: int
    """Copies whose API call blocked the host until they finished."""
    sync_copy_ns: int
    blocked_ns: int
    """Host time blocked: sync API calls plus synchronous copy calls."""
    by_api: tuple[SyncApi, ...]
    """Sync and blocking copy APIs, most time first."""
    sites: tuple[SyncSite, ...]
    """(outer op, inner op) pairs, most time first."""
    calls_per_step: float | None = None
    """Blocking calls (sync APIs + sync copies) per ProfilerStep; None without steps."""
    blocked_step_share: float | None = None
    """Blocked host time inside steps over total step time; None without steps."""
    h2d_copy_blocked_ns: int = 0
    """The part of `blocked_ns` spent in synchronous host→device copy calls (the `transfer.h2d` fix,
    pinned memory and non_blocking, removes it; the `host.sync` fix does not)."""


def sync_stats(trace: KinetoTrace) -> SyncStats:
    ev = trace.events
    syncs = np.flatnonzero(name_mask(ev, is_sync_api, *HOST_API_KINDS))
    copies = memcpy_stats(trace)
    copy_rows = blocking_copy_calls(ev)
    blocking = np.union1d(syncs, copy_rows)

    by_api = _group(ev, blocking, ev.name[blocking])
    apis = tuple(SyncApi(name=ev.names[k], count=c, total_ns=t, max_ns=m) for k, (c, t, m) in by_api.items())
    outer, inner = _enclosing_ops(ev, blocking)
    sites: dict[tuple[str, str], tuple[int, int]] = {}
    for row, o, i in zip(blocking.tolist(), outer, inner, strict=True):
        c, t = sites.get((o, i), (0, 0))
        sites[(o, i)] = (c + 1, t + int(ev.dur_ns[row]))

    numbers, s_starts, s_ends = step_bounds(ev)
    per_step = share = None
    if numbers.size:
        b = iv.union(ev.start_ns[blocking], ev.end_ns[blocking])
        in_steps = busy_within(b, s_starts, s_ends)
        share = float(in_steps.sum()) / max(int((s_ends - s_starts).sum()), 1)
        starts = np.sort(ev.start_ns[blocking])
        n = np.searchsorted(starts, s_ends) - np.searchsorted(starts, s_starts)
        per_step = float(n.mean())
    calls_ns = int(ev.dur_ns[syncs].sum())
    return SyncStats(
        calls=int(syncs.size),
        calls_ns=calls_ns,
        sync_copies=copies.sync_copies,
        sync_copy_ns=copies.sync_host_ns,
        blocked_ns=int(ev.dur_ns[blocking].sum()),
        by_api=tuple(sorted(apis, key=lambda a: -a.total_ns)),
        sites=tuple(
            sorted(
                (SyncSite(op=o, inner_op=i, count=c, total_ns=t) for (o, i), (c, t) in sites.items()),
                key=lambda s: -s.total_ns,
            )
        ),
        calls_per_step=per_step,
        blocked_step_share=share,
        h2d_copy_blocked_ns=int(ev.dur_ns[blocking_h2d_calls(ev)].sum()),
    )


def _group(ev: EventTable, rows: I64, keys: np.ndarray) -> dict[int, tuple[int, int, int]]:
    out: dict[int, tuple[int, int, int]] = {}
    for k in np.unique(keys).tolist():
        d = ev.dur_ns[rows[keys == k]]
        out[int(k)] = (int(d.size), int(d.sum()), int(d.max()))
    return out


def _enclosing_ops(ev: EventTable, calls: I64) -> tuple[list[str], list[str]]:
    """Outermost and innermost CPU op around each call on the same (pid, tid)."""
    wrapper = ev.mask_names(lambda s: STEP_NAME.match(s) is not None or is_dataloader_wait(s))
    ops_mask = kind_mask(ev, Kind.CPU_OP) & ~wrapper
    op_rows = np.flatnonzero(ops_mask)
    start, end = ev.start_ns, ev.end_ns  # end_ns is computed on each access
    outer = [NO_OP] * calls.size
    inner = [NO_OP] * calls.size
    for pid, tid in {(int(p), int(t)) for p, t in zip(ev.pid[calls], ev.tid[calls], strict=True)}:
        mine = op_rows[(ev.pid[op_rows] == pid) & (ev.tid[op_rows] == tid)]
        if mine.size == 0:
            continue
        s, e = start[mine], end[mine]
        run_end = np.maximum.accumulate(e)
        top = np.ones(mine.size, dtype=bool)
        top[1:] = s[1:] >= run_end[:-1]
        top_rows = mine[top]
        ts = start[top_rows]
        for j in np.flatnonzero((ev.pid[calls] == pid) & (ev.tid[calls] == tid)).tolist():
            c = calls[j]
            k = int(np.searchsorted(ts, start[c], side="right")) - 1
            if k < 0 or end[top_rows[k]] < end[c]:
                continue
            outer[j] = ev.names[ev.name[top_rows[k]]]
            # The innermost enclosing op: the latest-starting op of this top-level tree that covers the call.
            lo = int(np.searchsorted(s, ts[k], side="left"))
            hi = int(np.searchsorted(s, start[c], side="right"))
            cover = np.flatnonzero(e[lo:hi] >= end[c])
            inner[j] = ev.names[ev.name[mine[lo + cover[-1]]]]
    return outer, inner
