"""Every GPU rule of `pinchpoint analyze` as a table of should-fire / shouldn't-fire cases, plus the engine.

Traces come from `gpu_trace_builder`: three identical steps of 1000 µs unless a case says otherwise, so a
phase of N µs is a share of N/1000 and "0.25 ms per step" is 250 µs. Thresholds come from the rule
module, so a case sits just below or just above the named constant whatever its value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_trace_builder import (
    A100,
    A100_UNLISTED,
    ELEMENTWISE,
    GIB,
    P40,
    SGEMM_AMPERE,
    SGEMM_VOLTA,
    TC_GEMM,
    US,
    V100,
    Comm,
    Compile,
    Copy,
    Gap,
    Gpu,
    Graphs,
    Load,
    Phase,
    Queued,
    Sync,
    Tiny,
    TraceBuilder,
    build,
)
from pinchpoint.analysis.gpu.ranks import STRAGGLER_EXCESS
from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis, analyze_traces
from pinchpoint.diagnosis.engine import diagnose_gpu
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Finding, NoteKind, facts
from pinchpoint.diagnosis.registry import RULES
from pinchpoint.diagnosis.rules.base import Job, Scope, Subject
from pinchpoint.diagnosis.rules.gpu_base import (
    HIGH_SHARE,
    LOADER_OPS_PREPROCESS,
    MATRIX_UNIT_GAIN,
    MEMORY_PRESSURE_PEAK,
    MIN_SHARE,
)
from pinchpoint.report.phrases import say, say_all
from pinchpoint.trace.kineto import CopyKind, DeviceInfo, Kind, KinetoTrace

GPU_RULES = tuple(r for r in RULES if r.scope is Scope.DEVICE)
STEP_US = 1000
AT_MIN = round(MIN_SHARE * STEP_US)  # 50 µs of a 1000 µs step
AT_HIGH = round(HIGH_SHARE * STEP_US)  # 200 µs
HIGH, MEDIUM, LOW = Confidence.HIGH, Confidence.MEDIUM, Confidence.LOW


def amdahl(share: float) -> float:
    return 1.0 / (1.0 - share)


@dataclass(frozen=True)
class Case:
    traces: tuple[KinetoTrace, ...]
    fires: bool
    share: float | None = None
    confidence: Confidence | None = None
    speedup: float | None = None
    """Expected estimated_speedup; Amdahl on `share` when None."""
    ranks: tuple[int, ...] = (0,)
    check: Callable[[Finding], None] | None = None
    facts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The facts the finding must state, by key, with the measured values they must carry."""


def t(*phases: Phase, **kw: Any) -> tuple[KinetoTrace, ...]:
    return (build(*phases, **kw),)


def yes(
    traces: tuple[KinetoTrace, ...],
    share: float,
    confidence: Confidence,
    speedup: float | None = None,
    *,
    facts: Mapping[str, Mapping[str, Any]] | None = None,
    ranks: tuple[int, ...] = (0,),
    check: Callable[[Finding], None] | None = None,
) -> Case:
    return Case(traces, True, share, confidence, speedup, ranks, check, facts or {})


def no(traces: tuple[KinetoTrace, ...]) -> Case:
    return Case(traces, False)


def run_rule(rule_id: str, run: GpuRunAnalysis) -> list[Finding]:
    return [
        f
        for rank in run.ranks
        for rule in GPU_RULES
        for f in rule.check(Subject(rank=rank.rank, job=Job(devices=run), device=rank))
        if f.id.value == rule_id
    ]


def assert_well_formed(f: Finding, ranks: Sequence[int] = (0,)) -> None:
    # A finding that claims no gain says so; one that claims a gain says how it was obtained.
    assert f.basis is not Basis.NONE or f.estimated_speedup == 1.0, (f.basis, f.estimated_speedup)
    assert isinstance(f.id, Category)
    assert say(f.title)
    assert 0.0 <= f.share <= 1.0, f.share
    assert math.isfinite(f.estimated_speedup) and f.estimated_speedup >= 1.0, f.estimated_speedup
    assert isinstance(f.confidence, Confidence)
    assert f.evidence and all(say_all(f.evidence))
    assert "nan" not in " ".join(say_all(f.evidence)).lower().split()
    for fact in facts(f).values():
        for name, value, _ in fact.quantities():
            assert not (isinstance(value, float) and not math.isfinite(value)), (fact.key, name, value)
    assert say(f.fix)
    assert set(ranks) <= set(f.ranks), (ranks, f.ranks)


def assert_facts(f: Finding, expected: Mapping[str, Mapping[str, Any]]) -> None:
    """The finding states each expected fact, with these values (floats to 1e-6 relative)."""
    got = facts(f)
    for key, values in expected.items():
        assert key in got, (key, sorted(got))
        for name, want in values.items():
            have = got[key][name]
            assert have == (pytest.approx(want) if isinstance(want, float) else want), (key, name, have, want)


def _lacks(key: str) -> Callable[[Finding], None]:
    def check(f: Finding) -> None:
        assert key not in facts(f), sorted(facts(f))

    return check


# ------------------------------------------------------------------------------------------ input

INPUT_FETCH = {
    # 250 µs loader wait, GPU idle, then 750 µs of kernels: 25% exposed input wait; no ops inside it.
    "quarter-of-the-step": yes(
        t(Load(250), Gpu(750)),
        0.25,
        HIGH,
        facts={
            "gpu.input.wait": {"share": 0.25, "wait_ns": 250e3, "per_step": True, "loader_share": 0.25},
            "gpu.input.ops": {"op_share": 0.0},
            "gpu.input.single_process": {},
            "gpu.input.fix": {"in_process": True},
        },
    ),
    "just-above-min": yes(t(Load(AT_MIN + 1), Gpu(STEP_US - AT_MIN - 1)), 0.051, MEDIUM),
    "just-below-min": no(t(Load(AT_MIN - 1), Gpu(STEP_US - AT_MIN + 1))),
    "just-below-high": yes(t(Load(AT_HIGH - 1), Gpu(STEP_US - AT_HIGH + 1)), 0.199, MEDIUM),
    "at-high": yes(t(Load(AT_HIGH), Gpu(STEP_US - AT_HIGH)), 0.20, HIGH),
    # Ops cover 99 of the 400 µs wait (24.75% < 25%): nothing visible computes, so it is fetch.
    "ops-just-below-preprocess": yes(
        t(Load(400, ops_us=round(LOADER_OPS_PREPROCESS * 400) - 1), Gpu(600)), 0.40, HIGH
    ),
    "ops-at-preprocess-is-not-fetch": no(t(Load(400, ops_us=round(LOADER_OPS_PREPROCESS * 400)), Gpu(600))),
    # A kernel issued before the wait keeps the GPU busy through it: the wait costs nothing.
    "gpu-busy-during-wait-is-not-exposed": no(t(Load(300, hidden_us=300), Gpu(700))),
    # ... for half of it: only the exposed 200 of the 400 µs count.
    "partly-hidden-counts-the-exposed-part": yes(
        t(Load(400, hidden_us=200), Gpu(600)), 0.20, HIGH, facts={"gpu.input.wait": {"loader_share": 0.40}}
    ),
    "multi-process-workers-cannot-keep-up": yes(
        t(Load(300, multi=True), Gpu(700)),
        0.30,
        HIGH,
        facts={"gpu.input.fix": {"in_process": False}},
        check=_lacks("gpu.input.single_process"),
    ),
    "no-profiler-steps": no(t(Load(250), Gpu(750), profiler_steps=False)),
    "no-kernels": no(t(Load(250), Gap(750))),
}

INPUT_PREPROCESS = {
    # Transforms (aten::stack) cover 120 of the 400 µs wait: 30% ≥ 25%, the loader computes.
    "transforms-cover-30pct": yes(
        t(Load(400, ops_us=120), Gpu(600)),
        0.40,
        HIGH,
        facts={
            "gpu.input.preprocess_title": {},
            "gpu.input.wait": {"share": 0.40},
            "gpu.input.ops": {"op_share": 0.30},
        },
    ),
    "ops-at-threshold": yes(t(Load(400, ops_us=round(LOADER_OPS_PREPROCESS * 400)), Gpu(600)), 0.40, HIGH),
    "ops-just-below-threshold": no(t(Load(400, ops_us=round(LOADER_OPS_PREPROCESS * 400) - 1), Gpu(600))),
    "below-min-share": no(t(Load(AT_MIN - 1, ops_us=AT_MIN - 1), Gpu(STEP_US - AT_MIN + 1))),
    "just-above-min": yes(t(Load(AT_MIN + 1, ops_us=AT_MIN), Gpu(STEP_US - AT_MIN - 1)), 0.051, MEDIUM),
    "multi-process": yes(
        t(Load(300, ops_us=150, multi=True), Gpu(700)),
        0.30,
        HIGH,
        facts={"gpu.input.fix": {"in_process": False}},
    ),
}

# ----------------------------------------------------------------------------------------- host


def _dispatch(n: int) -> tuple[KinetoTrace, ...]:
    """A launch-bound tail of `n` tiny kernels (5 µs each: 2 busy, 3 host-wait) after a loader wait full of
    transforms (the host thread stays busy): host-wait idle is 3n µs per 1000 µs step."""
    return t(Load(STEP_US - 5 * n, ops_us=STEP_US - 5 * n), Tiny(n))


HOST_DISPATCH = {
    # 200 tiny kernels per step: each 5 µs period has a 3 µs launch call, a 2 µs kernel and 3 µs of idle,
    # so the GPU idles 60% waiting for launches. The fix (CUDA graphs, compile, fewer ops) removes the
    # launch calls, so only the kernels' own 40% bounds it: Amdahl on 60% = ×2.5.
    "launch-bound": yes(
        t(Tiny(200)),
        0.60,
        HIGH,
        2.5,
        facts={
            "gpu.host.dispatch_title": {},
            "gpu.host.idle": {"share": 0.60, "idle_ns": 600e3, "per_step": True},
            "gpu.host.kernels": {
                "kernel_median_ns": 2e3,
                "launch_median_ns": 3e3,
                "tiny_share": 1.0,
                "kernels_per_step": 200.0,
            },
            "gpu.host.dispatch_snippet": {},
        },
    ),
    "just-above-min": yes(_dispatch(AT_MIN // 3 + 1), 0.051, MEDIUM),  # 17 kernels: 51 µs
    "just-below-min": no(_dispatch(AT_MIN // 3)),  # 16 kernels: 48 µs
    "just-below-high": yes(_dispatch(AT_HIGH // 3), 0.198, MEDIUM),  # 66 kernels
    "above-high": yes(_dispatch(AT_HIGH // 3 + 1), 0.201, HIGH),  # 67 kernels
    # Launch-bound needs the GPU under 50% busy, the launching thread ≥ 80% busy, kernels < launch calls.
    "kernels-longer-than-launch-calls": no(t(Tiny(200, launch_us=1))),
    "launching-thread-has-slack": no(t(Tiny(200, host_op=False))),
    "gpu-half-busy-no-host-wait": no(t(Tiny(250, period_us=4))),
    "big-kernels-are-python": no(t(Gpu(700), Gap(300))),
}

HOST_PYTHON = {
    # 700 µs kernel, then 300 µs the host does Python before the next launch: 30% host-wait idle. The
    # GPU work is 70% of the step, so ×1/0.7 is also the floor.
    "python-gap-30pct": yes(
        t(Gpu(700), Gap(300)),
        0.30,
        MEDIUM,
        1 / 0.7,
        facts={
            "gpu.host.python_title": {},
            "gpu.host.idle": {"share": 0.30, "idle_ns": 300e3, "per_step": True},
            "gpu.host.kernels": {"kernel_median_ns": 700e3, "launch_median_ns": 1e3, "tiny_share": 0.0},
        },
    ),
    # GPU work is 60% of the step: the step cannot get shorter than that, ×1/0.6 at most.
    "gpu-work-60pct-caps-speedup": yes(t(Gpu(600), Gap(400)), 0.40, MEDIUM, 1 / 0.6),
    "just-above-min": yes(t(Gpu(STEP_US - AT_MIN - 1), Gap(AT_MIN + 1)), 0.051, LOW),
    "just-below-min": no(t(Gpu(STEP_US - AT_MIN + 1), Gap(AT_MIN - 1))),
    "just-below-high": yes(t(Gpu(STEP_US - AT_HIGH + 1), Gap(AT_HIGH - 1)), 0.199, LOW),
    "at-high": yes(t(Gpu(STEP_US - AT_HIGH), Gap(AT_HIGH)), 0.20, MEDIUM),
    # Without ProfilerStep ranges the window is the GPU-activity span: kernels at 0, 1000, 2000 µs of
    # 700 µs each span 2700 µs with 600 µs idle. Confidence low: no steps to measure against.
    "no-steps-low-confidence": yes(t(Gpu(700), Gap(300), profiler_steps=False), 600 / 2700, LOW),
    # Tiny kernels but the launching thread has slack (only the 3 µs launch calls): not launch-bound.
    "tiny-kernels-host-with-slack": yes(t(Tiny(200, host_op=False)), 0.60, MEDIUM, 1 / 0.6),
    # The next kernel was issued long before the 300 µs gap: the GPU waits on something else.
    "queued-idle-is-not-host": no(t(Gpu(400), Queued(300), Gpu(300))),
    # After a 300 µs .item() the host spends 300 µs before launching: host.sync takes that idle.
    "sync-idle-not-counted-twice": no(t(Gpu(400), Sync(300), Gap(300))),
    # A 100 µs sync, then 500 µs idle: 100 µs go to host.sync, the other 400 µs here.
    "idle-beyond-the-sync": yes(t(Gpu(400), Sync(100), Gap(500)), 0.40, MEDIUM, 1 / 0.6),
    "input-wait-is-not-host": no(t(Load(300), Gpu(700))),
    # 300 µs loader wait, 400 µs kernel, 300 µs Python: each idle gap is one host-wait gap of 600 µs;
    # half of it is input (data_wait), the other half is here.
    "input-wait-then-python": yes(t(Load(300), Gpu(400), Gap(300)), 0.30, MEDIUM),
    # Bug fixed: the host-wait ratio used to include the loader wait, so with 500 µs of input wait and
    # 100 µs of queued (not host) idle per step, 1000/1300 of the idle read as host wait and host.python
    # fired at 0.1 × 0.77 = 7.7%. The only non-input idle here is queued.
    "input-wait-beside-queued-idle": no(t(Load(500), Gpu(200), Queued(100), Gpu(200))),
    "launch-bound-is-dispatch": no(t(Tiny(200))),
    "no-kernels": no(t(Gap(1000))),
}

HOST_SYNC = {
    # .item() blocks 300 µs while a kernel runs, then the host takes 300 µs to launch again: the block
    # costs as much as the idle it leaves, 30%.
    "item-then-python": yes(
        t(Gpu(400), Sync(300), Gap(300)),
        0.30,
        HIGH,
        facts={
            "gpu.sync.blocking": {"syncs": 3, "sync_copies": 0, "blocked_ns": 900e3, "share": 0.30},
            "gpu.sync.sites": {"sites": (("aten::item", 3, 900_000),)},
        },
    ),
    # The GPU never idles: blocking while it computes costs nothing extra.
    "sync-while-gpu-busy-costs-nothing": no(t(Gpu(700), Sync(300))),
    # 300 µs blocked but only 100 µs of GPU idle: capped at 10%.
    "capped-by-gpu-idle": yes(t(Gpu(400), Sync(300), Gap(100), Gpu(200)), 0.10, MEDIUM),
    "just-above-min": yes(t(Gpu(STEP_US - 301 - AT_MIN), Sync(300), Gap(AT_MIN + 1)), 0.051, MEDIUM),
    "just-below-min": no(t(Gpu(STEP_US - 299 - AT_MIN), Sync(300), Gap(AT_MIN - 1))),
    "just-below-high": yes(t(Gpu(STEP_US - 299 - AT_HIGH), Sync(300), Gap(AT_HIGH - 1)), 0.199, MEDIUM),
    "at-high": yes(t(Gpu(STEP_US - 300 - AT_HIGH), Sync(300), Gap(AT_HIGH)), 0.20, HIGH),
    "device-synchronize-outside-ops": yes(
        t(Gpu(400), Sync(300, api="cudaDeviceSynchronize", op=None), Gap(300)),
        0.30,
        HIGH,
        facts={"gpu.sync.sites": {"sites": (("(no enclosing op)", 3, 900_000),)}},
    ),
    # A pageable cudaMemcpyAsync whose call lasts the whole 200 µs copy (from 2 µs before it): synchronous
    # in effect. The idle it causes belongs to transfer.h2d (pinning fixes it), not to host.sync.
    "pageable-copy-blocks": no(t(Gpu(500), Copy(200, call_us=202), Gap(300))),
    "no-steps": no(t(Gpu(400), Sync(300), Gap(300), profiler_steps=False)),
}

# ------------------------------------------------------------------------------------- transfers

TRANSFER_H2D = {
    # 250 µs pageable copy of 5 MB (20 GB/s) with nothing beside it, then 750 µs of compute.
    "exposed-pageable-quarter": yes(
        t(Copy(250, nbytes=5_000_000), Gpu(750)),
        0.25,
        HIGH,
        facts={
            "gpu.h2d.copies": {
                "copies": 3,
                "moved_bytes": 15_000_000,
                "bandwidth_gbps": 20.0,
                "exposed_ns": 750e3,
                "exposed_share": 0.25,
            },
            "gpu.h2d.pageable": {"pageable": 3, "copies": 3},
            "gpu.h2d.fix": {"pinned": False},
            "gpu.h2d.snippet": {"pinned": False},
        },
    ),
    "hidden-under-compute-on-another-stream": no(t(Copy(250, hidden=True), Gpu(750))),
    "pinned-but-exposed": yes(
        t(Copy(250, pinned=True), Gpu(750)),
        0.25,
        HIGH,
        facts={"gpu.h2d.pageable": {"pageable": 0, "copies": 3}, "gpu.h2d.fix": {"pinned": True}},
    ),
    "just-above-min": yes(t(Copy(AT_MIN + 1), Gpu(STEP_US - AT_MIN - 1)), 0.051, MEDIUM),
    "just-below-min": no(t(Copy(AT_MIN - 1), Gpu(STEP_US - AT_MIN + 1))),
    "just-below-high": yes(t(Copy(AT_HIGH - 1), Gpu(STEP_US - AT_HIGH + 1)), 0.199, MEDIUM),
    "at-high": yes(t(Copy(AT_HIGH), Gpu(STEP_US - AT_HIGH)), 0.20, HIGH),
    "device-to-host-is-not-h2d": no(t(Copy(250, kind=CopyKind.D2H), Gpu(750))),
    "only-memcpys-no-kernels": yes(t(Copy(250), Gap(750)), 0.25, HIGH),
    # The copy call blocks the host for the whole 200 µs copy, then the GPU idles 300 µs: 202 µs of that
    # idle (capped by the blocked time) is the copy's doing too. 0.2 exposed + 0.202 = 0.402.
    "blocking-copy-adds-the-idle-it-causes": yes(
        t(Gpu(500), Copy(200, call_us=202), Gap(300)),
        0.402,
        HIGH,
        facts={"gpu.h2d.blocking": {"blocked_share": 0.202}},
    ),
    # Bug fixed: two copies at once on two streams were summed (0.50) rather than united (0.25).
    "two-copies-at-once-count-once": yes(
        t(Copy(250, parallel=2), Gpu(750)),
        0.25,
        HIGH,
        facts={"gpu.h2d.copies": {"copies": 6, "moved_bytes": 6_000_000}},
    ),
    # Bug fixed: a 1500 µs copy before ProfilerStep#1 (model upload) counted against the steps' 3000 µs,
    # as 50%, though no step copies anything.
    "copy-before-the-steps-does-not-count": no(t(Gpu(1000), prologue=(Copy(1500),))),
}

# -------------------------------------------------------------------------------------- compute


A100_TC_RATIO = 312 / 19.5
"""Datasheet: A100 bf16 Tensor Cores 312 TFLOP/s vs fp32 19.5 (no calibration in these tests)."""
V100_TC_RATIO = 125 / 15.7
"""Datasheet: V100 fp16 Tensor Cores 125 TFLOP/s vs fp32 15.7."""


def _tc_speedup(share: float, ratio: float = A100_TC_RATIO) -> float:
    """Tensor Core model: the off-Tensor-Core GEMM time shrinks by the device's datasheet ratio."""
    return amdahl(share * (1 - 1 / ratio))


COMPUTE_MATH = {
    # fp32 SIMT sgemm 500 µs + elementwise 500 µs on an A100: half the step could run 2× faster on TF32.
    "fp32-sgemm-on-a100": yes(
        t(Gpu(500, SGEMM_AMPERE), Gpu(500, ELEMENTWISE)),
        0.50,
        MEDIUM,
        _tc_speedup(0.5),
        facts={
            "gpu.math.off_tensor_cores": {"gemm_share": 0.50, "off_share": 1.0, "share": 0.50},
            "gpu.math.device": {"device": "NVIDIA A100-SXM4-80GB", "capability": (8, 0)},
            "gpu.math.top_kernel": {"kernel": "ampere_sgemm_128x64_nn"},
            "gpu.math.datasheet": {"dtype": "bfloat16", "faster_x": A100_TC_RATIO},
            "gpu.math.fix": {"ampere": True},
            "gpu.math.snippet": {"ampere": True},
        },
    ),
    "fp32-sgemm-on-v100": yes(
        t(Gpu(500, SGEMM_VOLTA), Gpu(500, ELEMENTWISE), devices=(V100,)),
        0.50,
        MEDIUM,
        _tc_speedup(0.5, V100_TC_RATIO),
        facts={
            "gpu.math.device": {"capability": (7, 0)},
            "gpu.math.datasheet": {"dtype": "float16", "faster_x": V100_TC_RATIO},
            "gpu.math.fix": {"ampere": False},
            "gpu.math.snippet": {"ampere": False},
        },
    ),
    "bf16-xmma-on-tensor-cores": no(t(Gpu(500, TC_GEMM), Gpu(500, ELEMENTWISE))),
    "pascal-has-no-tensor-cores": no(t(Gpu(500, SGEMM_AMPERE), Gpu(500, ELEMENTWISE), devices=(P40,))),
    "no-device-properties": no(t(Gpu(500, SGEMM_AMPERE), Gpu(500, ELEMENTWISE), devices=())),
    "just-above-min": yes(
        t(Gpu(AT_MIN + 1, SGEMM_AMPERE), Gpu(STEP_US - AT_MIN - 1, ELEMENTWISE)),
        0.051,
        MEDIUM,
        _tc_speedup(0.051),
    ),
    "just-below-min": no(t(Gpu(AT_MIN - 1, SGEMM_AMPERE), Gpu(STEP_US - AT_MIN + 1, ELEMENTWISE))),
    # Half the GEMM time on Tensor Cores: 300 of 1000 µs off them.
    "partial": yes(
        t(Gpu(300, SGEMM_AMPERE), Gpu(300, TC_GEMM), Gpu(400, ELEMENTWISE)),
        0.30,
        MEDIUM,
        _tc_speedup(0.3),
        facts={"gpu.math.off_tensor_cores": {"gemm_share": 0.60, "off_share": 0.50}},
    ),
    # 94% of GEMM time on Tensor Cores counts as "used" (≥ 90%), although 6% of the step is off them.
    "mostly-on-tensor-cores": no(t(Gpu(60, SGEMM_AMPERE), Gpu(940, TC_GEMM))),
    # Only the GPU's busy part scales: 100 µs of sgemm in a 1000 µs step is 10%.
    "gpu-mostly-idle": yes(t(Gpu(100, SGEMM_AMPERE), Gap(900)), 0.10, MEDIUM, _tc_speedup(0.1)),
    "unknown-device-uses-the-conservative-gain": yes(
        t(Gpu(500, SGEMM_AMPERE), Gpu(500, ELEMENTWISE), devices=(A100_UNLISTED,)),
        0.50,
        MEDIUM,
        _tc_speedup(0.5, MATRIX_UNIT_GAIN),
        facts={"gpu.math.assumed": {"faster_x": MATRIX_UNIT_GAIN}},
    ),
}

# -------------------------------------------------------------------------------- communication

COMM_EXPOSED = {
    "exposed-all-reduce": yes(
        t(Gpu(700), Comm(300)),
        0.30,
        HIGH,
        facts={
            "gpu.comm.exposed": {"share": 0.30, "exposed_ns": 300e3, "per_step": True},
            "gpu.comm.overlap": {"comm_ns": 900e3, "overlap_share": 0.0, "wait_share": 0.0},
        },
    ),
    "fully-overlapped": no(t(Comm(300, hidden_us=300), Gpu(700))),
    "half-overlapped": yes(
        t(Comm(300, hidden_us=150), Gpu(700)),
        0.15,
        MEDIUM,
        facts={"gpu.comm.overlap": {"overlap_share": 0.50}},
    ),
    "just-above-min": yes(t(Gpu(STEP_US - AT_MIN - 1), Comm(AT_MIN + 1)), 0.051, MEDIUM),
    "just-below-min": no(t(Gpu(STEP_US - AT_MIN + 1), Comm(AT_MIN - 1))),
    "just-below-high": yes(t(Gpu(STEP_US - AT_HIGH + 1), Comm(AT_HIGH - 1)), 0.199, MEDIUM),
    "at-high": yes(t(Gpu(STEP_US - AT_HIGH), Comm(AT_HIGH)), 0.20, HIGH),
    # Bug fixed: rank 0 computes 100 µs and waits 800 of its 900 µs all-reduce for rank 1 (900 µs of
    # compute). The wait is imbalance.straggler's; comm.exposed keeps the 100 µs transfer on each rank
    # (it reported 90% and ×10 on rank 0, and the two findings summed to 130% of the step).
    "wait-for-a-straggler-left-to-straggler": yes(
        (build(Gpu(100), Comm(900), rank=0), build(Gpu(900), Comm(100), rank=1)),
        0.10,
        MEDIUM,
        ranks=(0, 1),
        facts={"gpu.comm.overlap": {"wait_share": 800 / 900}},
    ),
}

# ---------------------------------------------------------------------------------------- ranks


def _ranks(*steps: tuple[int, int]) -> tuple[KinetoTrace, ...]:
    """One trace per rank: (compute µs, all-reduce µs) per step, three steps."""
    return tuple(build(Gpu(c), Comm(a), rank=r) for r, (c, a) in enumerate(steps))


IMBALANCE_STRAGGLER = {
    # Rank 1 computes 600 µs, rank 0 400 µs: rank 0's all-reduce lasts 300 µs (200 waiting + 100 transfer),
    # rank 1's 100 µs. Waiting is 600 of the 1200 µs of collective time (50%); exposed communication is
    # 300/700 and 100/700 of the ranks' steps, mean 200/700; the straggler costs 50% of that = 1/7.
    "rank-1-computes-1.5x": yes(
        _ranks((400, 300), (600, 100)),
        1 / 7,
        MEDIUM,
        7 / 6,
        ranks=(1,),
        facts={
            "gpu.straggler.late": {"rank": 1, "compute_ns": 600e3, "last_arrivals": 3, "collectives": 3},
            "gpu.straggler.others": {"compute_ns": 400e3},
            "gpu.straggler.wait": {"wait_frac": 0.50},
        },
    ),
    "rank-0-slow": yes(_ranks((600, 100), (400, 300)), 1 / 7, MEDIUM, 7 / 6, ranks=(0,)),
    "equal-ranks": no(_ranks((500, 200), (500, 200))),
    # Compute 551 vs 500 µs: just above the 10% excess (550), so rank 1 is a straggler, but the others
    # wait 51 µs per step: 51/1400 = 3.6% of the step, under MIN_SHARE: not reported.
    "just-above-excess-but-small": no(_ranks((500, 200), (round((1 + STRAGGLER_EXCESS) * 500) + 1, 149))),
    "just-below-excess": no(_ranks((500, 200), (round((1 + STRAGGLER_EXCESS) * 500) - 1, 151))),
    "one-rank": no(_ranks((400, 300))),
    # Bug fixed: without a collective matched on every rank nobody is seen waiting; the rule used to report
    # rank 0 "arrives last at 0 of 0 collectives" with share 0.
    "slower-rank-without-collectives": no(
        (build(Gpu(900), Gap(100), rank=0), build(Gpu(700), Gap(300), rank=1))
    ),
}

# --------------------------------------------------------------------------------------- memory

CAP = A100.total_memory_bytes or 0


def _mem(reserved: int, allocated: int = 10 * GIB, devices: tuple[DeviceInfo, ...] = (A100,)) -> Any:
    rows = [(0, 10 * GIB, 20 * GIB), (1000 * US, allocated, reserved), (2000 * US, 10 * GIB, reserved)]
    return t(Gpu(1000), memory=rows, devices=devices)


MEMORY_PRESSURE = {
    "reserved-92pct": yes(
        _mem(round(0.92 * CAP)),
        0.0,
        MEDIUM,
        1.0,
        facts={"gpu.memory.peak": {"device": 0, "peak_frac": 0.92, "capacity_bytes": 80 * GIB}},
    ),
    "at-threshold": yes(_mem(math.ceil(MEMORY_PRESSURE_PEAK * CAP)), 0.0, MEDIUM, 1.0),
    "just-above": yes(_mem(round((MEMORY_PRESSURE_PEAK + 0.001) * CAP)), 0.0, MEDIUM, 1.0),
    "just-below": no(_mem(round((MEMORY_PRESSURE_PEAK - 0.001) * CAP))),
    # No reserved totals: the allocated peak counts.
    "allocated-without-reserved-totals": yes(_mem(-1, round(0.95 * CAP)), 0.0, MEDIUM, 1.0),
    # The 2021 schema has only deltas: the curve is relative, never a fraction of capacity.
    "deltas-only": no(_mem(-1, -1)),
    "no-capacity": no(_mem(round(0.95 * CAP), devices=(DeviceInfo(index=0, name="NVIDIA A100-SXM4-80GB"),))),
    "no-memory-events": no(t(Gpu(1000))),
}


def _recompiling(compile_us: int, *, ran: tuple[bool, ...] = (True, True, True), fresh: bool = False) -> Any:
    """Three steps, each compiling frame 0 again (0/1, 0/2, 0/3) then running it, or not; `fresh`: each
    compiling a new frame for the first time (1/0, 2/0, 3/0) instead."""
    steps: list[list[Any]] = []
    for k, r in enumerate(ran, start=1):
        c = Compile(compile_us, k, 0) if fresh else Compile(compile_us, 0, k)
        steps.append(
            [c, Graphs(1000 - compile_us, 300, compile=0 if fresh else k) if r else Gap(1000 - compile_us)]
        )
    return (build(step_list=steps),)


COMPILE_RECOMPILES = {
    # 3 x 400 us of 3000: 40%; one compilation like them (400 us) stays: 3000 / 2200
    "three-recompiles": yes(
        _recompiling(400),
        0.4,
        MEDIUM,
        3000 / 2200,
        facts={
            "compile.trace.recompiles": {"recompiles": 3, "ns": 1_200_000, "frames": (0,)},
            "compile.trace.recompiles.priced": {"mean_ns": 400_000.0, "saved_ns": 800_000.0},
        },
        check=_lacks("compile.trace.fell_back"),
    ),
    "at-share-min": yes(_recompiling(100), 0.1, MEDIUM, 3000 / 2800),
    "below-share-min": no(_recompiling(99)),
    "first-compilations-only": no(_recompiling(400, fresh=True)),
    "one-recompile": no(
        (
            build(
                step_list=[[Compile(400, 0, 1), Graphs(600, 300, compile=1)], [Graphs(1000, 300, compile=1)]]
            ),
        )
    ),
    # the last recompile never ran, and frame 0 ran nothing compiled after it: back to eager
    "falls-back": yes(
        _recompiling(300, ran=(True, True, False)),
        0.3,
        MEDIUM,
        3000 / 2400,
        facts={"compile.trace.fell_back": {"frame": 0, "compile": "0/3", "step": 3}},
    ),
}

COMPILE_GRAPH_BREAKS = {
    # 4 graph runs (2 forward, 2 backward) of 150 us: 400 us around them; one forward and one backward
    # would leave half of it: 200 us of 1000
    "broken-on-cpu": yes(
        t(Graphs(1000, 600, broken=True)),
        0.2,
        MEDIUM,
        1000 / 800,
        facts={"compile.trace.breaks": {"breaks": 1.0, "calls": 4.0, "inside_ns": 600_000.0}},
    ),
    "whole-graph": no(t(Graphs(1000, 600))),
    # the GPU busy 900 us of the 1000: host time counts only where it waited
    "capped-by-gpu-idle": yes(t(Graphs(1000, 600, broken=True, gpu_us=900)), 0.1, MEDIUM, 1000 / 900),
    "gpu-busy": no(t(Graphs(1000, 600, broken=True, gpu_us=960))),
    "every-step-compiling": no(t(Compile(300, 1, 0), Graphs(700, 400, broken=True))),
}

CASES: dict[str, dict[str, Case]] = {
    "input.fetch": INPUT_FETCH,
    "input.preprocess": INPUT_PREPROCESS,
    "host.dispatch": HOST_DISPATCH,
    "host.python": HOST_PYTHON,
    "host.sync": HOST_SYNC,
    "transfer.h2d": TRANSFER_H2D,
    "compute.math": COMPUTE_MATH,
    "comm.exposed": COMM_EXPOSED,
    "imbalance.straggler": IMBALANCE_STRAGGLER,
    "memory.pressure": MEMORY_PRESSURE,
    "compile.recompiles": COMPILE_RECOMPILES,
    "compile.graph_breaks": COMPILE_GRAPH_BREAKS,
}


@pytest.mark.parametrize(
    ("rule_id", "case"),
    [
        pytest.param(rid, case, id=f"{rid}:{name}")
        for rid, table in CASES.items()
        for name, case in table.items()
    ],
)
def test_rule_table(rule_id: str, case: Case) -> None:
    found = run_rule(rule_id, analyze_traces(case.traces))
    if not case.fires:
        assert found == [], [(f.share, f.evidence) for f in found]
        return
    assert len(found) >= 1, found
    assert case.share is not None
    f = max(found, key=lambda x: x.estimated_speedup)  # one per rank; the engine keeps the biggest gain
    assert_well_formed(f, case.ranks[:1])
    assert f.share == pytest.approx(case.share, abs=1e-3), f.share
    assert f.confidence == case.confidence, f.confidence
    speedup = case.speedup if case.speedup is not None else amdahl(case.share)
    assert f.estimated_speedup == pytest.approx(speedup, rel=1e-3), f.estimated_speedup
    assert_facts(f, case.facts)
    assert {r for g in found for r in g.ranks} == set(case.ranks)
    if case.check is not None:
        case.check(f)


def test_every_rule_has_a_table_with_both_outcomes() -> None:
    emitted = {c.value for r in GPU_RULES for c in r.yields}
    assert set(CASES) == emitted
    for rid, table in CASES.items():
        outcomes = {c.fires for c in table.values()}
        assert outcomes == {True, False}, rid


def test_gpu_rule_ids_are_unique_and_documented() -> None:
    ids = [r.id.value for r in GPU_RULES]
    assert GPU_RULES and len(ids) == len(set(ids))
    for rule in GPU_RULES:
        doc = type(rule).__doc__ or ""
        assert "Pattern:" in doc, rule.id


# --------------------------------------------------------------------------------------- engine


def test_diagnose_gpu_merges_a_finding_across_ranks() -> None:
    # Equal compute on both ranks (no straggler); input wait 10% on rank 0 and 30% on rank 1.
    traces = [build(Load(100), Gpu(700), Gap(200), rank=0), build(Load(300), Gpu(700), rank=1)]
    findings = {f.id.value: f for f in diagnose_gpu(analyze_traces(traces)).findings}
    fetch = findings["input.fetch"]
    assert fetch.ranks == (0, 1)
    assert fetch.share == pytest.approx(0.30)  # the rank with the bigger predicted gain speaks
    assert findings["host.python"].ranks == (0,)
    assert "imbalance.straggler" not in findings


def test_diagnose_gpu_sorts_by_speedup() -> None:
    # input 30% (×1.43), sgemm 300 of 500 µs kernel time = 30% of the step (×1.39 at the A100 datasheet's
    # 16x Tensor Core ratio), Python 20% (×1.25), memory nearly full (×1.0).
    rows = [(0, 10 * GIB, 78 * GIB)]
    trace = build(Load(300), Gpu(300, SGEMM_AMPERE), Gpu(200), Gap(200), memory=rows)
    findings = diagnose_gpu(analyze_traces([trace])).findings
    assert [f.id.value for f in findings] == ["input.fetch", "compute.math", "host.python", "memory.pressure"]
    speedups = [f.estimated_speedup for f in findings]
    assert speedups == sorted(speedups, reverse=True)
    assert sum(f.share for f in findings) == pytest.approx(0.30 + 0.20 + 0.30)


def test_diagnose_gpu_straggler_and_communication_do_not_double_count() -> None:
    traces = _ranks((100, 900), (900, 100))
    findings = {f.id.value: f for f in diagnose_gpu(analyze_traces(traces)).findings}
    straggler, comm = findings["imbalance.straggler"], findings["comm.exposed"]
    assert straggler.ranks == (1,) and comm.ranks == (0, 1)
    # Rank 0 waits 800 of 900 µs per step: the straggler finding has the wait (mean over ranks: 40%), the
    # comm finding the 100 µs transfer. Together no more than rank 0's exposed communication (90%).
    assert straggler.share == pytest.approx(0.4) and comm.share == pytest.approx(0.1)
    assert straggler.share + comm.share <= 0.9
    first = diagnose_gpu(analyze_traces(traces)).findings[0]
    assert first.id.value == "imbalance.straggler"  # the cause first, not its symptom


def test_diagnose_gpu_notes() -> None:
    diagnosis = diagnose_gpu(analyze_traces([build(Gpu(700), Gap(300), profiler_steps=False)]))
    steps_notes = [n.fact for n in diagnosis.notes if n.kind is NoteKind.TRACE_STEPS]
    assert [f.key for f in steps_notes] == ["note.analysis", "note.span_shares"]
    assert "no ProfilerStep#N ranges" in str(steps_notes[0]["text"])  # the analysis' own sentence
    assert len(diagnosis.notes) == len({n.fact for n in diagnosis.notes})


def _zero_length_steps() -> KinetoTrace:
    b = TraceBuilder()
    for k in range(3):
        b.phase(Gpu(500), k * 1000 * US)
        b.host(Kind.USER_ANNOTATION, f"ProfilerStep#{k + 1}", k * 1000 * US, 0)
    return b.trace()


@pytest.mark.parametrize(
    "trace",
    [
        pytest.param(build(steps=0), id="empty"),
        pytest.param(build(Gap(1000)), id="host-only"),
        pytest.param(build(Load(300, ops_us=100), Gap(700)), id="loader-no-kernels"),
        pytest.param(build(Gpu(700), Gap(300), profiler_steps=False), id="no-steps"),
        pytest.param(_zero_length_steps(), id="zero-length-steps"),
        pytest.param(build(Gpu(0), Gpu(0)), id="zero-length-everything"),
        pytest.param(build(Copy(250), Copy(250, kind=CopyKind.D2H), Gap(500)), id="only-memcpys"),
        pytest.param(build(Comm(300), Gap(700)), id="only-collectives"),
        pytest.param(build(Gpu(700), Gap(300), devices=()), id="no-device-properties"),
    ],
)
def test_edge_case_traces_do_not_crash(trace: KinetoTrace) -> None:
    for traces in ([trace], [trace, build(Gpu(500), Comm(500), rank=1)]):
        diagnosis = diagnose_gpu(analyze_traces(traces))
        for f in diagnosis.findings:
            assert_well_formed(f, ())
        assert sum(f.share for f in diagnosis.findings if f.ranks == (0,)) <= 1 + 1e-9


def test_diagnose_gpu_without_ranks() -> None:
    assert diagnose_gpu(GpuRunAnalysis(ranks=(), comparison=None)).findings == ()


# ------------------------------------------------------------------------------- rule invariants

_us = st.integers(1, 300)


@st.composite
def _phase(draw: st.DrawFn) -> Phase:
    us = draw(_us)
    part = draw(st.integers(0, 4)) * us // 4
    options: list[Phase] = [
        Load(us, ops_us=part, hidden_us=draw(st.integers(0, 4)) * us // 4, multi=draw(st.booleans())),
        Gpu(us, draw(st.sampled_from([TC_GEMM, SGEMM_AMPERE, ELEMENTWISE]))),
        Gap(us),
        Queued(us, host_op=draw(st.booleans())),
        Sync(us),
        Copy(us, pinned=draw(st.booleans()), hidden=draw(st.booleans()), parallel=draw(st.integers(1, 2))),
        Comm(us, hidden_us=part),
        Tiny(max(1, us // 5), host_op=draw(st.booleans())),
    ]
    return draw(st.sampled_from(options))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    steps=st.lists(st.lists(_phase(), min_size=1, max_size=6), min_size=1, max_size=3),
    profiler_steps=st.booleans(),
    device=st.sampled_from([A100, V100, P40]),
)
def test_shares_on_one_rank_sum_to_at_most_one(
    steps: list[list[Phase]], profiler_steps: bool, device: DeviceInfo
) -> None:
    trace = build(step_list=steps, profiler_steps=profiler_steps, devices=(device,))
    findings = diagnose_gpu(analyze_traces([trace])).findings
    for f in findings:
        assert_well_formed(f)
    assert sum(f.share for f in findings) <= 1 + 1e-9, [(f.id.value, f.share) for f in findings]
    keys = [-round(f.estimated_speedup, 3) for f in findings]
    assert keys == sorted(keys)
