"""Op windows on demand (`pinchpoint capture RUN_DIR|PID`): a regression at hour three diagnosed from
hour-three ops.

`pinchpoint capture` writes RUN_DIR/capture.json, `{"id": N, "steps": S}`. Each rank's main process
looks at it at most once a second, at a step's end (one stat), and for a new id, once its current op
window is over, opens another over the next S steps: the earlier window's files are kept as
opwindow-K.json and probes-K.json (K = 1, 2, ...), the new ones take their names, so the report
analyses the latest window. It answers with ranks/rankR/capture-N.json (`start_step`, `steps`, or
`refused` and why) before the window opens; its probes.json, rewritten when it closes, says it is over.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from pinchpoint.capture.opwindow import OpWindow
from pinchpoint.capture.writer import write_json_atomic

REQUEST_FILE = "capture.json"
POLL_NS = 1_000_000_000
MAX_STEPS = 50
KEPT_FILES = ("opwindow.json", "probes.json")


class OnDemand:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / REQUEST_FILE
        self._next_poll_ns = 0
        self._mtime_ns = self._stat()
        self._seen = _int(self._request(), "id", 0) if self._mtime_ns is not None else 0
        """Requests made before this process started are not for it."""

    def poll(self, now_ns: int, next_step: int, window: OpWindow) -> OpWindow | None:
        """At the boundary before `next_step`: a new window over the steps after it, when asked."""
        if now_ns < self._next_poll_ns:
            return None
        self._next_poll_ns = now_ns + POLL_NS
        mtime = self._stat()
        if mtime is None or mtime == self._mtime_ns:
            return None
        self._mtime_ns = mtime
        request = self._request()
        request_id = _int(request, "id", 0)
        if request_id <= self._seen:
            return None
        self._seen = request_id
        ack = window.rank_dir / f"capture-{request_id}.json"
        if not window.done:
            write_json_atomic(ack, {"id": request_id, "refused": "an op window is open"})
            return None
        steps = max(1, min(MAX_STEPS, _int(request, "steps", 3)))
        kept = _keep_earlier(window.rank_dir)
        fresh = OpWindow(window.rank_dir, (next_step + 1, steps))
        fresh.batch_spec = window.batch_spec
        fresh.asked = True
        write_json_atomic(
            ack,
            {"id": request_id, "start_step": next_step + 1, "steps": steps, "t_ns": time.monotonic_ns(),
             "kept": kept},
        )  # fmt: skip
        return fresh

    def _stat(self) -> int | None:
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def _request(self) -> dict[str, object]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}


def _int(doc: dict[str, object], key: str, default: int) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) else default


def _keep_earlier(rank_dir: Path) -> str | None:
    """Rename the last window's files to the next free number; the name the trace got, or None."""
    if not (rank_dir / KEPT_FILES[0]).is_file():
        return None
    k = 1
    while (rank_dir / f"opwindow-{k}.json").exists():
        k += 1
    for name in KEPT_FILES:
        with contextlib.suppress(OSError):
            os.replace(rank_dir / name, rank_dir / name.replace(".json", f"-{k}.json"))
    return f"opwindow-{k}.json"
