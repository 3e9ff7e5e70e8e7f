"""A served model in words: the `serving` section as lines (terminal and HTML: the load's latency and
throughput, then what the server's model calls did meanwhile), and serve.batching's facts."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import pct
from pinchpoint.report.serving_doc import ServingInfo


def serving_lines(s: ServingInfo) -> list[str]:
    if s.error is not None:
        return [f"No load was sent to {s.url}: {s.error}"]
    head = (
        f"{s.sent:,} requests sent to {s.url} at {s.rate:g}/s for {s.duration_s:g} s: {s.ok:,} answered "
        f"({s.throughput_rps:.1f}/s)"
    )
    if s.failed:
        head += f", {s.failed:,} failed (" + ", ".join(f"{e.reason}: {e.count}" for e in s.errors[:3]) + ")"
    if s.dropped:
        head += f", {s.dropped:,} never sent (too many unanswered)"
    lines = [head]
    if s.latency is not None:
        lat = s.latency
        lines.append(
            f"latency from arrival to answer: p50 {lat.p50_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms, "
            f"p99 {lat.p99_ms:.1f} ms (max {lat.max_ms:.1f} ms)"
        )
    if s.first_token is not None and s.per_chunk is not None:
        lines.append(
            f"streamed: first token (the body's first byte) p50 {s.first_token.p50_ms:.1f} ms, p90 "
            f"{s.first_token.p90_ms:.1f} ms; then "
            + (
                f"a token every {s.per_token.p50_ms:.1f} ms (one server-sent event each; p50 of each answer's "
                f"mean), p90 {s.per_token.p90_ms:.1f} ms"
                if s.per_token is not None
                else f"a chunk every {s.per_chunk.p50_ms:.1f} ms (p50 of each answer's mean), p90 "
                f"{s.per_chunk.p90_ms:.1f} ms"
            )
        )
    c = s.model_calls
    if c is None:
        lines.append(
            "no model call ran on the server's main thread during the load (a model run in a thread pool "
            "or another process is not seen yet)"
        )
        return lines
    batch = ""
    if c.batch_mean is not None:
        batch = f", {c.batch_mean:.1f} request(s) a call on average (at most {c.batch_max})"
    pool = f" on {c.threads} threads, {c.in_flight:.1f} at once on average" if c.threads > 1 else ""
    lines.append(
        f"the model ran {c.calls:,} calls of {c.call_p50_ms:.1f} ms (median){pool}{batch}, busy {c.busy_share:.0%} "
        f"of the time; {c.waiting_mean:.1f} other request(s) waited while a call ran, on average "
        f"({c.queued_share:.0%} of calls began with one waiting)"
    )
    return lines


def _p90(p90_ms: float | None) -> str:
    return f"; requests took {p90_ms:.0f} ms at the p90" if p90_ms is not None else ""


PHRASES: dict[str, Callable[..., str]] = {
    "serve.batching.queue": lambda calls, one_at_a_time, waiting, busy, p90_ms: (
        f"{pct(one_at_a_time)} of the server's {calls:,} model calls under load answered one request while "
        f"others had arrived: {waiting:.1f} waited on average as each call ran, and the model was busy "
        f"{pct(busy)} of the time{_p90(p90_ms)}"
    ),
    "serve.batching.costs": lambda rows, call_ms, in_flight, threads, other_ms, batch, batch_call_ms: (
        f"A call of {rows} took {call_ms:.2f} ms in the run"
        + (
            f" ({in_flight:.1f} at once on {threads} threads, each that many times as long)"
            if in_flight >= 1.1
            else ""
        )
        + f" (and the server {other_ms:.2f} ms more a request outside it); pinchpoint replayed the server's own call at larger batches after the load: at "
        f"{batch} a call takes {batch_call_ms:.2f} ms, {batch_call_ms / batch:.2f} ms a request"
    ),
    "serve.batching.priced": lambda throughput, offered, capacity, fixed: (
        f"Answered {throughput:.1f} requests a second of the {offered:g} offered; batched, the server could "
        f"answer {capacity:.0f} a second, so {fixed:.1f} of these (×{fixed / throughput:.2f})"
    ),
    "serve.batching.fix": lambda: (
        "Batch the waiting requests: a queue that gathers them for a few milliseconds (up to a max batch) "
        "and answers them with one model call (Triton's dynamic batcher, TorchServe's batch_size and "
        "max_batch_delay, or an asyncio queue in the app)."
    ),
    "serve.batching.snippet": lambda: (
        "batch = [await queue.get()]                      # the first request waiting\n"
        "while len(batch) < MAX_BATCH and time_left():    # others, for at most a few ms\n"
        "    batch.append(await asyncio.wait_for(queue.get(), time_left()))\n"
        "out = model(torch.stack([x for x, _ in batch]))  # one call answers them all"
    ),
}
