"""The default op window on a CPU program: a census of framework ops through a TorchDispatchMode.

`torch.profiler` (Kineto) leaves a CPU program measurably slower after it stops: on the reference
machine the steps after a 3-step window ran ~3.5% slower for the rest of the run, in a plain PyTorch
script with no pinchpoint at all (`benchmarks/README.md`). A dispatch mode is pure Python: pushed for
the window's steps and popped after, it leaves nothing behind. It sees every aten op that reaches the
dispatcher's Python key on this thread (below autograd and autocast, so matmuls show the dtype they
really run in, and backward's ops are seen too), with input dtypes and shapes, timed around the call.

The census is written in the Chrome-trace form the op-window reader already reads (`cpu_op` events on
the monotonic clock, no `baseTimeNanoseconds`), so the analysis has one input format. Each recorded op
is one level deep (depth 0): an op's callees run below the Python key and are not seen separately.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

DTYPE_NAMES = {
    "float32": "float",
    "float64": "double",
    "bfloat16": "c10::BFloat16",
    "float16": "c10::Half",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
}
"""torch dtypes by the names Kineto writes in `Input type`, so the analysis reads both alike."""

_TENSOR, _TENSORS, _SCALAR = object(), object(), object()
"""Markers in a recorded op's arguments: (_TENSOR, dtype, shape), a list of tensors, a number."""

Event = tuple[str, int, int, int, list[str], list[list[int]]]
"""(op name, start ns, duration ns, thread id, input types, input dims)."""


def available(torch: Any) -> bool:
    """A dispatch mode can record this program: torch has it, and nothing was compiled (a mode active
    while a compiled graph runs would make dynamo recompile)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
    except Exception:
        return False
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None:
        try:
            if dynamo.counters["stats"]["unique_graphs"]:
                return False
        except Exception:
            return False
    return True


class Census:
    """Push with `start()`, pop with `stop()` (which returns the events); one thread's ops."""

    def __init__(self, torch: Any) -> None:
        import importlib

        base: Any = importlib.import_module("torch.utils._python_dispatch").TorchDispatchMode

        raw: list[tuple[Any, int, int, tuple[Any, ...]]] = []
        self._raw = raw
        self._tid = threading.get_native_id()
        now = time.monotonic_ns
        tensor_type = torch.Tensor

        def meta(a: Any) -> Any:
            # Only what is cheap to take now (dtype objects and torch.Size tuples, not strings: the
            # window's steps pay for every line of this, once per op), and no reference to a tensor.
            if isinstance(a, tensor_type):
                # A DTensor's shape is the global one; this rank computes on its local shard.
                local = getattr(a, "_local_tensor", None) if type(a) is not tensor_type else None
                return (_TENSOR, a.dtype, (a if local is None else local).shape)
            if isinstance(a, (list, tuple)):
                return _TENSORS if a and isinstance(a[0], tensor_type) else None
            return _SCALAR if isinstance(a, (int, float, bool)) else None

        class _Mode(base):  # type: ignore[misc]
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch wraps a mode's __torch_dispatch__ in dynamo's `disable`, which imports
                # torch._dynamo at the first op: 1.0 s of an inference program's run that had not
                # imported it. The census runs only where nothing was compiled (`available`).
                return "torch._dynamo" in sys.modules and bool(super()._should_skip_dynamo())

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                t0 = now()
                out = func(*args, **(kwargs or {}))
                t1 = now()
                raw.append((func, t0, t1, tuple(map(meta, args))))
                return out

        self._mode: Any = _Mode()
        self._active = False
        self._torch = torch

    def start(self) -> None:
        self._mode.__enter__()
        self._active = True
        # A first op under the mode, between steps, not in the window's first step (whose time the
        # per-op overhead estimate reads): whatever it sets up once is paid here. Not recorded.
        self._torch.zeros(1).add_(1)
        self._raw.clear()

    def stop(self) -> list[Event]:
        if self._active:
            self._active = False
            self._mode.__exit__(None, None, None)
        tid = self._tid
        return [(func._schema.name, t0, t1 - t0, tid, *_describe(args)) for func, t0, t1, args in self._raw]


def _describe(args: tuple[Any, ...]) -> tuple[list[str], list[list[int]]]:
    """Input types (Kineto's names) and dims of one op's recorded arguments."""
    types: list[str] = []
    dims: list[list[int]] = []
    for a in args:
        if isinstance(a, tuple) and a[0] is _TENSOR:
            name = str(a[1]).removeprefix("torch.")
            types.append(DTYPE_NAMES.get(name, name))
            dims.append(list(a[2]))
        else:
            types.append("TensorList" if a is _TENSORS else "Scalar" if a is _SCALAR else "")
            dims.append([])
    return types, dims


def write_trace(path: Path, events: list[Event]) -> None:
    """The census as a Chrome trace of `cpu_op` events (µs, monotonic clock)."""
    trace = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 0,
                "tid": tid,
                "ts": start / 1000,
                "dur": dur / 1000,
                "args": {"Input type": types, "Input Dims": dims},
            }
            for name, start, dur, tid, types, dims in events
        ],
        "displayTimeUnit": "ms",
        "pinchpoint": {"recorder": "census"},
    }
    path.write_text(json.dumps(trace))


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def heaviest_matmul(events: list[Event]) -> tuple[int, int, int] | None:
    """(M, K, N) of the 2-D matmul with the most total time in the census."""
    totals: dict[tuple[int, int, int], int] = {}
    for name, _, dur, _, _, dims in events:
        if name not in MATMUL_OPS:
            continue
        mats = [d for d in dims if len(d) >= 2]
        if len(mats) < 2:
            continue
        a, b = mats[-2], mats[-1]
        mkn = (int(a[-2]), int(a[-1]), int(b[-1]))
        totals[mkn] = totals.get(mkn, 0) + dur
    return max(totals, key=lambda k: totals[k]) if totals else None


CONV_OPS = ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution")


def heaviest_conv(events: list[Event]) -> tuple[list[int], list[int]] | None:
    """(input dims, weight dims) of the 2-D forward convolution with the most total time in the census."""
    totals: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for name, _, dur, _, _, dims in events:
        if name not in CONV_OPS or len(dims) < 2 or len(dims[0]) != 4 or len(dims[1]) != 4:
            continue
        key = (tuple(int(d) for d in dims[0]), tuple(int(d) for d in dims[1]))
        totals[key] = totals.get(key, 0) + dur
    if not totals:
        return None
    x, w = max(totals, key=lambda k: totals[k])
    return list(x), list(w)
