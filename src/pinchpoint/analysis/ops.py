"""What the op window says about the framework ops of one step: how many, how small, which precision.

Ops at depth 0 are the ones Python called; each pays the full trip through Python, the dispatcher and
autograd bookkeeping, measured on this machine by the dispatch probe. Matmul ops are grouped by the
dtype of their inputs, to find fp32 matmuls on a CPU whose matrix unit runs bf16.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from pinchpoint.trace.run import OpWindow, Probes, Step

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_weight_int8pack_mm"})
CONV_OPS = frozenset({"aten::mkldnn_convolution", "aten::_convolution", "aten::convolution_overrideable"})
FP32 = "float"
SMALL_OP_NS = 20_000
"""Ops under 20 µs (as the profiler sees them) are dominated by their fixed cost: Python, dispatcher,
autograd bookkeeping and the profiler's own ~1–2 µs; a tiny op's math takes nanoseconds."""
LOW_PRECISION = frozenset({"c10::BFloat16", "c10::Half", "BFloat16", "Half"})


@dataclass(frozen=True, slots=True, kw_only=True)
class OpStats:
    window_steps: int
    window_step_ns: float
    """Mean duration of the steps inside the window (inflated by the profiler)."""
    top_level_ops_per_step: float
    median_top_level_op_ns: float
    op_ns_per_step: float
    """Time inside depth-0 ops per step."""
    matmul_ns_per_step: Mapping[str, float] = field(default_factory=dict)
    """Time in matmul/conv ops per step, by input dtype ("float", "c10::BFloat16", ...)."""
    matmul_flops_per_step: float = 0.0
    dispatch_ns_per_op: int | None = None
    top_ops: tuple[tuple[str, float, int], ...] = ()
    """(name, ns per step, calls per step) of the depth-0 ops with the most time."""
    small_ops_per_step: float = 0.0
    """Depth-0 ops shorter than `SMALL_OP_NS`: overhead-dominated."""
    large_phase_op_ns_per_step: float = 0.0
    """Time per step in depth-0 ops of at least `SMALL_OP_NS` inside the measured phases: the part of
    forward/backward/optimizer that is real arithmetic rather than per-op overhead and Python glue."""
    loose_op_ns_per_step: float = 0.0
    """Time in depth-0 ops outside every measured phase (e.g. a functional loss, metrics on tensors):
    framework work that lands in host_other, not Python."""

    @property
    def fp32_matmul_ns_per_step(self) -> float:
        return float(self.matmul_ns_per_step.get(FP32, 0.0))

    @property
    def dispatch_ns_per_step(self) -> float | None:
        """Framework overhead per step: depth-0 ops times the measured cost of one tiny op."""
        if self.dispatch_ns_per_op is None:
            return None
        return self.top_level_ops_per_step * self.dispatch_ns_per_op


def op_stats(window: OpWindow, probes: Probes, steps: tuple[Step, ...]) -> OpStats | None:
    if not window.ops:
        return None
    n = max(1, window.steps)
    top = [o for o in window.ops if o.depth == 0]
    durs = sorted(o.dur_ns for o in top)
    by_dtype: dict[str, float] = {}
    flops = 0
    for o in window.ops:
        if o.name in MATMUL_OPS or o.name in CONV_OPS:
            dtype = next((t for t in o.input_types if t and t != "Scalar"), "?")
            by_dtype[dtype] = by_dtype.get(dtype, 0.0) + o.dur_ns
            flops += o.flops or 0
    per_name: dict[str, list[float]] = {}
    for o in top:
        acc = per_name.setdefault(o.name, [0.0, 0.0])
        acc[0] += o.dur_ns
        acc[1] += 1
    top_ops = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:8]
    phases = sorted((iv.start_ns, iv.end_ns) for s in steps if s.profiled for iv in s.intervals)
    covered = [_covered(phases, o.start_ns, o.start_ns + o.dur_ns) for o in top]
    loose = sum(o.dur_ns for o, c in zip(top, covered, strict=True) if not c)
    large_in_phases = sum(o.dur_ns for o, c in zip(top, covered, strict=True) if c and o.dur_ns >= SMALL_OP_NS)
    small = sum(1 for o in top if o.dur_ns < SMALL_OP_NS)
    # The profiled steps the window's ops overlap (the profiler starts as the first of them starts).
    inside = [s for s in steps if s.profiled and s.end_ns > window.start_ns and s.start_ns < window.end_ns]
    window_step_ns = (
        (sum(s.dur_ns for s in inside) / len(inside)) if inside else (window.end_ns - window.start_ns) / n
    )
    return OpStats(
        window_steps=n,
        window_step_ns=window_step_ns,
        top_level_ops_per_step=len(top) / n,
        median_top_level_op_ns=float(durs[len(durs) // 2]) if durs else 0.0,
        op_ns_per_step=sum(durs) / n,
        matmul_ns_per_step={k: v / n for k, v in by_dtype.items()},
        matmul_flops_per_step=flops / n,
        dispatch_ns_per_op=probes.dispatch_ns_per_op,
        top_ops=tuple((name, acc[0] / n, round(acc[1] / n)) for name, acc in top_ops),
        small_ops_per_step=small / n,
        large_phase_op_ns_per_step=large_in_phases / n,
        loose_op_ns_per_step=loose / n,
    )


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """True if [start, end] lies inside one of the (sorted by start) spans."""
    i = bisect.bisect_right(spans, (start, 2**63)) - 1
    while i >= 0:
        s, e = spans[i]
        if s <= start and e >= end:
            return True
        i -= 1
    return False
