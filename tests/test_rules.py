"""Every rule as a table of should-fire / shouldn't-fire cases, plus the engine that runs them.

Thresholds come from the rule modules, so a case sits just below or just above the named constant
whatever its value. Steps are 100 ms long, so a share of 0.05 is 5 ms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import (
    MIB,
    MS,
    make_cpu,
    make_env,
    make_loader,
    make_memory,
    make_ops,
    make_process,
    make_rank_analysis,
    make_run_analysis,
    make_step,
    make_steps,
    matmul_probes,
    ns,
)
from pinchpoint.analysis.attention import HandAttention
from pinchpoint.analysis.between_updates import BetweenUpdates
from pinchpoint.analysis.compiles import ColdCompiles, CompileStats, GraphBreak, GraphTime, Varying
from pinchpoint.analysis.gc import GcStats
from pinchpoint.analysis.generation import Recompute
from pinchpoint.analysis.memory import PageFaults, memory_trend, page_faults
from pinchpoint.analysis.ops import op_stats
from pinchpoint.analysis.restarts import WorkerRestarts
from pinchpoint.analysis.roofline import Chain, MemoryTraffic
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.run_time import RunTime, Segment, SegmentCode
from pinchpoint.analysis.serving import LoadSummary, ModelCalls, Serving
from pinchpoint.analysis.stacks import HotFunction, StackScope
from pinchpoint.analysis.steps import steady_steps, step_stats
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Finding, FixKind, NoteKind, facts
from pinchpoint.diagnosis.registry import RULES
from pinchpoint.diagnosis.rules.base import Job, Rule, Scope, Subject, speedup_removing
from pinchpoint.diagnosis.rules.compute import (
    AUTOCAST_OVERHEAD,
    COMPUTE_BOUND_SHARE,
    FP32_MATMUL_SHARE_MIN,
    MEMORY_BOUND_SHARE_MIN,
    MIN_PROBE_GAIN,
)
from pinchpoint.diagnosis.rules.cpu import (
    IDLE_CORE_MIN,
    PARALLEL_EFFICIENCY,
    RUNQ_SHARE_MIN,
    UNDERUSE_COMPUTE_MIN,
)
from pinchpoint.diagnosis.rules.gc import GC_SHARE_MIN
from pinchpoint.diagnosis.rules.host import (
    DISPATCH_RECOVERABLE,
    DISPATCH_SHARE_MIN,
    HOST_SHARE_HIGH,
    HOST_SHARE_MIN,
    MANY_SMALL_OPS,
    HostPython,
)
from pinchpoint.diagnosis.rules.input import (
    INPUT_SHARE_HIGH,
    INPUT_SHARE_MIN,
    MAX_IO_WORKERS,
    SLEEP_FRACTION_IO,
)
from pinchpoint.diagnosis.rules.io import CHECKPOINT_SHARE_MIN
from pinchpoint.diagnosis.rules.memory import (
    CHURN_MIN_FAULTS,
    CHURN_MIN_SHARE,
    LEAK_MAX_CONCENTRATION,
    LEAK_MIN_GROWTH,
    LEAK_MIN_R2,
    LEAK_MIN_RISING,
    LEAK_MIN_SLOPE,
    LEAK_NOISE_T,
)
from pinchpoint.diagnosis.rules.run import SHARE_MIN
from pinchpoint.report.phrases import say, say_all
from pinchpoint.report.phrases.notes import MISSING_DATA
from pinchpoint.trace.run import (
    ConvProbe,
    Environment,
    LiveTensors,
    LoaderTransfer,
    OpEvent,
    OpWindow,
    Probes,
    RankData,
    Role,
    Step,
    StepKind,
    TensorGroup,
)
from pinchpoint.trace.serving import BatchCosts, ServedLoad
from pinchpoint.trace.stacks import Frame
from pinchpoint.trace.trials import GcSite

STEP_MS = 100.0
EPS = 0.001  # a tenth of a millisecond in a 100 ms step


def steps_of(**shares: float) -> dict[str, Any]:
    """Phases (and host_other) as fractions of a 100 ms step; forward takes whatever is left."""
    host_other = shares.pop("host_other", 0.0)
    phases = {name: share * STEP_MS for name, share in shares.items()}
    phases["forward"] = phases.get("forward", 0.0) + STEP_MS * (1.0 - sum(shares.values()) - host_other)
    return {"phases": phases, "host_other_ms": host_other * STEP_MS}


def rank_of(shares: dict[str, float] | None = None, **kw: Any) -> RankAnalysis:
    parts = steps_of(**(shares or {}))
    return make_rank_analysis(parts["phases"], parts["host_other_ms"], **kw)


DEFAULT_ENV = make_env()


@dataclass(frozen=True)
class Case:
    rank: RankAnalysis
    fires: bool
    env: Environment = DEFAULT_ENV
    check: Callable[[Finding], None] | None = None
    facts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The facts the finding must state, by key, with the measured values they must carry."""


def _rule(rule_id: str) -> Rule:
    return next(r for r in RULES if r.id.value == rule_id and r.scope is Scope.RANK)


def run_rule(rule_id: str, env: Environment, rank: RankAnalysis) -> list[Finding]:
    subject = Subject(rank=rank.rank, job=Job(env=env, runs=(rank,)), run=rank)
    return [f for f in _rule(rule_id).check(subject) if f.id.value == rule_id]


def evidence_text(f: Finding) -> str:
    return " ".join(say_all(f.evidence))


_COMPUTE = ("forward", "backward", "optimizer")
LIVES_IN = {
    "input.fetch": ("data_wait",),
    "input.preprocess": ("data_wait",),
    "host.python": ("host_other",),
    "compute.math": _COMPUTE,
    "compute.memory": (*_COMPUTE, "host_other"),
    "host.dispatch": (*_COMPUTE, "host_other"),
    "io.checkpoint": ("checkpoint_io",),
}
"""The phases of a step each kind of time is spent in (the rest span the whole step)."""


def assert_shares_add_up(findings: Sequence[Finding], rank: RankAnalysis) -> None:
    """A finding's share never exceeds the phases it lives in; the causes that live in phases (a data
    wait counted once) never sum past the step; the step's breakdown sums to one."""
    steps = rank.steps
    assert steps is not None
    phases = {p: steps.share(p) for p in (*steps.phase_ns, "host_other")}
    assert sum(phases.values()) == pytest.approx(1.0, abs=1e-6) or not steps.phase_ns, phases
    total = 0.0
    waits = []
    for f in findings:
        where = LIVES_IN.get(f.id.value)
        if where is None:
            continue
        bound = sum(phases.get(p, 0.0) for p in where)
        assert f.share <= bound + 1e-6, (f.id.value, f.share, where, bound)
        if f.id.value.startswith("input."):
            waits.append(f.share)
        else:
            total += f.share
    total += max(waits, default=0.0)
    assert total <= 1.0 + 1e-6, [(f.id.value, f.share) for f in findings]


def assert_well_formed(f: Finding, rank: int = 0) -> None:
    # A finding that claims no gain says so; one that claims a gain says how it was obtained.
    assert f.basis is not Basis.NONE or f.estimated_speedup == 1.0, (f.basis, f.estimated_speedup)
    assert isinstance(f.id, Category)
    assert say(f.title)
    assert 0.0 <= f.share <= 1.0, f.share
    assert math.isfinite(f.estimated_speedup) and f.estimated_speedup >= 1.0, f.estimated_speedup
    assert isinstance(f.confidence, Confidence)
    assert f.evidence and all(say_all(f.evidence))
    assert "nan" not in evidence_text(f).lower().split()
    for fact in facts(f).values():
        for name, value, _ in fact.quantities():
            assert not (isinstance(value, float) and not math.isfinite(value)), (fact.key, name, value)
    assert say(f.fix)
    assert rank in f.ranks


def assert_facts(f: Finding, expected: Mapping[str, Mapping[str, Any]]) -> None:
    """The finding states each expected fact, with these values (floats to 1e-6 relative)."""
    got = facts(f)
    for key, values in expected.items():
        assert key in got, (key, sorted(got))
        for name, want in values.items():
            have = got[key][name]
            assert have == (pytest.approx(want) if isinstance(want, float) else want), (key, name, have, want)


def _eq(attr: str, value: Any) -> Callable[[Finding], None]:
    def check(f: Finding) -> None:
        got = getattr(f, attr)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), (attr, got, value)

    return check


def _all(*checks: Callable[[Finding], None]) -> Callable[[Finding], None]:
    def check(f: Finding) -> None:
        for c in checks:
            c(f)

    return check


# ------------------------------------------------------------------------------------------ inputs

SLEEPY = make_loader(wall_ms=30, cpu_fraction=0.1)  # 90% asleep: I/O-bound
BUSY = make_loader(wall_ms=30, cpu_fraction=0.9)  # 10% asleep: CPU-bound


def _busy_cores_case(cores: int, process_cores: float, **kw: Any) -> Case:
    """A CPU-bound loader while compute keeps `process_cores` of the `cores` busy."""
    rank = rank_of({"data_wait": 0.30}, loader=BUSY, cpu=make_cpu(cores=cores, process_cores=process_cores))
    return Case(rank, True, env=make_env(cores=cores), **kw)


def _workers_do_not_remove_whole_wait(f: Finding) -> None:
    stated = facts(f)
    predicted = stated["input.preprocess.options"]["workers_x"]
    assert isinstance(predicted, float)
    assert predicted < speedup_removing(f.share) - 0.01
    if "input.preprocess.fix_workers" in stated:
        assert f.estimated_speedup == pytest.approx(predicted)  # the partial gain, not the whole wait
    else:
        assert "input.preprocess.fix_cheaper" in stated, sorted(stated)
        assert f.estimated_speedup == pytest.approx(speedup_removing(f.share))


INPUT_FETCH = {
    "sleepy-loader-30pct": Case(
        rank_of({"data_wait": 0.30}, loader=SLEEPY),
        True,
        facts={
            "input.loader.wait": {"share": 0.30, "wait_ns": 30e6, "step_ns": 100e6},
            "input.loader.activity": {"in_process": True, "cpu_frac": 0.1, "sleep_frac": 0.9},
            "input.loader.settings": {"num_workers": 0},
            "input.fetch.fix": {"workers": 2},
            "input.fetch.snippet": {"workers": 2},
        },
        check=_all(
            _eq("share", 0.30),
            _eq("estimated_speedup", 1 / 0.7),
            _eq("confidence", Confidence.HIGH),
        ),
    ),
    "just-above-share-min": Case(
        rank_of({"data_wait": INPUT_SHARE_MIN + EPS}, loader=SLEEPY),
        True,
        check=_eq("confidence", Confidence.MEDIUM),
    ),
    "just-below-share-min": Case(rank_of({"data_wait": INPUT_SHARE_MIN - EPS}, loader=SLEEPY), False),
    "high-confidence-from-share-high": Case(
        rank_of({"data_wait": INPUT_SHARE_HIGH}, loader=SLEEPY),
        True,
        check=_eq("confidence", Confidence.HIGH),
    ),
    "sleep-just-above-io-threshold": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=1 - SLEEP_FRACTION_IO - 0.01)), True
    ),
    "sleep-at-io-threshold": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=1 - SLEEP_FRACTION_IO)), True
    ),
    "sleep-just-below-io-threshold": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=1 - SLEEP_FRACTION_IO + 0.01)), False
    ),
    "cpu-bound-loader": Case(rank_of({"data_wait": 0.30}, loader=BUSY), False),
    "waiting-for-a-cpu-is-not-sleep": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=0.3, runq_fraction=0.3)), False
    ),
    "no-loader-record-low-confidence": Case(
        rank_of({"data_wait": 0.30}),
        True,
        facts={"input.loader.wait": {"share": 0.30}, "input.loader.unrecorded": {}},
        check=_all(_eq("confidence", Confidence.LOW), _eq("estimated_speedup", 1 / 0.7)),
    ),
    "long-fetch-needs-more-workers": Case(
        rank_of({"data_wait": 0.60}, loader=make_loader(wall_ms=200, cpu_fraction=0.05)),
        True,
        facts={
            "input.loader.wait": {"share": 0.60, "wait_ns": 60e6, "step_ns": 100e6},
            "input.loader.activity": {"per_batch_ns": 200e6},
            # 200 ms batches vs 40 ms of compute: ceil(200/40)+1 = 6 workers; 200/6 = 33 ms < 40 ms.
            "input.fetch.fix": {"workers": 6},
        },
        check=_eq("estimated_speedup", 100 / 40),
    ),
    "no-steps-no-finding": Case(make_rank_analysis(steps=()), False),
}


def _accumulating_case(
    worker_ms: float,
    receive_ms: float,
    cores: int,
    batched_ms: float | None = None,
    num_workers: int = 0,
    **kw: Any,
) -> Case:
    """Four 6 ms CPU-bound fetches a step (gradient accumulation), and a loader probe that measured what
    one worker costs per batch."""
    steady = rank_of({"data_wait": 0.25}).steps
    assert steady is not None
    loader = make_loader(batches=4 * steady.count, wall_ms=6, cpu_fraction=1.0, num_workers=num_workers)
    probes = Probes(
        loader_transfer=LoaderTransfer(
            batch_bytes=33_000,
            worker_ns=ns(worker_ms),
            receive_ns=ns(receive_ms),
            batched_ns=None if batched_ms is None else ns(batched_ms),
        )
    )
    rank = rank_of(
        {"data_wait": 0.25}, loader=loader, probes=probes, cpu=make_cpu(cores=cores, process_cores=1.0)
    )
    return Case(rank, True, env=make_env(cores=cores), **kw)


INPUT_PREPROCESS = {
    # Moving a batch through a worker costs more than fetching it: keep loading in the training process
    # and make each fetch cheaper (in the training process the receive alone adds 4 x 10 ms to the step).
    "workers-cost-more-than-the-fetch": _accumulating_case(
        10,
        10,
        2,
        facts={
            "input.preprocess.cpu": {"prep_batch_ns": 6e6, "batches_per_step": 4.0},
            "input.loader.transfer": {"batch_bytes": 33_000, "worker_ns": 10e6, "in_workers": False},
            "input.preprocess.fix_whole_batches": {"transfer_bound": False, "workers": 0},
            "input.preprocess.snippet_whole_batches": {},
        },
        check=_all(_eq("estimated_speedup", 100 / 75), _eq("basis", Basis.REMOVED)),
    ),
    # With the probe's whole-batch fetch (0.5 ms): the wait keeps the DataLoader's own 0.25 ms a batch
    # (25 ms of wait, 4 x 6 ms in the fetch) and pays 0.5 ms per fetch: 4 x 0.75 = 3 ms instead of 25.
    "whole-batch-fetch-is-predicted": _accumulating_case(
        10,
        10,
        2,
        batched_ms=0.5,
        facts={
            "input.preprocess.whole_batches": {"fetch_ns": 0.5e6, "wait_ns": 3e6, "speedup": 100 / 78},
            "input.preprocess.fix_whole_batches": {"transfer_bound": False, "workers": 0},
        },
        check=_all(_eq("estimated_speedup", 100 / 78), _eq("basis", Basis.PROBE)),
    ),
    # Workers already load, and receiving their 4 batches (4 x 10 ms) is most of the 25 ms wait: load in
    # the training process, whole batches (0.5 ms each).
    "the-wait-is-the-transfer-from-workers": _accumulating_case(
        10,
        5,
        2,
        batched_ms=0.5,
        num_workers=1,
        facts={
            "input.preprocess.transfer_bound": {
                "receive_ns": 20e6,
                "batches_per_step": 4.0,
                "receive_frac": 0.8,
            },
            "input.loader.transfer": {"in_workers": True},
            "input.preprocess.fix_whole_batches": {"transfer_bound": True},
        },
        check=_eq("estimated_speedup", 100 / 77),
    ),
    # Cheap transfers on free cores: workers pay, less what the training process pays to receive.
    "cheap-transfer-workers-pay": _accumulating_case(
        0.5,
        0.2,
        8,
        facts={"input.preprocess.fix_workers": {"cores": 8}},
        check=_eq("estimated_speedup", 100 / (75 + 4 * 0.2)),
    ),
    "busy-loader-free-cores-more-workers": Case(
        rank_of({"data_wait": 0.30}, loader=BUSY, cpu=make_cpu(cores=8, process_cores=1.2)),
        True,
        env=make_env(cores=8),
        facts={
            "input.loader.wait": {"share": 0.30, "wait_ns": 30e6, "step_ns": 100e6},
            "input.loader.activity": {"cpu_frac": 0.9},
            "input.preprocess.cpu": {"prep_batch_ns": 27e6, "cores": 8},
            "input.preprocess.fix_workers": {"workers": 1},
        },
        check=_all(_eq("estimated_speedup", 1 / 0.7), _eq("confidence", Confidence.HIGH)),
    ),
    "one-core-busy-make-it-cheaper": _busy_cores_case(
        1, 1.0, facts={"input.preprocess.cpu": {"cores": 1}}, check=_workers_do_not_remove_whole_wait
    ),
    "two-cores-busy-make-it-cheaper": _busy_cores_case(
        2, 2.0, facts={"input.preprocess.cpu": {"cores": 2}}, check=_workers_do_not_remove_whole_wait
    ),
    # Compute keeps ~6.8 of 8 cores busy while it runs (5 on average over the step, waits included): a
    # worker takes a core from the intra-op pool, and the fix says so.
    "saturated-cores-worker-takes-a-pool-core": _busy_cores_case(
        8,
        5.0,
        facts={
            "input.preprocess.options": {"workers": 1, "threads": 7, "cores": 8},
            "input.preprocess.fix_workers": {"workers": 1, "threads": 7},
            "input.preprocess.snippet_workers": {"workers": 1, "threads": 7},
        },
    ),
    "waiting-for-a-cpu-counts-as-cpu-bound": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=0.3, runq_fraction=0.3)),
        True,
        facts={"input.loader.activity": {"cpu_frac": 0.3, "runq_frac": 0.3, "sleep_frac": 0.4}},
    ),
    "sleep-just-below-io-threshold": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=1 - SLEEP_FRACTION_IO + 0.01)), True
    ),
    "sleep-at-io-threshold": Case(
        rank_of({"data_wait": 0.30}, loader=make_loader(cpu_fraction=1 - SLEEP_FRACTION_IO)), False
    ),
    "sleepy-loader": Case(rank_of({"data_wait": 0.30}, loader=SLEEPY), False),
    "just-above-share-min": Case(
        rank_of({"data_wait": INPUT_SHARE_MIN + EPS}, loader=BUSY),
        True,
        check=_eq("confidence", Confidence.MEDIUM),
    ),
    "just-below-share-min": Case(rank_of({"data_wait": INPUT_SHARE_MIN - EPS}, loader=BUSY), False),
    "no-loader-record": Case(rank_of({"data_wait": 0.30}), False),
}

# ------------------------------------------------------------------------------------------- host


def _says(attr: str, text: str) -> Callable[[Finding], None]:
    """The finding's `attr` reads `text` in words (where the wording itself is the point)."""

    def check(f: Finding) -> None:
        assert say(getattr(f, attr)) == text, (attr, getattr(f, attr))

    return check


HOST_PYTHON = {
    "quarter-of-the-step": Case(
        rank_of({"host_other": 0.25}, cpu_ms=80),
        True,
        facts={
            "host.python.outside": {"share": 0.25, "outside_ns": 25e6},
            "host.python.main_cpu": {"cpu_share": 0.80, "computing": True},
        },
        check=_all(
            _eq("share", 0.25), _eq("estimated_speedup", 1 / 0.75), _eq("confidence", Confidence.HIGH)
        ),
    ),
    "just-above-min": Case(
        rank_of({"host_other": HOST_SHARE_MIN + EPS}), True, check=_eq("confidence", Confidence.MEDIUM)
    ),
    # 30 ms outside the phases; the main thread is on a CPU 60 of 100 ms: 40 ms asleep, of which the
    # 10 ms data wait is expected; 30 ms unexplained sleep covers the outside time: the loop blocks.
    "asleep-outside-the-phases-is-a-blocking-call": Case(
        rank_of({"host_other": 0.30, "data_wait": 0.10}, cpu_ms=60, runq_ms=0),
        True,
        facts={
            "host.python.asleep": {"asleep_ns": 30e6},
            "host.python.title": {"waiting": True, "inference": False},
            "host.python.fix": {"waiting": True},
            "host.python.snippet": {"waiting": True},
        },
        check=_all(_eq("share", 0.30), _eq("fix_kind", None)),
    ),
    # An inference loop that blocks (a request queue's get, a sleep) gets no logging knob either.
    "an-inference-loop-that-blocks": Case(
        replace(
            rank_of({"host_other": 0.30, "data_wait": 0.10}, cpu_ms=60, runq_ms=0),
            steps=replace(
                rank_of({"host_other": 0.30, "data_wait": 0.10}, cpu_ms=60, runq_ms=0).steps, kind="inference"
            ),
        ),
        True,
        facts={"host.python.title": {"waiting": True, "inference": True}},
        check=_eq("fix_kind", None),
    ),
    "busy-outside-the-phases-is-python-work": Case(
        rank_of({"host_other": 0.30, "data_wait": 0.10}, cpu_ms=85, runq_ms=0),
        True,
        facts={"host.python.title": {"waiting": False}, "host.python.fix": {"waiting": False}},
        check=_all(_says("title", HostPython.title), _eq("fix_kind", FixKind.LOG_LESS)),
    ),
    "an-inference-loop-is-named-so": Case(
        make_rank_analysis(steps=make_steps(10, {"forward": 70.0}, 30.0, kind=StepKind.INFERENCE)),
        True,
        facts={"host.python.title": {"waiting": False, "inference": True}},
        check=_says("title", "Python work in the inference loop, outside framework ops"),
    ),
    "just-below-min": Case(rank_of({"host_other": HOST_SHARE_MIN - EPS}), False),
    "just-below-high": Case(
        rank_of({"host_other": HOST_SHARE_HIGH - EPS}), True, check=_eq("confidence", Confidence.MEDIUM)
    ),
    "at-high": Case(rank_of({"host_other": HOST_SHARE_HIGH}), True, check=_eq("confidence", Confidence.HIGH)),
    "loose-framework-ops-are-not-python": Case(
        rank_of({"host_other": 0.08}, ops=make_ops(loose_op_ms=4)), False
    ),
    "loose-ops-subtracted-from-share": Case(
        rank_of({"host_other": 0.12}, ops=make_ops(loose_op_ms=2)),
        True,
        facts={"host.python.outside": {"share": 0.12}, "host.python.loose_ops": {"share": 0.02}},
        check=_eq("share", 0.10),
    ),
    "main-thread-mostly-off-cpu": Case(
        rank_of({"host_other": 0.25}, cpu_ms=20),
        True,
        facts={"host.python.main_cpu": {"cpu_share": 0.20, "computing": False}},
    ),
}


def _dispatch_ops(
    overhead_ms: float,
    small_ops: float = 2_000,
    window_step_ms: float = 100.0,
    large_ms: float | None = None,
    dispatch_ns: int | None = 3_000,
    ops: float | None = None,
) -> Any:
    """A window whose phases take the whole (100 ms) step, `overhead_ms` of it outside large-tensor ops."""
    return make_ops(
        window_step_ms=window_step_ms,
        phase_ms=window_step_ms,
        large_op_ms=window_step_ms - overhead_ms if large_ms is None else large_ms,
        small_ops_per_step=small_ops,
        top_level_ops_per_step=small_ops + 50 if ops is None else ops,
        dispatch_ns_per_op=dispatch_ns,
    )


HOST_DISPATCH = {  # (cases with no dispatch probe are not bounded by what issuing their ops costs)
    "many-tiny-ops": Case(
        rank_of({}, ops=_dispatch_ops(60.0)),
        True,
        facts={
            "host.dispatch.ops": {"ops": 2050.0, "small_ops": 2000.0},
            "host.dispatch.overhead": {"inference": False, "large_ns": 40e6, "overhead_ns": 60e6},
            "host.dispatch.issue_cost": {"dispatch_ns": 3_000},
            "host.dispatch.fix": {"remedy": "ops", "optimizer_ns": None},
        },
        check=_all(_eq("share", 0.60), _eq("estimated_speedup", 1 / (1 - 0.60 * DISPATCH_RECOVERABLE))),
    ),
    "the-main-threads-waits-for-a-cpu-are-no-overhead": Case(
        # beside a busy process the main thread waited for a CPU a quarter of each step: the phases'
        # time outside large ops holds its part of those waits (input_tiny_batches beside a spinner)
        rank_of({}, ops=_dispatch_ops(60.0), cpu=make_cpu(machine_busy_cores=1.9), runq_ms=25.0),
        True,
        check=_eq("share", 0.45),
    ),
    "waits-on-an-idle-machine-are-left-alone": Case(
        rank_of({}, ops=_dispatch_ops(60.0), runq_ms=25.0), True, check=_eq("share", 0.60)
    ),
    "just-above-share-min": Case(rank_of({}, ops=_dispatch_ops((DISPATCH_SHARE_MIN + EPS) * 100)), True),
    "just-below-share-min": Case(rank_of({}, ops=_dispatch_ops((DISPATCH_SHARE_MIN - EPS) * 100)), False),
    # (no dispatch probe: nothing bounds the overhead by what issuing an op costs)
    "few-small-ops": Case(
        rank_of({}, ops=_dispatch_ops(60.0, small_ops=MANY_SMALL_OPS - 1, dispatch_ns=None)), False
    ),
    "at-many-small-ops": Case(
        rank_of({}, ops=_dispatch_ops(60.0, small_ops=MANY_SMALL_OPS, dispatch_ns=None)), True
    ),
    "overhead-beyond-what-issuing-its-ops-costs": Case(
        # healthy.py on the avx512_bf16 EPYC: 13% of the step outside large ops, over 283 ops that
        # cost 1.4 µs each to issue: 20x that per op is not per-op overhead
        rank_of({}, ops=_dispatch_ops(13.0, small_ops=131, ops=283, dispatch_ns=1_400)),
        False,
    ),
    "overhead-within-what-issuing-its-ops-costs": Case(
        # host_dispatch.py: 3442 ops at 2.7 µs, 6x that per op
        rank_of({}, ops=_dispatch_ops(56.0, small_ops=3000, ops=3442, dispatch_ns=2_700)),
        True,
        check=_eq("share", 0.56),
    ),
    "profiler-cost-is-not-overhead": Case(
        # the window step is 20 ms longer than a normal step: the normal steps' phases are what is read
        rank_of({}, ops=_dispatch_ops(25.0, window_step_ms=120.0)),
        False,
    ),
    "a-slow-window-step-hides-nothing": Case(
        # one window step paid an import (as when the first op under the census imported torch._dynamo): the
        # overhead is still the normal steps' compute less the large ops' time
        rank_of(
            {},
            ops=make_ops(
                window_step_ms=900.0,
                phase_ms=900.0,
                large_op_ms=40.0,
                small_ops_per_step=40,
                dispatch_ns_per_op=None,
            ),
        ),
        True,
        check=_eq("share", 0.60),
    ),
    "a-step-that-also-evaluates-is-not-overhead": Case(
        # every 5th step also runs 100 ms of evaluation forwards: the mean step's compute is 120 ms,
        # a typical step's 100 ms, of which the window's large ops take 95 ms
        make_rank_analysis(
            steps=tuple(
                make_step(
                    i,
                    i * 300_000_000,
                    {"forward": 140.0 if i % 5 == 4 else 40.0, "backward": 40.0, "optimizer": 20.0},
                )
                for i in range(23)
            ),
            ops=make_ops(large_op_ms=95.0, small_ops_per_step=500),
        ),
        False,
    ),
    "steps-that-drift-after-the-window-are-not-overhead": Case(
        # memory that grows makes every step ~1 ms slower than the last (memory_leak.py on a busy
        # machine); the window (steps 10-12) saw 111 ms of large ops, as the steps around it took; the
        # run's median step (~132 ms) is not what the window's steps were
        make_rank_analysis(
            steps=tuple(
                make_step(
                    i,
                    i * 400_000_000,
                    {"forward": 30.0 + i, "backward": 60.0, "optimizer": 10.0},
                    profiled=10 <= i <= 12,
                )
                for i in range(60)
            ),
            ops=make_ops(large_op_ms=100.0 + 11, small_ops_per_step=90),
        ),
        False,
    ),
    "a-difference-inside-the-steps-own-spread-is-noise": Case(
        # a busy VM: the same step's compute is 90 to 140 ms (median 100 ms, IQR 40 ms); the window's
        # large ops took 85 ms, 15 ms under the typical step
        make_rank_analysis(
            steps=tuple(
                make_step(
                    i,
                    i * 400_000_000,
                    {
                        "forward": 30.0 + (40.0 if i % 2 else 0.0) + 10 * (i % 3 == 0),
                        "backward": 50.0,
                        "optimizer": 10.0,
                    },
                )
                for i in range(40)
            ),
            ops=make_ops(large_op_ms=85.0, small_ops_per_step=90),
        ),
        False,
    ),
    "a-spread-far-above-the-large-ops-hides-no-overhead": Case(
        # lbfgs_sequence.py in CI here: typical steps 150 ms (their large ops 10 ms), the last third
        # 380 ms (IQR 230 ms); the large ops' time, read at another moment, can be off by their part
        # of that spread (15 ms), not by all of it: 140 ms of overhead is no noise
        make_rank_analysis(
            steps=tuple(
                make_step(
                    i,
                    i * 1_000_000_000,
                    {"forward": 500.0, "backward": 70.0, "optimizer": 10.0}
                    if 10 <= i <= 12
                    else {"forward": 80.0, "backward": 60.0, "optimizer": 10.0}
                    if i < 24
                    else {"forward": 200.0, "backward": 110.0, "optimizer": 70.0},
                    profiled=10 <= i <= 12,
                )
                for i in range(36)
            ),
            ops=make_ops(large_op_ms=10.0, small_ops_per_step=2000, dispatch_ns_per_op=None),
        ),
        True,
    ),
    "the-window-steps-bound-the-overhead": Case(
        # the window ran at a quick moment: its own steps' compute (102 ms with the recorder) holds the
        # large ops (95 ms) and all the true overhead; the later steps' 120 ms would read 25 ms
        make_rank_analysis(
            steps=tuple(
                make_step(
                    i,
                    i * 400_000_000,
                    {"forward": 42.0 if 10 <= i <= 12 else 60.0, "backward": 50.0, "optimizer": 10.0},
                    profiled=10 <= i <= 12,
                )
                for i in range(40)
            ),
            ops=make_ops(large_op_ms=95.0, small_ops_per_step=500),
        ),
        False,
    ),
    "an-optimizer-looping-over-parameters-is-told-to-fuse": Case(
        # half the step is an optimizer whose ops are all small (one tensor at a time)
        rank_of(
            {"backward": 0.20, "optimizer": 0.50},
            ops=replace(
                make_ops(large_op_ms=45.0, small_ops_per_step=600, dispatch_ns_per_op=None),
                large_op_ns_by_phase={"forward": 25e6, "backward": 20e6},
            ),
        ),
        True,
        facts={
            "host.dispatch.optimizer": {"optimizer_ns": 50e6},
            "host.dispatch.fix": {"remedy": "optimizer"},
            "host.dispatch.snippet": {"remedy": "optimizer"},
        },
        check=_eq("share", 0.55),
    ),
    "inference-is-told-to-batch-requests": Case(
        make_rank_analysis(
            steps=make_steps(10, {"forward": 95.0}, 5.0, kind=StepKind.INFERENCE),
            ops=make_ops(large_op_ms=5.0, small_ops_per_step=37, dispatch_ns_per_op=None),
        ),
        True,
        facts={
            "host.dispatch.overhead": {"inference": True},
            "host.dispatch.serving": {"batch": 32, "step_ns": 100e6},
            "host.dispatch.fix": {"remedy": "serving"},
            "host.dispatch.snippet": {"remedy": "serving"},
        },
    ),
    # A generation loop drawing 4 sequences one after another can batch those 4, not 32 (nanoGPT's
    # sampler: its batching fix measured x1.3-1.4 at 4 samples here, where 32 a call priced x1.7).
    "a-generation-loop-batches-the-sequences-it-generates": Case(
        make_rank_analysis(
            steps=make_steps(10, {"forward": 95.0}, 5.0, kind=StepKind.INFERENCE),
            ops=make_ops(large_op_ms=40.0, small_ops_per_step=300, dispatch_ns_per_op=None),
            generation=Recompute(
                generations=4,
                calls=160,
                tokens=(32, 71),
                checked=True,
                base_ns=1.4e6,
                per_token_ns=12e3,
                calls_ns=300e6,
                saved_ns=90e6,
                steps_ns=320e6,
            ),
        ),
        True,
        facts={"host.dispatch.serving": {"batch": 4}},
        check=_eq("estimated_speedup", 1 / (0.45 + 0.55 / 4)),
    ),
    # A batch-1 request's matmuls are matrix-vector products: batched, they read the weights once for
    # all 32 rows, as the per-op overhead is paid once. Step 100 ms: 55 ms overhead (the compute's 95 ms
    # less 40 ms of large ops), 30 ms of the large ops matrix-vector: 85% of the call is shared.
    "batch-1-matrix-vector-products-are-shared-by-a-batch": Case(
        make_rank_analysis(
            steps=make_steps(10, {"forward": 95.0}, 5.0, kind=StepKind.INFERENCE),
            ops=make_ops(
                large_op_ms=40.0, small_ops_per_step=300, vector_matmul_ms=30.0, dispatch_ns_per_op=None
            ),
        ),
        True,
        facts={"host.dispatch.vector": {"vector_ns": 30e6}},
        check=_eq("estimated_speedup", 1 / (0.15 + 0.85 / 32)),
    ),
    "matrix-vector-time-absent-only-the-overhead-is-shared": Case(
        make_rank_analysis(
            steps=make_steps(10, {"forward": 95.0}, 5.0, kind=StepKind.INFERENCE),
            ops=make_ops(large_op_ms=40.0, small_ops_per_step=300, dispatch_ns_per_op=None),
        ),
        True,
        check=_eq("estimated_speedup", 1 / (0.45 + 0.55 / 32)),
    ),
    "share-is-within-compute": Case(
        # 12 ms of compute, 1 ms of it in large ops: 11 ms of overhead, however long the window's phases
        rank_of({"data_wait": 0.88}, ops=_dispatch_ops(90.0, large_ms=1.0)),
        True,
        check=_eq("share", 0.11),
    ),
    "all-large-ops": Case(rank_of({}, ops=make_ops(small_ops_per_step=5_000)), False),
    "no-op-window": Case(rank_of({}), False),
}

# ---------------------------------------------------------------------------------------- compute

AMX = make_env(cores=2, matrix_units=("amx_bf16", "amx_int8"))
AVX512_BF16 = make_env(cores=2, matrix_units=("avx512_bf16",))
INT8_ONLY = make_env(cores=2, matrix_units=("amx_int8", "avx512_vnni"))
AVX2 = make_env(cores=2, matrix_units=())
COMPUTE = {"backward": 0.40, "optimizer": 0.10}  # + forward 0.50 = all compute
FP32_HEAVY = make_ops(fp32_matmul_ms=50)
FAST_BF16 = matmul_probes(1_000_000, 300_000)
_PRECISION_SPEEDUP = 1 / (0.5 + 0.5 * min(1.0, 0.3 * AUTOCAST_OVERHEAD))


def _probe_with_gain(gain: float) -> Any:
    return matmul_probes(1_000_000, round(1_000_000 / gain))


def _states(key: str, present: bool = True) -> Callable[[Finding], None]:
    def check(f: Finding) -> None:
        assert (key in facts(f)) is present, (key, sorted(facts(f)))

    return check


def _precision(f: Finding) -> None:
    assert_facts(f, {"compute.math.precision_title": {"what": "matmuls"}})


_not_precision = _all(_states("compute.math.precision_title", False), _eq("estimated_speedup", 1.0))

CONV_HEAVY = replace(make_ops(fp32_matmul_ms=50), conv_ns_per_step={"float": 48e6})
CONV_PROBE = replace(
    # the head's tiny matmul, slower in bf16 and beside the point: 4% of the fp32 time, so unused
    matmul_probes(3_000, 25_000, (32, 64, 10)),
    conv=(
        ConvProbe(input=(32, 32, 32, 32), weight=(64, 32, 3, 3), dtype="float32", ns=3_700_000),
        ConvProbe(input=(32, 32, 32, 32), weight=(64, 32, 3, 3), dtype="bfloat16", ns=1_600_000),
    ),
)


def _bf16_autocast(
    bf16_probe_ns: int, env: Any, stated: Mapping[str, Mapping[str, Any]] | None = None, check: Any = None
) -> Case:
    """A step 60% bf16 matmuls under bf16 autocast, the probe's fp32 matmul at 1 ms; by default the
    emulated-bf16 finding must not fire."""
    rank = rank_of(
        COMPUTE,
        ops=make_ops(bf16_matmul_ms=60),
        probes=matmul_probes(1_000_000, bf16_probe_ns),
        main=make_process(autocast="bfloat16"),
    )
    fine = _all(_states("compute.math.emulated_title", False), _eq("estimated_speedup", 1.0))
    return Case(rank, True, env=env, facts=stated or {}, check=check or fine)


COMPUTE_MATH = {
    "fp32-convolutions-on-amx": Case(
        rank_of(COMPUTE, ops=CONV_HEAVY, probes=CONV_PROBE),
        True,
        env=AMX,
        facts={
            "compute.math.precision_title": {"what": "convolutions", "amx": True},
            "compute.math.fp32_share": {"what": "convolutions", "share": 0.5, "conv_named": False},
            "compute.math.probe_conv": {
                "input_shape": (32, 32, 32, 32),
                "weight_shape": (64, 32, 3, 3),
                "fp32_ns": 3_700_000,
                "bf16_ns": 1_600_000,
                "speedup": 3.7 / 1.6,
            },
        },
        check=_all(
            _says("title", "fp32 convolutions on a CPU with bf16 matrix units (AMX)"),
            _eq(
                "estimated_speedup",
                1 / (0.5 + 0.5 * (1.6 / 3.7) * AUTOCAST_OVERHEAD),
            ),
        ),
    ),
    "fp32-on-amx-probe-says-bf16-faster": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=FAST_BF16),
        True,
        env=AMX,
        facts={
            "compute.math.precision_title": {"what": "matmuls", "amx": True},
            "compute.math.fp32_share": {"share": 0.5, "fp32_ns": 50e6},
            "compute.math.bf16_units": {"units": ("amx_bf16",)},
            "compute.math.probe_matmul": {
                "shape": (256, 512, 512),
                "fp32_ns": 1_000_000,
                "bf16_ns": 300_000,
                "speedup": 1 / 0.3,
            },
            "compute.math.bf16_fix": {},
            "compute.math.bf16_snippet": {},
        },
        check=_all(
            _precision,
            _eq("share", 0.5),
            _eq("estimated_speedup", _PRECISION_SPEEDUP),
            _eq("basis", Basis.PROBE),
            _eq("confidence", Confidence.HIGH),
            _eq("fix_kind", FixKind.BF16_AUTOCAST),
        ),
    ),
    "fp32-on-avx512-bf16": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=FAST_BF16),
        True,
        env=AVX512_BF16,
        facts={"compute.math.precision_title": {"what": "matmuls", "amx": False}},
    ),
    "fp32-not-probed-assumed-worthwhile": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY),
        True,
        env=AMX,
        check=_all(_precision, _eq("confidence", Confidence.MEDIUM)),
    ),
    "probe-gain-just-above-min": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=_probe_with_gain(MIN_PROBE_GAIN + 0.01)),
        True,
        env=AMX,
        check=_precision,
    ),
    "probe-gain-just-below-min": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=_probe_with_gain(MIN_PROBE_GAIN - 0.01)),
        True,
        env=AMX,
        check=_not_precision,
    ),
    "probe-says-bf16-slower": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=matmul_probes(1_000_000, 2_000_000)),
        True,
        env=AMX,
        check=_not_precision,
    ),
    "fp32-share-just-above-min": Case(
        rank_of(
            COMPUTE, ops=make_ops(fp32_matmul_ms=(FP32_MATMUL_SHARE_MIN + EPS) * STEP_MS), probes=FAST_BF16
        ),
        True,
        env=AMX,
        check=_precision,
    ),
    "fp32-share-just-below-min": Case(
        rank_of(
            COMPUTE, ops=make_ops(fp32_matmul_ms=(FP32_MATMUL_SHARE_MIN - EPS) * STEP_MS), probes=FAST_BF16
        ),
        True,
        env=AMX,
        check=_not_precision,
    ),
    "autocast-already-on": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=FAST_BF16, main=make_process(autocast="bfloat16")),
        True,
        env=AMX,
        facts={
            "compute.math.autocast": {"dtype": "bfloat16"},
            "compute.math.bound_title": {"dtype": "bfloat16"},
        },
        check=_not_precision,
    ),
    "no-bf16-matrix-unit": Case(
        rank_of(COMPUTE, ops=FP32_HEAVY, probes=FAST_BF16), True, env=INT8_ONLY, check=_not_precision
    ),
    "bf16-matmuls-already": Case(
        rank_of(COMPUTE, ops=make_ops(bf16_matmul_ms=50), probes=FAST_BF16),
        True,
        env=AMX,
        check=_not_precision,
    ),
    "bf16-autocast-emulated-on-avx2": _bf16_autocast(
        # an AVX2 EPYC: bf16 matmuls run 40x slower than fp32; the fix is autocast off
        40_000_000,
        AVX2,
        stated={
            "compute.math.emulated_title": {},
            "compute.math.emulated_share": {"share": 0.6, "bf16_ns": 60e6},
            "compute.math.no_bf16_units": {},
            "compute.math.probe_matmul_slower": {
                "fp32_ns": 1_000_000,
                "bf16_ns": 40_000_000,
                "slower_x": 40.0,
            },
            "compute.math.fp32_fix": {},
        },
        check=_all(
            _eq("share", 0.6),
            _eq("estimated_speedup", 1 / (0.4 + 0.6 / 40)),
            _eq("fix_kind", FixKind.FP32),
        ),
    ),
    "bf16-autocast-on-amx-is-fine": _bf16_autocast(40_000_000, AMX),
    "bf16-autocast-emulated-but-probe-says-no-slower": _bf16_autocast(1_200_000, AVX2),
    "compute-bound-summary": Case(
        rank_of({"data_wait": 0.20}),
        True,
        facts={
            "compute.math.phases": {"inference": False, "share": 0.8, "compute_ns": 80e6},
            "compute.math.bound_title": {"dtype": "float32"},
        },
        check=_all(_not_precision, _eq("share", 0.8), _eq("confidence", Confidence.MEDIUM)),
    ),
    "compute-just-above-bound-share": Case(
        rank_of({"data_wait": 1 - COMPUTE_BOUND_SHARE - EPS}), True, check=_not_precision
    ),
    "compute-just-below-bound-share": Case(rank_of({"data_wait": 1 - COMPUTE_BOUND_SHARE + EPS}), False),
    "fp32-heavy-but-mostly-waiting-no-units": Case(
        rank_of({"data_wait": 0.7}, ops=FP32_HEAVY, probes=FAST_BF16), False, env=INT8_ONLY
    ),
}

# -------------------------------------------------------------------------------------------- cpu

_WORKER = make_process(pid=200, intra_op=1, role=Role.WORKER)


def _follows_fix_removes_oversubscription(env: Environment, rank: RankAnalysis) -> Callable[[Finding], None]:
    def check(f: Finding) -> None:
        stated = facts(f)
        suggested = [
            stated[k]["threads"] for k in ("cpu.oversubscription.fix", "cpu.oversubscription.snippet")
        ]
        workers = sum(w.threads.intra_op or 1 for w in rank.workers)
        for n in suggested:
            assert isinstance(n, int) and n + workers <= env.cpu.usable_cores, (f.fix, f.snippet)

    return check


CPU_OVERSUBSCRIPTION = {
    "intra-op-above-cores": Case(
        rank_of({}, main=make_process(intra_op=4, env={"OMP_NUM_THREADS": "4"})),
        True,
        facts={
            "rule.title": {"name": "More busy threads than cores"},
            "cpu.oversubscription.threads": {"threads": 4, "cores": 2, "workers": 0},
            "cpu.oversubscription.runq": {"share": 0.0},
            "cpu.oversubscription.env": {"variables": (("OMP_NUM_THREADS", "4"),)},
            "cpu.oversubscription.fix": {"threads": 2},
            "cpu.oversubscription.snippet": {"threads": 2},
        },
        check=_all(_eq("confidence", Confidence.MEDIUM), _eq("share", 0.0)),
    ),
    "intra-op-one-above-cores": Case(rank_of({}, main=make_process(intra_op=3)), True),
    "intra-op-equals-cores": Case(rank_of({}, main=make_process(intra_op=2), runq_ms=30), False),
    "workers-push-demand-over-with-runq": Case(
        rank_of(
            {},
            main=make_process(intra_op=2),
            workers=(_WORKER,),
            runq_ms=10,
            cpu=make_cpu(invol_switches_per_s=250, max_threads=9),
        ),
        True,
        facts={
            "cpu.oversubscription.threads": {"threads": 2, "cores": 2, "workers": 1},
            "cpu.oversubscription.runq": {"share": 0.10},
            "cpu.oversubscription.switches": {"switches_per_s": 250.0, "threads": 9},
        },
        check=_all(_eq("share", 0.10), _eq("estimated_speedup", 1 / 0.9), _eq("confidence", Confidence.HIGH)),
    ),
    "workers-runq-just-above-min": Case(
        rank_of(
            {}, main=make_process(intra_op=2), workers=(_WORKER,), runq_ms=(RUNQ_SHARE_MIN + EPS) * STEP_MS
        ),
        True,
    ),
    "workers-runq-just-below-min": Case(
        rank_of(
            {}, main=make_process(intra_op=2), workers=(_WORKER,), runq_ms=(RUNQ_SHARE_MIN - EPS) * STEP_MS
        ),
        False,
    ),
    "intra-op-unknown": Case(rank_of({}, main=make_process(intra_op=None), runq_ms=30), False),
    "many-cores-few-threads": Case(rank_of({}, main=make_process(intra_op=4)), False, env=make_env(cores=8)),
}

_UNDERUSE_MAIN = make_process(intra_op=2)

CPU_UNDERUSE = {
    "two-threads-on-eight-idle-cores": Case(
        rank_of(
            {"host_other": 0.2},
            main=_UNDERUSE_MAIN,
            cpu=make_cpu(cores=8, process_cores=1.9, machine_busy_cores=2.0),
        ),
        True,
        env=make_env(cores=8),
        facts={
            "rule.title": {"name": "Compute uses fewer cores than it could"},
            "cpu.underuse.threads": {"share": 0.80, "threads": 2, "cores": 8},
            "cpu.underuse.idle": {"idle_cores": 6.0, "process_cores": 1.9},
            "cpu.underuse.fix": {"threads": 8},
            "cpu.underuse.snippet": {},
        },
        check=_eq("share", 0.8 * (1 - 1 / (1 + 3 * PARALLEL_EFFICIENCY))),
    ),
    "intra-op-one-below-cores": Case(
        rank_of({}, main=make_process(intra_op=7), cpu=make_cpu(cores=8, machine_busy_cores=7.0)),
        True,
        env=make_env(cores=8),
    ),
    "intra-op-equals-cores": Case(
        rank_of({}, main=make_process(intra_op=8), cpu=make_cpu(cores=8, machine_busy_cores=1.0)),
        False,
        env=make_env(cores=8),
    ),
    "compute-just-above-min": Case(
        rank_of(
            {"host_other": 1 - UNDERUSE_COMPUTE_MIN - EPS},
            main=_UNDERUSE_MAIN,
            cpu=make_cpu(cores=8, machine_busy_cores=2.0),
        ),
        True,
        env=make_env(cores=8),
    ),
    "compute-just-below-min": Case(
        rank_of(
            {"host_other": 1 - UNDERUSE_COMPUTE_MIN + EPS},
            main=_UNDERUSE_MAIN,
            cpu=make_cpu(cores=8, machine_busy_cores=2.0),
        ),
        False,
        env=make_env(cores=8),
    ),
    "idle-just-above-min": Case(
        rank_of({}, main=_UNDERUSE_MAIN, cpu=make_cpu(cores=8, machine_busy_cores=8 - IDLE_CORE_MIN - 0.01)),
        True,
        env=make_env(cores=8),
    ),
    "idle-just-below-min": Case(
        rank_of({}, main=_UNDERUSE_MAIN, cpu=make_cpu(cores=8, machine_busy_cores=8 - IDLE_CORE_MIN + 0.01)),
        False,
        env=make_env(cores=8),
    ),
    "no-system-samples": Case(rank_of({}, main=_UNDERUSE_MAIN), False, env=make_env(cores=8)),
}

# ----------------------------------------------------------------------------------- io and memory

IO_CHECKPOINT = {
    "ten-percent": Case(
        rank_of({"checkpoint_io": 0.10}),
        True,
        facts={"io.checkpoint.save": {"share": 0.10, "per_step_ns": 10e6}},
        check=_all(_eq("share", 0.10), _eq("estimated_speedup", 1 / 0.9), _eq("confidence", Confidence.HIGH)),
    ),
    "just-above-min": Case(rank_of({"checkpoint_io": CHECKPOINT_SHARE_MIN + EPS}), True),
    "just-below-min": Case(rank_of({"checkpoint_io": CHECKPOINT_SHARE_MIN - EPS}), False),
}


def _gc(share: float, explicit: float = 0.0) -> GcStats:
    """Collector stats of 100 ms steps: `share` of them collecting, `explicit` of them in gc.collect()."""
    site = GcSite(file="/srv/app/train.py", line=40, function="epoch_end", calls=10, ns=10**9)
    return GcStats(
        steps=100, share=share, ns_per_step=share * 100e6, collections_per_step=2.0, full_per_step=0.1,
        explicit_share=explicit, stall_steps=10, stall_every=10, stall_ns=round(share * 1e9),
        median_step_ns=100_000_000, sites=(site,) if explicit else (), cwd="/srv/app",
    )  # fmt: skip


HOST_GC = {
    "epoch-end-collect": Case(
        rank_of({}, gc=_gc(0.40, 0.38)),
        True,
        facts={"host.gc.site": {"line": 40, "calls": 10, "own": True}, "host.gc.stalls": {"every": 10}},
        check=_all(
            _eq("share", 0.38), _eq("estimated_speedup", 1 / 0.62), _eq("confidence", Confidence.HIGH)
        ),
    ),
    "automatic-full-collections": Case(
        rank_of({}, gc=_gc(0.20)),
        True,
        check=_all(_eq("share", 0.20), _eq("confidence", Confidence.MEDIUM)),
    ),
    "just-below-min": Case(rank_of({}, gc=_gc(GC_SHARE_MIN - EPS)), False),
    "not-counted": Case(rank_of({}), False),
}

_GROWING = {"slope": 8 * MIB, "growth": 160 * MIB, "r2": 0.99}


def _live_probes(before: int, after: int) -> Probes:
    """Live-tensor snapshots where each step kept one 2 MiB bf16 logits tensor and one scalar loss."""

    def snap(n: int) -> LiveTensors:
        return LiveTensors(
            count=50 + 2 * n, bytes=100 * MIB + n * 2 * MIB, with_graph=2 * n, graph_bytes=n * 2 * MIB,
            graph_groups=(
                TensorGroup(shape=(32, 32, 1000), dtype="bfloat16", grad_fn="ViewBackward0", count=n, bytes=n * 2 * MIB),
                TensorGroup(shape=(), dtype="float32", grad_fn="NllLossBackward0", count=n, bytes=4 * n),
            ),
        )  # fmt: skip

    return Probes(live_before=snap(before), live_after=snap(after), window_steps=3)


def _threshold_rise(noise_mib: int) -> tuple[Step, ...]:
    """140 steps whose RSS rises 1 KiB a step more than `LEAK_MIN_SLOPE` (over `LEAK_MIN_GROWTH` in all),
    with a fixed, irregular noise of up to ±`noise_mib` MiB on each step."""
    slope = LEAK_MIN_SLOPE + 1024
    rss = [400 * MIB + i * slope + noise_mib * MIB * ((i * 37) % 11 - 5) // 5 for i in range(140)]
    return make_steps(140, {"forward": 10}, rss=rss)


def _assert(ok: bool, what: object) -> None:
    assert ok, what


MEMORY_LEAK = {
    "steady-growth": Case(
        rank_of({}, memory=make_memory(**_GROWING)),
        True,
        env=make_env(memory_bytes=16 << 30),
        facts={
            "memory.leak.growth": {
                "slope_bytes": 8 * MIB,
                "r2": 0.99,
                "first_bytes": 500 * MIB,
                "last_bytes": 660 * MIB,
                "steps": 20,
            },
            "memory.leak.runway": {"machine_bytes": 16 << 30},
        },
        check=_all(_eq("share", 0.0), _eq("estimated_speedup", 1.0), _eq("confidence", Confidence.HIGH)),
    ),
    "slope-at-min": Case(rank_of({}, memory=make_memory(**{**_GROWING, "slope": LEAK_MIN_SLOPE})), True),
    "slope-just-below-min": Case(
        rank_of({}, memory=make_memory(**{**_GROWING, "slope": LEAK_MIN_SLOPE - 1})), False
    ),
    "growth-at-min": Case(rank_of({}, memory=make_memory(**{**_GROWING, "growth": LEAK_MIN_GROWTH})), True),
    "growth-just-below-min": Case(
        rank_of({}, memory=make_memory(**{**_GROWING, "growth": LEAK_MIN_GROWTH - 1})), False
    ),
    "r2-just-above-min": Case(
        rank_of({}, memory=make_memory(**{**_GROWING, "r2": LEAK_MIN_R2 + EPS})),
        True,
        check=_eq("confidence", Confidence.MEDIUM),
    ),
    "r2-just-below-min": Case(
        rank_of({}, memory=make_memory(**{**_GROWING, "r2": LEAK_MIN_R2 - EPS})), False
    ),
    "no-trend": Case(rank_of({}), False),
    # RSS rising by the threshold amounts: a leak when steady, not when the noise could make that slope.
    "threshold-rise-steady": Case(rank_of({}, memory=memory_trend(steady_steps(_threshold_rise(0)))), True),
    "threshold-rise-within-noise": Case(
        rank_of({}, memory=memory_trend(steady_steps(_threshold_rise(4)))), False
    ),
    # Between-step snapshots of live tensors at the op window's edges name the culprit.
    "kept-graphs-named": Case(
        rank_of({}, memory=make_memory(**_GROWING), probes=_live_probes(before=10, after=13)),
        True,
        facts={
            "memory.leak.graphs_kept": {
                "before": 20,
                "after": 26,
                "steps": 3,
                "per_step": 2.0,
                "storage_bytes": 2.0 * MIB,
                "groups": (
                    ((32, 32, 1000), "bfloat16", "ViewBackward0", 1.0),
                    ((), "float32", "NllLossBackward0", 1.0),
                ),
            },
            "memory.leak.fix": {"kept_graphs": True},
        },
    ),
    "graphs-not-growing": Case(
        rank_of({}, memory=make_memory(**_GROWING), probes=_live_probes(before=10, after=10)),
        True,
        facts={
            "memory.leak.graphs_flat": {"before": 20, "after": 20},
            "memory.leak.fix": {"kept_graphs": False},
        },
    ),
}


def _churn(per_step: int = 6_000, fault_ns: int | None = 2_000, step_ms: float = 100.0) -> PageFaults:
    return PageFaults(
        steps=50, median_per_step=per_step, median_step_ns=int(step_ms * 1e6), fault_ns=fault_ns
    )


MEMORY_PRESSURE = {
    "churn-12-percent": Case(
        rank_of({}, faults=_churn()),
        True,
        facts={
            "memory.churn.faults": {"faults": 6_000, "growth_pages": 0, "fresh_bytes": 6_000 * 4096},
            "memory.churn.fault_cost": {
                "fault_ns": 2_000,
                "bounded": False,
                "model_ns": 12e6,
                "step_ns": 100e6,
            },
        },
        check=_all(_eq("share", 0.12), _eq("estimated_speedup", 1 / 0.88)),
    ),
    "share-at-min": Case(
        rank_of({}, faults=_churn(per_step=2_500, fault_ns=int(CHURN_MIN_SHARE * 100e6 / 2_500))), True
    ),
    "share-below-min": Case(
        rank_of({}, faults=_churn(per_step=2_500, fault_ns=int(CHURN_MIN_SHARE * 100e6 / 2_500) - 1)), False
    ),
    "few-faults-even-if-slow": Case(
        rank_of({}, faults=_churn(per_step=CHURN_MIN_FAULTS - 1, fault_ns=1_000_000)), False
    ),
    "cost-not-measured": Case(rank_of({}, faults=_churn(fault_ns=None)), False),
    # A leak maps 2,000 new pages a step: those faults are growth (memory.leak's), not churn.
    "growth-is-not-churn": Case(
        rank_of({}, faults=replace(_churn(per_step=2_200), growth_pages_per_step=2_000)), False
    ),
    "churn-beside-growth": Case(
        rank_of({}, faults=replace(_churn(per_step=8_000), growth_pages_per_step=2_000)),
        True,
        facts={"memory.churn.faults": {"faults": 8_000, "growth_pages": 2_000}},
        check=_eq("share", 0.12),
    ),
    # The fault model prices 6,000 faults at 12 ms; the main thread spent 5 ms in the kernel: the
    # measured kernel time bounds the cost (faults on OpenMP workers overlap with the main thread).
    "kernel-time-bounds-the-model": Case(
        rank_of({}, faults=replace(_churn(), main_sys_ns=5_000_000, sys_ns=9_000_000)),
        True,
        facts={
            "memory.churn.fault_cost": {"bounded": True, "model_ns": 12e6},
            "memory.churn.kernel_time": {
                "main_thread": True,
                "kernel_ns": 5e6,
                "cost_ns": 5e6,
                "share": 0.05,
            },
        },
        check=_all(_eq("share", 0.05), _eq("estimated_speedup", 1 / 0.95)),
    ),
    "kernel-time-below-min": Case(
        rank_of({}, faults=replace(_churn(), main_sys_ns=int(CHURN_MIN_SHARE * 100e6) - 1)), False
    ),
    # Only the process's system time recorded (no per-thread counter): that bounds it.
    "process-kernel-time-bounds": Case(
        rank_of({}, faults=replace(_churn(), sys_ns=8_000_000)),
        True,
        facts={"memory.churn.kernel_time": {"main_thread": False, "kernel_ns": 8e6}},
        check=_eq("share", 0.08),
    ),
    # The kernel time above the model (other syscalls): the model stands.
    "model-below-kernel-time": Case(
        rank_of({}, faults=replace(_churn(), main_sys_ns=30_000_000)), True, check=_eq("share", 0.12)
    ),
    "no-counts": Case(rank_of({}), False),
}


def _traffic(elementwise_ms: float, chains: tuple[tuple[float, float], ...] = ()) -> MemoryTraffic:
    """Elementwise time per step and chains as (ms per step, ms fused)."""
    return MemoryTraffic(
        elementwise_ns_per_step=elementwise_ms * MS,
        elementwise_ops_per_step=50,
        bytes_per_step=2e9,
        chains=tuple(
            Chain(
                ops=("mul",) * 8 + ("tanh",), shape=(32, 512, 256), dtype="float", ns_per_step=ms * MS,
                bytes_per_step=1e9, fused_ns_per_step=fused * MS,
            )
            for ms, fused in chains
        ),
        top_ops=(("mul", 20 * MS), ("add", 10 * MS)),
    )  # fmt: skip


_ATTENTION = HandAttention(
    shape=(8, 4, 256, 256), ns_per_step=20e6, softmax_per_step=4, top_ops=(("aten::masked_fill", 12e6),)
)
COMPUTE_MEMORY = {
    # 100 ms steps. A 30 ms chain that fuses to 5 ms gives back 25 ms: ×1.33.
    "fusable-chain": Case(
        rank_of({}, traffic=_traffic(40, ((30, 5),))),
        True,
        facts={
            "compute.memory.elementwise": {
                "share": 0.40,
                "elementwise_ns": 40e6,
                "ops": 50,
                "moved_bytes": 2e9,
                "achieved_bytes_per_s": 50e9,
                "copy_bytes_per_s": None,
            },
            "compute.memory.chain": {
                "ops": ("mul",) * 8 + ("tanh",),
                "shape": (32, 512, 256),
                "dtype": "float",
                "chain_ns": 30e6,
            },
            "compute.memory.fused": {"chain_ns": 30e6, "fused_ns": 5e6},
            "rule.title": {"name": "Memory-bound elementwise ops: chains that fusion would collapse"},
            "compute.memory.fix": {"fusable": True},
            "compute.memory.snippet": {},
        },
        check=_all(_eq("share", 0.40), _eq("estimated_speedup", 100 / 75)),
    ),
    "bandwidth-measured-here": Case(
        rank_of({}, traffic=_traffic(40, ((30, 5),)), probes=Probes(memory_bytes_per_s=26e9)),
        True,
        facts={"compute.memory.elementwise": {"copy_bytes_per_s": 26e9}},
    ),
    # Elementwise time spread over single ops: said, but no gain is claimed.
    "no-chain": Case(
        rank_of({}, traffic=_traffic(30)),
        True,
        facts={
            "compute.memory.top_ops": {"ops": (("mul", 20 * MS), ("add", 10 * MS))},
            "compute.memory.spread_title": {},
            "compute.memory.fix": {"fusable": False},
        },
        check=_all(_eq("estimated_speedup", 1.0), _eq("share", 0.30), _eq("snippet", None)),
    ),
    "chain-gain-below-min": Case(
        rank_of({}, traffic=_traffic(30, ((6, 1),))), True, check=_eq("estimated_speedup", 1.0)
    ),
    # Attention written out in ops (char_gpt_memmap.py): 20 ms of a 100 ms step in passes over the
    # score tensor, which the fused kernel never writes out: ×1.25 and the SDPA call as the fix.
    "hand-written-attention": Case(
        rank_of({}, traffic=replace(_traffic(26), attention=_ATTENTION)),
        True,
        facts={
            "compute.memory.attention": {
                "shape": (8, 4, 256, 256),
                "softmax_per_step": 4,
                "share": 0.20,
                "saving_ns": 20e6,
                "ops": (("aten::masked_fill", 12e6),),
            },
            "compute.memory.attention_fused": {"saving_ns": 20e6},
            "compute.memory.attention_title": {},
            "compute.memory.attention_fix": {},
            "compute.memory.attention_snippet": {},
        },
        check=_all(_eq("estimated_speedup", 100 / 80), _eq("share", 0.26)),
    ),
    # A transformers GPT-2 on a CPU: sdpa already, but attention dropout sends every call down the math
    # path (_safe_softmax, bernoulli_ on the scores). Not "call the fused kernel": dropout off.
    "sdpa-math-path-with-dropout": Case(
        rank_of(
            {}, traffic=replace(_traffic(26), attention=replace(_ATTENTION, via_sdpa=True, dropout=True))
        ),
        True,
        facts={
            "compute.memory.attention": {"via_sdpa": True},
            "compute.memory.sdpa_math_title": {},
            "compute.memory.sdpa_math_fix": {"dropout": True},
            "compute.memory.sdpa_math_snippet": {},
        },
        check=_all(
            _eq("estimated_speedup", 100 / 80),
            _states("compute.memory.attention_fix", False),
            _states("compute.memory.attention_title", False),
        ),
    ),
    # GPT-2 on a CPU: the tanh GELU spelled out in ops beside the attention (its gelu_new). Both are named
    # and both savings count: 20 ms of attention passes and a 10 ms chain that fuses to 2 ms.
    "attention-and-a-chain-beside-it": Case(
        rank_of({}, traffic=replace(_traffic(36, ((10, 2),)), attention=replace(_ATTENTION, via_sdpa=True))),
        True,
        facts={
            "compute.memory.chain": {"shape": (32, 512, 256), "chain_ns": 10e6},
            "compute.memory.fused": {"chain_ns": 10e6, "fused_ns": 2e6},
            "compute.memory.sdpa_math_fix": {"dropout": False, "chains": True},
        },
        check=_eq("estimated_speedup", 100 / 72),
    ),
    "sdpa-math-path-without-dropout": Case(
        rank_of({}, traffic=replace(_traffic(26), attention=replace(_ATTENTION, via_sdpa=True))),
        True,
        facts={"compute.memory.sdpa_math_fix": {"dropout": False}},
        check=_all(_eq("snippet", None), _states("compute.memory.sdpa_math_snippet", False)),
    ),
    "hand-written-attention-too-small-to-matter": Case(
        rank_of({}, traffic=replace(_traffic(26), attention=replace(_ATTENTION, ns_per_step=4e6))),
        True,
        facts={"compute.memory.spread_title": {}},
        check=_all(_eq("estimated_speedup", 1.0), _states("compute.memory.attention", False)),
    ),
    # ×1.15 (FUSION_GAIN_MIN) needs 13.04 ms of a 100 ms step back.
    "chain-gain-just-above-min": Case(
        rank_of({}, traffic=_traffic(30, ((14.1, 1.0),))), True, check=_eq("estimated_speedup", 100 / 86.9)
    ),
    "chain-gain-just-below-min": Case(
        rank_of({}, traffic=_traffic(30, ((13.9, 1.0),))), True, check=_eq("estimated_speedup", 1.0)
    ),
    "share-at-min": Case(rank_of({}, traffic=_traffic(MEMORY_BOUND_SHARE_MIN * 100)), True),
    "share-below-min": Case(rank_of({}, traffic=_traffic(MEMORY_BOUND_SHARE_MIN * 100 - 0.01)), False),
}


def _between(
    kind: str,
    share: float,
    *,
    passes: int = 4,
    call_ms: float = 0.4,
    torch: float | None = 0.5,
    after_ms: float = 0,
) -> dict[str, Any]:
    """A 10 s run whose calls between updates (rollouts or evaluation) hold `share` of it: 2,048 calls
    a pass, the forward a quarter of their time, an evaluation's DataLoader a fifth."""
    wall = 10 * 10**9
    ns = int(share * wall)
    whole = RunTime(
        wall_ns=wall,
        segments=(
            Segment(name="training steps", ns=wall - ns, count=100),
            Segment(name="evaluation and rollouts", ns=ns, count=2048 * passes),
        ),
    )
    calls = BetweenUpdates(
        kind=kind, calls=2048 * passes, passes=passes, ns=ns, forward_ns=ns // 4,
        data_wait_ns=0 if kind == "rollouts" else ns // 5, median_call_ns=int(call_ms * 1e6),
        batched_frac=torch, samples=100 if torch is not None else 0, after_pass_ns=int(after_ms * 1e6),
    )  # fmt: skip
    return {"run_time": whole, "between": calls}


def _of_run(f: Finding) -> None:
    assert f.of_run and f.run_speedup == f.estimated_speedup and f.basis is Basis.MODEL


RUN_ROLLOUTS = {
    "rollouts-hold-the-run": Case(
        rank_of({}, **_between("rollouts", 0.6)),
        True,
        facts={"run.between.time": {"passes": 4, "calls": 8192}, "run.rollouts.fix": {"envs": 8}},
        check=_all(_of_run, _eq("share", 0.6), _eq("estimated_speedup", 1 / (1 - 0.6 * 0.5 * 7 / 8))),
    ),
    "update-after-each-pass": Case(
        rank_of({}, **_between("rollouts", 0.6, after_ms=500)),
        True,
        check=_eq("estimated_speedup", 1 / (1 - (0.6 * 0.5 + 0.05) * 7 / 8)),
    ),
    "not-sampled-forward-only": Case(
        rank_of({}, **_between("rollouts", 0.6, torch=None)),
        True,
        check=_all(_eq("estimated_speedup", 1 / (1 - 0.6 * 0.25 * 7 / 8)), _eq("confidence", Confidence.LOW)),
    ),
    "below-share": Case(rank_of({}, **_between("rollouts", SHARE_MIN - 0.01)), False),
    "calls-too-long-to-batch-free": Case(rank_of({}, **_between("rollouts", 0.6, call_ms=6.0)), False),
    "evaluation-instead": Case(rank_of({}, **_between("evaluation", 0.6)), False),
    "no-run-clock": Case(rank_of({}), False),
}

RUN_EVALUATION = {
    "every-epoch": Case(
        rank_of({}, **_between("evaluation", 0.5)),
        True,
        facts={"run.evaluation.fix": {"every": 2, "ceiling_x": 2.0}},
        check=_all(_of_run, _eq("share", 0.5), _eq("estimated_speedup", 1 / (1 - 0.25))),
    ),
    "one-pass": Case(rank_of({}, **_between("evaluation", 0.5, passes=1)), False),
    "below-share": Case(rank_of({}, **_between("evaluation", SHARE_MIN - 0.01)), False),
    "rollouts-instead": Case(rank_of({}, **_between("rollouts", 0.5)), False),
}


def _startup(start_s: float, imports: float, *, wall_s: float = 10.0, stacks: bool = True) -> dict[str, Any]:
    """A `wall_s` run whose start-up takes `start_s`, `imports` of it inside imports, the rest in a
    tokeniser of the program's own (train.py:12); the steps are the rest of the run."""
    code = SegmentCode(
        scope=StackScope(name="start-up", samples=200, seconds=start_s, top=(HotFunction(
            frame=Frame(function="encode", file="/home/me/proj/train.py", line=12),
            label="encode (train.py:12)", share=0.8, calls_into=None),)),
        cpu_frac=0.98, imports_frac=imports,
    )  # fmt: skip
    whole = RunTime(
        wall_ns=int(wall_s * 1e9),
        segments=(
            Segment(name="start-up", ns=int(start_s * 1e9), code=code if stacks else None),
            Segment(name="training steps", ns=int((wall_s - start_s) * 1e9), count=40),
        ),
    )
    return {"run_time": whole}


RUN_STARTUP = {
    "builds-most-of-the-run": Case(
        rank_of({}, **_startup(6.0, 0.25)),
        True,
        facts={"run.startup.time": {"building_ns": 4.5e9}, "run.startup.fix": {"own": True, "waits": False}},
        # 4.5 s of 10 s removed: x1.82 on this run
        check=_all(
            _eq("share", 0.45), _eq("estimated_speedup", 10 / 5.5), _eq("fix_kind", FixKind.CACHE_STARTUP)
        ),
    ),
    "mostly-imports": Case(rank_of({}, **_startup(6.0, 0.6)), False),  # 2.4 s of own work
    "a-small-share": Case(rank_of({}, **_startup(4.0, 0.0, wall_s=20.0)), False),  # 20% of the run
    "no-stack-samples": Case(rank_of({}, **_startup(6.0, 0.25, stacks=False)), False),
    "no-run-clock": Case(rank_of({}), False),
}


def test_start_up_prices_a_run_ten_times_as_long_too() -> None:
    (f,) = run_rule("run.startup", make_env(cores=2), rank_of({}, **_startup(6.0, 0.25)))
    # the loop is 4 s; with 10x of it the run is 46 s, 41.5 s without the 4.5 s start-up builds
    assert facts(f)["run.startup.once"]["longer_x"] == pytest.approx(46 / 41.5)
    assert f.of_run and f.run_speedup == f.estimated_speedup and f.basis is Basis.REMOVED


def _restarts(share: float, steps: int = 100) -> WorkerRestarts:
    """A training loader restarting its 2 workers over 6 epochs of 100 ms steps, the restarts `share`
    of the steps' time."""
    steps_ns = steps * 100_000_000
    return WorkerRestarts(
        site="/home/me/proj/train.py:40", workers=2, iterators=6, first_ns=400_000_000, other_ns=100_000_000,
        saved_ns=int(share * steps_ns), steps=steps, steps_ns=steps_ns,
    )  # fmt: skip


INPUT_WORKER_RESTART = {
    "every-epoch": Case(
        rank_of({"data_wait": 0.30}, loader=SLEEPY, restarts=_restarts(0.30)),
        True,
        facts={
            "input.restart.steps": {"iterators": 6, "workers": 2, "site": "proj/train.py:40"},
            "input.restart.first": {"first_ns": 400e6, "other_ns": 100e6, "share": 0.30},
        },
        check=_all(_eq("share", 0.30), _eq("estimated_speedup", 1 / 0.7)),
    ),
    "small": Case(rank_of({"data_wait": 0.30}, loader=SLEEPY, restarts=_restarts(0.04)), False),
    "persistent": Case(rank_of({"data_wait": 0.30}, loader=SLEEPY), False),
}
INPUT_FETCH["restarts-are-the-wait"] = Case(
    rank_of({"data_wait": 0.30}, loader=SLEEPY, restarts=_restarts(0.30)), False
)  # (more workers would restart too: the wait is input.worker_restart's)


def _compiled(
    recompiles: int,
    each_s: float,
    loop_s: float = 10.0,
    varying: bool = True,
    reason: str = "0/0: tensor 'x' size mismatch at index 1. expected 32, actual 48",
) -> dict[str, Any]:
    """A `loop_s` loop in which a frame compiled once, then `recompiles` times more at `each_s` each."""
    sizes = tuple(32 + 16 * i for i in range(recompiles + 1))
    stats = CompileStats(
        compile_ns=int((recompiles + 3) * each_s * 1e9), compiles=recompiles + 1, recompiles=recompiles,
        recompile_ns=int(recompiles * each_s * 1e9), mean_recompile_ns=each_s * 1e9, frame="forward (train.py:12)",
        reasons=(reason,),
        varying=(Varying(tensor="x", dim=1, sizes=sizes),) if varying else (),
    )  # fmt: skip
    whole = RunTime(wall_ns=int((loop_s + 2) * 1e9), segments=(
        Segment(name="start-up", ns=2_000_000_000), Segment(name="training steps", ns=int(loop_s * 1e9), count=40),
    ))  # fmt: skip
    return {"compiles": stats, "run_time": whole}


COMPILE_RECOMPILES = {
    "a-dimension-varies": Case(
        rank_of({}, **_compiled(4, 1.0)),
        True,
        facts={
            "compile.recompiles.varying": {"tensor": "x", "dim": 1},
            "compile.recompiles.count": {"recompiles": 4},
        },
        # 4 s of the 10 s loop out, one more 1 s compile in
        check=_all(
            _eq("share", 0.4), _eq("estimated_speedup", 10 / 7), _eq("fix_kind", FixKind.DYNAMIC_SHAPES)
        ),
    ),
    "another-guard": Case(
        rank_of({}, **_compiled(3, 1.0, varying=False)),
        True,
        facts={
            "compile.recompiles.reason": {
                "reason": "0/0: tensor 'x' size mismatch at index 1. expected 32, actual 48"
            }
        },
    ),
    "one-recompile": Case(rank_of({}, **_compiled(1, 3.0)), False),  # dynamo's route to a dynamic graph
    "no-size-guard": Case(  # a first call without gradients, a value a graph break specialised
        rank_of({}, **_compiled(3, 1.0, varying=False, reason="0/1: tensor 'x' requires_grad mismatch")),
        False,
    ),
    "a-small-share": Case(rank_of({}, **_compiled(4, 0.2)), False),  # 0.8 s of 10 s
    "no-compile": Case(rank_of({}, **_compiled(4, 1.0) | {"compiles": None}), False),
    "no-run-clock": Case(rank_of({}, compiles=_compiled(4, 1.0)["compiles"]), False),
}

ITEM_BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False"


def _broken(
    calls: int = 34, around_ms: float = 2.8, reason: str = ITEM_BREAK, whole: int = 0
) -> dict[str, Any]:
    """A compiled model whose steps (4.7 ms, 1.6 ms inside graphs) enter `calls` graphs around a break."""
    stats = CompileStats(
        compile_ns=10**10, compiles=4, recompiles=0, recompile_ns=0, mean_recompile_ns=0.0, frame=None, reasons=(),
        breaks=(GraphBreak(function="forward", site="train.py:51", reason=reason),) if reason else (),
        whole_frames=whole, graphs=GraphTime(calls=calls, inside_ns=1.6e6, around_ns=around_ms * 1e6, step_ns=4.7e6),
    )  # fmt: skip
    return {"compiles": stats}


COMPILE_GRAPH_BREAKS = {
    "an-item-in-every-block": Case(
        rank_of({}, **_broken()),
        True,
        facts={
            "compile.graph_breaks.sites": {"sites": ("forward at train.py:51",)},
            "compile.graph_breaks.priced": {"whole": 2},
        },
        # 2.8 ms around 34 graphs, shrinking with them to 2: 2.8 * 32/34 ms less
        check=_all(
            _eq("estimated_speedup", 4.7 / (4.7 - 2.8 * 32 / 34)),
            _eq("fix_kind", FixKind.GRAPH_BREAKS),
            _eq("fix_params", (("item", 1),)),
        ),
    ),
    "a-print": Case(
        rank_of({}, **_broken(reason="Unsupported builtin print")), True, check=_eq("fix_params", ())
    ),
    "another-whole-frame": Case(
        rank_of({}, **_broken(whole=1)), True, facts={"compile.graph_breaks.priced": {"whole": 4}}
    ),
    "no-break": Case(rank_of({}, **_broken(reason="")), False),
    "one-graph-each-way": Case(rank_of({}, **_broken(calls=2)), False),
    "little-around-the-graphs": Case(rank_of({}, **_broken(around_ms=0.2)), False),  # 4% of the step
    "no-compile": Case(rank_of({}), False),
}


def _cold(backend_s: float, wall_s: float = 10.0, compiling_s: float = 7.0) -> dict[str, Any]:
    """A `wall_s` run that compiled for `compiling_s`, `backend_s` of it in backends that missed the cache."""
    stats = CompileStats(
        compile_ns=int(compiling_s * 1e9), compiles=2, recompiles=0, recompile_ns=0, mean_recompile_ns=0.0,
        frame=None, reasons=(),
        cold=ColdCompiles(backend_ns=int(backend_s * 1e9), misses=4, hits=0, directory="/tmp/inductor-cache-x1"),
    )  # fmt: skip
    whole = RunTime(wall_ns=int(wall_s * 1e9), segments=(
        Segment(name="start-up", ns=2_000_000_000), Segment(name="compiling", ns=int(compiling_s * 1e9)),
        Segment(name="training steps", ns=int((wall_s - 2 - compiling_s) * 1e9), count=60),
    ))  # fmt: skip
    return {"compiles": stats, "run_time": whole}


COMPILE_TIME = {
    "compiles-from-scratch": Case(
        rank_of({}, **_cold(5.0)),
        True,
        facts={
            "compile.time.cache": {"misses": 4, "directory": "/tmp/inductor-cache-x1"},
            "compile.time.run": {"compiling_ns": 7e9},
        },
        # 5 s of backend, 90% of it loaded instead: 4.5 s of the 10 s run out
        check=_all(
            _eq("share", 0.45), _eq("estimated_speedup", 10 / 5.5), _eq("fix_kind", FixKind.COMPILE_CACHE)
        ),
    ),
    "a-small-share": Case(rank_of({}, **_cold(1.0, wall_s=20.0)), False),  # 0.9 s of 20 s
    "caches-off-or-hit": Case(
        rank_of({}, **_cold(5.0) | {"compiles": replace(_cold(5.0)["compiles"], cold=None)}), False
    ),
    "no-run-clock": Case(rank_of({}, compiles=_cold(5.0)["compiles"]), False),
}


def _generating(
    saved_ms: float, *, calls: int = 40, steps_ms: float = 100.0, checked: bool = True
) -> dict[str, Any]:
    """A generation loop whose calls (`steps_ms` of inference steps) would lose `saved_ms` with a cache."""
    return {
        "generation": Recompute(
            generations=1, calls=calls, tokens=(16, 16 + calls - 1), checked=checked, base_ns=800e3, per_token_ns=17e3,
            calls_ns=steps_ms * 1e6, saved_ns=saved_ms * 1e6, steps_ns=steps_ms * 1e6,
        )
    }  # fmt: skip


COMPUTE_RECOMPUTE = {
    # 73 of 100 ms recomputed context: a cache leaves 27 ms
    "no-kv-cache": Case(
        rank_of({}, **_generating(73.0)),
        True,
        facts={
            "compute.recompute.growth": {"per_token_ns": 17e3, "shortest": 16, "longest": 55},
            "compute.recompute.priced": {"saved_ns": 73e6},
        },
        check=_all(
            _eq("share", 0.73),
            _eq("estimated_speedup", 100 / 27),
            _eq("fix_kind", FixKind.KV_CACHE),
            _eq("confidence", Confidence.HIGH),
        ),
    ),
    "few-calls": Case(
        rank_of({}, **_generating(50.0, calls=10)), True, check=_eq("confidence", Confidence.MEDIUM)
    ),
    "at-share-min": Case(rank_of({}, **_generating(10.0)), True),
    "ids-not-read-back": Case(
        rank_of({}, **_generating(73.0, checked=False)), True, check=_eq("confidence", Confidence.MEDIUM)
    ),
    "below-share-min": Case(rank_of({}, **_generating(9.9)), False),
    "no-generation": Case(rank_of({}), False),
}


PROBED = BatchCosts(rows=1, ms=((1, 6.0), (2, 7.0), (4, 8.5), (8, 12.0), (16, 20.0), (32, 36.0)))


def _served(
    *,
    rate: float = 150.0,
    throughput: float = 95.0,
    one_at_a_time: float = 0.95,
    costs: BatchCosts | None = PROBED,
) -> dict[str, Any]:
    """A server loaded at `rate` answering `throughput` a second, its calls of 9 ms (the probe's 6 ms at
    batch 1, so ×1.5 beside the load)."""
    calls = ModelCalls(
        calls=950, call_p50_ms=9.0, busy_share=0.9, batch_mean=1.0, batch_max=1, waiting_mean=20.0,
        queued_share=0.97, one_at_a_time_share=one_at_a_time,
    )  # fmt: skip
    summary = LoadSummary(
        sent=1500, ok=950, failed=0, dropped=0, errors=(), wall_s=10.0, throughput_rps=throughput, latency=None,
        first_byte=None,
    )  # fmt: skip
    load = ServedLoad(url="http://127.0.0.1:8000/predict", rate=rate, duration_s=10.0)
    return {"serving": Serving(load=load, summary=summary, calls=calls, batch_costs=costs)}


SERVE_BATCHING = {
    # 1000/95 = 10.53 ms a request, 9 of them the call: 1.53 ms outside it. At batch 4 a call is
    # 8.5 x 1.5 = 12.75 ms, 3.19 a request: 212/s, above the 150 offered (batch 2: 148/s, short of it).
    "one-at-a-time": Case(
        rank_of({}, **_served()),
        True,
        facts={
            "serve.batching.costs": {"batch": 4, "batch_call_ms": 12.75, "call_ms": 9.0},
            "serve.batching.priced": {"fixed": 150.0, "throughput": 95.0},
        },
        check=_all(
            _eq("estimated_speedup", 150 / 95),
            _eq("share", 1 - (1000 / 95 - 9 + 12.75 / 4) / (1000 / 95)),
            _eq("fix_kind", FixKind.BATCHING),
            _eq("confidence", Confidence.HIGH),
        ),
    ),
    # Offered more than any batch answers: the fastest probed batch (32: 54 ms, 1.69 a request) caps it.
    "offered-above-every-batch": Case(
        rank_of({}, **_served(rate=1000.0)),
        True,
        facts={"serve.batching.costs": {"batch": 32}},
        check=_eq("estimated_speedup", 1000 / (1000 / 95 - 9 + 54 / 32) / 95),
    ),
    "already-keeping-up": Case(rank_of({}, **_served(throughput=149.0)), False),
    "calls-not-one-at-a-time": Case(rank_of({}, **_served(one_at_a_time=0.3)), False),
    "no-probe": Case(rank_of({}, **_served(costs=None)), False),
    "not-served": Case(rank_of({}), False),
}

CASES: dict[str, dict[str, Case]] = {
    "serve.batching": SERVE_BATCHING,
    "compute.recompute": COMPUTE_RECOMPUTE,
    "compile.recompiles": COMPILE_RECOMPILES,
    "compile.time": COMPILE_TIME,
    "compile.graph_breaks": COMPILE_GRAPH_BREAKS,
    "input.fetch": INPUT_FETCH,
    "input.worker_restart": INPUT_WORKER_RESTART,
    "input.preprocess": INPUT_PREPROCESS,
    "host.python": HOST_PYTHON,
    "host.dispatch": HOST_DISPATCH,
    "compute.math": COMPUTE_MATH,
    "compute.memory": COMPUTE_MEMORY,
    "cpu.oversubscription": CPU_OVERSUBSCRIPTION,
    "cpu.underuse": CPU_UNDERUSE,
    "io.checkpoint": IO_CHECKPOINT,
    "host.gc": HOST_GC,
    "memory.leak": MEMORY_LEAK,
    "memory.pressure": MEMORY_PRESSURE,
    "run.rollouts": RUN_ROLLOUTS,
    "run.evaluation": RUN_EVALUATION,
    "run.startup": RUN_STARTUP,
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
    found = run_rule(rule_id, case.env, case.rank)
    if not case.fires:
        assert found == [], [f.title for f in found]
        return
    assert len(found) == 1, found
    f = found[0]
    assert_well_formed(f, case.rank.rank)
    assert_facts(f, case.facts)
    if case.check is not None:
        case.check(f)


def test_every_rule_has_a_table_with_both_outcomes() -> None:
    assert set(CASES) == {r.id.value for r in RULES if r.scope is Scope.RANK}
    for rid, table in CASES.items():
        outcomes = {c.fires for c in table.values()}
        assert outcomes == {True, False}, rid


# ---------------------------------------------------------------------------- known bugs, pinned


def test_preprocess_without_samples_respects_intra_op_threads() -> None:
    env = make_env(cores=2)
    rank = rank_of({"data_wait": 0.30}, loader=BUSY, main=make_process(intra_op=2))
    (f,) = run_rule("input.preprocess", env, rank)
    _workers_do_not_remove_whole_wait(f)


def test_fetch_never_suggests_fewer_workers_than_in_use() -> None:
    current = MAX_IO_WORKERS + 2
    loader = make_loader(wall_ms=300, cpu_fraction=0.05, num_workers=current)
    (f,) = run_rule("input.fetch", make_env(cores=16), rank_of({"data_wait": 0.30}, loader=loader))
    suggested = facts(f)["input.fetch.fix"]["workers"]
    assert isinstance(suggested, int) and suggested >= current, suggested


@pytest.mark.parametrize("intra", [2, 4])
def test_oversubscription_fix_brings_demand_within_cores(intra: int) -> None:
    env = make_env(cores=2)
    rank = rank_of({}, main=make_process(intra_op=intra), workers=(_WORKER,), runq_ms=10)
    (f,) = run_rule("cpu.oversubscription", env, rank)
    _follows_fix_removes_oversubscription(env, rank)(f)


def test_oversubscription_fix_without_workers_uses_the_cores() -> None:
    env = make_env(cores=2)
    rank = rank_of({}, main=make_process(intra_op=4))
    (f,) = run_rule("cpu.oversubscription", env, rank)
    _follows_fix_removes_oversubscription(env, rank)(f)


def test_underuse_survives_zero_intra_op() -> None:
    rank = rank_of({}, main=make_process(intra_op=0), cpu=make_cpu(cores=8, machine_busy_cores=1.0))
    for f in run_rule("cpu.underuse", make_env(cores=8), rank):
        assert_well_formed(f)


def test_precision_survives_zero_ns_bf16_probe() -> None:
    rank = rank_of(COMPUTE, ops=FP32_HEAVY, probes=matmul_probes(1_000_000, 0))
    for f in run_rule("compute.math", AMX, rank):
        assert_well_formed(f)


# ------------------------------------------------------------------------------ honest analyses


def test_memory_leak_from_real_rss_series() -> None:
    growing = make_steps(20, {"forward": 10}, rss=[400 * MIB + i * 4 * MIB for i in range(20)])
    noisy = make_steps(20, {"forward": 10}, rss=[400 * MIB + (i % 2) * 64 * MIB for i in range(20)])
    fires = make_rank_analysis(steps=growing, memory=memory_trend(steady_steps(growing)))
    quiet = make_rank_analysis(steps=noisy, memory=memory_trend(steady_steps(noisy)))
    (f,) = run_rule("memory.leak", make_env(), fires)
    assert_facts(
        f,
        {
            "memory.leak.growth": {
                "slope_bytes": 4.0 * MIB,
                "r2": 1.0,
                "first_bytes": 408 * MIB,
                "last_bytes": 476 * MIB,
                "steps": 18,
            }
        },
    )
    assert run_rule("memory.leak", make_env(), quiet) == []


def test_a_slope_within_its_noise_is_no_leak() -> None:
    """The noisy threshold rise passes every other threshold of memory.leak (slope, growth, r², spread):
    only its slope's standard error keeps it quiet."""
    trend = memory_trend(steady_steps(_threshold_rise(4)))
    assert trend is not None and trend.slope_stderr_bytes > 0
    assert trend.slope_bytes_per_step >= LEAK_MIN_SLOPE and trend.growth_bytes >= LEAK_MIN_GROWTH
    assert trend.r2 >= LEAK_MIN_R2 and trend.concentration <= LEAK_MAX_CONCENTRATION
    assert trend.slope_bytes_per_step - LEAK_NOISE_T * trend.slope_stderr_bytes < LEAK_MIN_SLOPE
    steady = memory_trend(steady_steps(_threshold_rise(0)))
    assert steady is not None and steady.slope_stderr_bytes == pytest.approx(0.0, abs=1e-6)


def test_rss_that_rose_in_a_few_jumps_or_across_pinchpoints_own_steps_is_no_leak() -> None:
    """Seen beside a busy process: RSS 374 MiB, +21 MiB across the thread trial (a new thread count's
    buffers), flat, then two +8 MiB jumps (the allocator's high-water mark), flat to the end: r² 0.88
    and 0.97 MiB a step, but no step-by-step growth. A tensor kept every step grows every step."""
    rss = [374 * MIB] * 14 + [395 * MIB] * 14 + [403 * MIB] + [411 * MIB] * 21
    stairs = list(make_steps(50, {"forward": 10}, rss=rss))
    for i in range(10, 19):  # the op window and the thread trial
        stairs[i] = replace(stairs[i], profiled=i < 14, trial=i >= 14)
    trend = memory_trend(steady_steps(stairs))
    assert trend is not None and trend.gap_bytes == 21 * MIB and trend.concentration == 1.0
    assert run_rule("memory.leak", make_env(), make_rank_analysis(steps=tuple(stairs), memory=trend)) == []
    kept = list(make_steps(50, {"forward": 10}, rss=[374 * MIB + i * 2 * MIB for i in range(50)]))
    for i in range(10, 19):
        kept[i] = replace(kept[i], profiled=i < 14, trial=i >= 14)
    trend = memory_trend(steady_steps(kept))
    assert trend is not None and trend.concentration < 0.15
    assert trend.slope_bytes_per_step == pytest.approx(2 * MIB) and trend.r2 == pytest.approx(1.0)
    (f,) = run_rule("memory.leak", make_env(), make_rank_analysis(steps=tuple(kept), memory=trend))
    assert f.id is Category.MEMORY_LEAK


def test_a_leak_that_glibc_serves_in_chunks_is_a_leak() -> None:
    """memory_leak.py at 40 steps here: 21 steady steps (the op window and the allocator trial took
    10-26), RSS rising +10, +9, +6 MiB and a few MiB between, flat in the other intervals: the three
    largest rises hold 52% of the growth, but RSS rose in over half the intervals."""
    kept = [452, 452, 462, 462, 462, 468, 470, 470, *[480] * 17, 509, 510, 519, 519, 519, 519, 524]
    kept += [530, 530, 530, 533, 537, 539]
    steps = list(make_steps(40, {"forward": 10}, rss=[v * MIB for v in [420, 448, *kept]]))
    for i in range(10, 27):
        steps[i] = replace(steps[i], profiled=i < 13, trial=i >= 13)
    trend = memory_trend(steady_steps(steps))
    assert trend is not None and trend.steps == 21
    assert trend.concentration > LEAK_MAX_CONCENTRATION and trend.rising >= LEAK_MIN_RISING
    (f,) = run_rule("memory.leak", make_env(), make_rank_analysis(steps=tuple(steps), memory=trend))
    assert f.id is Category.MEMORY_LEAK


def test_page_faults_counted_before_the_op_window_when_enough_steps() -> None:
    steps = make_steps(30, {"forward": 10})
    # the program faults little until the profiler's window (steps 10-12), heavily after it
    steps = tuple(
        replace(s, profiled=10 <= s.index <= 12, minor_faults=100 if s.index < 10 else 5_000) for s in steps
    )
    pf = page_faults(steady_steps(steps), 10, 1_000)
    assert pf is not None and pf.before_window and pf.median_per_step == 100 and pf.steps == 8
    late = page_faults(steady_steps(steps), 5, 1_000)  # only 3 steady steps before: use them all
    assert late is not None and not late.before_window and late.median_per_step == 5_000
    assert page_faults(steady_steps(steps), None, 1_000) is not None
    assert page_faults(steady_steps(steps[:6]), None, 1_000) is None  # too few steps
    leaking = tuple(replace(s, rss_bytes=(100 + 8 * s.index) << 20) for s in steps)
    grown = page_faults(steady_steps(leaking), 10, 1_000)
    assert grown is not None and grown.growth_pages_per_step == 2_048 and grown.churn_per_step == 0


# ------------------------------------------------------------------------------------- registry


def _keys(rules: tuple[Rule, ...]) -> list[tuple[str, str]]:
    return [(r.scope.value, r.id.value) for r in rules]


def test_registry_ids_are_unique() -> None:
    keys = _keys(RULES)
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_duplicate_check_catches_a_duplicate() -> None:
    doubled = _keys((*RULES, RULES[0]))
    assert len(doubled) != len(set(doubled))


def test_the_registry_holds_every_scope() -> None:
    assert {r.scope for r in RULES} == set(Scope)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.scope.value}:{r.id.value}")
def test_rule_declares_its_metadata(rule: Rule) -> None:
    assert isinstance(rule.id, Category) and rule.id in rule.yields
    assert isinstance(rule.title, str) and rule.title
    analysis_fields = {f.name for f in fields(RankAnalysis)}
    if rule.scope in (Scope.DEVICE, Scope.OUTSIDE):
        assert not rule.requires, (
            "a device or outside rule reads the timeline or the watch, not the recordings"
        )
    else:
        assert rule.requires and rule.requires <= analysis_fields
        assert rule.requires <= set(MISSING_DATA), "every required field needs a 'not judged' reason"
    doc = type(rule).__doc__ or ""
    parts = (
        ("Pattern:", "Why it's slow:", "Fix:", "Reference:")
        if rule.scope not in (Scope.DEVICE, Scope.OUTSIDE)
        else ("Pattern:",)
    )
    for part in parts:
        assert part in doc, (rule.id.value, part)


# --------------------------------------------------------------------------------------- engine


def test_diagnose_sorts_by_speedup_and_puts_compute_bound_summary_last() -> None:
    env = make_env(memory_bytes=16 << 30)
    rank = rank_of({"data_wait": 0.10, "checkpoint_io": 0.20}, memory=make_memory(**_GROWING))
    ids = [f.id.value for f in diagnose(make_run_analysis(env, [rank])).findings]
    # io.checkpoint (×1.25) > input.fetch (×1.11) > compute.math (×1.0, summary), then memory.leak (×1.0,
    # no share of the step: after every finding with one)
    assert ids == ["io.checkpoint", "input.fetch", "compute.math", "memory.leak"]
    speedups = [f.estimated_speedup for f in diagnose(make_run_analysis(env, [rank])).findings]
    assert speedups == sorted(speedups, reverse=True)


def test_diagnose_notes_rules_that_lack_data() -> None:
    rank = rank_of({"data_wait": 0.30})  # no loader, no op window, no samples, no memory trend
    diagnosis = diagnose(make_run_analysis(make_env(), [rank]))
    ids = {f.id.value for f in diagnosis.findings}
    assert "host.dispatch" not in ids and "input.preprocess" not in ids
    judged = [n for n in diagnosis.notes if n.kind is NoteKind.NOT_JUDGED]
    lacking = {n.category: n.fact["missing"] for n in judged}
    assert {
        Category.HOST_DISPATCH: "ops",
        Category.INPUT_PREPROCESS: "loader",
        Category.CPU_UNDERUSE: "cpu",
        Category.MEMORY_LEAK: "memory",
    }.items() <= lacking.items()
    assert all(n.fact.key == "note.not_judged" and n.fact["rank"] == 0 for n in judged)
    assert all(n.category is not None and n.fact["category"] == n.category.value for n in judged)
    # Rules with their data are judged, not noted.
    assert Category.INPUT_FETCH not in lacking and Category.HOST_PYTHON not in lacking


def test_diagnose_without_steps_notes_every_rule() -> None:
    rank = make_rank_analysis(steps=())
    diagnosis = diagnose(make_run_analysis(make_env(), [rank]))
    assert diagnosis.findings == ()
    not_judged = {n.category for n in diagnosis.notes if n.kind is NoteKind.NOT_JUDGED}
    for rule in RULES:
        if rule.scope is Scope.RANK and "serving" in rule.requires:  # (a server's rule: nothing to judge)
            assert rule.id not in not_judged, rule.id
        elif rule.scope is Scope.RANK:
            assert rule.id in not_judged, rule.id
            assert any(
                n.category is rule.id and n.fact.key == "note.not_judged" and n.fact["rank"] == 0
                for n in diagnosis.notes
            )


def test_two_planted_causes_both_fire_and_shares_add_up() -> None:
    rank = rank_of({"data_wait": 0.30, "host_other": 0.25}, loader=SLEEPY)
    findings = {f.id.value: f for f in diagnose(make_run_analysis(make_env(), [rank])).findings}
    assert {"input.fetch", "host.python"} <= set(findings)
    assert findings["input.fetch"].share + findings["host.python"].share == pytest.approx(0.55, abs=1e-9)
    for f in findings.values():
        assert_well_formed(f)


def test_two_planted_causes_with_cpu_bound_loader() -> None:
    rank = rank_of(
        {"data_wait": 0.30, "host_other": 0.25}, loader=BUSY, cpu=make_cpu(cores=2, process_cores=1.0)
    )
    findings = {f.id.value: f for f in diagnose(make_run_analysis(make_env(), [rank])).findings}
    assert {"input.preprocess", "host.python"} <= set(findings)
    assert "input.fetch" not in findings
    assert findings["input.preprocess"].share + findings["host.python"].share == pytest.approx(0.55, abs=1e-9)


def test_diagnose_merges_a_finding_across_ranks() -> None:
    r0 = rank_of({"data_wait": 0.10}, rank=0)
    r1 = rank_of({"data_wait": 0.30}, rank=1)
    diagnosis = diagnose(make_run_analysis(make_env(), [r0, r1]))
    (fetch,) = [f for f in diagnosis.findings if f.id.value == "input.fetch"]
    assert fetch.ranks == (0, 1)
    assert fetch.share == pytest.approx(0.30)  # the rank with the bigger predicted gain


def test_diagnose_notes_only_rank_zero_on_multi_rank_runs() -> None:
    ranks = [rank_of({}, rank=0), rank_of({}, rank=1)]
    notes = diagnose(make_run_analysis(make_env(), ranks)).notes
    judged = [n for n in notes if n.kind is NoteKind.NOT_JUDGED]
    assert judged and all(n.fact["rank"] == 0 for n in judged)
    assert len(notes) == len({say(n.fact) for n in notes})


# ------------------------------------------------------------------------------- rule invariants

_ms = st.integers(0, 60)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    phases=st.tuples(_ms, _ms, _ms, _ms, _ms, _ms, _ms),
    cores=st.integers(1, 16),
    intra=st.integers(1, 32),
    n_workers=st.integers(0, 3),
    loader=st.none() | st.tuples(st.integers(1, 300), st.floats(0, 1), st.floats(0, 1), st.integers(0, 12)),
    busy=st.floats(0, 1),
    ops=st.none()
    | st.tuples(st.integers(0, 60), st.integers(1, 20_000), st.integers(1, 200_000), st.integers(1, 10_000)),
    probe=st.none() | st.tuples(st.integers(1, 10**7), st.integers(1, 10**7)),
    units=st.sampled_from([(), ("amx_bf16",), ("avx512_bf16",), ("amx_int8",)]),
    autocast=st.sampled_from([None, "bfloat16"]),
    window_scale=st.sampled_from([1.0, 0.3, 0.6, 1.5, 3.0]),
)
def test_findings_stay_in_range(
    phases: tuple[int, ...],
    cores: int,
    intra: int,
    n_workers: int,
    loader: Any,
    busy: float,
    ops: Any,
    probe: Any,
    units: tuple[str, ...],
    autocast: str | None,
    window_scale: float,
) -> None:
    """...and their shares add up, also when the op window's steps ran slower or faster than the steady
    ones (`window_scale`: a loaded machine, a window that caught a slow phase)."""
    dw, fw, bw, op, ck, sync, other = phases
    names = {
        "data_wait": dw,
        "forward": fw,
        "backward": bw,
        "optimizer": op,
        "checkpoint_io": ck,
        "sync_wait": sync,
    }
    if sum(phases) == 0:
        return
    activity = None
    if loader is not None:
        wall, cpu_f, runq_f, workers = loader
        activity = make_loader(
            wall_ms=wall, cpu_fraction=cpu_f, runq_fraction=runq_f * (1 - cpu_f), num_workers=workers
        )
    op_stats = None
    if ops is not None:
        fp32, n_ops, median, dispatch = ops
        op_stats = make_ops(
            window_step_ms=max(1, sum(phases)) * window_scale,
            fp32_matmul_ms=fp32 * window_scale,
            top_level_ops_per_step=n_ops,
            median_op_ns=median,
            dispatch_ns_per_op=dispatch,
        )
    rank = make_rank_analysis(
        names,
        other,
        runq_ms=sync / 2,
        cpu_ms=fw,
        loader=activity,
        cpu=make_cpu(cores=cores, process_cores=busy * cores, machine_busy_cores=busy * cores),
        ops=op_stats,
        main=make_process(intra_op=intra, autocast=autocast),
        workers=tuple(make_process(pid=200 + i, intra_op=1, role=Role.WORKER) for i in range(n_workers)),
        probes=matmul_probes(*probe) if probe else None,
    )
    diagnosis = diagnose(make_run_analysis(make_env(cores=cores, matrix_units=units), [rank]))
    for f in diagnosis.findings:
        assert_well_formed(f)
    keys = [(-round(f.estimated_speedup, 3)) for f in diagnosis.findings]
    assert keys == sorted(keys)
    assert_shares_add_up(diagnosis.findings, rank)


def test_a_compiled_graph_is_math_not_per_op_overhead() -> None:
    """A torch.compile'd model's window has a few depth-0 graph calls over small tensors: their time is
    fused kernels (the overhead is what is left around them), never "tiny ops" to compile."""
    steps = list(make_steps(8, {"forward": 40, "backward": 30}))
    steps[5] = replace(steps[5], profiled=True)
    t0 = steps[5].start_ns
    graph = OpEvent(name="Torch-Compiled Region: 0/0", start_ns=t0 + 1 * MS, dur_ns=35 * MS, tid=1, depth=0)
    inner = OpEvent(
        name="aten::mm", start_ns=t0 + 2 * MS, dur_ns=5 * MS, tid=1, depth=1, input_dims=((32, 64), (64, 64))
    )
    back = OpEvent(
        name="autograd::engine::evaluate_function: CompiledFunctionBackward",
        start_ns=t0 + 41 * MS,
        dur_ns=25 * MS,
        tid=1,
        depth=0,
    )
    small = OpEvent(
        name="aten::add_", start_ns=t0 + 67 * MS, dur_ns=1 * MS, tid=1, depth=0, input_dims=((64,), (64,))
    )
    ops = (graph, inner, back, small)
    window = OpWindow(steps=1, start_ns=t0, end_ns=t0 + 70 * MS, ops=ops)
    stats = op_stats(window, matmul_probes(1, 1), tuple(steps))
    assert stats is not None
    assert stats.compiled_ns_per_step == pytest.approx(60 * MS)
    assert stats.small_ops_per_step == 1  # the add_, not the graphs
    assert stats.large_phase_op_ns_per_step == pytest.approx(60 * MS)


def test_one_steps_first_use_of_an_op_is_not_every_steps_arithmetic() -> None:
    """An autoregressive sampler's window: one addmm took 2.3 ms in one of three steps (a shape's first
    use) where the others took 0.1 ms. The large ops' time per step is the steps' median, not a mean
    that spreads 0.7 ms of one-off cost over every step (which hid its per-op overhead in CI)."""
    steps = list(make_steps(8, {"forward": 4}))
    for i in (4, 5, 6):
        steps[i] = replace(steps[i], profiled=True)

    def addmm(step: int, dur_ns: int) -> OpEvent:
        return OpEvent(
            name="aten::addmm", start_ns=steps[step].start_ns + MS // 10, dur_ns=dur_ns, tid=1, depth=0,
            input_types=("float", "float"), input_dims=((1, 512), (512, 512)),
        )  # fmt: skip

    ops = (addmm(4, 23 * MS // 10), addmm(5, MS // 10), addmm(6, 2 * MS // 10))
    window = OpWindow(steps=3, start_ns=steps[4].start_ns, end_ns=steps[6].end_ns, ops=ops)
    stats = op_stats(window, matmul_probes(1, 1), tuple(steps))
    assert stats is not None
    assert stats.large_phase_op_ns_per_step == pytest.approx(2 * MS // 10)
    # with fewer than three steps there is no median to take: the mean stands
    two = OpWindow(steps=2, start_ns=steps[4].start_ns, end_ns=steps[5].end_ns, ops=ops[:2])
    stats = op_stats(two, matmul_probes(1, 1), tuple(steps[:6]))
    assert stats is not None
    assert stats.large_phase_op_ns_per_step == pytest.approx(12 * MS // 10)


def test_op_window_step_length_comes_from_the_profiled_steps() -> None:
    steps = list(make_steps(8, {"data_wait": 30, "forward": 40, "backward": 30}))
    steps[5] = replace(steps[5], profiled=True)
    mm = OpEvent(
        name="aten::mm",
        start_ns=steps[5].start_ns + 35 * MS,
        dur_ns=20 * MS,
        tid=1,
        depth=0,
        input_types=("float", "float"),
    )
    window = OpWindow(steps=1, start_ns=mm.start_ns, end_ns=mm.start_ns + mm.dur_ns, ops=(mm,))
    stats = op_stats(window, matmul_probes(1, 1), tuple(steps))
    assert stats is not None
    assert stats.window_step_ns == pytest.approx(100 * MS)
    assert stats.fp32_matmul_ns_per_step / stats.window_step_ns == pytest.approx(0.20)


def test_the_small_ops_own_matrix_math_is_kept_by_batching() -> None:
    """An LSTM unrolled in Python: 97x204 matmuls are small by their tensors, yet ran at 71-76 GFLOP/s
    of a 91 peak here; batching does the same FLOPs, so their math is no overhead. It is priced at the
    best rate a group of the window's own matmuls of that dtype reached (a tiny group sets no rate)."""
    from pinchpoint.analysis.ops import small_op_math_ns
    from pinchpoint.trace.run import OpEvent, OpWindow

    def mm(t: int, flops: int, dur_ns: int, dims: tuple[tuple[int, ...], ...]) -> OpEvent:
        return OpEvent(
            name="aten::mm", start_ns=t, dur_ns=dur_ns, tid=1, depth=0, input_types=("float", "float"),
            input_dims=dims, flops=flops,
        )  # fmt: skip

    small = [mm(i * 100_000, 8_000_000, 100_000, ((97, 204), (204, 204))) for i in range(10)]  # 80 GFLOP/s
    big = mm(2_000_000, 400_000_000, 4_000_000, ((1024, 1024), (1024, 200)))  # 100 GFLOP/s
    tiny = mm(7_000_000, 1000, 1, ((1, 1), (1, 1)))  # 1000 GFLOP/s on paper: too few FLOPs to say
    window = OpWindow(steps=1, start_ns=0, end_ns=8_000_000, ops=(*small, big, tiny))
    math_ns = small_op_math_ns(window, {id(o) for o in small})
    assert math_ns == pytest.approx(10 * 8_000_000 / 100.0)  # 80 MFLOP at the big group's 100 GFLOP/s
    assert small_op_math_ns(window, set()) == 0.0


def test_batches_a_step_count_every_step_the_batches_fed() -> None:
    """Gradient accumulation over 4 batches a step, with a fifth of the steps beside a busy process
    (left out of the steady statistics) and two op-window steps: 4 batches a step, not 5 (a loaded CI
    run said 5, dividing every batch by the undisturbed steps alone)."""
    from pinchpoint.analysis.loader import loader_activity
    from pinchpoint.trace.run import Fetch, LoaderConfig

    steps = list(make_steps(40, {"data_wait": 2, "forward": 5}))
    for i in range(10, 40, 5):
        steps[i] = replace(steps[i], disturbed=True)
    steps[20] = replace(steps[20], profiled=True)
    fetches = tuple(
        Fetch(
            pid=100,
            start_ns=s.start_ns + k * MS // 4,
            end_ns=s.start_ns + (k + 1) * MS // 4,
            cpu_ns=0,
            runq_ns=0,
        )
        for s in steps
        for k in range(4)
    )
    config = LoaderConfig(
        t_ns=0, num_workers=0, pin_memory=False, prefetch_factor=None, persistent_workers=False,
        batch_size=8, dataset="Tiny",
    )  # fmt: skip
    rank = RankData(
        rank=0, processes=(make_process(),), loaders=(config,), fetches=fetches, steps=tuple(steps)
    )
    stats = step_stats(rank)
    assert stats is not None and stats.count < 34
    activity = loader_activity(rank, stats.start_ns, stats.end_ns)
    assert activity is not None
    assert round(activity.batches / activity.steps) == 4
    assert round(activity.batches / stats.count) == 5  # (what was read before)
