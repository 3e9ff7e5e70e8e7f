"""A server's load and its model's cost by batch, as `run --load` recorded them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request of a load: when it was due, its first and last bytes back (monotonic ns, the steps'
    clock), its HTTP status or why it failed; `dropped`: never sent (too many unanswered)."""

    due_ns: int
    first_ns: int | None = None
    end_ns: int | None = None
    status: int | None = None
    error: str | None = None
    dropped: bool = False
    body_ns: int | None = None
    """When the body's first byte came (a streamed answer's first token)."""
    chunks: int = 0
    """The reads the body came in (a stream's chunks, as the network delivered them)."""
    events: int = 0
    """Server-sent events in the body (`data:` lines, a closing `data: [DONE]` left out): a streamed
    answer's tokens, where the server sends one an event."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.dropped and self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedLoad:
    url: str
    rate: float
    """Arrivals a second, as planned."""
    duration_s: float
    requests: tuple[Request, ...] = ()
    error: str | None = None
    """Why no load was sent (the server never answered on its port)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCosts:
    """One call of the served model, timed at each batch (`capture/batch_probe.py`)."""

    rows: int
    """The batch of the call that was replayed (what the server ran)."""
    ms: tuple[tuple[int, float], ...]
    """(batch, median ms of a call), by batch."""
    start_ns: int = 0
    end_ns: int = 0
    """When the probe ran (monotonic ns): pinchpoint's own time, not the program's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCall:
    """A top-level model call off the main thread (a server's thread pool: `capture/served_calls.py`)."""

    start_ns: int
    end_ns: int
    rows: int | None
    thread: int
