"""An open-loop HTTP load over loopback: requests arrive at a given rate whether or not earlier ones were
answered (as users do), each timed from its scheduled arrival to its first byte and to its last.

A closed loop (each client waits for its answer before the next request) hides queueing: a slow server
slows the arrivals down with it. Here an arrival that finds `max_in_flight` requests unanswered is
counted as dropped, not delayed. Plain HTTP/1.1 on asyncio streams, one connection a request
(`Connection: close`): no dependency, and on loopback a connection costs tens of microseconds. The load
stays on this machine: a URL whose host is not a loopback address is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import random
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from pinchpoint.errors import UsageError
from pinchpoint.stats.quantiles import nearest_rank

MAX_DURATION_S = 600.0
MAX_REQUESTS = 100_000
MAX_RATE = 5_000.0
READ_LIMIT = 16 << 20
"""A response body past 16 MiB is cut (the load measures latency, not transfer)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    host: str
    port: int
    path: str
    body: bytes | None = None
    content_type: str = "application/json"

    def request(self) -> bytes:
        method = "POST" if self.body is not None else "GET"
        lines = [f"{method} {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close"]
        if self.body is not None:
            lines += [f"Content-Type: {self.content_type}", f"Content-Length: {len(self.body)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (self.body or b"")


def target(url: str, body: bytes | None = None) -> Target:
    """The URL as a loopback target; `UsageError` for anything else (another host, not http)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise UsageError(f"{url}: give an http://HOST:PORT/PATH URL on this machine")
    host = parts.hostname
    if not _loopback(host):
        raise UsageError(
            f"{url}: the load stays on this machine (a loopback address or localhost), not {host}"
        )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(host=host, port=parts.port or 80, path=path, body=body)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """One request: when it was due, when its first and last bytes came back (ns on the monotonic
    clock), its status, or why it failed."""

    due_ns: int
    first_ns: int | None = None
    end_ns: int | None = None
    status: int | None = None
    error: str | None = None
    dropped: bool = False

    @property
    def ok(self) -> bool:
        return (
            self.error is None and not self.dropped and self.status is not None and 200 <= self.status < 300
        )

    @property
    def latency_ns(self) -> int | None:
        return self.end_ns - self.due_ns if self.end_ns is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    rate: float
    """Arrivals a second."""
    duration_s: float
    poisson: bool = False
    """Exponential gaps between arrivals (seeded) instead of even ones."""
    max_in_flight: int = 256
    timeout_s: float = 30.0
    seed: int = 0

    def arrivals(self) -> list[float]:
        """Offsets in seconds from the start, bounded by the duration and `MAX_REQUESTS`."""
        if not 0 < self.rate <= MAX_RATE:
            raise UsageError(f"--rate must be in (0, {MAX_RATE:g}] requests a second")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise UsageError(f"--duration must be in (0, {MAX_DURATION_S:g}] seconds")
        if not self.poisson:  # (by index: summed gaps would drift past or short of the duration)
            n = min(MAX_REQUESTS, math.ceil(self.duration_s * self.rate - 1e-9))
            return [i / self.rate for i in range(n)]
        rng = random.Random(self.seed)
        out: list[float] = []
        t = 0.0
        while t < self.duration_s and len(out) < MAX_REQUESTS:
            out.append(t)
            t += rng.expovariate(self.rate)
        return out


async def _one(where: Target, due_ns: int, timeout_s: float) -> Timed:
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(where.host, where.port, family=socket.AF_UNSPEC)
            writer.write(where.request())
            await writer.drain()
            status_line = await reader.readline()
            first = time.monotonic_ns()
            words = status_line.split()
            if len(words) < 2 or not words[1].isdigit():
                return Timed(due_ns=due_ns, first_ns=first, error="not an HTTP response")
            await reader.read(READ_LIMIT)  # (headers and body, until the server closes)
            return Timed(due_ns=due_ns, first_ns=first, end_ns=time.monotonic_ns(), status=int(words[1]))
    except TimeoutError:
        return Timed(due_ns=due_ns, error=f"no answer within {timeout_s:g} s")
    except OSError as exc:
        return Timed(due_ns=due_ns, error=exc.strerror or type(exc).__name__)
    finally:
        if writer is not None:
            writer.close()


async def _run(where: Target, plan: Plan) -> list[Timed]:
    offsets = plan.arrivals()
    start = time.monotonic_ns()
    tasks: list[asyncio.Task[Timed]] = []
    dropped: list[Timed] = []
    in_flight = 0

    async def tracked(due_ns: int) -> Timed:
        nonlocal in_flight
        in_flight += 1
        try:
            return await _one(where, due_ns, plan.timeout_s)
        finally:
            in_flight -= 1

    for offset in offsets:
        due = start + int(offset * 1e9)
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        if in_flight >= plan.max_in_flight:
            dropped.append(Timed(due_ns=due, dropped=True))
            continue
        tasks.append(asyncio.create_task(tracked(due)))
    done = list(await asyncio.gather(*tasks))
    return sorted(done + dropped, key=lambda t: t.due_ns)


def run_load(where: Target, plan: Plan) -> list[Timed]:
    """Every request of the plan, timed (in arrival order); returns once each was answered, failed, or
    timed out."""
    return asyncio.run(_run(where, plan))


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
    """Answered requests (2xx) a second over `wall_s`."""
    latency: Spread | None
    """From each answered request's arrival to its last byte."""
    first_byte: Spread | None


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


def summarize(requests: list[Timed]) -> LoadSummary:
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
        throughput_rps=len(ok) / wall if wall > 0 else 0.0,
        latency=_spread([r.latency_ns for r in ok if r.latency_ns is not None]),
        first_byte=_spread([r.first_ns - r.due_ns for r in ok if r.first_ns is not None]),
    )
