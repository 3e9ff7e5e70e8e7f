"""Speed and memory of `read_xprof_ranks` on a large XSpace built from a real one.

    python benchmarks/xprof_reader.py [--size-mb 100] [--source FILE] [--repeat 3]

The big file is the source's events copied along the time axis: every line's events are written again
K times, each copy's `offset_ps` shifted by the source's span, so the planes, lines and metadata stay
those of the real file and only the event count grows (in the real file's mix: the Python tracer's
events, TraceMe ranges, allocator events, kernels and copies). The measurement runs in a fresh
subprocess (ru_maxrss is the reader's alone; the interpreter's RSS with pinchpoint imported is printed
beside it). The file goes to a temporary directory, never the repository.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pinchpoint.ingest.protowire import LENGTH, VARINT, fields
from pinchpoint.ingest.protowire import encode_varint as _varint

SOURCE = Path(__file__).resolve().parents[1] / "tests/data/xprof/jax_conv_legacy.xplane.pb"
CHILD = """
import json, resource, sys, time
from pathlib import Path
from pinchpoint.ingest.xprof import read_xprof_ranks
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
traces = read_xprof_ranks(Path(sys.argv[1]))
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "events": sum(len(t.events) for t in traces), "rss_kb": rss, "base_kb": base}))
"""


def _copy(buf: bytes, number: int, wire: int, x: int, y: int) -> bytes:
    """One field as `fields` yielded it, written again (a varint's value is `x`)."""
    if wire == VARINT:
        return _varint(number << 3) + _varint(x)
    return _varint(number << 3 | wire) + (_varint(y - x) if wire == LENGTH else b"") + buf[x:y]


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | LENGTH) + _varint(len(payload)) + payload


def _event_copy(buf: bytes, a: int, b: int, shift_ps: int) -> bytes:
    out = bytearray()
    for number, wire, x, y in fields(buf, a, b):
        out += _copy(buf, number, wire, x + shift_ps if number == 2 and wire == VARINT else x, y)
    return bytes(out)


def _line(buf: bytes, a: int, b: int, copies: int, span_ps: int) -> bytes:
    head = bytearray()
    events: list[tuple[int, int]] = []
    for number, wire, x, y in fields(buf, a, b):
        if number == 4 and wire == LENGTH:
            events.append((x, y))
        else:
            head += _copy(buf, number, wire, x, y)
    body = bytearray(head)
    for k in range(copies):
        for x, y in events:
            body += _field(4, _event_copy(buf, x, y, k * span_ps))
    return bytes(body)


def build(source: Path, out: Path, size_mb: float) -> None:
    buf = source.read_bytes()
    copies = max(1, round(size_mb * 1e6 / len(buf)))
    span_ps = 100 * 10**9  # 100 ms: longer than the source's span
    with out.open("wb") as f:
        for number, wire, a, b in fields(buf):
            if number != 1 or wire != LENGTH:
                f.write(_field(number, buf[a:b]))
                continue
            plane = bytearray()
            for n2, w2, x, y in fields(buf, a, b):
                if n2 == 3 and w2 == LENGTH:
                    plane += _field(3, _line(buf, x, y, copies, span_ps))
                else:
                    plane += _copy(buf, n2, w2, x, y)
            f.write(_field(1, bytes(plane)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=float, default=100.0)
    p.add_argument("--source", type=Path, default=SOURCE)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.xplane.pb"
        build(args.source, big, args.size_mb)
        mb = big.stat().st_size / 1e6
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, "-c", CHILD, str(big)], capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(args.repeat)
        ]
    best = min(runs, key=lambda r: r["s"])
    rss, base = best["rss_kb"] / 1e3, best["base_kb"] / 1e3
    print(
        f"{mb:.0f} MB: {best['s']:.2f} s ({mb / best['s']:.1f} MB/s), {best['events'] / 1e6:.2f} M events "
        f"({best['events'] / best['s'] / 1e6:.2f} M/s), peak RSS {rss:.0f} MB ({rss / mb:.2f}x the file; "
        f"{(rss - base) / mb:.2f}x above the interpreter's {base:.0f} MB); best of {args.repeat}"
    )


if __name__ == "__main__":
    main()
