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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pinchpoint.errors import UsageError
from pinchpoint.trace.serving import Request

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


async def _one(where: Target, due_ns: int, timeout_s: float) -> Request:
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
                return Request(due_ns=due_ns, first_ns=first, error="not an HTTP response")
            body_ns, chunks, events = await _body(reader)
            return Request(
                due_ns=due_ns, first_ns=first, end_ns=time.monotonic_ns(), status=int(words[1]), body_ns=body_ns,
                chunks=chunks, events=events,
            )  # fmt: skip
    except TimeoutError:
        return Request(due_ns=due_ns, error=f"no answer within {timeout_s:g} s")
    except OSError as exc:
        return Request(due_ns=due_ns, error=exc.strerror or type(exc).__name__)
    except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):  # (a line past 64 KiB)
        return Request(due_ns=due_ns, error="a malformed HTTP response")
    finally:
        if writer is not None:
            writer.close()


MAX_HEADER_LINES = 200


async def _body(reader: asyncio.StreamReader) -> tuple[int | None, int, int]:
    """Past the headers, the body until the server closes (at most `READ_LIMIT`): when its first byte
    came (a streamed answer's first token), in how many reads it came (a stream's chunks, as the network
    delivered them) and how many server-sent events it held (`events`)."""
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
    first: int | None = None
    chunks = got = 0
    counted = Events()
    while got < READ_LIMIT:
        data = await reader.read(READ_LIMIT - got)
        if not data:
            break
        first = first if first is not None else time.monotonic_ns()
        chunks, got = chunks + 1, got + len(data)
        counted.feed(data)
    return first, chunks, counted.events


class Events:
    """Server-sent events in a body read in pieces: lines that begin `data:`, less the `data: [DONE]`
    that OpenAI-style streams end with (a streamed answer's tokens, where each event is one). A line may
    be cut between two reads: the last bytes of each read are kept for the next."""

    MARK, DONE = b"\ndata:", (b"\ndata: [DONE]", b"\ndata:[DONE]")
    KEEP = 13

    def __init__(self) -> None:
        self.events = 0
        self._tail = b"\n"  # (the body's first line begins a line)

    def feed(self, data: bytes) -> None:
        joined = self._tail + data
        for mark, sign in ((self.MARK, 1), *((d, -1) for d in self.DONE)):
            self.events += sign * (joined.count(mark) - self._tail.count(mark))
        self._tail = joined[-self.KEEP :]


async def _run(where: Target, plan: Plan, stop: Callable[[], bool] | None) -> list[Request]:
    offsets = plan.arrivals()
    start = time.monotonic_ns()
    tasks: list[asyncio.Task[Request]] = []
    dropped: list[Request] = []
    in_flight = 0

    async def tracked(due_ns: int) -> Request:
        nonlocal in_flight
        in_flight += 1
        try:
            return await _one(where, due_ns, plan.timeout_s)
        finally:
            in_flight -= 1

    for offset in offsets:
        if stop is not None and stop():
            break  # (the server is gone: the arrivals not yet due are not sent)
        due = start + int(offset * 1e9)
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        if in_flight >= plan.max_in_flight:
            dropped.append(Request(due_ns=due, dropped=True))
            continue
        tasks.append(asyncio.create_task(tracked(due)))
    done = list(await asyncio.gather(*tasks))
    return sorted(done + dropped, key=lambda t: t.due_ns)


def run_load(where: Target, plan: Plan, stop: Callable[[], bool] | None = None) -> list[Request]:
    """Every request of the plan, timed (in arrival order); returns once each was answered, failed, or
    timed out. `stop`, asked before each arrival: True ends the arrivals there (the server ended)."""
    return asyncio.run(_run(where, plan, stop))


def read_body(path: str | None, option: str) -> bytes | None:
    """The bytes each request POSTs (`--body`, `--load-body`); a file that cannot be read is a usage error."""
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
