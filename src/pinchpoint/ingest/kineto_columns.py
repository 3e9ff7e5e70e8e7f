"""Turns decoded Kineto events into numpy column chunks: the declarative category table, ns times, ids.

Only the fields the model needs are declared on `RawEvent`/`RawArgs`; msgspec skips every other key
without allocating. Numeric args accept int, float or str (ROCm writes `"stream": "0x0"`, 2021 traces
write `"tid": "25738"`), and `to_ints` maps them: digits and hex parse, `"stream 7"` gives 7, other
strings a stable negative id (`string_id`).
"""

from __future__ import annotations

import math
import re
import warnings
import zlib
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import msgspec
import numpy as np

from pinchpoint.trace.kineto import MISSING, CopyKind, HostMemory, Kind

Num = int | float | str


NO_NUMBER = msgspec.Raw(b"null")


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
    ts: msgspec.Raw = NO_NUMBER
    """Kept as text: a float64 cannot hold epoch µs with ns digits (`1712195495519689.047`)."""
    dur: msgspec.Raw = NO_NUMBER
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


_str_ids: dict[str, int] = {}


def _str_int(v: str) -> int:
    got = _str_ids.get(v)
    if got is None:
        if len(_str_ids) > 100_000:
            _str_ids.clear()
        got = _str_ids[v] = one_int(v)
    return got


def to_ints(values: list[Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """int64 column of ints, floats (truncated) or strings (see module doc)."""
    try:
        return np.array(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array(
            [v if type(v) is int and -(1 << 63) <= v < 1 << 63 else _cold_int(v) for v in values], np.int64
        )


def _cold_int(v: Any) -> int:
    return _str_int(v) if isinstance(v, str) else one_int(v)


MAX_US = 9.0e15
"""Stamps at or past this many µs would overflow int64 nanoseconds; they count as unusable."""
_PLAIN = np.zeros(256, dtype=np.bool_)
_PLAIN[np.frombuffer(b"0123456789.-,", dtype=np.uint8)] = True
_POW10 = 10 ** np.arange(19, dtype=np.int64)


def to_ns(
    raws: list[msgspec.Raw],
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.bool_]]]:
    """Exact integer ns from JSON numbers in µs (their text), and a mask of the usable ones.

    Fast path: join the texts, drop the dots, parse the integers in C, scale by each number's count of
    decimals (rounding past the third). Anything else (exponents, null, strings, > 18 digits) goes through
    Decimal, one by one.
    """
    n = len(raws)
    text = b",".join(raws)
    a = np.frombuffer(text, dtype=np.uint8)
    seps = np.flatnonzero(a == 0x2C)
    if n == 0 or seps.size != n - 1 or not bool(_PLAIN[a].all()):
        return _to_ns_slow(raws)
    ends = np.append(seps, a.size)
    starts = np.concatenate(([0], seps + 1))
    if int((ends - starts).max()) > 19:
        return _to_ns_slow(raws)
    dots = np.flatnonzero(a == 0x2E)
    dec = np.zeros(n, dtype=np.int64)
    dec[np.searchsorted(seps, dots)] = ends[np.searchsorted(seps, dots)] - dots - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = np.fromstring(text.replace(b".", b""), dtype=np.int64, sep=",")
    if v.size != n:
        return _to_ns_slow(raws)
    ok = np.abs(v / _POW10[dec].astype(np.float64)) < MAX_US
    up = np.maximum(3 - dec, 0)
    down = np.maximum(dec - 3, 0)
    q = _POW10[down]
    half = q // 2
    scaled = np.where(v >= 0, (v + half) // q, -((half - v) // q))
    ns = np.where(ok, scaled, 0) * _POW10[up]
    return ns.astype(np.int64), ok


def _to_ns_slow(
    raws: list[msgspec.Raw],
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.bool_]]]:
    out = [_one_ns(bytes(r)) for r in raws]
    ok = np.array([v is not None for v in out], dtype=np.bool_)
    return np.array([0 if v is None else v for v in out], dtype=np.int64), ok


def _one_ns(text: bytes) -> int | None:
    try:
        d = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not d.is_finite() or abs(d) >= Decimal(MAX_US):
        return None
    return int((d * 1000).to_integral_value(rounding=ROUND_HALF_UP))
