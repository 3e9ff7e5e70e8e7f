"""GPU time breakdown and idle causes: tiny synthetic traces with hand-computed answers, and properties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu.breakdown import GpuBreakdown, gpu_breakdown
from pinchpoint.analysis.gpu.idle import IdleSplit, gpu_idle
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.trace.kineto import EventTable, Kind, events_from_rows

NCCL = "ncclDevKernel_Generic"
COPY = "Memcpy HtoD (Pinned -> Device)"


def k(start: int, dur: int, stream: int = 7, name: str = "gemm", **kw: Any) -> dict[str, Any]:
    kind = Kind.MEMCPY if name.startswith("Memcpy") else Kind.KERNEL
    return {"kind": kind, "name": name, "start_ns": start, "dur_ns": dur, "stream": stream, "device": 0, **kw}


def launch(start: int, corr: int) -> dict[str, Any]:
    return {
        "kind": Kind.RUNTIME,
        "name": "cudaLaunchKernel",
        "start_ns": start,
        "dur_ns": 3,
        "correlation": corr,
    }


def bd(rows: list[dict[str, Any]], window: tuple[int, int] | None = None) -> GpuBreakdown:
    out = gpu_breakdown(events_from_rows(rows), window)
    assert out is not None
    return out


# (case, rows, window, expected (span, compute, communication, memory, idle) in ns, comm_overlap)
CASES: list[tuple[str, list[dict[str, Any]], tuple[int, int] | None, tuple[int, ...], float | None]] = [
    ("gap between two kernels", [k(0, 10), k(20, 10)], None, (30, 20, 0, 0, 10), None),
    ("overlapping compute streams", [k(0, 50), k(25, 50, stream=8)], None, (75, 75, 0, 0, 0), None),
    ("comm hidden under compute", [k(0, 100), k(20, 40, 8, NCCL)], None, (100, 100, 0, 0, 0), 1.0),
    ("comm partly exposed", [k(0, 50), k(30, 50, 8, NCCL)], None, (80, 50, 30, 0, 0), 20 / 50),
    (
        "memcpy overlapping comm, then idle, then compute",
        [k(0, 40, 8, NCCL), k(20, 40, 9, COPY), k(70, 30)],
        None,
        (100, 30, 40, 20, 10),
        0.0,
    ),
    ("memcpy hidden under compute", [k(0, 100), k(10, 20, 9, COPY)], None, (100, 100, 0, 0, 0), None),
    (
        "window clips events, idle against window",
        [k(0, 100), k(200, 100)],
        (50, 250),
        (200, 100, 0, 0, 100),
        None,
    ),
    ("window wider than the work", [k(100, 10)], (0, 1000), (1000, 10, 0, 0, 990), None),
    (
        "host events and annotations are not GPU work",
        [
            k(10, 10),
            {"kind": Kind.RUNTIME, "name": "cudaLaunchKernel", "start_ns": 0, "dur_ns": 500},
            {
                "kind": Kind.GPU_USER_ANNOTATION,
                "name": "ProfilerStep#1",
                "start_ns": 0,
                "dur_ns": 500,
                "stream": 7,
            },
            {"kind": Kind.OTHER, "name": "Stream Wait Event", "start_ns": 25, "dur_ns": 400, "stream": 7},
            k(40, 10),
        ],
        None,
        (40, 20, 0, 0, 20),
        None,
    ),
]


@pytest.mark.parametrize(("case", "rows", "window", "expected", "overlap"), CASES, ids=[c[0] for c in CASES])
def test_breakdown_cases(
    case: str,
    rows: list[dict[str, Any]],
    window: tuple[int, int] | None,
    expected: tuple[int, ...],
    overlap: float | None,
) -> None:
    b = bd(rows, window)
    assert (b.span_ns, b.compute_ns, b.communication_ns, b.memory_ns, b.idle_ns) == expected
    assert b.comm_overlap == (pytest.approx(overlap) if overlap is not None else None)
    assert b.compute + b.communication + b.memory + b.idle == pytest.approx(1.0, abs=1e-9)
    assert b.non_compute == pytest.approx(b.communication + b.memory)


def test_breakdown_totals_and_fractions() -> None:
    b = bd([k(0, 40, 8, NCCL), k(20, 40, 9, COPY), k(70, 30)])
    assert (b.start_ns, b.end_ns, b.busy_ns) == (0, 100, 90)
    assert (b.communication_total_ns, b.memory_total_ns) == (40, 40)
    assert (b.compute, b.communication, b.memory, b.idle) == (0.3, 0.4, 0.2, 0.1)


def test_breakdown_none_without_gpu_work() -> None:
    assert gpu_breakdown(events_from_rows([launch(0, 1)])) is None
    assert gpu_breakdown(events_from_rows([k(0, 10)]), window=(20, 30)) is None
    assert gpu_idle(events_from_rows([launch(0, 1)])) is None


def split(s: IdleSplit) -> tuple[int, int, int]:
    return s.host_wait_ns, s.kernel_wait_ns, s.other_ns


def test_idle_causes_on_one_stream() -> None:
    ev = events_from_rows(
        [
            launch(-5_000, 1),
            k(0, 10_000, correlation=1),
            launch(1_000, 2),  # queued while kernel 1 ran; 2 µs gap = launch latency
            k(12_000, 8_000, correlation=2),
            launch(50_000, 3),  # enqueued 30 µs after the stream ran dry: host wait 80 µs
            k(100_000, 10_000, correlation=3),
            launch(30_000, 4),  # queued early but started 90 µs late: other (waited on something else)
            k(200_000, 10_000, correlation=4),
            k(215_000, 5_000, correlation=99),  # no launch in the trace: other
        ]
    )
    idle = gpu_idle(ev)
    assert idle is not None
    (s,) = idle.streams
    assert (s.device, s.stream, s.events, s.busy_ns) == (0, 7, 5, 43_000)
    assert split(s.idle) == (80_000, 2_000, 90_000 + 5_000)
    assert s.idle.gaps == 4
    assert split(idle.wall) == split(s.idle)
    assert idle.wall.total_ns == gpu_breakdown(ev).idle_ns  # type: ignore[union-attr]


def test_kernel_wait_threshold_is_a_parameter() -> None:
    ev = events_from_rows(
        [launch(-5, 1), k(0, 10, correlation=1), launch(1, 2), k(60_000, 10, correlation=2)]
    )
    assert split(gpu_idle(ev).wall) == (0, 0, 59_990)  # type: ignore[union-attr]
    assert split(gpu_idle(ev, kernel_wait_max_ns=100_000).wall) == (0, 59_990, 0)  # type: ignore[union-attr]


def test_wall_clock_idle_is_not_double_counted_across_streams() -> None:
    ev = events_from_rows(
        [
            launch(-10, 1),
            k(0, 100, stream=7, correlation=1),
            launch(-10, 2),
            k(0, 150, stream=8, correlation=2),
            launch(160, 3),  # stream 7 resumes 60 ns after it ran dry... and 10 ns after the whole GPU did
            k(200, 100, stream=7, correlation=3),
            launch(0, 4),  # queued long before: stream 8's gap is not the host's fault
            k(250, 50, stream=8, correlation=4),
        ]
    )
    idle = gpu_idle(ev, kernel_wait_max_ns=10)
    assert idle is not None
    s7, s8 = idle.streams
    assert split(s7.idle) == (100, 0, 0)
    assert split(s8.idle) == (0, 0, 100)
    # One wall-clock gap [150, 200), ended by stream 7's kernel launched at 160 > 150: host wait.
    assert split(idle.wall) == (50, 0, 0)
    assert idle.wall.gaps == 1


def test_idle_window_clips_and_blames_edges_other() -> None:
    ev = events_from_rows(
        [launch(0, 1), k(100, 10, correlation=1), launch(150, 2), k(200, 10, correlation=2)]
    )
    idle = gpu_idle(ev, window=(50, 205))
    assert idle is not None
    # [50,100) precedes all GPU work: other; [110,200) host wait (launch 150 > 110).
    assert split(idle.wall) == (90, 0, 50)
    b = gpu_breakdown(ev, window=(50, 205))
    assert b is not None and b.idle_ns == idle.wall.total_ns == 140


# --- properties -------------------------------------------------------------------------------------

names = st.sampled_from(["gemm", "relu", NCCL, COPY, "Memset (Device)"])
gpu_rows = st.lists(
    st.tuples(names, st.integers(0, 200), st.integers(0, 40), st.integers(0, 3), st.integers(-50, 250)),
    min_size=1,
    max_size=25,
)


def table(rows: list[tuple[str, int, int, int, int]]) -> EventTable:
    out: list[dict[str, Any]] = []
    for i, (name, start, dur, stream, launched) in enumerate(rows):
        kind = (
            Kind.MEMCPY
            if name.startswith("Memcpy")
            else Kind.MEMSET
            if name.startswith("Memset")
            else Kind.KERNEL
        )
        out.append(
            {
                "kind": kind,
                "name": name,
                "start_ns": start,
                "dur_ns": dur,
                "stream": stream,
                "device": 0,
                "correlation": i,
            }
        )
        out.append(launch(launched, i))
    return events_from_rows(out)


@settings(max_examples=200, deadline=None)
@given(gpu_rows, st.one_of(st.none(), st.tuples(st.integers(-20, 150), st.integers(1, 150))))
def test_breakdown_properties(
    rows: list[tuple[str, int, int, int, int]], win: tuple[int, int] | None
) -> None:
    ev = table(rows)
    window = (win[0], win[0] + win[1]) if win is not None else None
    b = gpu_breakdown(ev, window)
    gpu = ev.kind != Kind.RUNTIME
    s, e = ev.start_ns[gpu], ev.end_ns[gpu]
    union = iv.clip((s, e), *window) if window is not None else iv.union(s, e)
    if iv.total(union) == 0:
        assert b is None
        return
    assert b is not None
    fr = (b.compute, b.communication, b.memory, b.idle)
    assert all(0.0 <= f <= 1.0 for f in fr)
    assert sum(fr) == pytest.approx(1.0, abs=1e-9)
    assert b.compute_ns + b.communication_ns + b.memory_ns + b.idle_ns == b.span_ns
    assert b.idle_ns == b.span_ns - iv.total(union)
    if window is None:
        assert (b.start_ns, b.end_ns) == (int(s.min()), int(e.max()))  # zero-length events count (as HTA)
    assert b.comm_overlap is None or 0.0 <= b.comm_overlap <= 1.0
    idle = gpu_idle(ev, window)
    assert idle is not None
    assert idle.wall.total_ns == b.idle_ns
    assert all(x >= 0 for x in split(idle.wall))
    # Per stream, idle + busy spans that stream's own activity (within the window).
    for st_idle in idle.streams:
        assert min(split(st_idle.idle)) >= 0
    assert np.all(np.isfinite(fr))


# --- golden numbers on real traces ------------------------------------------------------------------
# Expected values are ours, in ns. Each was checked against HTA 0.5 run on the same file alone as rank 0
# with include_last_profiler_step=True and HTA_DISABLE_NS_ROUNDING=1 (benchmarks/hta_compare.py):
# get_temporal_breakdown's idle / compute / non-compute (µs) and the per-stream sums of
# get_idle_time_breakdown (host_wait / kernel_wait / other, µs) are quoted next to each case.

TRACES = Path(__file__).parent / "data" / "traces"

# (file, (span, idle, compute, communication, memory), per-stream idle sums (host, kernel, other))
GOLDEN = [
    (
        # HTA: kernel_time 1222847, idle 675191, compute 210320, non-compute 337336 (= 336983 + 353) µs;
        # comm overlap 14.95 %; idle per stream 3525804 / 3966 / 701924 µs.
        "hta/trace_filter/sampled_rank-0.json.gz",
        (1_222_847_000, 675_191_000, 210_320_000, 336_983_000, 353_000),
        (3_525_804_000, 3_966_000, 701_924_000),
    ),
    (
        # HTA: kernel_time 3907.825, idle 3598.388, compute 307.197, non-compute 2.24 µs;
        # idle per stream 3598.39 µs host wait.
        "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
        (3_907_825, 3_598_388, 307_197, 0, 2_240),
        (3_598_388, 0, 0),
    ),
    (
        # HTA: kernel_time 996477, idle 392919, compute 591532, non-compute 12026 µs;
        # idle per stream 382676 / 10243 / 0 µs.
        "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        (996_477_000, 392_919_000, 591_532_000, 0, 12_026_000),
        (382_676_000, 10_243_000, 0),
    ),
    (
        # HTA: kernel_time 12996011, idle 12929684, compute 10637, non-compute 55690 µs (the same
        # percentages to 0.01 pp): HTA also counts 41 `cuda_sync` rows (Stream Wait Event as compute, Stream
        # and Context Sync as non-compute), which widen its span by 75.8 ms. Idle per stream 24866725 / 107 / 0 µs.
        "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        (12_920_244_000, 12_854_103_000, 10_630_000, 0, 55_511_000),
        (24_866_725_000, 107_000, 0),
    ),
]


@pytest.mark.parametrize(("name", "expected", "per_stream"), GOLDEN, ids=[g[0].split("/")[1] for g in GOLDEN])
def test_golden_real_traces(name: str, expected: tuple[int, ...], per_stream: tuple[int, int, int]) -> None:
    events = read_trace(TRACES / name).events
    b = gpu_breakdown(events)
    assert b is not None
    assert (b.span_ns, b.idle_ns, b.compute_ns, b.communication_ns, b.memory_ns) == expected
    idle = gpu_idle(events)
    assert idle is not None
    assert idle.wall.total_ns == b.idle_ns
    summed = tuple(
        sum(getattr(s.idle, f) for s in idle.streams) for f in ("host_wait_ns", "kernel_wait_ns", "other_ns")
    )
    assert summed == per_stream


def test_golden_comm_overlap_and_wall_idle() -> None:
    events = read_trace(TRACES / "hta/trace_filter/sampled_rank-0.json.gz").events
    b = gpu_breakdown(events)
    assert b is not None and b.comm_overlap == pytest.approx(0.1495, abs=5e-5)  # HTA: 14.95 %
    idle = gpu_idle(events)
    assert idle is not None
    # Ours only (HTA has no wall-clock split): each gap of the union over all streams counted once.
    assert split(idle.wall) == (362_945_000, 2_708_000, 309_538_000)
