"""pinchpoint calibrate: measure this machine's matmul, memory and copy ceilings and cache them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


class CalibrateCommand:
    NAME = "calibrate"
    HELP = "measure this machine's real peaks (matmul FLOP/s per dtype, bandwidths) and cache them"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--device",
            action="append",
            help="'cpu' or 'cuda:N' (repeatable; default: the CPU and every CUDA device)",
        )
        parser.add_argument("--json", help="also write the measurements to this path")
        parser.add_argument("-q", "--quiet", action="store_true", help="no table")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.capture.calibrate import measure_this_machine
        from pinchpoint.capture.writer import write_json_atomic

        def say(msg: str) -> None:
            if not args.quiet:
                print(f"pinchpoint: {msg}", file=sys.stderr, flush=True)

        result, path = measure_this_machine(args.device, progress=say)
        if args.json:
            write_json_atomic(Path(args.json), result)
        if not args.quiet:
            print(render(result))
            print(f"cached in {path}")
        return 0


def _fmt_flops(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.0f} GFLOP/s"


def _fmt_bw(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 1e12:.2f} TB/s" if x >= 1e12 else f"{x / 1e9:.1f} GB/s"


def render(result: dict[str, Any]) -> str:
    """A plain table per device: measured ceilings, with datasheet peaks where known."""
    from pinchpoint.analysis.datasheet import gpu_peaks

    lines: list[str] = []
    for dev in result.get("devices", []):
        peaks = gpu_peaks(dev.get("name")) if dev.get("device", "cpu") != "cpu" else None
        head = f"{dev.get('device')}: {dev.get('name')}"
        if dev.get("threads"):
            head += f" ({dev['threads']} threads)"
        lines.append(head)
        sheet = f"   datasheet ({peaks.name})" if peaks else ""
        for dtype, flops in (dev.get("matmul_flops") or {}).items():
            ref = peaks.matmul_flops(dtype) if peaks else None
            extra = f"{sheet} {_fmt_flops(ref)}, measured {flops / ref:.0%}" if ref else ""
            lines.append(f"  matmul {dtype:<9} {_fmt_flops(flops):>16}{extra}")
        bw = dev.get("memory_bytes_per_s")
        extra = (
            f"{sheet} {_fmt_bw(peaks.memory_bytes_per_s)}, measured {bw / peaks.memory_bytes_per_s:.0%}"
            if peaks and bw
            else ""
        )
        lines.append(f"  memory copy      {_fmt_bw(bw):>16}{extra}")
        for direction in ("h2d", "d2h"):
            for kind, value in (dev.get(f"{direction}_bytes_per_s") or {}).items():
                lines.append(f"  {direction} {kind:<12} {_fmt_bw(value):>16}")
        if dev.get("launch_host_ns") is not None:
            lines.append(
                f"  tiny kernel      {dev['launch_host_ns'] / 1000:>10.1f} µs to launch (host), "
                f"{dev['launch_device_ns'] / 1000:.1f} µs each back to back"
            )
    return "\n".join(lines)
