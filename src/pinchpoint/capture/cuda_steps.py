"""How long each step takes on the GPU: a CUDA event at every step boundary, read without waiting.

The host only enqueues work, so on a GPU-bound program its step times are the time to *enqueue* a step
(an fp32 MLP on an H200: 2.3 ms on the host, 30 ms on the GPU). An event recorded on the current stream
at each step end completes when the GPU gets there; the time between two consecutive events is the
step as the GPU ran it, which in steady state is the step's real duration whichever side is slower.
Events are only queried (`Event.query()`, non-blocking); the ones still pending when the program ends
are dropped rather than waited for. Written to `device_steps.jsonl`: {"step": N, "device_ns": ...,
"cuda_allocated": bytes, "cuda_reserved": bytes} -- the caching allocator's counters at the step's end on
the host (host-side numbers: reading them never waits for the GPU).
"""

from __future__ import annotations

import contextlib
from collections import deque
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import JsonlWriter

FILE = "device_steps.jsonl"


class DeviceStepClock:
    def __init__(self, torch: Any, rank_dir: Path) -> None:
        self._event = torch.cuda.Event
        self._allocated = torch.cuda.memory_allocated
        self._reserved = torch.cuda.memory_reserved
        self._pending: deque[tuple[int, Any, int | None, int | None]] = deque()
        self._previous: Any = None
        self._writer = JsonlWriter(rank_dir / FILE)

    def mark(self, step: int) -> None:
        """Step `step` just ended on the host: record its boundary on the GPU."""
        event = self._event(enable_timing=True)
        event.record()
        allocated: int | None = None
        reserved: int | None = None
        with contextlib.suppress(Exception):
            allocated, reserved = int(self._allocated()), int(self._reserved())
        self._pending.append((step, event, allocated, reserved))
        self.drain()

    def drain(self) -> None:
        """Write the steps whose closing event the GPU has reached."""
        wrote = False
        while self._pending and self._pending[0][1].query():
            step, event, allocated, reserved = self._pending.popleft()
            if self._previous is not None:
                ns = round(float(self._previous.elapsed_time(event)) * 1e6)
                self._writer.add(
                    {"step": step, "device_ns": ns, "cuda_allocated": allocated, "cuda_reserved": reserved}
                )
                wrote = True
            self._previous = event
        if wrote:
            self._writer.flush()

    def close(self) -> None:
        self.drain()
        self._writer.close()
