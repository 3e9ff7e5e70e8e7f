"""XProf's XSpace (`*.xplane.pb`, written by TensorFlow's and JAX's profilers), decoded from the wire.

The schema is openxla/xla's `xla/tsl/profiler/protobuf/xplane.proto` (field numbers below, decoded with
`protowire`; no generated code, no TensorFlow). An XSpace holds planes (`/host:CPU`, `/device:GPU:0`,
`/device:TPU:0`, ...); a plane holds lines (GPU streams, host threads, derived rows such as `XLA Ops`);
a line holds events, timed in picoseconds from the line's `timestamp_ns`. Names live in the plane's
metadata maps: an event names its `XEventMetadata` by id, a stat its `XStatMetadata`. A stat's
`ref_value` is a string stored as a stat metadata name (how XProf shares long kernel details).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from pinchpoint.ingest.protowire import (
    FIXED32,
    FIXED64,
    LENGTH,
    VARINT,
    WireError,
    double,
    fields,
    signed,
    text,
    varint,
)

StatValue = int | float | str

# XSpace
SPACE_PLANES, SPACE_ERRORS, SPACE_WARNINGS, SPACE_HOSTNAMES = 1, 2, 3, 4
# XPlane
PLANE_ID, PLANE_NAME, PLANE_LINES, PLANE_EVENT_METADATA, PLANE_STAT_METADATA, PLANE_STATS = 1, 2, 3, 4, 5, 6
# XLine
LINE_ID, LINE_NAME, LINE_TIMESTAMP_NS, LINE_EVENTS, LINE_DURATION_PS = 1, 2, 3, 4, 9
LINE_DISPLAY_ID, LINE_DISPLAY_NAME = 10, 11
# XEvent
EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS, EVENT_NUM_OCCURRENCES = 1, 2, 3, 4, 5
# XStat
STAT_METADATA_ID, STAT_DOUBLE, STAT_UINT64, STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF = 1, 2, 3, 4, 5, 6, 7
# XEventMetadata / XStatMetadata
META_ID, META_NAME, META_DISPLAY_NAME, META_STATS = 1, 2, 4, 5
MAP_KEY, MAP_VALUE = 1, 2


NO_STATS: dict[str, StatValue] = {}
"""The stats of an event that has none we use: one shared, never written, dict (most events)."""


@dataclass(slots=True)
class XEvent:
    metadata_id: int
    offset_ps: int
    duration_ps: int
    stats: dict[str, StatValue]


@dataclass(slots=True)
class XLine:
    id: int
    name: str
    timestamp_ns: int
    events: list[XEvent] = field(default_factory=list)
    """Events held as objects (the trace viewer's JSON, tests); a decoded protobuf keeps `raw` instead."""
    raw: tuple[bytes | memoryview, int, int, dict[int, str]] | None = None
    """(buffer, start, end, stat names) of the line's message: its events are decoded as they are
    walked (`iter_events`), one at a time, never all held (a line can carry millions)."""

    def iter_events(self) -> Iterator[XEvent]:
        """The line's events, in file order. Raises `WireError` on a damaged event."""
        yield from self.events
        if self.raw is not None:
            buf, start, end, stat_names = self.raw
            for number, wire, a, b in fields(buf, start, end):
                if number == LINE_EVENTS and wire == LENGTH:
                    yield _event(buf, a, b, stat_names)


@dataclass(slots=True)
class XPlane:
    id: int
    name: str
    lines: list[XLine] = field(default_factory=list)
    event_names: dict[int, str] = field(default_factory=dict)
    event_stats: dict[int, dict[str, StatValue]] = field(default_factory=dict)
    """Stats every event of one metadata id shares (TPU ops keep their HLO details here)."""
    stats: dict[str, StatValue] = field(default_factory=dict)
    """The plane's own stats: device vendor, core count, memory size, compute capability."""


@dataclass(slots=True)
class XSpace:
    planes: list[XPlane]
    errors: list[str]
    hostnames: list[str]


def decode_space(buf: bytes | memoryview) -> XSpace:
    """The XSpace in `buf`. Raises `WireError` on bytes that are not one."""
    try:
        return _space(buf)
    except IndexError as exc:  # every read is bounded by its message; this is a last guard
        raise WireError(f"a field runs past the end of the file ({exc})") from exc


def _space(buf: bytes | memoryview) -> XSpace:
    planes: list[XPlane] = []
    errors: list[str] = []
    hostnames: list[str] = []
    for number, wire, a, b in fields(buf):
        if number == SPACE_PLANES and wire == LENGTH:
            planes.append(_plane(buf, a, b))
        elif number == SPACE_ERRORS and wire == LENGTH:
            errors.append(text(buf, a, b))
        elif number == SPACE_HOSTNAMES and wire == LENGTH:
            hostnames.append(text(buf, a, b))
        elif number in (SPACE_PLANES, SPACE_ERRORS, SPACE_WARNINGS, SPACE_HOSTNAMES) and wire != LENGTH:
            raise WireError(f"XSpace field {number} has wire type {wire} at byte {a}")
    return XSpace(planes=planes, errors=errors, hostnames=hostnames)


def _plane(buf: bytes | memoryview, start: int, end: int) -> XPlane:
    plane = XPlane(id=0, name="")
    stat_names: dict[int, str] = {}
    raw_lines: list[tuple[int, int]] = []
    raw_stats: list[tuple[int, int]] = []
    raw_events_meta: list[tuple[int, int]] = []
    for number, wire, a, b in fields(buf, start, end):
        if number == PLANE_ID and wire == VARINT:
            plane.id = signed(a)
        elif wire != LENGTH:
            continue
        elif number == PLANE_NAME:
            plane.name = text(buf, a, b)
        elif number == PLANE_LINES:
            raw_lines.append((a, b))
        elif number == PLANE_EVENT_METADATA:
            raw_events_meta.append((a, b))
        elif number == PLANE_STAT_METADATA:
            key, name, _ = _metadata_entry(buf, a, b)
            stat_names[key] = name
        elif number == PLANE_STATS:
            raw_stats.append((a, b))
    # stats name their metadata, which may come after them in the plane: resolve once all is read
    for a, b in raw_events_meta:
        key, name, stats = _metadata_entry(buf, a, b)
        plane.event_names[key] = name
        if stats:
            plane.event_stats[key] = dict(_stat(buf, sa, sb, stat_names) for sa, sb in stats)
    plane.stats = dict(_stat(buf, a, b, stat_names) for a, b in raw_stats)
    plane.lines = [_line(buf, a, b, stat_names) for a, b in raw_lines]
    return plane


def _metadata_entry(buf: bytes | memoryview, start: int, end: int) -> tuple[int, str, list[tuple[int, int]]]:
    """A map entry (key, XEventMetadata or XStatMetadata): its key, its name (the display name when
    there is no name) and its stats' spans."""
    key, name, display = 0, "", ""
    stats: list[tuple[int, int]] = []
    for number, wire, a, b in fields(buf, start, end):
        if number == MAP_KEY and wire == VARINT:
            key = signed(a)
        elif number == MAP_VALUE and wire == LENGTH:
            for n2, w2, a2, b2 in fields(buf, a, b):
                if n2 == META_ID and w2 == VARINT and not key:
                    key = signed(a2)
                elif n2 == META_NAME and w2 == LENGTH:
                    name = text(buf, a2, b2)
                elif n2 == META_DISPLAY_NAME and w2 == LENGTH:
                    display = text(buf, a2, b2)
                elif n2 == META_STATS and w2 == LENGTH:
                    stats.append((a2, b2))
    return key, name or display, stats


def _line(buf: bytes | memoryview, start: int, end: int, stat_names: dict[int, str]) -> XLine:
    line = XLine(id=0, name="", timestamp_ns=0)
    display = ""
    for number, wire, a, b in fields(buf, start, end):
        if wire == VARINT:
            if number == LINE_ID:
                line.id = signed(a)
            elif number == LINE_TIMESTAMP_NS:
                line.timestamp_ns = signed(a)
        elif wire != LENGTH:
            continue
        elif number == LINE_EVENTS:
            continue  # decoded as walked (`XLine.iter_events`)
        elif number == LINE_NAME:
            line.name = text(buf, a, b)
        elif number == LINE_DISPLAY_NAME:
            display = text(buf, a, b)
    line.name = line.name or display
    line.raw = (buf, start, end, stat_names)
    return line


def _event(buf: bytes | memoryview, start: int, end: int, stat_names: dict[int, str]) -> XEvent:
    """One XEvent, on the hot path (most of a file's bytes): one-byte tags and varints are read inline,
    and only the stats `WANTED_STATS` names are decoded (a line of the Python tracer carries thousands
    of events; its allocator stats are skipped by length)."""
    metadata_id = offset = duration = 0
    stats: dict[str, StatValue] = NO_STATS
    pos = start
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = varint(buf, pos, end)
        wire = tag & 7
        if wire == VARINT:
            value = buf[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = varint(buf, pos, end)
            number = tag >> 3
            if number == EVENT_OFFSET_PS:
                offset = signed(value)
            elif number == EVENT_DURATION_PS:
                duration = signed(value)
            elif number == EVENT_METADATA_ID:
                metadata_id = signed(value)
        elif wire == LENGTH:
            size, pos = varint(buf, pos, end)
            if size > end - pos:
                raise WireError(f"an event's field of {size} bytes runs past it at byte {pos}")
            if tag >> 3 == EVENT_STATS and size and _wanted(buf, pos, pos + size, stat_names):
                name, stat = _stat(buf, pos, pos + size, stat_names)
                if stats is NO_STATS:
                    stats = {}
                stats[name] = stat
            pos += size
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        else:
            raise WireError(f"wire type {wire} (a group, or not a protobuf) at byte {pos}")
    if pos != end:
        raise WireError(f"an event runs past its line at byte {pos}")
    return XEvent(metadata_id=metadata_id, offset_ps=offset, duration_ps=max(duration, 0), stats=stats)


WANTED_STATS = frozenset(
    {
        "correlation_id", "memcpy_details", "memset_details", "step_num",
        "allocator_name", "allocation_bytes", "bytes_allocated",
    }
)  # fmt: skip
"""The event stats the trace model uses (`ingest/xprof.py`); the rest are skipped undecoded."""


def _wanted(buf: bytes | memoryview, pos: int, end: int, stat_names: dict[int, str]) -> bool:
    """Whether the XStat in `buf[pos:end]` (its metadata id comes first, as XProf writes it) is one we use."""
    if buf[pos] != STAT_METADATA_ID << 3:
        return True  # not in the usual order: decode it whole
    key, _ = varint(buf, pos + 1, end)
    return stat_names.get(key) in WANTED_STATS


def _stat(buf: bytes | memoryview, start: int, end: int, stat_names: dict[int, str]) -> tuple[str, StatValue]:
    metadata_id = 0
    value: StatValue = 0
    for number, wire, a, b in fields(buf, start, end):
        if number == STAT_METADATA_ID and wire == VARINT:
            metadata_id = signed(a)
        elif number == STAT_DOUBLE and wire == FIXED64:
            value = double(buf, a)
        elif number == STAT_UINT64 and wire == VARINT:
            value = a
        elif number == STAT_INT64 and wire == VARINT:
            value = signed(a)
        elif number in (STAT_STR, STAT_BYTES) and wire == LENGTH:
            value = text(buf, a, b)
        elif number == STAT_REF and wire == VARINT:
            value = stat_names.get(a, "")
    return stat_names.get(metadata_id, f"stat#{metadata_id}"), value
