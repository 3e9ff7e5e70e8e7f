"""What the op window says about the framework ops of one step: how many, how small, which precision.

Ops at depth 0 are the ones Python called; each pays the full trip through Python, the dispatcher and
autograd bookkeeping, measured on this machine by the dispatch probe. Matmul ops are grouped by the
dtype of their inputs, to find fp32 matmuls on a CPU whose matrix unit runs bf16.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pinchpoint.trace.run import OpEvent, OpWindow, Phase, Probes, Step

MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_weight_int8pack_mm"})
CONV_OPS = frozenset(
    {
        "aten::mkldnn_convolution",
        "aten::_convolution",
        "aten::convolution_overrideable",
        # the census sees the dispatcher's entry points, forward and backward
        "aten::convolution",
        "aten::convolution_backward",
    }
)
FP32 = "float"
BF16 = "c10::BFloat16"
SMALL_OP_NUMEL = 32_768
"""An op whose largest tensor (its own inputs or those of the ops it calls) has at most 32K elements
does microseconds of math or less, below the fixed cost of issuing it from Python with autograd
(measured here at tens of µs per op under autocast); its time is per-op overhead."""
COMPILED_REGIONS = (
    "Torch-Compiled Region",
    "CompiledFunction",
    "autograd::engine::evaluate_function: Compiled",
)
"""Depth-0 ops that run a torch.compile'd graph (forward, and its backward): their time is the graph's
fused kernels, math that compiling already made as large as it gets, whatever its tensors' sizes."""
COMPUTE_PHASE_NAMES = frozenset({Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value})


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
    conv_ns_per_step: Mapping[str, float] = field(default_factory=dict)
    """The part of `matmul_ns_per_step` in convolutions (forward and backward), by input dtype."""
    matmul_flops_per_step: float = 0.0
    dispatch_ns_per_op: int | None = None
    top_ops: tuple[tuple[str, float, int], ...] = ()
    """(name, ns per step, calls per step) of the depth-0 ops with the most time."""
    small_ops_per_step: float = 0.0
    """Depth-0 ops whose tensors are all small (`SMALL_OP_NUMEL`): overhead-dominated."""
    large_phase_op_ns_per_step: float = 0.0
    """Time per step in depth-0 ops with a large tensor (or unknown shapes) inside the measured phases:
    the part of forward/backward/optimizer that is arithmetic rather than per-op overhead and glue."""
    large_op_ns_by_phase: Mapping[str, float] = field(default_factory=dict)
    """`large_phase_op_ns_per_step` split by the phase (forward, backward, optimizer) each op ran in."""
    loose_op_ns_per_step: float = 0.0
    """Time in depth-0 ops outside every measured phase (e.g. a functional loss, metrics on tensors):
    framework work that lands in host_other, not Python."""
    compiled_ns_per_step: float = 0.0
    """Time per step in depth-0 ops that run torch.compile'd graphs (`COMPILED_REGIONS`), inside the
    measured phases; part of `large_phase_op_ns_per_step`."""
    vector_matmul_ns_per_step: float = 0.0
    """The part of `large_phase_op_ns_per_step` in matrix-vector products: depth-0 matmuls whose
    activation has at most `VECTOR_ROWS` rows (a batch-1 request, one token at a time). Their time is
    reading the weights, which a call with more rows reads once too."""
    small_math_ns_per_step: float = 0.0
    """The matrix math inside the small ops, at the best rate this program's own matmuls of the same
    dtype reached in the window (`small_op_math_ns`): time batching keeps, since it does the same FLOPs.
    An LSTM cell's 97x204 matmuls are "small" by their tensors yet ran at 71-76 GFLOP/s of a 91 peak."""

    @property
    def fp32_matmul_ns_per_step(self) -> float:
        return float(self.matmul_ns_per_step.get(FP32, 0.0))


VECTOR_ROWS = 4
"""Rows of a matmul's activation up to which it is a matrix-vector product (weight-read bound)."""
ROWS_INPUT = {"aten::mm": 0, "aten::addmm": 1, "aten::linear": 0, "aten::matmul": 0}
"""Which input of a depth-0 matmul is the activation: (x, W) for mm/linear/matmul, (bias, x, W) for addmm."""


def _activation_rows(o: OpEvent) -> int | None:
    """Rows of a depth-0 matmul's activation (the product of all but its last dimension), or None."""
    i = ROWS_INPUT.get(o.name)
    if i is None or len(o.input_dims) <= i or not o.input_dims[i]:
        return None
    return math.prod(o.input_dims[i][:-1])


def op_stats(window: OpWindow, probes: Probes, steps: tuple[Step, ...]) -> OpStats | None:
    if not window.ops:
        return None
    n = max(1, window.steps)
    top = [o for o in window.ops if o.depth == 0]
    durs = sorted(o.dur_ns for o in top)
    by_dtype: dict[str, float] = {}
    conv_by_dtype: dict[str, float] = {}
    flops = 0
    outer_until: dict[int, int] = {}  # per thread: the end of the matmul/conv op that holds later ones
    for o in window.ops:
        if o.name in MATMUL_OPS or o.name in CONV_OPS:
            # Kineto nests aten::convolution > aten::_convolution > aten::mkldnn_convolution: the
            # outermost one counts, once.
            if o.start_ns < outer_until.get(o.tid, -1):
                continue
            outer_until[o.tid] = o.start_ns + o.dur_ns
            dtype = next((t for t in o.input_types if t and t != "Scalar"), "?")
            by_dtype[dtype] = by_dtype.get(dtype, 0.0) + o.dur_ns
            if o.name in CONV_OPS:
                conv_by_dtype[dtype] = conv_by_dtype.get(dtype, 0.0) + o.dur_ns
            flops += o.flops or 0
    per_name: dict[str, list[float]] = {}
    for o in top:
        acc = per_name.setdefault(o.name, [0.0, 0.0])
        acc[0] += o.dur_ns
        acc[1] += 1
    top_ops = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:8]
    phases = sorted(
        (iv.start_ns, iv.end_ns, str(iv.phase.value)) for s in steps if s.profiled for iv in s.intervals
    )
    covered = [_phase_of(phases, o.start_ns, o.start_ns + o.dur_ns) is not None for o in top]
    loose = sum(o.dur_ns for o, c in zip(top, covered, strict=True) if not c)
    numel = _largest_numel_per_top_op(window)
    compiled_flags = [o.name.startswith(COMPILED_REGIONS) for o in top]
    small_flags = [
        0 < numel.get(id(o), 0) <= SMALL_OP_NUMEL and not compiled
        for o, compiled in zip(top, compiled_flags, strict=True)
    ]
    compiled_ns = sum(
        o.dur_ns for o, c, compiled in zip(top, covered, compiled_flags, strict=True) if c and compiled
    )
    large = [o for o, c, small in zip(top, covered, small_flags, strict=True) if c and not small]
    large_per_step = _median_step_sum(large, steps)
    vector = sum(
        o.dur_ns
        for o, c, small in zip(top, covered, small_flags, strict=True)
        if c and not small and (rows := _activation_rows(o)) is not None and rows <= VECTOR_ROWS
    )
    named = [span for span in phases if span[2] in COMPUTE_PHASE_NAMES]
    by_phase: dict[str, float] = {}
    for o, is_small in zip(top, small_flags, strict=True):
        phase = None if is_small else _phase_of(named, o.start_ns, o.start_ns + o.dur_ns)
        if phase is not None:
            by_phase[phase] = by_phase.get(phase, 0.0) + o.dur_ns / n
    small_ids = {id(o) for o, sm in zip(top, small_flags, strict=True) if sm}
    return OpStats(
        window_steps=n,
        window_step_ns=_window_step_ns(window, steps, n),
        top_level_ops_per_step=len(top) / n,
        median_top_level_op_ns=float(durs[len(durs) // 2]) if durs else 0.0,
        op_ns_per_step=sum(durs) / n,
        matmul_ns_per_step={k: v / n for k, v in by_dtype.items()},
        conv_ns_per_step={k: v / n for k, v in conv_by_dtype.items()},
        matmul_flops_per_step=flops / n,
        dispatch_ns_per_op=probes.dispatch_ns_per_op,
        top_ops=tuple((name, acc[0] / n, round(acc[1] / n)) for name, acc in top_ops),
        small_ops_per_step=len(small_ids) / n,
        large_phase_op_ns_per_step=(sum(o.dur_ns for o in large) / n)
        if large_per_step is None
        else large_per_step,
        large_op_ns_by_phase=by_phase,
        loose_op_ns_per_step=loose / n,
        vector_matmul_ns_per_step=vector / n,
        small_math_ns_per_step=small_op_math_ns(window, small_ids) / n,
        compiled_ns_per_step=compiled_ns / n,
    )


def _median_step_sum(ops: list[OpEvent], steps: tuple[Step, ...]) -> float | None:
    """The median over the profiled steps of the time `ops` took in each; None with fewer than three such
    steps (then the mean over the window is all there is). One step's first use of a shape can take an
    op x20 its usual time (an addmm of 2.3 ms among 0.1 ms ones in an autoregressive sampler's window):
    a mean over three steps then puts 0.8 ms a step of arithmetic that the other steps never ran."""
    spans = sorted((s.start_ns, s.end_ns) for s in steps if s.profiled and not s.partial)
    sums = [0.0] * len(spans)
    for o in ops:
        i = bisect.bisect_right(spans, (o.start_ns, 2**63)) - 1
        if i >= 0 and o.start_ns < spans[i][1]:
            sums[i] += o.dur_ns
    held = sorted(x for x in sums if x > 0)
    if len(held) < 3:
        return None
    mid = len(held) // 2
    return held[mid] if len(held) % 2 else (held[mid - 1] + held[mid]) / 2


def _window_step_ns(window: OpWindow, steps: tuple[Step, ...], n: int) -> float:
    """Mean duration of the profiled steps the window's ops overlap (the profiler starts as the first
    of them starts); the window's span over its step count without them."""
    inside = [s for s in steps if s.profiled and s.end_ns > window.start_ns and s.start_ns < window.end_ns]
    return (sum(s.dur_ns for s in inside) / len(inside)) if inside else (window.end_ns - window.start_ns) / n


RATE_MIN_FLOPS = 1_000_000
"""A group of matmuls (one op name, shape and dtype) sets a dtype's rate only with at least 1 MFLOP in
the window: a handful of tiny calls times their overhead, not the machine."""


def small_op_math_ns(window: OpWindow, small: set[int]) -> float:
    """Time the matmul FLOPs inside the small depth-0 ops (ids in `small`) would take at the best rate
    any group of the window's matmuls of the same dtype reached (total FLOPs over total time per name,
    shape and dtype: the program's own, on this machine, with its threads)."""
    groups: dict[tuple[str, str, tuple[tuple[int, ...], ...]], list[float]] = {}
    inside: dict[str, float] = {}
    parent: int | None = None
    for o in window.ops:  # ordered by thread, then start: a depth-0 op's callees follow it
        if o.depth == 0:
            parent = id(o)
        if o.name not in MATMUL_OPS or not o.flops or o.dur_ns <= 0:
            continue
        dtype = next((t for t in o.input_types if t and t != "Scalar"), "?")
        acc = groups.setdefault((o.name, dtype, tuple(tuple(d) for d in o.input_dims)), [0.0, 0.0])
        acc[0] += o.flops
        acc[1] += o.dur_ns
        if parent in small:
            inside[dtype] = inside.get(dtype, 0.0) + o.flops
    best: dict[str, float] = {}
    for (_, dtype, _), (flops, ns) in groups.items():
        if flops >= RATE_MIN_FLOPS:
            best[dtype] = max(best.get(dtype, 0.0), flops / ns)
    return sum(flops / best[dtype] for dtype, flops in inside.items() if best.get(dtype))


def _largest_numel_per_top_op(window: OpWindow) -> dict[int, int]:
    """For each depth-0 op (by id), the most elements of any tensor it or the ops it called touched.

    Ops are ordered by thread then start, so an op's callees follow it; 0 means no shapes were seen.
    """
    out: dict[int, int] = {}
    parent: int | None = None
    for o in window.ops:
        if o.depth == 0:
            parent = id(o)
            out[parent] = 0
        if parent is None:
            continue
        for dims in o.input_dims:
            n = math.prod(dims) if dims else 0
            if n > out[parent]:
                out[parent] = n
    return out


def _phase_of(spans: list[tuple[int, int, str]], start: int, end: int) -> str | None:
    """The phase of the innermost (latest-starting) span, sorted by start, that holds [start, end];
    None when no span holds it."""
    i = bisect.bisect_right(spans, (start, 2**63, "")) - 1
    while i >= 0:
        s, e, name = spans[i]
        if s <= start and e >= end:
            return name
        i -= 1
    return None
