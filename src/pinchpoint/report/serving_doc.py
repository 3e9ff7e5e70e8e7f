"""report.json's `serving` section, typed: a server's load under `run --load` (latency, throughput) and
its model calls meanwhile (batch, waiting requests). Data only; `load_doc.serving_info` builds it."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.report.document import optional


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentiles:
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadError:
    reason: str
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallsInfo:
    calls: int
    call_p50_ms: float
    busy_share: float
    batch_mean: float | None
    batch_max: int | None
    waiting_mean: float
    queued_share: float
    one_at_a_time_share: float | None
    in_flight: float
    """Calls running at once while any ran (a thread pool's)."""
    threads: int
    """Threads that called the model (the main one and a thread pool's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingInfo:
    """The load `run --load` sent and what the server's model did meanwhile."""

    url: str
    rate: float
    duration_s: float
    sent: int
    ok: int
    failed: int
    dropped: int
    errors: tuple[LoadError, ...]
    wall_s: float
    throughput_rps: float
    latency: Percentiles | None
    first_byte: Percentiles | None
    first_token: Percentiles | None = optional(doc="a streaming endpoint's: arrival to the body's first byte")
    per_chunk: Percentiles | None = optional(
        doc="a streaming endpoint's: mean gap between an answer's chunks"
    )
    per_token: Percentiles | None = optional(
        doc="a server-sent-events endpoint's: mean gap between an answer's events (time per output token)"
    )
    model_calls: ModelCallsInfo | None
    """None when no model call ran on the server's main thread during the load."""
    error: str | None
    """Why no load was sent."""
