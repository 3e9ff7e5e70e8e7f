"""`serve.batching`: a server under load (`run --load`) runs its model once per request while others
wait, so each request pays a whole call (`analysis/serving.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.serving import batching
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject

GAIN_MIN = 1.1
"""Batching must answer at least 10% more requests a second under the same load."""
CONFIDENT_CALLS = 100


class Batching(Rule):
    """Pattern: under load, most model calls answer one request while others have arrived and wait
    (batch 1 with a queue), and the model costs less per request in a larger batch (the batch probe
    replays one call at batch 1, 2, 4, ... on the server's own model once its load is over).
    Why it's slow: each call pays its fixed cost (dispatch, every weight read from memory) for one row;
    the waiting requests then wait for each other's calls in turn, and the queue grows while the
    offered rate is above what one-at-a-time can answer.
    Fix: dynamic batching: gather the requests that wait (up to a max batch, a few ms at most) and
    answer them with one call.
    Reference: NVIDIA Triton's dynamic batcher; TorchServe's batch_size / max_batch_delay.
    Priced: from the run's own throughput and calls, and the probe's cost by batch (`Batching`): the
    requests a second the server could answer at the batch a queue would form, capped by the offered
    rate.
    """

    id: ClassVar[Category] = Category.SERVE_BATCHING
    title: ClassVar[str] = "Requests are answered one model call each while others wait"
    requires: ClassVar[frozenset[str]] = frozenset({"serving"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        serving = rank.serving
        b = batching(serving) if serving is not None else None
        if serving is None or b is None or serving.calls is None or b.gain < GAIN_MIN:
            return
        c, m = serving.calls, serving.summary
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=b.share,
            estimated_speedup=b.gain,
            basis=Basis.MODEL,
            confidence=Confidence.HIGH if c.calls >= CONFIDENT_CALLS else Confidence.MEDIUM,
            evidence=(
                Fact(
                    "serve.batching.queue",
                    calls=c.calls,
                    one_at_a_time=c.one_at_a_time_share or 0.0,
                    waiting=c.waiting_mean,
                    busy=c.busy_share,
                    p90_ms=m.latency.p90_ms if m.latency is not None else None,
                ),
                Fact(
                    "serve.batching.costs",
                    rows=b.rows,
                    call_ms=b.call_ms,
                    in_flight=b.in_flight,
                    threads=c.threads,
                    other_ms=b.other_ms,
                    batch=b.batch,
                    batch_call_ms=b.batch_call_ms,
                ),
                Fact(
                    "serve.batching.priced",
                    throughput=b.throughput_rps,
                    offered=b.offered_rps,
                    capacity=b.capacity_rps,
                    fixed=b.throughput_fixed_rps,
                ),
            ),
            fix=Fact("serve.batching.fix"),
            snippet=Fact("serve.batching.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.BATCHING,
            of_request=True,
        )
