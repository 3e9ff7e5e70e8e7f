"""Turns decoded Kineto events into numpy column chunks: the declarative category table, ns times, ids.

Only the fields the model needs are declared on `RawEvent`/`RawArgs`; msgspec skips every other key
without allocating. Numeric args accept int, float or str (ROCm writes `"stream": "0x0"`, 2021 traces
write `"tid": "25738"`), and `to_ints` maps them: digits and hex parse, `"stream 7"` gives 7, other
strings a stable negative id (`string_id`).
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import msgspec
import numpy as np

from pinchpoint.trace.kineto import MISSING, CopyKind, HostMemory, Kind

Num = int | float | str


class RawArgs(msgspec.Struct, gc=False):
    external_id: Num = msgspec.field(default=MISSING, name="External id")
    external_id_2021: Num = msgspec.field(default=MISSING, name="external id")
    correlation: Num = MISSING
    stream: Num = MISSING
    device: Num = MISSING
    bytes: Num = MISSING
    mem_bytes: Num = msgspec.field(default=0, name="Bytes")
    total_allocated: Num = msgspec.field(default=MISSING, name="Total Allocated")
    total_reserved: Num = msgspec.field(default=MISSING, name="Total Reserved")
    device_type: Num = msgspec.field(default=MISSING, name="Device Type")
    device_id: Num = msgspec.field(default=MISSING, name="Device Id")


class RawEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Num = MISSING
    tid: Num = MISSING
    ts: float = math.nan
    dur: float = math.nan
    id: Num = MISSING
    args: RawArgs | None = None


_NO_ARGS = RawArgs()

KIND_BY_CAT: dict[str, Kind] = {
    # current (2022+) names            # 2021 names
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "driver": Kind.DRIVER,
    "hip_driver": Kind.DRIVER,
    "python_function": Kind.PYTHON_FUNCTION,
    "python": Kind.PYTHON_FUNCTION,
}
"""`cat` (lower-cased) -> Kind. ROCm traces use the CUDA names (`cuda_runtime` holds `hipLaunchKernel`).
Everything else (`cuda_sync`, `Trace`, `overhead`, `cpu_instant_event`, ...) is Kind.OTHER."""

LEGACY_CATS = frozenset({"operator", "runtime", "memcpy", "memset", "python"})
"""Categories only the 2021 schema writes (it also used `Kernel`, which now is `kernel`)."""
LEGACY_ANNOTATION_PREFIXES = (
    "ProfilerStep#",
    "enumerate(DataLoader)#",
    "Optimizer.step#",
    "Optimizer.zero_grad#",
)
"""The 2021 schema files record_function ranges under `Operator`; these names become USER_ANNOTATION."""
FLOW_CATS = frozenset({"ac2g", "async", "async_cpu_to_gpu"})
"""Flow categories linking a launch to its GPU work (2024+, 2021, 2022)."""

_COPY_DIR = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoA|HtoA|AtoH)\b")
_COPY_KIND = {"HtoD": CopyKind.H2D, "DtoH": CopyKind.D2H, "DtoD": CopyKind.D2D}
_STREAM_NUM = re.compile(r"^\s*(?:stream|thread)?\s*(-?\d+)\s*(?:\(.*\))?\s*$", re.IGNORECASE)


def kind_of(cat: str) -> Kind:
    return KIND_BY_CAT.get(cat.lower(), Kind.OTHER)


def copy_of(name: str) -> tuple[CopyKind, HostMemory]:
    """Direction and host memory of a memcpy from its name, e.g. `Memcpy HtoD (Pageable -> Device)`."""
    m = _COPY_DIR.search(name)
    kind = CopyKind.OTHER if m is None else _COPY_KIND.get(m.group(1), CopyKind.OTHER)
    lower = name.lower()
    host = HostMemory.UNKNOWN
    if "pageable" in lower:
        host = HostMemory.PAGEABLE
    elif "pinned" in lower:
        host = HostMemory.PINNED
    return kind, host


def string_id(s: str) -> int:
    """A stable id for a non-numeric pid/tid string (`"Spans"`, `""`): negative, never -1 (MISSING)."""
    return -2 - (zlib.crc32(s.encode("utf-8", "replace")) & 0x7FFFFFFF)


def one_int(v: Any) -> int:
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else MISSING
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and abs(v) < 9.2e18 else MISSING
    if isinstance(v, str):
        m = _STREAM_NUM.match(v)
        if m:
            return one_int(int(m.group(1)))
        try:
            return one_int(int(v, 16)) if v.lower().startswith("0x") else string_id(v)
        except ValueError:
            return string_id(v)
    return MISSING


def to_ints(values: list[Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """int64 column of ints, floats (truncated) or strings (see module doc)."""
    try:
        return np.array(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array([one_int(v) for v in values], dtype=np.int64)


EXACT_US_LIMIT = float(1 << 43)
"""Below 2**43 µs (~102 days) a float stamp's ulp is < 1 ns, so its 3 decimals convert to ns exactly."""


def to_ns(us: np.ndarray[Any, np.dtype[np.float64]]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], bool]:
    """Integer ns from float µs, splitting off the integer part so the product never rounds.

    Returns the ns and whether some stamp is past `EXACT_US_LIMIT` with a sub-µs fraction (may be ±1 ns off).
    """
    whole = np.floor(us)
    frac = us - whole
    ns = whole.astype(np.int64) * 1000 + np.rint(frac * 1000).astype(np.int64)
    inexact = bool(np.any((np.abs(us) >= EXACT_US_LIMIT) & (frac != 0)))
    return ns, inexact
