"""Folded ("collapsed") stack files into `Stacks`: py-spy's `--format raw`, flamegraph.pl's input.

One line per distinct stack, `frame;frame;...;leaf COUNT`, root first. py-spy frames read
`function (file:line)`; with `--subprocesses` the line starts with `process PID:"command line"`
frames, the process's ancestors first (a DataLoader worker: the training process, then itself); with
`--threads` a `thread (0xTID)` (or `thread (TID): NAME`) frame follows. Any other frame text is kept as a function name.
Malformed lines are counted, not fatal: a sampler killed mid-write leaves half a line.

pinchpoint's own wrappers around framework entry points (`capture/hooks.py`) pass straight through;
their frames are dropped so the stacks read as the program runs without pinchpoint, as are those of the
`pinchpoint.profile()` object (`notebook.py`: `prof.step()` is the capture's work).
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from pinchpoint.errors import TraceError
from pinchpoint.trace.stacks import Frame, Stacks, StackSample

_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_PROCESS = re.compile(r"^process (?P<pid>[0-9]+):")
_THREAD = re.compile(r"^thread \((?P<tid>[^)]*)\)(?::.*)?$")
"""`thread (0x7f..)`, or `thread (TID): NAME` (py-spy 0.4 names the OS thread id and Python's name)."""
_OWN_FILES = ("pinchpoint/capture/", "pinchpoint/notebook.py")
"""Frames in these files are pinchpoint's own (path fragments, `/` as py-spy writes them)."""
MAX_BYTES = 512 * 1024 * 1024
MAX_DEPTH = 2000


def read_folded(path: Path, *, rate_hz: float | None = None, source: str = "") -> tuple[Stacks, int]:
    """The stacks of a folded-stack file and how many lines could not be read."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise TraceError(
                f"{path}: {size >> 20} MiB of stacks is more than pinchpoint reads ({MAX_BYTES >> 20} MiB)"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the stack samples ({exc.strerror})") from exc
    return parse_folded(_decode(data), rate_hz=rate_hz, source=source or path.name)


def _decode(data: bytes) -> str:
    """UTF-8, or UTF-16 / UTF-8 after a byte-order mark (PowerShell's `>` writes UTF-16); CRLF is fine."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def parse_folded(text: str, *, rate_hz: float | None = None, source: str = "") -> tuple[Stacks, int]:
    merged: dict[tuple[int | None, str | None, tuple[Frame, ...]], int] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "//")):
            continue  # (comments, as flamegraph.pl and speedscope skip them)
        stack, _, count_text = line.rpartition(" ")
        if not stack or not (count_text.isascii() and count_text.isdigit()):
            bad += 1
            continue
        parts = stack.split(";")
        if len(parts) > MAX_DEPTH:
            bad += 1
            continue
        pid: int | None = None
        thread: str | None = None
        frames: list[Frame] = []
        for part in parts:
            if not frames and thread is None and (m := _PROCESS.match(part)):
                pid = int(m.group("pid"))  # a subprocess line lists its parents first: keep the last
                continue
            if not frames and thread is None and (t := _THREAD.match(part)):
                thread = t.group("tid")
                continue
            frame = _frame(part)
            if not any(own in frame.file for own in _OWN_FILES):
                frames.append(frame)
        key = (pid, thread, tuple(frames))
        merged[key] = merged.get(key, 0) + int(count_text)
    samples = tuple(
        StackSample(frames=frames, count=count, pid=pid, thread=thread)
        for (pid, thread, frames), count in merged.items()
    )
    return Stacks(samples=samples, rate_hz=rate_hz, source=source), bad


def _frame(text: str) -> Frame:
    m = _FRAME.match(text)
    if m is None:
        return Frame(text)
    line = m.group("line")
    return Frame(m.group("fn"), m.group("file"), int(line) if line else None)
