"""Append-only writers for the run directory (see docs/run-directory.md).

Lines are buffered in memory and written with one `os.write` per flush, so a SIGKILL loses at most the
lines since the last flush and never leaves a half-written line from an interrupted Python buffer.
Step boundaries flush at most every `FLUSH_NS` (and at once for the steps that matter alone: see
`Agent.end_step`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _line_encoder() -> Callable[[Any], bytes]:
    """Compact JSON as bytes. msgspec's encoder takes ~0.5 µs for a step record against ~5 µs for
    `json.dumps` (and ten times that inside a busy step on the reference machine, where the agent
    writes); `json` stays as the fallback for a program whose Python cannot load pinchpoint's msgspec."""
    try:
        import msgspec

        return msgspec.json.Encoder().encode
    except Exception:  # ImportError, or a build for another Python
        encode = json.JSONEncoder(separators=(",", ":")).encode
        return lambda obj: encode(obj).encode()


encode_line = _line_encoder()


FLUSH_NS = 20_000_000
"""`flush_due` writes at most this often: a step boundary's `os.write` cost ~7 µs of a 0.3 ms step (×3
right after a parallel region, the OpenMP workers spinning on the sibling core), and a SIGKILL then
loses at most this much of the run."""


class JsonlWriter:
    """Appends JSON objects as lines; `flush()` writes what is buffered, `flush_due(now)` only when the
    last write is `FLUSH_NS` old."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: list[bytes] = []
        self._fd: int | None = None
        self._written_ns = 0

    def add(self, obj: Any) -> None:
        self._lines.append(encode_line(obj))

    def flush_due(self, now_ns: int) -> None:
        """`flush()` if the last write was `FLUSH_NS` before `now_ns` (a monotonic clock's ns)."""
        if self._lines and now_ns - self._written_ns >= FLUSH_NS:
            self._written_ns = now_ns
            self.flush()

    def flush(self) -> None:
        if not self._lines:
            return
        data = b"\n".join(self._lines) + b"\n"
        self._lines.clear()
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, data)

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def move(self, path: Path) -> None:
        """Write to `path` from now on (what was flushed stays where it was)."""
        self.close()
        self.path = path

    def forget(self) -> None:
        """Drop the buffer and handle without writing (a forked child must not write the parent's lines)."""
        self._lines.clear()
        self._fd = None


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write `obj` as JSON via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def agent_log(run_dir: Path, message: str) -> None:
    """One line in the run directory's `agent.log` (what the agent could not do); never raises."""
    with contextlib.suppress(OSError), open(run_dir / "agent.log", "a") as f:
        f.write(f"[pid {os.getpid()}] {message}\n")
