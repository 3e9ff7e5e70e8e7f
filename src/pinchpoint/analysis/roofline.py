"""Where the op window's time went against what this machine can do: arithmetic or memory traffic.

Each framework op gets the bytes it must move (its tensor inputs read, its output written, from
shapes and dtypes) and, for matmuls, its FLOPs. Elementwise ops on large tensors do about one
operation per element against several bytes: they run at memory speed, whatever the matrix units
can do, and a run of them over the same tensor (a hand-written activation, a normalisation spelled
out in tensor ops, their backward) moves the tensor through memory once per op. Fused, the chain
reads its inputs once and writes once, like its slowest member does alone: that is the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pinchpoint.analysis.attention import HandAttention, hand_attention
from pinchpoint.analysis.datasheet import gpu_peaks
from pinchpoint.trace.run import OpEvent, OpWindow, Probes

ELEMENTWISE_OPS = frozenset(
    f"aten::{n}"
    for base in (
        "add", "sub", "mul", "div", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "tanh", "sigmoid",
        "relu", "gelu", "silu", "mish", "elu", "leaky_relu", "hardtanh", "hardswish", "pow", "sqrt", "rsqrt",
        "reciprocal", "abs", "sin", "cos", "erf", "erfc", "clamp", "clamp_min", "clamp_max", "where",
        "maximum", "minimum", "square", "sign", "addcmul", "addcdiv", "lerp", "masked_fill", "fill",
        "copy", "floor", "ceil", "round", "trunc", "frac", "sgn", "logical_not", "bitwise_not", "eq",
        "ne", "lt", "le", "gt", "ge", "mul_scalar", "fmod", "remainder", "hypot", "atan2", "xlogy",
    )
    for n in (base, base + "_")
) | frozenset(
    f"aten::{n}"
    for n in (
        "tanh_backward", "sigmoid_backward", "gelu_backward", "silu_backward", "threshold_backward",
        "hardswish_backward", "elu_backward", "leaky_relu_backward", "mish_backward", "_to_copy",
        "clone", "zeros_like", "ones_like",
    )
)  # fmt: skip
"""aten ops that do O(1) arithmetic per element: memory-bound on any large tensor."""
LARGE_NUMEL = 65_536
"""An elementwise op on fewer elements than this (256 KiB in fp32) does microseconds of memory work,
less than its own dispatch: it belongs to host.dispatch, not here."""
MIN_CHAIN = 3
"""Consecutive elementwise ops over one tensor size that count as a fusion candidate."""
ITEMSIZE = {
    "float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Chain:
    ops: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    ns_per_step: float
    bytes_per_step: float
    fused_ns_per_step: float
    """The chain as one kernel: its slowest op alone (that op already reads and writes the tensor once)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTraffic:
    elementwise_ns_per_step: float
    """Time per step in elementwise ops on large tensors (depth-0 ops)."""
    elementwise_ops_per_step: float
    bytes_per_step: float
    chains: tuple[Chain, ...] = ()
    """Fusion candidates, most time first."""
    top_ops: tuple[tuple[str, float], ...] = ()
    """(op name, ns per step) of the elementwise ops with the most time."""
    attention: HandAttention | None = None
    """Attention written out in tensor ops, when the window ran some."""

    @property
    def achieved_bytes_per_s(self) -> float:
        return (
            self.bytes_per_step / (self.elementwise_ns_per_step / 1e9)
            if self.elementwise_ns_per_step
            else 0.0
        )

    @property
    def chain_ns_per_step(self) -> float:
        return sum(c.ns_per_step for c in self.chains)

    @property
    def fusion_saving_ns_per_step(self) -> float:
        return sum(c.ns_per_step - c.fused_ns_per_step for c in self.chains)


def _largest(o: OpEvent) -> tuple[int, tuple[int, ...], str]:
    best: tuple[int, tuple[int, ...], str] = (0, (), "")
    for dims, t in zip(o.input_dims, o.input_types, strict=False):
        n = math.prod(dims) if dims else 0
        if n > best[0]:
            best = (n, tuple(dims), t)
    return best


def op_bytes(o: OpEvent) -> int:
    """Tensor inputs read plus an output the size of the largest input written (broadcasting ops)."""
    read = 0
    widest = 1
    for dims, t in zip(o.input_dims, o.input_types, strict=False):
        size = ITEMSIZE.get(t)
        if size is None or not dims:
            continue
        read += math.prod(dims) * size
        widest = max(widest, size)
    n, _, _ = _largest(o)
    return read + n * widest


def memory_traffic(window: OpWindow) -> MemoryTraffic | None:
    """Elementwise time, bytes and fusion chains of the window's depth-0 ops (one thread's order)."""
    top = sorted((o for o in window.ops if o.depth == 0), key=lambda o: (o.tid, o.start_ns))
    if not top:
        return None
    steps = max(1, window.steps)
    ew_ns = ew_bytes = 0.0
    ew_ops = 0
    by_name: dict[str, float] = {}
    chains: list[Chain] = []
    run: list[OpEvent] = []
    run_key: tuple[int, tuple[int, ...], str] | None = None

    def close() -> None:
        if len(run) >= MIN_CHAIN and run_key is not None:
            chains.append(
                Chain(
                    ops=tuple(o.name.removeprefix("aten::") for o in run),
                    shape=run_key[1],
                    dtype=run_key[2],
                    ns_per_step=sum(o.dur_ns for o in run) / steps,
                    bytes_per_step=sum(op_bytes(o) for o in run) / steps,
                    fused_ns_per_step=max(o.dur_ns for o in run) / steps,
                )
            )

    for o in top:
        key = _largest(o)
        if o.name in ELEMENTWISE_OPS and key[0] >= LARGE_NUMEL:
            ew_ns += o.dur_ns
            ew_bytes += op_bytes(o)
            ew_ops += 1
            name = o.name.removeprefix("aten::")
            by_name[name] = by_name.get(name, 0.0) + o.dur_ns / steps
            if run_key is not None and key[0] == run_key[0] and o.tid == run[-1].tid:
                run.append(o)
                continue
            close()
            run, run_key = [o], key
        else:
            close()
            run, run_key = [], None
    close()
    # Identical chains repeat every step (and every layer): merge them by op sequence and shape.
    merged: dict[tuple[tuple[str, ...], tuple[int, ...]], Chain] = {}
    for c in chains:
        k = (c.ops, c.shape)
        m = merged.get(k)
        merged[k] = c if m is None else Chain(
            ops=c.ops, shape=c.shape, dtype=c.dtype, ns_per_step=m.ns_per_step + c.ns_per_step,
            bytes_per_step=m.bytes_per_step + c.bytes_per_step,
            fused_ns_per_step=m.fused_ns_per_step + c.fused_ns_per_step,
        )  # fmt: skip
    return MemoryTraffic(
        elementwise_ns_per_step=ew_ns / steps,
        elementwise_ops_per_step=ew_ops / steps,
        bytes_per_step=ew_bytes / steps,
        chains=tuple(sorted(merged.values(), key=lambda c: -c.ns_per_step)),
        top_ops=tuple(sorted(by_name.items(), key=lambda kv: -kv[1])[:4]),
        attention=hand_attention(window),
    )


DTYPE_LABELS = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "double": "fp64",
    "tf32": "tf32",
}
"""Short names for dtypes as ops carry them, for people and for report.json."""
TF32_EVIDENCE = 1.2
"""An fp32 op faster than this × the fp32 peak ran on TF32 Tensor Cores."""
PROBE_DTYPES = {"float32": "float", "bfloat16": "c10::BFloat16", "float16": "c10::Half"}
"""The matmul probe's dtype names (torch's) by the names ops carry (Kineto's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflinePoint:
    """One kind of op (name, largest input's shape and dtype) in the op window, per step."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    calls_per_step: float
    ns_per_step: float
    flops_per_step: float
    bytes_per_step: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops_per_step / self.bytes_per_step if self.bytes_per_step else 0.0

    @property
    def achieved_flops(self) -> float:
        return self.flops_per_step / (self.ns_per_step / 1e9) if self.ns_per_step else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ceilings:
    """What the machine can do: matmul FLOP/s per op dtype ("tf32" too, on GPUs), memory bandwidth."""

    matmul_flops: dict[str, float]
    memory_bytes_per_s: float | None
    source: str = "measured"
    """Where the numbers come from, for labels: "measured at the op window", "datasheet", ..."""

    def attainable(self, intensity: float, dtype: str, achieved: float = 0.0) -> float | None:
        """The roofline: min(the dtype's matmul peak, bandwidth × intensity); None when unmeasured.

        An fp32 op that ran well past the fp32 (SIMT) peak can only have used TF32 Tensor Cores
        (`torch.backends.cuda.matmul.allow_tf32`): its roof is the TF32 peak."""
        peak = self.matmul_flops.get(dtype) or max(self.matmul_flops.values(), default=0.0)
        tf32 = self.matmul_flops.get("tf32")
        if dtype == "float" and tf32 and peak and achieved > TF32_EVIDENCE * peak:
            peak = tf32
        if not peak and not self.memory_bytes_per_s:
            return None
        if not self.memory_bytes_per_s:
            return peak
        mem = self.memory_bytes_per_s * intensity
        return min(peak, mem) if peak else mem


def timed_on_device(window: OpWindow) -> bool:
    """The window's ops carry the GPU kernel time they launched (a CUDA program's Kineto window)."""
    return any(o.device_ns is not None for o in window.ops)


def window_ceilings(window: OpWindow, probes: Probes, device: Ceilings | None) -> Ceilings | None:
    """The roof a window's ops are held to: a CPU window's own probes, a CUDA window's `device` ceilings."""
    return device if timed_on_device(window) else cpu_ceilings(probes)


def roofline_points(window: OpWindow, limit: int = 40) -> list[RooflinePoint]:
    """Matmuls (FLOPs from shapes) and elementwise ops on large tensors (one FLOP per element), the
    `limit` kinds with the most time. Ops whose work is unknown from shapes are left out.

    On a CUDA program's window (ops carry `device_ns`) each op is timed by the kernels it launched,
    so the points say what the device achieved; on a CPU window by the op's own duration."""
    from pinchpoint.analysis.ops import CONV_OPS, MATMUL_OPS

    steps = max(1, window.steps)
    on_device = timed_on_device(window)
    groups: dict[tuple[str, tuple[int, ...], str], list[float]] = {}
    for o in window.ops:
        ns = o.device_ns if on_device else o.dur_ns
        if not ns:
            continue
        n, shape, dtype = _largest(o)
        if (o.name in MATMUL_OPS or o.name in CONV_OPS) and o.flops:
            flops = float(o.flops)
        elif o.name in ELEMENTWISE_OPS and (on_device or o.depth == 0) and n >= LARGE_NUMEL:
            flops = float(n)
        else:
            continue
        acc = groups.setdefault((o.name.removeprefix("aten::"), shape, dtype), [0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += ns
        acc[2] += flops
        acc[3] += op_bytes(o)
    points = [
        RooflinePoint(
            name=name,
            shape=shape,
            dtype=dtype,
            calls_per_step=acc[0] / steps,
            ns_per_step=acc[1] / steps,
            flops_per_step=acc[2] / steps,
            bytes_per_step=acc[3] / steps,
        )
        for (name, shape, dtype), acc in groups.items()
        if acc[1] > 0 and acc[3] > 0
    ]
    return sorted(points, key=lambda p: -p.ns_per_step)[:limit]


def ceilings_from(
    matmul_flops: Mapping[str, float], memory_bytes_per_s: float | None, source: str
) -> Ceilings:
    """Ceilings keyed by the dtype names ops carry, from FLOP/s keyed by torch's ("float32", "tf32", ...)."""
    flops = {PROBE_DTYPES.get(k, k): float(v) for k, v in matmul_flops.items() if v}
    return Ceilings(matmul_flops=flops, memory_bytes_per_s=memory_bytes_per_s, source=source)


def cpu_ceilings(probes: Probes) -> Ceilings:
    """Ceilings from the op window's probes (a matmul per dtype of the program's heaviest shape, a copy)."""
    flops: dict[str, float] = {}
    for p in probes.matmul:
        if p.ns > 0:
            m, k, n = p.shape
            flops[p.dtype] = max(flops.get(p.dtype, 0.0), 2 * m * k * n / (p.ns / 1e9))
    return ceilings_from(flops, probes.memory_bytes_per_s, "measured at the op window")


def gpu_ceilings(
    measured_flops: Mapping[str, float] | None, measured_bandwidth: float | None, device_name: str | None
) -> Ceilings | None:
    """A GPU's ceilings for the roofline: its matmul peaks and memory bandwidth as `pinchpoint calibrate`
    measured them on this machine (when it did), else the datasheet's; None for an unknown device."""
    if measured_flops:
        return ceilings_from(measured_flops, measured_bandwidth, "measured by pinchpoint calibrate")
    return datasheet_ceilings(device_name)


def datasheet_ceilings(device_name: str | None) -> Ceilings | None:
    """A GPU's datasheet peaks as roofline ceilings; None for a device not in `analysis.datasheet`."""
    peaks = gpu_peaks(device_name)
    if peaks is None:
        return None
    sheet = {d: peaks.matmul_flops(d) or 0.0 for d in ("float32", "tf32", "bfloat16", "float16")}
    return ceilings_from(sheet, peaks.memory_bytes_per_s, f"{peaks.name} datasheet")
