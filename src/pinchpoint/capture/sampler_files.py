"""The system sampler's files: its rate-limited log (``sampler.log``) and the check for an incomplete
last line in the file it appends samples to.

Standard library only: the sampler process imports this at start-up (see :mod:`.sampler`).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

# How many times a given error (same exception type and context) is written to sampler.log before
# further occurrences are only counted.
_MAX_LOGS_PER_ERROR = 5


class SamplerLog:
    """Appends timestamped lines to sampler.log; never raises; rate limits repeated errors."""

    def __init__(self, path: Path) -> None:
        self._fd: int | None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            self._fd = None
        self._counts: dict[str, int] = {}

    def write(self, message: str) -> None:
        if self._fd is None:
            return
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid={os.getpid()} {message}\n"
        with contextlib.suppress(OSError):
            os.write(self._fd, line.encode("utf-8", "replace"))

    def error(self, where: str, exc: BaseException) -> None:
        key = f"{where}:{type(exc).__name__}"
        n = self._counts.get(key, 0) + 1
        self._counts[key] = n
        if n <= _MAX_LOGS_PER_ERROR:
            suffix = " (further occurrences not logged)" if n == _MAX_LOGS_PER_ERROR else ""
            self.write(f"error in {where}: {type(exc).__name__}: {exc}{suffix}")

    def close(self) -> None:
        suppressed = {k: n - _MAX_LOGS_PER_ERROR for k, n in self._counts.items() if n > _MAX_LOGS_PER_ERROR}
        if suppressed:
            self.write(f"suppressed repeated errors: {suppressed}")
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def ends_without_newline(path: Path) -> bool:
    """Whether the file ends in an incomplete line (False when empty or unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False
