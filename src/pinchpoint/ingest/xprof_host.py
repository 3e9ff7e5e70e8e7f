"""The host plane of an XSpace (`/host:CPU`), classified once into columns that every device's trace
takes a share of (`ingest/xprof.py`).

Its lines are threads. CUDA/HIP runtime calls (`cuda*`, `hip*`; `cu*` as driver calls) carry a
`correlation_id` naming their GPU work; Python tracer events (`$file:line name`) are Python functions; an
event with a `step_num` stat (`jax.profiler.StepTraceAnnotation`, TF's `Trace(step_num=)`) is a step,
`ProfilerStep#N`; the rest (XLA and PjRt TraceMe ranges, TF ops) are host ops. `MemoryAllocation` and
`MemoryDeallocation` events of a `GPU_N_bfc` allocator are device N's memory rows.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pinchpoint.ingest.xplane import StatValue, XEvent, XLine, XPlane
from pinchpoint.trace.kineto import MISSING, Kind

RUNTIME_CALL = re.compile(r"^(?:cuda|hip)[A-Z]")
DRIVER_CALL = re.compile(r"^cu[A-Z]")
STEP_STAT = "step_num"
ALLOCATOR = re.compile(r"^GPU_(\d+)_")
_I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class HostColumns:
    """The host's events, one row each (file order); `name` indexes `names`."""

    kind: _I64
    name: _I64
    names: tuple[str, ...]
    tid: _I64
    start: _I64
    dur: _I64
    corr: _I64
    memory: tuple[tuple[int, int, int, int], ...]
    """(device, time ns, bytes allocated (+) or freed (-), the allocator's total after) per BFC event."""

    def rows_for(self, index: int, device_of: dict[int, int]) -> npt.NDArray[np.bool_]:
        """Device `index`'s share: every row but the runtime and driver calls whose work (by correlation
        id) ran on another device."""
        api = (self.kind == Kind.RUNTIME) | (self.kind == Kind.DRIVER)
        if not device_of or not api.any():
            return np.ones(self.kind.size, dtype=bool)
        keys = np.fromiter(device_of, dtype=np.int64, count=len(device_of))
        values = np.fromiter(device_of.values(), dtype=np.int64, count=len(device_of))
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        at = np.clip(np.searchsorted(keys, self.corr), 0, keys.size - 1)
        elsewhere = (keys[at] == self.corr) & (values[at] != index)
        keep: npt.NDArray[np.bool_] = ~(api & elsewhere)
        return keep


def times(line: XLine, ev: XEvent) -> tuple[int, int]:
    """(start ns, duration ns): picoseconds from the line's start, rounded down."""
    return line.timestamp_ns + ev.offset_ps // 1000, ev.duration_ps // 1000


def as_int(value: StatValue | str | None) -> int:
    """A stat as an integer (numbers written as text too), MISSING when it is none."""
    if isinstance(value, bool) or value is None:
        return MISSING
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return int(value) if value.strip().isdigit() else MISSING


def host_columns(host: XPlane | None) -> HostColumns:
    """The host plane's events, classified and walked once (every device's trace takes them)."""
    cols = {k: array("q") for k in ("kind", "name", "tid", "start", "dur", "corr")}
    ids: dict[str, int] = {}
    kinds: dict[int, Kind] = {}  # by metadata id: a name's kind is decided once
    memory: list[tuple[int, int, int, int]] = []
    for line in host.lines if host is not None else []:
        for ev in line.iter_events():
            name = host.event_names.get(ev.metadata_id, "") if host is not None else ""
            start, dur = times(line, ev)
            stats = ev.stats
            if "bytes_allocated" in stats and name in ("MemoryAllocation", "MemoryDeallocation"):
                m = ALLOCATOR.match(str(stats.get("allocator_name", "")))
                if m is not None:
                    size = as_int(stats.get("allocation_bytes"))
                    delta = size if name == "MemoryAllocation" else -size
                    memory.append((int(m.group(1)), start, delta, as_int(stats.get("bytes_allocated"))))
                continue
            if STEP_STAT in stats:
                kind, name = Kind.USER_ANNOTATION, f"ProfilerStep#{as_int(stats[STEP_STAT])}"
            else:
                kind = kinds.get(ev.metadata_id) or kinds.setdefault(ev.metadata_id, _kind(name))
            cols["kind"].append(kind)
            cols["name"].append(ids.setdefault(name or f"event#{ev.metadata_id}", len(ids)))
            cols["tid"].append(line.id)
            cols["start"].append(start)
            cols["dur"].append(dur)
            cols["corr"].append(as_int(stats.get("correlation_id")))
    arr = {
        k: np.frombuffer(v, dtype=np.int64) if len(v) else np.zeros(0, dtype=np.int64)
        for k, v in cols.items()
    }
    return HostColumns(
        kind=arr["kind"], name=arr["name"], names=tuple(ids), tid=arr["tid"], start=arr["start"],
        dur=arr["dur"], corr=arr["corr"], memory=tuple(memory),
    )  # fmt: skip


def _kind(name: str) -> Kind:
    if RUNTIME_CALL.match(name):
        return Kind.RUNTIME
    if DRIVER_CALL.match(name):
        return Kind.DRIVER
    if name.startswith("$"):
        return Kind.PYTHON_FUNCTION
    return Kind.CPU_OP
