"""A served model's calls off the main thread: FastAPI runs a plain `def` endpoint in a thread pool, and
other servers call their model from worker threads. Steps are the main thread's; these calls are not
steps, but `run --load` needs each one to place it among the requests.

Under `run --load` (`SERVED_ENV`), each top-level module call on another thread (nested calls on that
thread pass through) is timed and kept as `[start_ns, end_ns, rows, thread]`; the list is appended to
ranks/rankR/calls.jsonl every `FLUSH_EVERY` calls and at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVED_ENV = "PINCHPOINT_SERVED"
FILE = "calls.jsonl"
FLUSH_EVERY = 256


class ServedCalls:
    def __init__(self, rank_dir: Callable[[], Path]) -> None:
        self.rank_dir = rank_dir
        self.calls: list[tuple[int, int, int | None, int]] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        atexit.register(self.flush)

    def call(
        self, orig_call: Callable[..., Any], module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """`module(*args, **kwargs)`, timed when it is this thread's top-level call."""
        if getattr(self._local, "inside", False):
            return orig_call(module, *args, **kwargs)
        self._local.inside = True
        rows = rows_of(args[0]) if args else None
        t0 = time.monotonic_ns()
        try:
            return orig_call(module, *args, **kwargs)
        finally:
            self._local.inside = False
            with self._lock:
                self.calls.append((t0, time.monotonic_ns(), rows, threading.get_ident()))
                full = len(self.calls) >= FLUSH_EVERY
            if full:
                self.flush()

    def flush(self) -> None:
        with self._lock:
            calls, self.calls = self.calls, []
            if not calls:
                return
            lines = "".join(json.dumps(list(c), separators=(",", ":")) + "\n" for c in calls)
            with contextlib.suppress(OSError), open(self.rank_dir() / FILE, "a") as f:
                f.write(lines)


def rows_of(x: Any) -> int | None:
    """A tensor's first dimension (a served model's batch: how many requests one call answered)."""
    try:
        return int(x.shape[0]) if x.dim() >= 1 else None
    except Exception:  # (not a tensor)
        return None
