"""Reads XProf XSpace protobufs (`*.xplane.pb` from TensorFlow's and JAX's profilers) into `KinetoTrace`s.

The same model the Kineto and Nsight readers build, so every analysis, rule and report works on it.

Devices: every `/device:GPU:N` or `/device:TPU:N` plane with events becomes one trace, numbered in device
order (`rank_known` False: a JAX process drives all its devices, so these are devices, not ranks), as
TraceLens splits a JAX trace by GPU. A GPU's events are its `Stream #N` lines (CUPTI's or roctracer's
records): a `memcpy_details` stat makes a copy (its `kind:` and `size:`), a `memset_details` a memset,
anything else a kernel; the stream is the line's id. A TPU has no streams: its `XLA Ops` line is what ran
on the core (as kernels, stream = the line id), its `Steps` line the steps. Derived rows (`XLA Modules`,
`TensorFlow Ops`, name scopes, source code) repeat what those hold, and are left out.

The host plane (`/host:CPU`) is shared: classified once (`ingest/xprof_host.py`), every device's trace
takes it, except the runtime calls whose work (by `correlation_id`) ran on another device. A line's
events are decoded as they are walked, never all held. Picoseconds are rounded down to nanoseconds.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pinchpoint.errors import TraceError
from pinchpoint.ingest.protowire import WireError
from pinchpoint.ingest.xplane import StatValue, XPlane, XSpace, decode_space
from pinchpoint.ingest.xprof_host import STEP_STAT, HostColumns, as_int, host_columns, times
from pinchpoint.ingest.xprof_json import looks_like_xprof_json, read_xprof_json
from pinchpoint.trace.kineto import (
    MISSING,
    CopyKind,
    DeviceInfo,
    EventTable,
    HostMemory,
    Kind,
    KinetoTrace,
    MemoryTable,
    TraceMeta,
)

__all__ = ["is_xprof", "is_xspace", "read_xprof_ranks", "xspace_files"]

DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU):(\d+)(?:\s.*)?$")
HOST_PLANE = "/host:CPU"
STREAM_LINE = "Stream #"
TPU_OPS_LINE, STEPS_LINE = "XLA Ops", "Steps"
_I64 = npt.NDArray[np.int64]
HOST_PID = 1 << 40
"""The host's `pid` (XProf records no process id): apart from any device index."""
MAX_FILE_BYTES = 8 << 30
COPY_KINDS = {"htod": CopyKind.H2D, "dtoh": CopyKind.D2H, "dtod": CopyKind.D2D, "hosttodevice": CopyKind.H2D}
COPY_KINDS |= {"devicetohost": CopyKind.D2H, "devicetodevice": CopyKind.D2D}
FIELD = re.compile(r"(\w+):(\S+)")


def is_xprof(path: Path) -> bool:
    """An XSpace protobuf or a trace-viewer JSON made from one."""
    return is_xspace(path) or looks_like_xprof_json(path)


def is_xspace(path: Path) -> bool:
    """True when `path` starts as an XSpace does: a first plane whose first fields decode (the protobuf
    has no magic bytes: field 1, a nested XPlane of id and name; names start with `/`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if not head or head[0] != 0x0A:  # field 1 (planes), length-delimited
        return False
    from pinchpoint.ingest.protowire import fields, varint

    try:
        size, pos = varint(head, 1, len(head))
        for number, wire, a, _ in fields(head, pos, min(len(head), pos + size)):
            if number == 2 and wire == 2:
                return head[a : a + 1] == b"/"
            if number != 1 or wire != 0:
                return False
    except WireError:
        return False
    return False


def xspace_files(path: Path) -> list[Path]:
    """`path` itself, or the `*.xplane.pb` files under a directory (a TensorBoard log directory holds
    them in `plugins/profile/RUN/HOST.xplane.pb`), in name order; where there are none, its trace-viewer
    JSON files (`HOST.trace.json.gz`, TensorFlow 2.2–2.3)."""
    if not path.is_dir():
        return [path]
    found = sorted(p for p in path.rglob("*.xplane.pb") if p.is_file())
    return found or sorted(
        p for p in path.rglob("*.trace.json.gz") if p.is_file() and looks_like_xprof_json(p)
    )


def read_xprof_ranks(path: Path) -> list[KinetoTrace]:
    """One trace per device with events, of the XSpace file `path` (or of every `*.xplane.pb` under the
    directory `path`, hosts in name order). Raises TraceError (one line) when nothing is readable."""
    files = xspace_files(Path(path))
    if not files:
        raise TraceError(f"{path}: no *.xplane.pb files in this directory")
    traces: list[KinetoTrace] = []
    for f in files:
        if looks_like_xprof_json(f):
            space, repaired = read_xprof_json(f)
        else:
            space, repaired = _space(f), []
        try:  # a protobuf's events are decoded here, as its lines are walked
            traces.extend(_device_traces(f, space, len(traces), repaired))
        except (WireError, IndexError, RecursionError, UnicodeError) as exc:
            raise TraceError(
                f"{f}: not a readable XProf XSpace protobuf ({exc}); it may be truncated"
            ) from exc
    if not traces:
        raise TraceError(f"{path}: the XSpace has no device with events (no GPU or TPU plane recorded work)")
    return traces


def _space(path: Path) -> XSpace:
    try:
        size = path.stat().st_size
        if size == 0:
            raise TraceError(f"{path}: empty file")
        if size > MAX_FILE_BYTES:
            raise TraceError(f"{path}: {size / 2**30:.1f} GiB is more than this reader takes (8 GiB)")
        data = path.read_bytes()  # (a memoryview of an mmap cannot be closed while a traceback holds it)
        return decode_space(data)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (WireError, RecursionError, MemoryError, UnicodeError) as exc:
        raise TraceError(
            f"{path}: not a readable XProf XSpace protobuf ({exc}); it may be truncated"
        ) from exc


@dataclass
class _Columns:
    """Rows of one trace, appended to int64 arrays (8 bytes a value, not a Python int), made numpy once."""

    kind: array[int] = field(default_factory=lambda: array("q"))
    name: array[int] = field(default_factory=lambda: array("q"))
    pid: array[int] = field(default_factory=lambda: array("q"))
    tid: array[int] = field(default_factory=lambda: array("q"))
    start: array[int] = field(default_factory=lambda: array("q"))
    dur: array[int] = field(default_factory=lambda: array("q"))
    corr: array[int] = field(default_factory=lambda: array("q"))
    device: array[int] = field(default_factory=lambda: array("q"))
    stream: array[int] = field(default_factory=lambda: array("q"))
    copy: array[int] = field(default_factory=lambda: array("q"))
    host: array[int] = field(default_factory=lambda: array("q"))
    nbytes: array[int] = field(default_factory=lambda: array("q"))

    def extend(
        self, *, kind: _I64, name: _I64, pid: _I64, tid: _I64, start: _I64, dur: _I64, corr: _I64
    ) -> None:
        """Host rows, as arrays (no device, copy kind or bytes)."""
        n = int(kind.size)
        for column, values in ((self.kind, kind), (self.name, name), (self.pid, pid), (self.tid, tid),
                               (self.start, start), (self.dur, dur), (self.corr, corr)):  # fmt: skip
            column.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
        missing = np.full(n, MISSING, dtype=np.int64).tobytes()
        for column in (self.device, self.stream, self.nbytes):
            column.frombytes(missing)
        for column in (self.copy, self.host):
            column.frombytes(bytes(8 * n))  # CopyKind.NONE, HostMemory.UNKNOWN

    def add(self, kind: Kind, name: int, pid: int, tid: int, start: int, dur: int, corr: int, *,
            device: int = MISSING, copy: CopyKind = CopyKind.NONE, nbytes: int = MISSING) -> None:  # fmt: skip
        self.kind.append(kind)
        self.name.append(name)
        self.pid.append(pid)
        self.tid.append(tid)
        self.start.append(start)
        self.dur.append(dur)
        self.corr.append(corr)
        self.device.append(device)
        self.stream.append(tid if device != MISSING else MISSING)
        self.copy.append(copy)
        self.host.append(HostMemory.UNKNOWN)
        self.nbytes.append(nbytes)


_Step = tuple[int, int, int, int]
"""(number, line id, start ns, duration ns) of a device `Steps` row."""


class _Names:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        return self.ids.setdefault(name, len(self.ids))


def _device_traces(path: Path, space: XSpace, first_rank: int, repaired: list[str]) -> list[KinetoTrace]:
    devices = sorted(
        ((m.group(1), int(m.group(2)), p) for p in space.planes if (m := DEVICE_PLANE.match(p.name))),
        key=lambda d: (d[0], d[1]),
    )
    host = host_columns(next((p for p in space.planes if p.name.startswith(HOST_PLANE)), None))
    out: list[KinetoTrace] = []
    device_of: dict[int, int] = {}  # correlation id -> device index, for the host's runtime calls
    built = []
    for kind, index, plane in devices:
        names, cols = _Names(), _Columns()
        steps = _device_rows(kind, index, plane, names, cols)
        if not cols.kind:
            continue
        for c, k in zip(cols.corr, cols.kind, strict=True):
            if c != MISSING and Kind(k).on_gpu:
                device_of.setdefault(c, index)
        built.append((kind, index, plane, names, cols, steps))
    for kind, index, plane, names, cols, steps in built:
        marked = len(cols.kind)
        memory = _host_rows(host, index, device_of, names, cols)
        if Kind.USER_ANNOTATION not in cols.kind[marked:].tolist():  # the host marked no steps: the device's
            for number, tid, start, dur in steps:
                cols.add(
                    Kind.USER_ANNOTATION, names(f"ProfilerStep#{number}"), HOST_PID, tid, start, dur, MISSING
                )
        warnings = (*repaired, *(f"XSpace: {e}" for e in space.errors[:5]))
        meta = TraceMeta(path=str(path), rank=first_rank + len(out), devices=(_device_info(kind, index, plane),),
                         schema=f"xprof-{kind.lower()}", trace_bytes=path.stat().st_size)  # fmt: skip
        out.append(KinetoTrace(meta=meta, events=_table(cols, names), memory=memory, warnings=warnings))
    return out


def _device_rows(kind: str, index: int, plane: XPlane, names: _Names, cols: _Columns) -> list[_Step]:
    """The device's work into `cols`; its `Steps` line's steps returned (used when the host marked none)."""
    steps: list[_Step] = []
    if kind == "TPU":
        lines = [ln for ln in plane.lines if ln.name in (TPU_OPS_LINE, STEPS_LINE)]
    else:
        lines = [ln for ln in plane.lines if ln.name.startswith(STREAM_LINE)]
    for line in lines:
        for ev in line.iter_events():
            name = plane.event_names.get(ev.metadata_id, f"event#{ev.metadata_id}")
            start, dur = times(line, ev)
            if line.name == STEPS_LINE:
                step = name if name.isdigit() else str(ev.stats.get(STEP_STAT, ""))
                if step.isdigit():
                    steps.append((int(step), line.id, start, dur))
                continue
            stats = {**plane.event_stats.get(ev.metadata_id, {}), **ev.stats}
            corr = as_int(stats.get("correlation_id"))
            what, copy, nbytes = _gpu_kind(name, stats)
            cols.add(
                what, names(name), index, line.id, start, dur, corr, device=index, copy=copy, nbytes=nbytes
            )
    return steps


def _gpu_kind(name: str, stats: dict[str, StatValue]) -> tuple[Kind, CopyKind, int]:
    details = stats.get("memcpy_details")
    if isinstance(details, str):
        info = dict(FIELD.findall(details))
        copy = COPY_KINDS.get(info.get("kind", "").lower())
        if copy is None:
            low = name.lower()
            copy = next((v for k, v in COPY_KINDS.items() if k in low), CopyKind.OTHER)
        return Kind.MEMCPY, copy, as_int(info.get("size"))
    memset = stats.get("memset_details")
    if isinstance(memset, str) or "memset" in name.lower():
        size = as_int(dict(FIELD.findall(memset)).get("size")) if isinstance(memset, str) else MISSING
        return Kind.MEMSET, CopyKind.NONE, size
    return Kind.KERNEL, CopyKind.NONE, MISSING


def _host_rows(
    host: HostColumns, index: int, device_of: dict[int, int], names: _Names, cols: _Columns
) -> MemoryTable:
    """Device `index`'s share of the host (every event but the runtime calls whose work ran on another
    device) appended to `cols`, and its allocator's memory rows."""
    keep = host.rows_for(index, device_of)
    remap = np.array([names(n) for n in host.names] or [0], dtype=np.int64)
    n = int(keep.sum())
    cols.extend(
        kind=host.kind[keep], name=remap[host.name[keep]], pid=np.full(n, HOST_PID, dtype=np.int64),
        tid=host.tid[keep], start=host.start[keep], dur=host.dur[keep], corr=host.corr[keep],
    )  # fmt: skip
    return _memory([(t, d, total) for dev, t, d, total in host.memory if dev == index], index)


def _table(c: _Columns, names: _Names) -> EventTable:
    start, dur = np.frombuffer(c.start, dtype=np.int64), np.frombuffer(c.dur, dtype=np.int64)
    order = np.lexsort((-dur, start))

    def col(values: array[int], dtype: type) -> npt.NDArray[Any]:
        return np.frombuffer(values, dtype=np.int64)[order].astype(dtype)

    return EventTable(
        kind=col(c.kind, np.int8),
        name=col(c.name, np.int32),
        names=tuple(names.ids),
        pid=col(c.pid, np.int64),
        tid=col(c.tid, np.int64),
        start_ns=start[order],
        dur_ns=dur[order],
        correlation=col(c.corr, np.int64),
        external_id=np.full(len(order), MISSING, dtype=np.int64),
        device=col(c.device, np.int32),
        stream=col(c.stream, np.int64),
        copy_kind=col(c.copy, np.int8),
        host_memory=col(c.host, np.int8),
        bytes=col(c.nbytes, np.int64),
    )


def _memory(rows: list[tuple[int, int, int]], device: int = 0) -> MemoryTable:
    rows.sort()
    n = len(rows)
    return MemoryTable(
        t_ns=np.array([r[0] for r in rows], dtype=np.int64),
        bytes_delta=np.array([r[1] for r in rows], dtype=np.int64),
        total_allocated=np.array([r[2] for r in rows], dtype=np.int64),
        total_reserved=np.full(n, MISSING, dtype=np.int64),
        device_type=np.ones(n, dtype=np.int8),
        device_id=np.full(n, device, dtype=np.int32),
    )


def _device_info(kind: str, index: int, plane: XPlane) -> DeviceInfo:
    s = plane.stats
    vendor_text = str(s.get("device_vendor", "")).lower()
    vendor = (
        "google"
        if kind == "TPU"
        else ("amd" if "amd" in vendor_text else "nvidia" if "nvidia" in vendor_text else "unknown")
    )
    major, minor = as_int(s.get("compute_cap_major")), as_int(s.get("compute_cap_minor"))
    name = str(s.get("device_type_string") or s.get("device_name") or "")
    if not name:
        cores = as_int(s.get("core_count"))
        name = f"{s.get('device_vendor') or kind} {kind}" + (f" ({cores} cores)" if cores > 0 else "")
    memory = as_int(s.get("memory_size"))
    cores = as_int(s.get("core_count"))
    return DeviceInfo(
        index=index,
        name=name,
        compute_capability=(major, minor) if vendor == "nvidia" and major >= 0 and minor >= 0 else None,
        total_memory_bytes=memory if memory > 0 else None,
        sm_count=cores if cores > 0 else None,
        vendor=vendor,
    )
