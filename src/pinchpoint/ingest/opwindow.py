"""Reads the op window (`opwindow.json`, a torch.profiler Chrome trace of CPU ops) into an `OpWindow`."""

from __future__ import annotations

import bisect
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


RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "hip_driver"})
KERNEL_CATS = frozenset({"kernel", "Kernel"})
"""Event categories of launches and of kernels (Kineto's names; 2021 traces capitalise them)."""
INNERMOST_SEARCH = 64
"""Ops looked at, back from the last one starting before a launch, for the innermost that contains it."""


def _arg_int(e: dict[str, Any], key: str) -> int | None:
    args = e.get("args")
    v = args.get(key) if isinstance(args, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _external_id(e: dict[str, Any]) -> int | None:
    v = _arg_int(e, "External id")
    return v if v is not None else _arg_int(e, "external id")


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


Raw = tuple[int, int, int, str, tuple[str, ...], tuple[tuple[int, ...], ...], int | None]
"""A CPU op as read: (thread, start ns, duration ns, name, input types, input dims, External id)."""


def _kernel_time_by_op(events: list[Any], raw: list[Raw], offset: int) -> dict[int, int]:
    """GPU kernel time per op (index into `raw`, sorted by thread and start) that launched it.

    A kernel's `correlation` names the runtime call that enqueued it; that call carries the launching
    op's `External id` (newer traces copy it onto the kernel too). Some traces (2022) give runtime calls
    and kernels their correlation as `External id` instead: then the launching op is the innermost op of
    the call's thread whose time contains the call. An id match is trusted only when that op contains
    the call (ids of the two kinds can collide)."""
    launches: dict[int, tuple[int, int, int | None]] = {}  # correlation -> (thread, ns, External id)
    for e in events:
        if isinstance(e, dict) and e.get("cat") in RUNTIME_CATS:
            corr, tid = _arg_int(e, "correlation"), e.get("tid")
            with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError):
                if corr is not None:
                    ts = _us_to_ns(e["ts"]) + offset
                    launches[corr] = (tid if isinstance(tid, int) else 0, ts, _external_id(e))
    by_ext = {r[6]: i for i, r in enumerate(raw) if r[6] is not None}
    by_tid: dict[int, tuple[list[int], list[int]]] = {}  # thread -> (starts, indices), in start order
    for i, r in enumerate(raw):
        starts, idx = by_tid.setdefault(r[0], ([], []))
        starts.append(r[1])
        idx.append(i)

    def contains(i: int, tid: int, t: int) -> bool:
        r = raw[i]
        return r[0] == tid and r[1] <= t <= r[1] + r[2]

    def innermost(tid: int, t: int) -> int | None:
        starts, idx = by_tid.get(tid, ([], []))
        k = bisect.bisect_right(starts, t) - 1
        for j in range(k, max(-1, k - INNERMOST_SEARCH), -1):
            if contains(idx[j], tid, t):
                return idx[j]
        return None

    out: dict[int, int] = {}
    for e in events:
        if not (isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in KERNEL_CATS):
            continue
        try:
            dur = _us_to_ns(e["dur"])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        corr = _arg_int(e, "correlation")
        launch = launches.get(corr) if corr is not None else None
        op: int | None = None
        for ext in (launch[2] if launch else None, _external_id(e)):
            found = by_ext.get(ext) if ext is not None else None
            if found is not None and (launch is None or contains(found, launch[0], launch[1])):
                op = found
                break
        if op is None and launch is not None:
            op = innermost(launch[0], launch[1])
        if op is not None:
            out[op] = out.get(op, 0) + dur
    return out


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
    raw: list[Raw] = []
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
        tid = e.get("tid")
        raw.append(
            (
                tid if isinstance(tid, int) else 0,
                start,
                dur,
                str(e.get("name", "?")),
                types,
                dims,
                _external_id(e),
            )
        )
    raw.sort(key=lambda r: (r[0], r[1], -r[2]))
    kernel_ns = _kernel_time_by_op(events, raw, offset)
    ops: list[OpEvent] = []
    stack: list[int] = []  # end times of enclosing ops on the current thread
    current_tid = None
    for i, (tid, start, dur, name, types, dims, _) in enumerate(raw):
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
                device_ns=kernel_ns.get(i),
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
