"""`load.json` (schema `pinchpoint.load/1`): the load `pinchpoint load` put on a server over loopback and
what its requests measured, typed (`pinchpoint schema load`)."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.report.document import Document, JsonSchema, json_schema, optional
from pinchpoint.serve.load import LoadSummary, Plan, Spread

SCHEMA = "pinchpoint.load/1"


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
class LoadDoc(Document):
    """An open-loop load: its plan, what was sent, answered, failed or dropped, and the latencies."""

    schema: str
    url: str
    rate: float
    duration_s: float
    poisson: bool
    sent: int
    ok: int
    failed: int
    dropped: int
    errors: tuple[LoadError, ...]
    wall_s: float
    throughput_rps: float
    latency: Percentiles | None = optional(doc="arrival to last byte, answered requests")
    first_byte: Percentiles | None = optional(doc="arrival to first byte, answered requests")


def _p(s: Spread | None) -> Percentiles | None:
    if s is None:
        return None
    return Percentiles(
        p50_ms=round(s.p50_ms, 3),
        p90_ms=round(s.p90_ms, 3),
        p99_ms=round(s.p99_ms, 3),
        max_ms=round(s.max_ms, 3),
    )


def load_doc(url: str, plan: Plan, s: LoadSummary) -> LoadDoc:
    return LoadDoc(
        schema=SCHEMA,
        url=url,
        rate=plan.rate,
        duration_s=plan.duration_s,
        poisson=plan.poisson,
        sent=s.sent,
        ok=s.ok,
        failed=s.failed,
        dropped=s.dropped,
        errors=tuple(LoadError(reason=r, count=n) for r, n in s.errors),
        wall_s=round(s.wall_s, 3),
        throughput_rps=round(s.throughput_rps, 2),
        latency=_p(s.latency),
        first_byte=_p(s.first_byte),
    )


def load_schema() -> JsonSchema:
    return json_schema(
        LoadDoc, title="pinchpoint load", schema_id="https://pinchpoint.dev/schema/load-1.json"
    )
