"""`load.json` (schema `pinchpoint.load/1`): the load `pinchpoint load` put on a server over loopback and
what its requests measured, typed (`pinchpoint schema load`); and report.json's `serving` section built
from the same measurements (`serving_info`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pinchpoint.analysis.serving import LoadSummary, ModelCalls, Serving, Spread
from pinchpoint.ingest.served import LOAD_FILE as LOAD_FILE
from pinchpoint.report.document import Document, JsonSchema, json_schema, optional
from pinchpoint.report.serving_doc import LoadError, ModelCallsInfo, Percentiles, ServingInfo
from pinchpoint.serve.load import Plan

SCHEMA = "pinchpoint.load/1"


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
    first_token: Percentiles | None = optional(doc="a streaming endpoint's: arrival to the body's first byte")
    per_chunk: Percentiles | None = optional(
        doc="a streaming endpoint's: mean gap between an answer's chunks"
    )
    per_token: Percentiles | None = optional(
        doc="a server-sent-events endpoint's: mean gap between an answer's events (time per output token)"
    )
    error: str | None = optional(doc="why no load was sent (`run --load`: the server never answered)")


def percentiles(s: Spread | None) -> Percentiles | None:
    if s is None:
        return None
    return Percentiles(
        p50_ms=round(s.p50_ms, 3),
        p90_ms=round(s.p90_ms, 3),
        p99_ms=round(s.p99_ms, 3),
        max_ms=round(s.max_ms, 3),
    )


def _measured(s: LoadSummary) -> dict[str, Any]:
    """What a load measured, as the fields load.json and report.json's `serving` share."""
    return {
        "sent": s.sent,
        "ok": s.ok,
        "failed": s.failed,
        "dropped": s.dropped,
        "errors": tuple(LoadError(reason=r, count=n) for r, n in s.errors),
        "wall_s": round(s.wall_s, 3),
        "throughput_rps": round(s.throughput_rps, 2),
        "latency": percentiles(s.latency),
        "first_byte": percentiles(s.first_byte),
        "first_token": percentiles(s.first_token),
        "per_chunk": percentiles(s.per_chunk),
        "per_token": percentiles(s.per_token),
    }


def load_doc(url: str, plan: Plan, s: LoadSummary, error: str | None = None) -> LoadDoc:
    return LoadDoc(
        schema=SCHEMA,
        url=url,
        rate=plan.rate,
        duration_s=plan.duration_s,
        poisson=plan.poisson,
        error=error,
        **_measured(s),
    )


def _calls(c: ModelCalls | None) -> ModelCallsInfo | None:
    if c is None:
        return None
    return ModelCallsInfo(
        calls=c.calls,
        call_p50_ms=round(c.call_p50_ms, 3),
        busy_share=round(c.busy_share, 3),
        batch_mean=round(c.batch_mean, 2) if c.batch_mean is not None else None,
        batch_max=c.batch_max,
        waiting_mean=round(c.waiting_mean, 2),
        queued_share=round(c.queued_share, 3),
        one_at_a_time_share=round(c.one_at_a_time_share, 3) if c.one_at_a_time_share is not None else None,
        in_flight=round(c.in_flight, 2),
        threads=c.threads,
    )


def serving_info(s: Serving | None) -> ServingInfo | None:
    if s is None:
        return None
    return ServingInfo(
        url=s.load.url,
        rate=s.load.rate,
        duration_s=s.load.duration_s,
        model_calls=_calls(s.calls),
        error=s.load.error,
        **_measured(s.summary),
    )


def load_schema() -> JsonSchema:
    return json_schema(
        LoadDoc, title="pinchpoint load", schema_id="https://pinchpoint.dev/schema/load-1.json"
    )
