"""Nsight Systems SQLite ingest: the real CloverLeaf export checked against pipit's frames of it (the
oracle CSVs beside it), schema variants made from it (2022-style, NVTX steps, two GPU processes, repeated
API rows, memsets), dispatch by content, and hostile files through `pinchpoint analyze`."""

from __future__ import annotations

import csv
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pinchpoint.analysis.gpu.steps import step_stats
from pinchpoint.errors import TraceError
from pinchpoint.ingest.nsys import read_nsys, read_nsys_ranks
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.trace.kineto import CopyKind, HostMemory, Kind, KinetoTrace

DATA = Path(__file__).parent / "data" / "nsys" / "cloverleaf"
EXPORT = DATA / "perlmutter-cloverleaf-cuda.sqlite"
GPU_CSV = DATA / "cloverleaf_gpu_trace.csv"
API_CSV = DATA / "cloverleaf-cuda_api_trace.csv"
KINETO = Path(__file__).parent / "data" / "traces" / "tracelens" / "h100"
PID = 1701896
GLOBAL_PID = 310028053512192
"""CloverLeaf's serialized globalPid: (GLOBAL_PID >> 24) & 0xFFFFFF == PID."""
OTHER_PID = 1701999


def enters(path: Path) -> list[dict[str, str]]:
    """The oracle's rows, one per event (pipit writes an Enter and a Leave row each)."""
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["Event Type"] == "Enter"]


def rows(trace: KinetoTrace, *kinds: Kind) -> list[tuple[int, int, str, int, int]]:
    """(start, end, name, tid, bytes) of the events of these kinds, sorted."""
    ev = trace.events
    m = np.isin(ev.kind, [int(k) for k in kinds])
    names = [ev.names[i] for i in ev.name[m].tolist()]
    cols = (ev.start_ns[m].tolist(), ev.end_ns[m].tolist(), names, ev.tid[m].tolist(), ev.bytes[m].tolist())
    return sorted(zip(*cols, strict=True))


@pytest.fixture(scope="module")
def clover() -> KinetoTrace:
    return read_nsys(EXPORT)


def test_kernels_match_the_oracle_row_for_row(clover: KinetoTrace) -> None:
    want = sorted(
        (int(r["Timestamp (ns)"]), int(r["_matching_timestamp"]), r["Name"], int(r["streamId"]))
        for r in enters(GPU_CSV)
        if r["type"] == "kernel"
    )
    got = rows(clover, Kind.KERNEL)
    assert len(got) == len(want) == 1312
    assert [(s, e, tid) for s, e, _, tid, _ in got] == [(s, e, st) for s, e, _, st in want]
    # pipit names kernels by their short name; pinchpoint keeps the demangled one, as Kineto does
    # (template arguments carry the GEMM/tensor-core words the analyses read).
    assert all(short in name for (_, _, name, _, _), (_, _, short, _) in zip(got, want, strict=True))
    assert Counter(short for _, _, short, _ in want).most_common(1) == [("par_ranged1d_kernel", 968)]
    assert got[0][2].startswith("void clover::par_ranged2d_kernel<build_field(global_variables &)")
    ev = clover.events
    kernels = ev.kind == Kind.KERNEL
    assert set(ev.device[kernels].tolist()) == {0} and set(ev.pid[kernels].tolist()) == {0}
    assert bool((ev.correlation[kernels] > 0).all())


def test_memcpys_match_the_oracle(clover: KinetoTrace) -> None:
    direction = {"CUDA_MEMCPY_KIND_HTOD": CopyKind.H2D, "CUDA_MEMCPY_KIND_DTOH": CopyKind.D2H}
    want = sorted(
        (int(r["Timestamp (ns)"]), int(r["_matching_timestamp"]), int(r["bytes"]), int(direction[r["type"]]))
        for r in enters(GPU_CSV)
        if r["type"] != "kernel"
    )
    ev = clover.events
    m = ev.kind == Kind.MEMCPY
    got = sorted(
        zip(
            ev.start_ns[m].tolist(),
            ev.end_ns[m].tolist(),
            ev.bytes[m].tolist(),
            ev.copy_kind[m].tolist(),
            strict=True,
        )
    )
    assert len(got) == len(want) == 279
    assert got == want
    assert set(ev.host_memory[m].tolist()) == {HostMemory.PAGEABLE}
    names = Counter(ev.names[i] for i in ev.name[m].tolist())
    assert names == {"Memcpy HtoD (Pageable -> Device)": 254, "Memcpy DtoH (Device -> Pageable)": 25}


def test_cuda_api_rows_match_the_oracle(clover: KinetoTrace) -> None:
    """pipit keeps every CUPTI_ACTIVITY_KIND_RUNTIME row (3048, no two share a correlation id here) with
    its export name (`cudaLaunchKernel_v7000`); so does pinchpoint, and it files the one driver call,
    cuModuleGetLoadingMode, as DRIVER."""
    want = sorted(
        (int(r["Timestamp (ns)"]), int(r["_matching_timestamp"]), r["Name"], int(r["Thread"]))
        for r in enters(API_CSV)
    )
    got = [(s, e, n, t) for s, e, n, t, _ in rows(clover, Kind.RUNTIME, Kind.DRIVER)]
    assert len(got) == len(want) == 3048
    assert got == want
    assert {int(r["Process"]) for r in enters(API_CSV)} == {PID}
    ev = clover.events
    api = np.isin(ev.kind, [Kind.RUNTIME, Kind.DRIVER])
    assert set(ev.pid[api].tolist()) == {PID}
    assert [ev.names[i] for i in ev.name[ev.kind == Kind.DRIVER].tolist()] == ["cuModuleGetLoadingMode"]


def test_launches_link_to_their_kernels(clover: KinetoTrace) -> None:
    ev = clover.events
    launch = ev.mask_names(lambda s: s.startswith("cudaLaunchKernel")) & (ev.kind == Kind.RUNTIME)
    assert set(ev.correlation[launch].tolist()) == set(ev.correlation[ev.kind == Kind.KERNEL].tolist())


def test_other_activity_syncs_and_os_runtime(clover: KinetoTrace) -> None:
    ev = clover.events
    other = Counter(ev.names[i] for i in ev.name[ev.kind == Kind.OTHER].tolist())
    assert other["Event Sync"] == 1312  # CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, as Kineto's cuda_sync: OTHER
    assert other["ioctl"] == 1253  # OSRT_API: host thread activity
    assert sum(other.values()) == 1312 + 1831
    assert list(ev.start_ns) == sorted(ev.start_ns.tolist())


def test_events_that_start_together_come_longest_first(tmp_path: Path) -> None:
    """The model's order, (start, -dur), made by a sort on start and a pass over the ties (no negated
    copy of every duration in memory): every OS runtime call copied with twice its duration (read after
    the original) starts with it, and comes before it."""
    path = variant(tmp_path, clone("OSRT_API", end='"start" + ("end" - "start") * 2'))
    ev = read_nsys(path).events
    start, dur = ev.start_ns.tolist(), ev.dur_ns.tolist()
    assert [(s, -d) for s, d in zip(start, dur, strict=True)] == sorted(
        zip(start, (-d for d in dur), strict=True)
    )
    assert sum(a == b for a, b in itertools.pairwise(start)) >= 1831
    assert ev.pid.dtype == ev.tid.dtype == ev.stream.dtype == np.int32


def test_device_and_meta(clover: KinetoTrace) -> None:
    (dev,) = clover.meta.devices
    assert (dev.index, dev.name, dev.vendor) == (0, "NVIDIA A100-SXM4-80GB", "nvidia")
    assert (dev.compute_capability, dev.sm_count, dev.total_memory_bytes) == ((8, 0), 108, 84990623744)
    assert clover.meta.schema == "nsys 3.13.2"
    assert (clover.meta.rank, clover.meta.world_size, clover.warnings) == (0, None, ())
    assert clover.meta.trace_bytes == EXPORT.stat().st_size


def oracle_busy_fraction() -> float:
    """GPU busy share from the oracle alone: union of kernel and copy intervals over their span."""
    spans = sorted((int(r["Timestamp (ns)"]), int(r["_matching_timestamp"])) for r in enters(GPU_CSV))
    busy, cur_s, cur_e = 0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    return busy / (max(e for _, e in spans) - spans[0][0])


def analyze(path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", "analyze", str(path), "--no-color", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=out,
        env={k: v for k, v in os.environ.items() if k != "PINCHPOINT_DEBUG"},
    )


def test_analyze_the_export_end_to_end(tmp_path: Path) -> None:
    res = analyze(EXPORT, tmp_path, "--json", str(tmp_path / "report.json"))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    (gpu,) = report["gpu"]
    busy = gpu["compute"] + gpu["communication"] + gpu["memory"]
    assert busy == pytest.approx(1 - gpu["idle"], abs=2e-4)
    assert busy == pytest.approx(oracle_busy_fraction(), abs=0.01)
    assert gpu["span_ms"] == pytest.approx(342.4, abs=0.1)
    assert report["findings"], report
    assert report["environment"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert "A100" in res.stdout


def test_dispatch_is_by_content_not_name(tmp_path: Path) -> None:
    disguised = tmp_path / "trace.json"
    shutil.copyfile(EXPORT, disguised)
    report = report_traces(disguised).to_dict()
    assert report["gpu"][0]["span_ms"] == pytest.approx(342.4, abs=0.1)
    kineto = tmp_path / "trace.sqlite"
    shutil.copyfile(next(KINETO.glob("*.json.gz")), kineto)
    assert report_traces(kineto).to_dict()["environment"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    with pytest.raises(TraceError, match="not a SQLite database"):
        read_nsys(kineto)


# --- schema variants, made from the real export --------------------------------------------------------


def variant(tmp_path: Path, *sql: str, name: str = "variant.sqlite") -> Path:
    out = tmp_path / name
    shutil.copyfile(EXPORT, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    for stmt in sql:
        con.execute(stmt)
    con.commit()
    con.close()
    return out


def clone(table: str, tmp_con: sqlite3.Connection | None = None, **exprs: str) -> str:
    """INSERT ... SELECT copying every row of `table`, with some columns replaced by SQL expressions."""
    con = tmp_con or sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True)
    cols = [str(r[1]) for r in con.execute(f'PRAGMA table_info("{table}")')]
    sel = ", ".join(exprs.get(c, f'"{c}"') for c in cols)
    return f'INSERT INTO "{table}" SELECT {sel} FROM "{table}"'


def test_a_2022_style_export_without_enum_tables(tmp_path: Path) -> None:
    """No ENUM_* tables (their numbering is assumed), the metadata table under another name, kernels
    with only a short name: still the same events."""
    con = sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True)
    enums = [str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'ENUM_%'")]
    path = variant(
        tmp_path,
        *(f'DROP TABLE "{t}"' for t in enums),
        "ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName",
    )
    trace = read_nsys(path)
    assert trace.meta.schema == "nsys 3.13.2"
    kernels = rows(trace, Kind.KERNEL)
    assert len(kernels) == 1312 and {n for _, _, n, _, _ in kernels} == {
        "par_ranged1d_kernel",
        "par_ranged2d_kernel",
        "par_reduce_kernel",
    }
    ev = trace.events
    m = ev.kind == Kind.MEMCPY
    assert Counter(ev.copy_kind[m].tolist()) == {CopyKind.H2D: 254, CopyKind.D2H: 25}
    assert Counter(ev.names[i] for i in ev.name[ev.kind == Kind.OTHER].tolist())["Event Sync"] == 1312


NVTX_TABLE = (
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,"
    " category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,"
    " domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,"
    " int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT)"
)
MAIN_TID = 310028055214088
"""CloverLeaf's main thread (globalTid): pid and tid 1701896."""


def test_nvtx_profiler_step_ranges_become_steps(tmp_path: Path) -> None:
    """Three `ProfilerStep#N` push/pop ranges over the kernel time (inline text), one registered-string
    range (textId), a mark (no end): the ranges are annotations, the steps are found as in Kineto."""
    bounds = [(533_000_000, 640_000_000), (640_000_000, 760_000_000), (760_000_000, 876_000_000)]
    ranges = [
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES ({s}, {e}, 59, 'ProfilerStep#{i}', {MAIN_TID})"
        for i, (s, e) in enumerate(bounds, 1)
    ]
    path = variant(
        tmp_path,
        NVTX_TABLE,
        *ranges,
        "INSERT INTO StringIds (id, value) VALUES (99999, 'timestep loop')",
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid) VALUES (530000000, 880000000, 59, 99999, {MAIN_TID})",
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (600000000, NULL, 34, 'a mark', {MAIN_TID})",
    )
    trace = read_nsys(path)
    got = rows(trace, Kind.USER_ANNOTATION)
    assert [(s, e, n, t) for s, e, n, t, _ in got] == sorted(
        [(s, e, f"ProfilerStep#{i}", PID) for i, (s, e) in enumerate(bounds, 1)]
        + [(530000000, 880000000, "timestep loop", PID)]
    )
    steps = step_stats(trace)
    assert [s.number for s in steps.steps] == [1, 2, 3]
    assert steps.gpu_busy_fraction > 0.5


def test_pinchpoints_own_nvtx_steps_and_data_waits_are_read(tmp_path: Path) -> None:
    """`pinchpoint run --annotate nvtx` under nsys: `pinchpoint/step N` ranges with phases inside."""
    bounds = [(533_000_000, 640_000_000), (640_000_000, 760_000_000)]
    ranges = [
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES ({s}, {e}, 59, 'pinchpoint/step {i}', {MAIN_TID})"
        for i, (s, e) in enumerate(bounds, 10)
    ] + [
        f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES ({s}, {s + 20_000_000}, 59, 'pinchpoint/data_wait', {MAIN_TID})"
        for s, _ in bounds
    ]
    trace = read_nsys(variant(tmp_path, NVTX_TABLE, *ranges))
    steps = step_stats(trace)
    assert [s.number for s in steps.steps] == [10, 11]
    assert all(s.dataloader_ns > 0 for s in steps.steps)


def test_each_gpu_process_is_a_rank_in_pid_order(tmp_path: Path) -> None:
    other_gpid = f"((globalPid & ~(16777215 << 24)) | ({OTHER_PID} << 24))"
    other_gtid = f"(((globalTid & ~(16777215 << 24)) & ~16777215) | ({OTHER_PID} << 24) | {OTHER_PID})"
    path = variant(
        tmp_path,
        clone("CUPTI_ACTIVITY_KIND_KERNEL", globalPid=other_gpid, start="start + 5", end="end + 5"),
        clone("CUPTI_ACTIVITY_KIND_RUNTIME", globalTid=other_gtid),
    )
    traces = read_nsys_ranks(path)
    assert [t.meta.rank for t in traces] == [0, 1]
    assert [t.meta.world_size for t in traces] == [2, 2]
    for trace, pid, shift in ((traces[0], PID, 0), (traces[1], OTHER_PID, 5)):
        assert len(rows(trace, Kind.KERNEL)) == 1312
        assert rows(trace, Kind.KERNEL)[0][0] == 533338240 + shift
        assert set(trace.events.pid[trace.events.kind == Kind.RUNTIME].tolist()) == {pid}
        assert any(f"process {pid} of 2" in w for w in trace.warnings)
    assert len(rows(traces[1], Kind.MEMCPY)) == 0 and len(rows(traces[0], Kind.MEMCPY)) == 279
    assert len(report_traces(path).to_dict()["ranks"]) == 2
    assert any("2 processes" in w for w in read_nsys(path).warnings)


def test_repeated_api_rows_of_one_call_are_dropped(tmp_path: Path) -> None:
    """A second, nested row under the same correlation id on the same thread (`cudaLaunchKernel` inside
    `cudaLaunchKernel_v7000`) is the same call: kept once, the outer row."""
    path = variant(
        tmp_path,
        "INSERT INTO StringIds (id, value) VALUES (99998, 'cudaLaunchKernel')",
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue)"
        " SELECT r.start + 1, r.end - 1, 0, r.globalTid, r.correlationId, 99998, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
        " JOIN StringIds s ON s.id = r.nameId WHERE s.value = 'cudaLaunchKernel_v7000'",
    )
    trace = read_nsys(path)
    api = rows(trace, Kind.RUNTIME, Kind.DRIVER)
    assert len(api) == 3048
    assert Counter(n for _, _, n, _, _ in api)["cudaLaunchKernel_v7000"] == 1312
    assert trace.warnings == (
        "1312 CUDA API rows repeating another's correlation id on its thread were dropped",
    )


def test_memsets(tmp_path: Path) -> None:
    path = variant(
        tmp_path,
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER"
        " NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid"
        " INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, memKind INTEGER)",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (540000000, 540001000, 0, 1, 7, 9000001, {GLOBAL_PID}, 0, 4096, 2)",
    )
    trace = read_nsys(path)
    assert rows(trace, Kind.MEMSET) == [(540000000, 540001000, "Memset (Device)", 7, 4096)]


def test_a_trace_without_gpu_work_keeps_its_host_processes(tmp_path: Path) -> None:
    path = variant(
        tmp_path,
        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
        "DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY",
    )
    (trace,) = read_nsys_ranks(path)
    assert len(rows(trace, Kind.RUNTIME)) == 3047
    assert trace.warnings == ("the export has no GPU kernels, copies or memsets",)


# --- hostile input ----------------------------------------------------------------------------------------


def hostile_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    data = EXPORT.read_bytes()
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(data[: len(data) // 2])
    unrelated = tmp_path / "unrelated.sqlite"
    con = sqlite3.connect(unrelated)
    con.execute("CREATE TABLE measurements (t INTEGER, value REAL)")
    con.execute("INSERT INTO measurements VALUES (1, 2.5)")
    con.commit()
    con.close()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(bytes(np.random.default_rng(7).integers(0, 256, 50_000, dtype=np.uint8)))
    headed = tmp_path / "headed-garbage.sqlite"
    headed.write_bytes(data[:16] + garbage.read_bytes())
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    texts = tmp_path / "text-times.sqlite"
    con = sqlite3.connect(texts)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, globalPid)")
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('soon', 'later', 0, 7, {GLOBAL_PID})")
    con.commit()
    con.close()
    return {
        "truncated": (truncated, "truncated or damaged"),
        "unrelated": (unrelated, "not an Nsight Systems export"),
        "garbage": (garbage, "not a JSON trace"),
        "headed": (headed, "truncated or damaged"),
        "empty": (empty, "empty file"),
        "texts": (texts, "not integers"),
    }


def test_hostile_files_give_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    for what, (path, message) in hostile_files(tmp_path).items():
        res = analyze(path, tmp_path, "--json", str(tmp_path / f"{what}.json"))
        assert res.returncode == 3, (what, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (what, res.stderr)
        assert lines[0].startswith("pinchpoint: error: ")
        assert not (tmp_path / f"{what}.json").exists()


def test_read_nsys_raises_trace_error_only(tmp_path: Path) -> None:
    for path, message in hostile_files(tmp_path).values():
        if "JSON" in message:
            message = "not a SQLite database"
        with pytest.raises(TraceError, match=message):
            read_nsys(path)
    with pytest.raises(TraceError, match="directory"):
        read_nsys(tmp_path)


def test_a_directory_of_per_rank_exports_is_one_report(tmp_path: Path) -> None:
    """`nsys profile -o rank%q{RANK}` writes one report per rank: each export's GPU process is a rank,
    numbered across the files in natural order (rank2 before rank10)."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("rank10.sqlite", "rank2.sqlite"):
        shutil.copyfile(EXPORT, ranks / name)
    link = variant(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000000", name="rank1.sqlite")
    shutil.move(link, ranks / "rank1.sqlite")
    report = report_traces(ranks).to_dict()
    spans = [g["span_ms"] for g in report["gpu"]]
    assert [g["rank"] for g in report["gpu"]] == [0, 1, 2]
    assert spans[0] > spans[1] == pytest.approx(342.4, abs=0.1) and spans[2] == spans[1]  # rank1 first


def test_emit_nvtx_op_ranges_are_framework_ops(tmp_path: Path) -> None:
    """`torch.autograd.profiler.emit_nvtx()` pushes a range per op, `aten::addmm, seq = 12, sizes = [...]`:
    those become CPU ops named by the op alone; other ranges stay annotations."""
    texts = [
        "aten::addmm, seq = 12, sizes = [[64, 8], [8, 4]]",
        "aten::addmm, seq = 13",
        "aten::relu",
        "my phase",
    ]
    path = variant(
        tmp_path,
        NVTX_TABLE,
        *(
            f"INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
            f"VALUES ({600_000_000 + i * 1000}, {600_000_500 + i * 1000}, 59, '{t}', {MAIN_TID})"
            for i, t in enumerate(texts)
        ),
    )
    trace = read_nsys(path)
    ops = [(n, s) for s, _, n, _, _ in rows(trace, Kind.CPU_OP)]
    assert ops == [("aten::addmm", 600_000_000), ("aten::addmm", 600_001_000), ("aten::relu", 600_002_000)]
    assert [n for _, _, n, _, _ in rows(trace, Kind.USER_ANNOTATION)] == ["my phase"]
    assert trace.events.names.count("aten::addmm") == 1
