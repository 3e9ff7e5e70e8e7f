"""Small pieces the GPU analyses share: distributions, event masks, correlation joins, GPU busy time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.trace.kineto import EventTable, Kind

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

HOST_RANGE_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)
"""Host-side ranges. The 2021 schema files `ProfilerStep#N` and DataLoader ranges under `Operator` (CPU_OP)."""
GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
HOST_API_KINDS = (Kind.RUNTIME, Kind.DRIVER)


@dataclass(frozen=True, slots=True, kw_only=True)
class Distribution:
    """Summary of a set of integer-nanosecond values (zeros when `count` is 0)."""

    count: int
    total_ns: int
    mean_ns: float
    median_ns: float
    p90_ns: float
    max_ns: int


def distribution(values: I64) -> Distribution:
    if values.size == 0:
        return Distribution(count=0, total_ns=0, mean_ns=0.0, median_ns=0.0, p90_ns=0.0, max_ns=0)
    return Distribution(
        count=int(values.size),
        total_ns=int(values.sum()),
        mean_ns=float(values.mean()),
        median_ns=float(np.median(values)),
        p90_ns=float(np.percentile(values, 90)),
        max_ns=int(values.max()),
    )


def kind_mask(ev: EventTable, *kinds: Kind) -> Mask:
    return np.isin(ev.kind, np.array([int(k) for k in kinds], dtype=np.int8))


def name_mask(ev: EventTable, predicate: Callable[[str], bool], *kinds: Kind) -> Mask:
    """Rows of the given kinds (all kinds when none) whose name satisfies `predicate`."""
    m = ev.mask_names(predicate)
    return m & kind_mask(ev, *kinds) if kinds else m


def join_by_key(keys: I64, table_keys: I64) -> I64:
    """For each of `keys`, a row index into `table_keys` with the same value, or -1 (missing keys: -1)."""
    out = np.full(keys.shape, -1, dtype=np.int64)
    if keys.size == 0 or table_keys.size == 0:
        return out
    order = np.argsort(table_keys, kind="stable")
    sorted_keys = table_keys[order]
    pos = np.searchsorted(sorted_keys, keys)
    pos_ok = np.minimum(pos, sorted_keys.size - 1)
    hit = (pos < sorted_keys.size) & (sorted_keys[pos_ok] == keys) & (keys >= 0)
    out[hit] = order[pos_ok[hit]]
    return out


def gpu_busy(ev: EventTable, device: int | None = None, kinds: tuple[Kind, ...] = GPU_KINDS) -> iv.Intervals:
    """Union of the GPU activity intervals (kernels, copies, memsets), on one device or all."""
    m = kind_mask(ev, *kinds)
    if device is not None:
        m &= ev.device == device
    return iv.union(ev.start_ns[m], ev.end_ns[m])


def busy_within(busy: iv.Intervals, starts: I64, ends: I64) -> I64:
    """For each window [starts[i], ends[i]), the time `busy` (a canonical interval set) covers inside it."""
    s, e = busy
    if s.size == 0 or starts.size == 0:
        return np.zeros(starts.shape, dtype=np.int64)
    # Cumulative covered time up to a point t: full intervals before t plus the partial one containing t.
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_until(t: I64) -> I64:
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.minimum(t, e[last]) - s[last], 0)
        return np.asarray(full + partial, dtype=np.int64)

    return covered_until(ends) - covered_until(starts)
