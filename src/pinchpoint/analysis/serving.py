"""A server under `run --load`: what its requests measured (latency percentiles, throughput) and what its
model calls did meanwhile (how many requests each answered, how many waited while it ran).

The requests and the steps share one clock (CLOCK_MONOTONIC), so each model call (a top-level module
call outside training: an inference step) is placed among the requests: those that had arrived and were
not yet answered when it began were in the server, `rows` of them (its batch) being answered by it and
the rest waiting. A server that answers one request a call while others wait has calls of batch 1 with a
queue: the shape batching removes.
"""

from __future__ import annotations

import heapq
import statistics
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.stats.quantiles import nearest_rank
from pinchpoint.trace.run import RankData
from pinchpoint.trace.serving import BatchCosts, ModelCall, Request, ServedLoad
from pinchpoint.trace.step import Phase, Step, StepKind


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSummary:
    sent: int
    ok: int
    failed: int
    dropped: int
    errors: tuple[tuple[str, int], ...]
    """Why requests failed (an HTTP status or the client's reason), most frequent first."""
    wall_s: float
    """From the first arrival to the last answer."""
    throughput_rps: float
    """Answered requests (2xx) a second while requests arrived: those answered before the arrivals'
    span ended, over that span (a server that keeps up answers the offered rate; one that cannot, its
    capacity). Not over `wall_s`: a few stragglers answered long after (a stalled connection, a client's
    timeout) would stretch it."""
    latency: Spread | None
    """From each answered request's arrival to its last byte."""
    first_byte: Spread | None
    first_token: Spread | None = None
    """A streaming endpoint's (most answers came in `STREAM_CHUNKS` reads or more): arrival to the
    body's first byte (time to first token)."""
    per_chunk: Spread | None = None
    """...and each answer's mean gap between its body's reads after the first (time per output chunk)."""
    per_token: Spread | None = None
    """...and, where most streamed answers were server-sent events (`STREAM_CHUNKS` or more), each
    answer's mean gap between its events after the first: time per output token, one token an event."""


def _spread(values_ns: list[int]) -> Spread | None:
    if not values_ns:
        return None
    v = sorted(values_ns)
    return Spread(
        p50_ms=nearest_rank(v, 0.5) / 1e6,
        p90_ms=nearest_rank(v, 0.9) / 1e6,
        p99_ms=nearest_rank(v, 0.99) / 1e6,
        max_ms=v[-1] / 1e6,
    )


def _throughput(requests: Sequence[Request], ok: Sequence[Request], wall_s: float) -> float:
    """Answers a second over the arrivals' span (one mean gap added: n arrivals span n gaps); over the
    whole wall clock for a load of one request."""
    if len(requests) < 2:
        return len(ok) / wall_s if wall_s > 0 else 0.0
    first, last = requests[0].due_ns, requests[-1].due_ns
    span = (last - first) * len(requests) / (len(requests) - 1)
    answered = sum(1 for r in ok if r.end_ns is not None and r.end_ns <= first + span)
    return answered / (span / 1e9) if span > 0 else 0.0


def summarize(requests: Sequence[Request]) -> LoadSummary:
    ok = [r for r in requests if r.ok]
    failed = [r for r in requests if not r.ok and not r.dropped]
    reasons: dict[str, int] = {}
    for r in failed:
        why = r.error or f"HTTP {r.status}"
        reasons[why] = reasons.get(why, 0) + 1
    ends = [r.end_ns for r in requests if r.end_ns is not None]
    wall = (max(ends) - requests[0].due_ns) / 1e9 if ends and requests else 0.0
    return LoadSummary(
        sent=len(requests) - sum(r.dropped for r in requests),
        ok=len(ok),
        failed=len(failed),
        dropped=sum(r.dropped for r in requests),
        errors=tuple(sorted(reasons.items(), key=lambda kv: -kv[1])),
        wall_s=wall,
        throughput_rps=_throughput(requests, ok, wall),
        latency=_spread([r.end_ns - r.due_ns for r in ok if r.end_ns is not None]),
        first_byte=_spread([r.first_ns - r.due_ns for r in ok if r.first_ns is not None]),
        **_streamed(ok),
    )


STREAM_CHUNKS = 3
"""An answer whose body came in this many reads or more was streamed (a JSON answer comes in one)."""


def _streamed(ok: Sequence[Request]) -> dict[str, Spread | None]:
    """Time to first token and per chunk (per token where the chunks held server-sent events), where
    most answers were streamed; else nothing."""
    streams = [r for r in ok if r.chunks >= STREAM_CHUNKS and r.body_ns is not None and r.end_ns is not None]
    if not ok or len(streams) < len(ok) / 2:
        return {}
    events = [r for r in streams if r.events >= STREAM_CHUNKS]
    return {
        "first_token": _spread([(r.body_ns or 0) - r.due_ns for r in streams]),
        "per_chunk": _spread([((r.end_ns or 0) - (r.body_ns or 0)) // (r.chunks - 1) for r in streams]),
        "per_token": _spread([((r.end_ns or 0) - (r.body_ns or 0)) // (r.events - 1) for r in events])
        if len(events) >= len(streams) / 2
        else None,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCalls:
    """The server's model calls while its load ran."""

    calls: int
    call_p50_ms: float
    busy_share: float
    """Their forwards' time as a share of the load's wall clock (from the first arrival to the last answer)."""
    batch_mean: float | None
    """Requests (rows) a call answered, on average; None where the calls' inputs had no batch dimension."""
    batch_max: int | None
    waiting_mean: float
    """Requests that had arrived, unanswered, and were not in the call, on average at a call's start."""
    queued_share: float
    """Calls that began with at least one other request waiting."""
    one_at_a_time_share: float | None
    """Calls of batch 1 that began with another request waiting (None: batch unknown)."""
    in_flight: float = 1.0
    """Calls running at once while any ran (a thread pool runs several)."""
    threads: int = 1
    """Threads that called the model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving:
    load: ServedLoad
    summary: LoadSummary
    calls: ModelCalls | None
    """None when no model call was seen during the load (the server's model runs off the main thread,
    or in another process)."""
    batch_costs: BatchCosts | None = None
    """One model call timed at batch 1, 2, 4, ... after the load (`capture/batch_probe.py`)."""


def serving(load: ServedLoad, rank: RankData | None) -> Serving:
    """The load and the rank's model calls meanwhile, with its model's cost by batch where probed."""
    summary = summarize(load.requests)
    if rank is None:
        return Serving(load=load, summary=summary, calls=None)
    calls = model_calls(rank.steps, load.requests, summary.wall_s, rank.other_calls)
    return Serving(load=load, summary=summary, calls=calls, batch_costs=rank.batch_costs)


def _call(step: Step) -> tuple[int, int] | None:
    """(start, ns) of an inference step's model call: its forward (the step also holds the time since the
    previous call: the server's own work and its idle wait for a request)."""
    forward = [iv for iv in step.intervals if iv.phase is Phase.FORWARD]
    if not forward:
        return None
    return forward[0].start_ns, sum(iv.end_ns - iv.start_ns for iv in forward)


def model_calls(
    steps: Sequence[Step], requests: Sequence[Request], wall_s: float, others: Sequence[ModelCall] = ()
) -> ModelCalls | None:
    """The model calls that began between the first arrival and the last answer — the main thread's
    inference steps' forwards and the calls on other threads (`others`: a thread pool) — among the
    requests. Calls in flight together (a thread pool) share the requests inside: those beyond all their
    rows were waiting."""
    sent = [r for r in requests if not r.dropped]
    if not sent or wall_s <= 0:
        return None
    first = sent[0].due_ns
    last = max((r.end_ns for r in sent if r.end_ns is not None), default=first)
    main = [(c[0], c[1], s.rows) for s in steps if s.kind is StepKind.INFERENCE and (c := _call(s))]
    calls = sorted(
        [c for c in main if first <= c[0] <= last]
        + [(c.start_ns, c.end_ns - c.start_ns, c.rows) for c in others if first <= c.start_ns <= last]
    )
    if not calls:
        return None
    due = sorted(r.due_ns for r in sent)
    ended = sorted(r.end_ns if r.end_ns is not None else last for r in sent)
    waiting: list[int] = []
    one_at_a_time = 0
    running: list[tuple[int, int]] = []  # (end, rows) of the calls in flight
    for start, ns, rows in calls:
        while running and running[0][0] <= start:
            heapq.heappop(running)
        heapq.heappush(running, (start + ns, rows or 1))
        inside = bisect_right(due, start) - bisect_right(ended, start)
        others_waiting = max(0, inside - sum(r for _, r in running))
        waiting.append(others_waiting)
        one_at_a_time += rows == 1 and others_waiting > 0
    batches = [rows for _, _, rows in calls if rows is not None]
    busy_ns, union_ns = sum(ns for _, ns, _ in calls), _union_ns(calls)
    return ModelCalls(
        calls=len(calls),
        call_p50_ms=statistics.median(ns for _, ns, _ in calls) / 1e6,
        busy_share=min(1.0, union_ns / 1e9 / wall_s),
        batch_mean=statistics.fmean(batches) if batches else None,
        batch_max=max(batches) if batches else None,
        waiting_mean=statistics.fmean(waiting),
        queued_share=sum(w > 0 for w in waiting) / len(calls),
        one_at_a_time_share=one_at_a_time / len(calls) if len(batches) == len(calls) else None,
        in_flight=busy_ns / max(1, union_ns),
        threads=len({c.thread for c in others}) + (1 if main else 0),
    )


def _union_ns(calls: Sequence[tuple[int, int, int | None]]) -> int:
    """The time at least one call was running (calls sorted by start)."""
    total, reach = 0, 0
    for start, ns, _ in calls:
        end = start + ns
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


ONE_AT_A_TIME_MIN = 0.5
"""At least half the model calls answered one request while another waited."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Batching:
    """What batching the queued requests would give, from the run's own calls and the batch probe.

    Queued, the server is never idle: each answered request cost it 1 / throughput, of which one model
    call (`call_ms`, as measured in the run; a thread pool's concurrent calls each hold it for their time
    over how many ran at once) and the rest its own work (HTTP, JSON, tokenizing: `other_ms`). Batched, a request costs `other_ms` plus its part of a call of `batch`
    (the probe's time at that batch, scaled by how much slower the run's calls were than the probe's
    at the server's own batch). `batch` is the smallest probed batch whose capacity keeps up with the
    offered rate (else the fastest probed): the batch a queue forms at that rate."""

    rows: int
    call_ms: float
    """The wall time a call holds the server: its median, over the calls in flight at once (a thread pool)."""
    in_flight: float
    other_ms: float
    batch: int
    batch_call_ms: float
    throughput_rps: float
    offered_rps: float
    capacity_rps: float
    """Requests a second the server could answer at `batch`."""

    @property
    def throughput_fixed_rps(self) -> float:
        return min(self.offered_rps, self.capacity_rps)

    @property
    def gain(self) -> float:
        return self.throughput_fixed_rps / self.throughput_rps

    @property
    def share(self) -> float:
        """The part of a request's time on the server's main thread batching removes."""
        now = self.other_ms + self.call_ms / self.rows
        return max(0.0, 1 - (self.other_ms + self.batch_call_ms / self.batch) / now)


def batching(s: Serving) -> Batching | None:
    """None unless the calls ran one request at a time while others waited, and the probe measured
    larger batches."""
    c, costs, thr = s.calls, s.batch_costs, s.summary.throughput_rps
    if c is None or costs is None or thr <= 0 or s.load.rate <= 0:
        return None
    if c.one_at_a_time_share is None or c.one_at_a_time_share < ONE_AT_A_TIME_MIN:
        return None
    probed = dict(costs.ms)
    base = probed.get(costs.rows)
    if base is None or len(probed) < 2:
        return None
    call = c.call_p50_ms / max(1.0, c.in_flight)  # (a thread pool's calls share the cores: wall ms a call)
    scale = call / base  # (the run's calls beside the load against the probe's alone)
    other = max(0.0, 1e3 / thr - call)
    options = [(b, ms * scale) for b, ms in sorted(probed.items()) if b >= costs.rows]
    capacity = {b: 1e3 / (other + ms / b) for b, ms in options}
    keeps_up = [b for b, _ in options if capacity[b] >= s.load.rate]
    batch = keeps_up[0] if keeps_up else max(capacity, key=lambda b: capacity[b])
    return Batching(
        rows=costs.rows,
        call_ms=call,
        in_flight=c.in_flight,
        other_ms=other,
        batch=batch,
        batch_call_ms=dict(options)[batch],
        throughput_rps=thr,
        offered_rps=s.load.rate,
        capacity_rps=capacity[batch],
    )
