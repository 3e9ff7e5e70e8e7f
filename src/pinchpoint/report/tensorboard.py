"""A run as TensorBoard event files: `tensorboard --logdir DIR` shows pinchpoint next to training curves.

Scalars, by the program's own step index (rank 0):
  pinchpoint/step_time_ms            each step's wall time (steps inside the op window are left out)
  pinchpoint/phase/<phase>           each step's exposed share per phase (data_wait, forward, ...)
  pinchpoint/finding/<id>            each finding's share of the step, at every steady step
and the report as markdown text (tag `pinchpoint/report`, the text plugin).

Written without TensorFlow or tensorboard: an event file is TFRecord framing (length, masked CRC-32C)
around protobuf `Event` messages, and the few fields used here are encoded by hand below.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

from pinchpoint.analysis.views import RunViews
from pinchpoint.report.phrases.common import gain
from pinchpoint.report.report_doc import ReportDoc

# ---- protobuf, the handful of field types the Event messages here need ------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _event(
    wall_time: float, step: int, *, summary: bytes | None = None, file_version: str | None = None
) -> bytes:
    out = _key(1, 1) + struct.pack("<d", wall_time) + _key(2, 0) + _varint(step)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if summary is not None:
        out += _bytes_field(5, summary)
    return out


def _scalar(tag: str, value: float) -> bytes:
    """Summary.Value{tag, simple_value}."""
    return _bytes_field(1, _bytes_field(1, tag.encode()) + _key(2, 5) + struct.pack("<f", value))


def _text(tag: str, text: str) -> bytes:
    """Summary.Value{tag, metadata{plugin_data{plugin_name: "text"}}, tensor{dtype: DT_STRING, string_val}}."""
    metadata = _bytes_field(1, _bytes_field(1, b"text"))
    tensor = _key(1, 0) + _varint(7) + _bytes_field(2, b"") + _bytes_field(8, text.encode())
    return _bytes_field(
        1, _bytes_field(1, tag.encode()) + _bytes_field(8, tensor) + _bytes_field(9, metadata)
    )


# ---- TFRecord framing --------------------------------------------------------------------------------

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _record(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return (
        header + struct.pack("<I", _masked(crc32c(header))) + data + struct.pack("<I", _masked(crc32c(data)))
    )


# ---- the run -------------------------------------------------------------------------------------------


def _events(views: RunViews, report: ReportDoc, markdown: str) -> Iterable[bytes]:
    now = time.time()
    yield _event(now, 0, file_version="brain.Event:2")
    steps = views.steps
    findings = report.findings
    for s in steps:
        wall = (s.end_ns + views.wall_offset_ns) / 1e9 if views.wall_offset_ns is not None else now
        values = []
        if not s.profiled and not s.trial:
            values.append(_scalar("pinchpoint/step_time_ms", s.dur_ns / 1e6))
            for phase, ns in s.phases_ns:
                values.append(_scalar(f"pinchpoint/phase/{phase}", ns / s.dur_ns if s.dur_ns else 0.0))
            for f in findings:
                values.append(_scalar(f"pinchpoint/finding/{f.id}", f.share))
        if values:
            yield _event(wall, s.index, summary=b"".join(values))
    last = steps[-1].index if steps else 0
    yield _event(now, last, summary=_text("pinchpoint/report", markdown))


def report_markdown(report: ReportDoc) -> str:
    """The report's findings as markdown (what the text plugin renders)."""
    steps = report.steps
    lines = [f"**{' '.join(report.run.command)}**", ""]
    if steps.median_ms is not None:
        lines += [f"{steps.count} steady steps, median {steps.median_ms} ms", ""]
    for i, f in enumerate(report.findings, 1):
        lines.append(
            f"{i}. **{f.title}** (`{f.id}`): {100 * f.share:.0f}% of the step, "
            f"{gain(f.estimated_speedup, f.estimate_basis)}"
        )
        lines += [f"    - {e}" for e in f.evidence]
        lines.append(f"    - *Fix:* {f.fix}")
    if not report.findings:
        lines.append("No bottleneck found above the reporting thresholds.")
    return "\n".join(lines)


def write_event_file(views: RunViews, report: ReportDoc, logdir: Path) -> Path:
    """One event file in `logdir` (created); returns its path."""
    logdir.mkdir(parents=True, exist_ok=True)
    path = logdir / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.pinchpoint"
    with path.open("wb") as f:
        for event in _events(views, report, report_markdown(report)):
            f.write(_record(event))
    return path
