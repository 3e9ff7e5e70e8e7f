"""Reads the op window (`opwindow.json`, a torch.profiler Chrome trace of CPU ops) into an `OpWindow`."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pinchpoint.trace.run import OpEvent, OpWindow

MATMUL_FLOP_OPS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1}
"""Matmul ops whose FLOPs we compute from input dims: value = index of the first matrix operand."""


def _us_to_ns(v: Any) -> int:
    # Chrome traces carry microseconds with (at most) nanosecond decimals: round to the nanosecond,
    # never to the microsecond.
    return round(float(v) * 1000.0)


def _external_id(e: dict[str, Any]) -> int | None:
    args = e.get("args")
    v = args.get("External id", args.get("external id")) if isinstance(args, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _dims(d: Any) -> tuple[int, ...]:
    """A tensor's dims; () for scalars and for lists of tensors (aten::cat), whose dims nest."""
    if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
        return tuple(d)
    return ()


def matmul_flops(name: str, dims: Sequence[Sequence[int]]) -> int | None:
    first = MATMUL_FLOP_OPS.get(name)
    if first is None or len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if len(a) < 2 or len(b) < 2:
        return None
    batch = 1
    for d in a[:-2]:
        batch *= d
    return 2 * batch * a[-2] * a[-1] * b[-1]


def read_opwindow(path: Path, window_steps: int | None, wall_minus_mono_ns: int = 0) -> OpWindow:
    """`wall_minus_mono_ns` maps Kineto's wall-clock stamps onto CLOCK_MONOTONIC (0: keep them)."""
    raw_bytes = path.read_bytes()
    if path.suffix == ".gz":
        raw_bytes = gzip.decompress(raw_bytes)
    doc = json.loads(raw_bytes)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ValueError("no traceEvents list")
    base_ns = doc.get("baseTimeNanoseconds")
    offset = (int(base_ns) - wall_minus_mono_ns) if isinstance(base_ns, int) and wall_minus_mono_ns else 0
    raw = []
    kernel_ns: dict[int, int] = {}  # External id -> GPU kernel time it launched
    for e in events:
        if (
            isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")
        ):  # 2021: "Kernel"
            ext = _external_id(e)
            if ext is not None:
                with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError):
                    kernel_ns[ext] = kernel_ns.get(ext, 0) + _us_to_ns(e["dur"])
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in ("cpu_op", "Operator"):
            continue
        try:
            start, dur = _us_to_ns(e["ts"]) + offset, _us_to_ns(e.get("dur", 0))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        args_obj = e.get("args")
        args: dict[str, Any] = args_obj if isinstance(args_obj, dict) else {}
        dims = tuple(_dims(d) for d in _list(args.get("Input Dims")))
        types = tuple(str(t) for t in _list(args.get("Input type")))
        name = str(e.get("name", "?"))
        tid = e.get("tid")
        ext = _external_id(e)
        device = kernel_ns.get(ext) if ext is not None else None
        raw.append((tid if isinstance(tid, int) else 0, start, dur, name, types, dims, device))
    raw.sort(key=lambda r: (r[0], r[1], -r[2]))
    ops: list[OpEvent] = []
    stack: list[int] = []  # end times of enclosing ops on the current thread
    current_tid = None
    for tid, start, dur, name, types, dims, device in raw:
        if tid != current_tid:
            stack, current_tid = [], tid
        while stack and stack[-1] <= start:
            stack.pop()
        ops.append(
            OpEvent(
                name=name,
                start_ns=start,
                dur_ns=dur,
                tid=tid,
                depth=len(stack),
                input_types=types,
                input_dims=dims,
                flops=matmul_flops(name, dims),
                device_ns=device,
            )
        )
        stack.append(start + dur)
    if not window_steps:  # a trace from elsewhere: its profiler steps, when it marked them
        names = (str(e.get("name", "")) for e in events if isinstance(e, dict))
        window_steps = len({n for n in names if n.startswith("ProfilerStep#")})
    n_steps = max(1, window_steps or 1)
    start_ns = min((o.start_ns for o in ops), default=0)
    end_ns = max((o.start_ns + o.dur_ns for o in ops), default=0)
    devices = doc.get("deviceProperties")
    first = devices[0] if isinstance(devices, list) and devices and isinstance(devices[0], dict) else {}
    device = first.get("name")
    return OpWindow(
        steps=n_steps, start_ns=start_ns, end_ns=end_ns, ops=tuple(ops),
        device_name=device if isinstance(device, str) else None,
    )  # fmt: skip
