"""pinchpoint load URL --rate R --duration S: an open-loop load over loopback, its latencies and throughput."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinchpoint.report.load_doc import LoadDoc

FAILED_EXIT = 1


class LoadCommand:
    NAME = "load"
    HELP = "send an open-loop HTTP load to a server on this machine and report latency percentiles"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("url", help="http://127.0.0.1:PORT/PATH (loopback only)")
        parser.add_argument("--rate", type=float, default=10.0, help="arrivals a second (default 10)")
        parser.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals (default 10)")
        parser.add_argument("--body", help="a file whose bytes each request POSTs (JSON); GET without it")
        parser.add_argument(
            "--poisson", action="store_true", help="exponential gaps between arrivals (seeded)"
        )
        parser.add_argument(
            "--max-in-flight", type=int, default=256, help="unanswered requests before an arrival is dropped"
        )
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds a request may take")
        parser.add_argument("--json", help="write load.json (`pinchpoint schema load`) here")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.analysis.serving import summarize
        from pinchpoint.report.load_doc import load_doc
        from pinchpoint.serve.load import Plan, read_body, run_load, target

        body = read_body(args.body, "--body")
        where = target(args.url, body)
        plan = Plan(
            rate=args.rate,
            duration_s=args.duration,
            poisson=args.poisson,
            max_in_flight=max(1, args.max_in_flight),
            timeout_s=max(0.1, args.timeout),
        )
        doc = load_doc(args.url, plan, summarize(run_load(where, plan)))
        if args.json:
            Path(args.json).write_text(json.dumps(doc.to_dict(), indent=2) + "\n")
        print(_summary_line(doc))
        return 0 if doc.ok and not doc.failed else FAILED_EXIT


def _summary_line(doc: LoadDoc) -> str:
    head = (
        f"pinchpoint load {doc.url}: {doc.sent} sent at {doc.rate:g}/s for {doc.duration_s:g} s, {doc.ok} answered "
        f"({doc.throughput_rps:.1f}/s)"
    )
    if doc.latency is not None:
        lat = doc.latency
        head += f"; latency p50 {lat.p50_ms:.1f} ms, p90 {lat.p90_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms"
    if doc.first_token is not None and doc.per_chunk is not None:
        every = (
            f"a token every {doc.per_token.p50_ms:.1f} ms"
            if doc.per_token is not None
            else f"a chunk every {doc.per_chunk.p50_ms:.1f} ms"
        )
        head += f"; streamed: first token p50 {doc.first_token.p50_ms:.1f} ms, {every}"
    if doc.failed:
        head += f"; {doc.failed} failed (" + ", ".join(f"{e.reason}: {e.count}" for e in doc.errors[:3]) + ")"
    if doc.dropped:
        head += f"; {doc.dropped} dropped (more than --max-in-flight unanswered)"
    return head
