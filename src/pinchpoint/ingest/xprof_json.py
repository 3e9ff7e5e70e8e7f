"""The TensorBoard profile plugin's trace-viewer JSON (`*.trace.json.gz`, what TensorFlow 2.2–2.3 wrote and
what XProf still serves its trace viewer): an XSpace turned into Chrome trace events, read back into one.

The layout (XProf's `trace_events_to_json`): `{"displayTimeUnit":"ns","metadata":{"highres-ticks":true},
"traceEvents":[...]}`; a `process_name` metadata event names each `pid` after its plane (`/device:GPU:0`,
`/host:CPU`), a `thread_name` event each `tid` after its line (`Stream #7(Kernel)`, a host thread);
complete events (`"ph":"X"`) carry `ts` and `dur` in microseconds with picosecond digits, and their
stats as `args` (numbers as strings). Each pid becomes an `XPlane`, each tid an `XLine`, so
`ingest/xprof.py` maps them exactly as it maps a protobuf. Streamed in blocks, as the Kineto reader is.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec

from pinchpoint.errors import TraceError
from pinchpoint.ingest.kineto_stream import DEFAULT_MAX_JSON_BYTES, EventStream, Source
from pinchpoint.ingest.xplane import StatValue, XEvent, XLine, XPlane, XSpace

__all__ = ["looks_like_xprof_json", "read_xprof_json"]

SNIFF_BYTES = 1 << 16
_PLANE_NAME = re.compile(rb'"process_name"[^{}]*"args"\s*:\s*\{\s*"name"\s*:\s*"/(?:device|host):')
_PLANE_NAME_FIRST = re.compile(
    rb'"args"\s*:\s*\{\s*"name"\s*:\s*"/(?:device|host):[^"]*"\s*\}[^{}]*"process_name"'
)


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    pid: int = -1
    tid: int = 0
    ts: float = 0.0
    dur: float = 0.0
    args: dict[str, Any] = msgspec.field(default_factory=dict)


_decoder = msgspec.json.Decoder(list[_Event])
_one_decoder = msgspec.json.Decoder(_Event)


def looks_like_xprof_json(path: Path) -> bool:
    """True for a trace-viewer JSON (plain or gzip): a `process_name` event that names a pid after an XProf
    plane (`/device:...`, `/host:...`) within the first 64 KB of text."""
    try:
        with open(path, "rb") as f:
            raw = f.read(SNIFF_BYTES)
        if raw[:2] == b"\x1f\x8b":
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, SNIFF_BYTES)
    except (OSError, zlib.error, EOFError, gzip.BadGzipFile):
        return False
    if not raw.lstrip().startswith(b"{") or b'"traceEvents"' not in raw:
        return False
    return _PLANE_NAME.search(raw) is not None or _PLANE_NAME_FIRST.search(raw) is not None


def read_xprof_json(path: Path, max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> tuple[XSpace, list[str]]:
    """The XSpace a trace-viewer JSON was made from, and what was repaired or skipped while reading it."""
    planes: dict[int, XPlane] = {}
    lines: dict[tuple[int, int], XLine] = {}
    meta_ids: dict[tuple[int, str], int] = {}
    src = Source(path, max_json_bytes)
    try:
        stream = EventStream(src, _decoder, _one_decoder)
        for events in stream:
            for ev in events:
                _add(ev, planes, lines, meta_ids)
    finally:
        src.close()
    warnings = []
    if stream.truncated or src.truncated_gzip:
        if stream.n_events == 0:
            raise TraceError(f"{path}: truncated before the first complete event; nothing to read")
        warnings.append(f"trace truncated after {stream.n_events} events (the file ends early)")
    if stream.skipped:
        warnings.append(f"{stream.skipped} trace events with fields of the wrong type were skipped")
    for (pid, _), line in lines.items():
        planes[pid].lines.append(line)
    return XSpace(planes=list(planes.values()), errors=[], hostnames=[]), warnings


def _plane(planes: dict[int, XPlane], pid: int) -> XPlane:
    plane = planes.get(pid)
    if plane is None:
        plane = planes[pid] = XPlane(id=pid, name=f"pid {pid}")
    return plane


def _add(
    ev: _Event,
    planes: dict[int, XPlane],
    lines: dict[tuple[int, int], XLine],
    ids: dict[tuple[int, str], int],
) -> None:
    if ev.ph == "M":
        name = ev.args.get("name")
        if isinstance(name, str) and ev.name == "process_name":
            _plane(planes, ev.pid).name = name
        elif isinstance(name, str) and ev.name == "thread_name":
            _line(lines, ev.pid, ev.tid).name = name
        return
    if ev.ph != "X" or ev.pid < 0:
        return
    plane = _plane(planes, ev.pid)
    key = (ev.pid, ev.name)
    mid = ids.get(key)
    if mid is None:
        mid = ids[key] = len(plane.event_names) + 1
        plane.event_names[mid] = ev.name
    stats: dict[str, StatValue] = {
        k: v for k, v in ev.args.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)
    }
    offset = round(ev.ts * 1e6)  # µs -> ps; the line's timestamp stays 0
    _line(lines, ev.pid, ev.tid).events.append(
        XEvent(metadata_id=mid, offset_ps=offset, duration_ps=max(round(ev.dur * 1e6), 0), stats=stats)
    )


def _line(lines: dict[tuple[int, int], XLine], pid: int, tid: int) -> XLine:
    line = lines.get((pid, tid))
    if line is None:
        line = lines[(pid, tid)] = XLine(id=tid, name=f"tid {tid}", timestamp_ns=0)
    return line
