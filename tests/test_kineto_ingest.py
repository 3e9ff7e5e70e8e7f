"""Kineto trace ingest: tiny synthetic traces of both schemas, every bad input, and real traces checked
against a naive `json.load` reference written here."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pinchpoint.errors import TraceError
from pinchpoint.ingest import kineto_stream
from pinchpoint.ingest.kineto import read_trace, read_trace_dir
from pinchpoint.ingest.kineto_columns import string_id
from pinchpoint.trace.kineto import CopyKind, HostMemory, Kind, KinetoTrace

DATA = Path(__file__).parent / "data" / "traces"
PID = 4242

DEVICE = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9}
DEVICE |= {"computeMinor": 0, "numSms": 132}
DIST = {"backend": "nccl", "rank": 3, "world_size": 8}


def x(cat: str, name: str, ts: Any, dur: Any, pid: Any = PID, tid: Any = PID, **args: Any) -> dict[str, Any]:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def current_events() -> list[dict[str, Any]]:
    return [
        {"name": "process_labels", "ph": "M", "ts": 1000.0, "pid": PID, "tid": 0, "args": {"labels": "CPU"}},
        x("user_annotation", "ProfilerStep#3", 1010.0, 900.0, **{"External id": 1}),
        x("cpu_op", "aten::mm", 1200.0, 20.0, **{"External id": 3}),
        x("cuda_runtime", "cudaLaunchKernel", 1205.0, 6.5, correlation=101, **{"External id": 3}),
        {"ph": "s", "id": 101, "pid": PID, "tid": PID, "ts": 1205.0, "cat": "ac2g", "name": "ac2g"},
        x("kernel", "gemm", 1215.001, 0.4, pid=0, tid=7, correlation=101, device=0, stream=7),
        {"ph": "f", "id": 101, "pid": 0, "tid": 7, "ts": 1215.001, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            1.5,
            2.0,
            pid=0,
            tid=7,
            bytes=4096,
            correlation=5,
        ),
        x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 1300.0, 3.0, pid=0, tid=7, bytes=64),
        x("gpu_memset", "Memset (Device)", 1310.0, 1.0, pid=0, tid=7, bytes=8),
        x("gpu_user_annotation", "ProfilerStep#3", 1009.999, 900.003, pid=0, tid=7),
        x("python_function", "train.py(57): step", 1011.0, 880.0),
        x("cuda_driver", "cuLaunchKernel", 1400.0, 3.0, correlation=7),
        x("cuda_sync", "Stream Sync", 1500.0, 10.0, pid=0, tid=7),
        x("Trace", "PyTorch Profiler (0)", 1000.0, 1000.0, pid="Spans", tid="PyTorch Profiler"),
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": PID,
            "tid": PID,
            "ts": 1190.0,
        }
        | {"args": {"Total Reserved": 2097152, "Total Allocated": 262144, "Bytes": 262144, "Device Id": 0}}
        | {"args": {"Total Reserved": 2097152, "Total Allocated": 262144, "Bytes": 262144, "Device Id": 0}}
        | {"args": {"Device Type": 1, "Device Id": 0, "Bytes": 262144, "Total Allocated": 262144}},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 2000.0},
    ]


def trace_doc(events: list[dict[str, Any]], *, meta_after: bool = False) -> str:
    meta = {
        "schemaVersion": 1,
        "deviceProperties": [DEVICE],
        "distributedInfo": DIST,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": 1711964646000000000,
        "metadata": {"system": {"pip_packages": ["numpy==2.0", "torch==2.6.0"]}},
    }
    body = '"traceEvents": [\n' + ",\n".join("  " + json.dumps(e) for e in events) + "\n]"
    head = json.dumps(meta)[1:-1]
    return "{" + (f"{body},\n{head}" if meta_after else f"{head},\n{body}") + ', "traceName": "t.json"}'


def write(tmp_path: Path, text: str | bytes, name: str = "t.json", gz: bool = False) -> Path:
    data = text.encode() if isinstance(text, str) else text
    p = tmp_path / (name + ".gz" if gz else name)
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


def rows(t: KinetoTrace, name: str) -> np.ndarray[Any, Any]:
    return np.flatnonzero(t.events.mask_names(lambda s: s == name))


# -- current schema -----------------------------------------------------------------------------------


def test_current_schema_columns_and_meta(tmp_path: Path) -> None:
    t = read_trace(write(tmp_path, trace_doc(current_events())))
    ev = t.events
    assert t.warnings == ()
    assert len(ev) == 12
    assert Counter(Kind(k).name for k in ev.kind.tolist()) == {
        "USER_ANNOTATION": 1,
        "CPU_OP": 1,
        "RUNTIME": 1,
        "KERNEL": 1,
        "MEMCPY": 2,
        "MEMSET": 1,
        "GPU_USER_ANNOTATION": 1,
        "PYTHON_FUNCTION": 1,
        "DRIVER": 1,
        "OTHER": 2,
    }
    assert np.all(np.diff(ev.start_ns) >= 0)
    (k,) = rows(t, "gemm")
    assert (ev.start_ns[k], ev.dur_ns[k]) == (1215001, 400)  # a 0.4 µs kernel stays 400 ns
    assert (ev.correlation[k], ev.device[k], ev.stream[k]) == (101, 0, 7)
    (r,) = rows(t, "cudaLaunchKernel")
    assert (ev.correlation[r], ev.external_id[r], ev.dur_ns[r]) == (101, 3, 6500)
    (h2d,) = rows(t, "Memcpy HtoD (Pageable -> Device)")
    assert ev.start_ns[h2d] == 1500  # ts 1.5 µs -> 1500 ns, exactly
    assert (ev.copy_kind[h2d], ev.host_memory[h2d], ev.bytes[h2d]) == (
        CopyKind.H2D,
        HostMemory.PAGEABLE,
        4096,
    )
    (d2h,) = rows(t, "Memcpy DtoH (Device -> Pinned)")
    assert (ev.copy_kind[d2h], ev.host_memory[d2h]) == (CopyKind.D2H, HostMemory.PINNED)
    assert ev.copy_kind[k] == CopyKind.NONE
    (g,) = np.flatnonzero(ev.kind == Kind.GPU_USER_ANNOTATION)
    assert (ev.start_ns[g], ev.dur_ns[g], ev.device[g], ev.stream[g]) == (1009999, 900003, 0, 7)
    (span,) = rows(t, "PyTorch Profiler (0)")
    assert ev.pid[span] == string_id("Spans") < -1
    assert len(t.memory) == 1
    assert (t.memory.t_ns[0], t.memory.bytes_delta[0], t.memory.total_allocated[0]) == (
        1190000,
        262144,
        262144,
    )
    assert (t.memory.device_type[0], t.memory.device_id[0], t.memory.total_reserved[0]) == (1, 0, -1)
    m = t.meta
    assert (m.rank, m.rank_known, m.world_size, m.backend, m.schema) == (3, True, 8, "nccl", "current")
    assert m.base_time_ns == 1711964646000000000
    assert m.pytorch_version == "2.6.0"
    (dev,) = m.devices
    assert (dev.name, dev.vendor, dev.compute_capability, dev.sm_count) == (
        "NVIDIA H100 80GB HBM3",
        "nvidia",
        (9, 0),
        132,
    )


def test_sorted_by_start_then_longer_first(tmp_path: Path) -> None:
    evs = [x("cpu_op", "short", 10.0, 1.0), x("cpu_op", "long", 10.0, 5.0), x("cpu_op", "early", 5.0, 1.0)]
    t = read_trace(write(tmp_path, trace_doc(evs)))
    assert [t.events.names[i] for i in t.events.name.tolist()] == ["early", "long", "short"]


def test_metadata_after_the_array_and_bare_array(tmp_path: Path) -> None:
    before = read_trace(write(tmp_path, trace_doc(current_events()), "a.json"))
    after = read_trace(write(tmp_path, trace_doc(current_events(), meta_after=True), "b.json"))
    assert after.meta.rank == 3 and after.meta.devices == before.meta.devices
    assert after.meta.pytorch_version == "2.6.0"
    assert np.array_equal(after.events.start_ns, before.events.start_ns)
    bare = read_trace(write(tmp_path, json.dumps(current_events()), "c.json"))
    assert np.array_equal(bare.events.dur_ns, before.events.dur_ns)
    assert not bare.meta.rank_known


def test_epoch_microseconds_with_ns_digits_are_exact(tmp_path: Path) -> None:
    text = trace_doc([]).replace(
        '"traceEvents": [\n\n]',
        '"traceEvents": [{"ph": "X", "cat": "kernel", '
        '"name": "k", "pid": 0, "tid": 7, "ts": 1712195495519689.047, "dur": 0.001}]',
    )
    t = read_trace(write(tmp_path, text))
    assert (t.events.start_ns[0], t.events.dur_ns[0]) == (1712195495519689047, 1)


def test_exponent_and_integer_stamps(tmp_path: Path) -> None:
    evs = [x("cpu_op", "a", 1.5e3, 2e-3), x("cpu_op", "b", 1623142623460111, 25)]
    t = read_trace(write(tmp_path, trace_doc(evs)))
    assert t.events.start_ns.tolist() == [1500000, 1623142623460111000]
    assert t.events.dur_ns.tolist() == [2, 25000]


def test_string_pids_and_tids(tmp_path: Path) -> None:
    evs = [
        x("Kernel", "k", 1.0, 1.0, pid=0, tid="stream 7", correlation=1),
        x("Operator", "op", 2.0, 1.0, pid=25738, tid="25772"),
        x("cpu_op", "hex", 3.0, 1.0, pid=1, tid="0x1f"),
        x("cpu_op", "odd", 4.0, 1.0, pid="Traces", tid=""),
    ]
    ev = read_trace(write(tmp_path, trace_doc(evs))).events
    assert ev.tid.tolist()[:3] == [7, 25772, 31]
    assert ev.stream[0] == 7
    assert ev.pid[3] == string_id("Traces") and ev.tid[3] == string_id("") != -1


# -- 2021 schema, ROCm, flows ---------------------------------------------------------------------------


def test_2021_schema(tmp_path: Path) -> None:
    evs = [
        x("Operator", "ProfilerStep#5", 10, 100, tid="25738", **{"External id": 1}),
        x("Operator", "aten::conv2d", 11, 50, tid="25738", **{"External id": 2}),
        x("Runtime", "cudaLaunchKernel", 12, 5, tid="25738", correlation=9, **{"external id": 2}),
        x("Kernel", "implicit_gemm", 20, 30, pid=0, tid="stream 7", correlation=9, device=0, stream=7),
        x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 30, 2, pid=0, tid="stream 7", bytes=10),
        x("Memset", "Memset (Device)", 40, 1, pid=0, tid="stream 7", bytes=10),
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 11, "args": {"Device Type": 0}}
        | {"args": {"Device Type": 0, "Device Id": -1, "Bytes": -4}},
    ]
    t = read_trace(write(tmp_path, json.dumps({"schemaVersion": 1, "traceEvents": evs})))
    ev = t.events
    assert t.meta.schema == "2021"
    assert [Kind(k) for k in ev.kind.tolist()] == [
        Kind.USER_ANNOTATION, Kind.CPU_OP, Kind.RUNTIME, Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET
    ]  # fmt: skip
    assert ev.external_id.tolist()[:3] == [1, 2, 2]
    assert ev.tid.tolist()[:4] == [25738, 25738, 25738, 7]
    assert t.memory.bytes_delta.tolist() == [-4] and t.memory.total_allocated.tolist() == [-1]


def test_rocm_names(tmp_path: Path) -> None:
    evs = [
        x(
            "cuda_runtime",
            "hipMemcpyWithStream",
            1.0,
            60.2,
            stream="0x0",
            correlation=117,
            size="2560",
            kind="1",
        ),
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Host -> Device)",
            2.0,
            22.441,
            pid=2,
            tid=0,
            device=2,
            stream=0,
            correlation=117,
        ),
        x("cuda_runtime", "hipExtModuleLaunchKernel", 3.0, 5.0, correlation=118),
        x("kernel", "Cijk_Ailk_Bljk_BBS_BH", 4.0, 9.0, pid=2, tid=0, device=2, stream=0, correlation=118),
    ]
    doc = {
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4}]
    }
    t = read_trace(write(tmp_path, json.dumps(doc | {"traceEvents": evs})))
    ev = t.events
    assert [Kind(k) for k in ev.kind.tolist()] == [Kind.RUNTIME, Kind.MEMCPY, Kind.RUNTIME, Kind.KERNEL]
    assert (ev.copy_kind[1], ev.host_memory[1], ev.device[1]) == (CopyKind.H2D, HostMemory.UNKNOWN, 2)
    assert ev.stream[0] == 0  # "0x0"
    assert t.meta.devices[0].vendor == "amd" and t.meta.devices[0].compute_capability is None


def test_correlation_from_flows_when_args_lack_it(tmp_path: Path) -> None:
    evs = [
        x("cuda_runtime", "cudaLaunchKernel", 10.0, 5.0),
        {"ph": "s", "id": 77, "pid": PID, "tid": PID, "ts": 10.0, "cat": "ac2g", "name": "ac2g"},
        x("kernel", "k", 20.0, 5.0, pid=0, tid=7),
        {"ph": "f", "id": 77, "pid": 0, "tid": 7, "ts": 20.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        x("kernel", "orphan", 30.0, 5.0, pid=0, tid=7),
    ]
    ev = read_trace(write(tmp_path, trace_doc(evs))).events
    assert ev.correlation.tolist() == [77, 77, -1]


# -- block cutting --------------------------------------------------------------------------------------


def tricky_events(n: int) -> list[dict[str, Any]]:
    """Names and args holding `}, {`, brackets, quotes and escapes: cuts must not land inside them."""
    out = []
    for i in range(n):
        name = ['a}, {"b', 'x" }, { "y', "}]},{[", '\\"}, {\\', "plain"][i % 5] + str(i)
        args = {"Input Dims": [[1, 2], []], "nested": [{"a": 1}, {"b": "}, {"}], "correlation": i}
        out.append(x("cpu_op", name, float(i), 1.0, **args))
    return out


@pytest.mark.parametrize("block", [64, 200, 1000, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_small_blocks_give_the_same_trace(tmp_path: Path, block: int, gz: bool) -> None:
    p = write(tmp_path, trace_doc(tricky_events(60), meta_after=True), gz=gz)
    t = read_trace(p, block_bytes=block)
    assert t.warnings == ()
    assert len(t.events) == 60 and t.meta.rank == 3
    assert t.events.correlation.tolist() == list(range(60))
    assert t.events.names[int(t.events.name[0])] == 'a}, {"b0'


def test_progress_reports_bytes(tmp_path: Path) -> None:
    p = write(tmp_path, trace_doc(tricky_events(200)), gz=True)
    calls: list[tuple[int, int]] = []
    read_trace(p, progress=lambda d, t: calls.append((d, t)), block_bytes=4096)
    assert len(calls) > 2
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(calls))
    assert calls[-1] == (p.stat().st_size, p.stat().st_size)


# -- bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"  \n ", "empty file"),
        (b"hello world", "not a JSON trace"),
        (b'{"a": 1, "b": [1, 2]}', "no traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "traceEvents is not a list"),
        (b'{"traceEvents": null}', "traceEvents is not a list"),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X" "ts": 2}, {"ph": "X", "ts": 3}]}',
            "invalid JSON",
        ),
        (
            b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1, "args": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}]}",
            "nested",
        ),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated before the first complete event"),
    ],
)
def test_bad_files_raise_one_line_trace_errors(tmp_path: Path, content: bytes, message: str) -> None:
    p = write(tmp_path, content)
    with pytest.raises(TraceError, match=message) as e:
        read_trace(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        read_trace(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="directory"):
        read_trace(tmp_path)


def test_bad_events_are_skipped_and_counted(tmp_path: Path) -> None:
    evs: list[Any] = [
        x("cpu_op", "good", 1.0, 1.0),
        7,
        "not an event",
        x("cpu_op", "string ts", "12", 1.0),
        x("cpu_op", "list pid", 1.0, 1.0, pid=[1]),
        x("cpu_op", "negative", 2.0, -1.0),
        {"ph": "X", "cat": "cpu_op", "name": "no dur", "pid": 1, "tid": 1, "ts": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "null ts", "pid": 1, "tid": 1, "ts": None, "dur": 1},
        x("cpu_op", "huge", 1e300, 1.0),
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 1.0},
        x("cpu_op", "good2", 5.0, 1.0),
    ]
    t = read_trace(write(tmp_path, json.dumps({"traceEvents": evs})))
    assert [t.events.names[i] for i in t.events.name.tolist()] == ["good", "good2"]
    w = " | ".join(t.warnings)
    assert "3 trace events with fields of the wrong type" in w  # 7, "not an event", list pid
    assert "4 events without a usable ts or dur" in w  # string ts, no dur, null ts, 1e300
    assert "1 complete events with a negative dur" in w
    assert "1 B/E" in w


def test_truncated_json_keeps_the_events_before_the_cut(tmp_path: Path) -> None:
    text = trace_doc(tricky_events(50)).encode()
    cut = text.index(b'"plain44"') + 3
    for gz in (False, True):
        t = read_trace(write(tmp_path, text[:cut], gz=gz), block_bytes=300)
        assert len(t.events) == 44
        assert t.warnings == ("trace truncated after 44 events (the JSON ends early)",)


def test_truncated_gzip_is_a_warning(tmp_path: Path) -> None:
    data = gzip.compress(trace_doc(tricky_events(400)).encode())
    p = write(tmp_path, data[: len(data) * 2 // 3], "t.json.gz")
    t = read_trace(p, block_bytes=1000)
    assert 0 < len(t.events) < 400
    assert any("gzip stream ends early" in w for w in t.warnings)


def test_corrupt_gzip_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not a valid gzip"):
        read_trace(write(tmp_path, b"\x1f\x8b" + b"\x00garbage" * 20))


def test_gzip_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = b'{"traceEvents": [' + b" " * 5_000_000 + b"]}"
    p = write(tmp_path, bomb, gz=True)
    with pytest.raises(TraceError, match="more than 1000000 bytes of JSON"):
        read_trace(p, max_json_bytes=1_000_000)
    monkeypatch.setattr(kineto_stream, "BOMB_FLOOR", 1000)
    with pytest.raises(TraceError, match="gzip bomb"):
        read_trace(p, block_bytes=100_000)


def test_empty_event_list_is_a_trace_with_a_warning(tmp_path: Path) -> None:
    t = read_trace(write(tmp_path, b'{"traceEvents": [], "distributedInfo": {"rank": 1}}'))
    assert len(t.events) == 0 and len(t.memory) == 0 and t.meta.rank == 1
    assert t.warnings == ("the trace has no events",)


def test_key_inside_a_string_is_not_the_array(tmp_path: Path) -> None:
    text = (
        b'{"note": "\\"traceEvents\\": [1]", "x": {"traceEvents": 1}, "traceEvents": ['
        + json.dumps(x("cpu_op", "a", 1.0, 1.0)).encode()
        + b"]}"
    )
    t = read_trace(write(tmp_path, text))
    assert len(t.events) == 1


# -- directories of ranks -------------------------------------------------------------------------------


def test_read_trace_dir_ranks(tmp_path: Path) -> None:
    for rank in (1, 0):
        doc = {
            "distributedInfo": {"rank": rank, "world_size": 2},
            "traceEvents": [x("cpu_op", "a", 1.0, 1.0)],
        }
        write(tmp_path, json.dumps(doc), f"r{rank}.pt.trace.json", gz=rank == 1)
    (tmp_path / "notes.txt").write_text("not a trace")
    traces = read_trace_dir(tmp_path)
    assert [t.meta.rank for t in traces] == [0, 1] and all(t.warnings == () for t in traces)


def test_read_trace_dir_renumbers_missing_or_repeated_ranks(tmp_path: Path) -> None:
    for name in ("b.json", "a.json", "c.json"):
        doc = {"distributedInfo": {"rank": 0}, "traceEvents": [x("cpu_op", name, 1.0, 1.0)]}
        write(tmp_path, json.dumps(doc), name)
    write(tmp_path, b"garbage", "d.json")
    traces = read_trace_dir(tmp_path)
    assert [(t.meta.rank, Path(t.meta.path).name) for t in traces] == [
        (0, "a.json"),
        (1, "b.json"),
        (2, "c.json"),
    ]
    assert any("numbered the files in name order" in w for w in traces[0].warnings)
    assert any("skipped an unreadable trace" in w and "d.json" in w for w in traces[0].warnings)


def test_read_trace_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no \*\.json"):
        read_trace_dir(tmp_path)
    write(tmp_path, b"", "a.json")
    with pytest.raises(TraceError, match="no readable trace"):
        read_trace_dir(tmp_path)


# -- real traces against a naive reference ----------------------------------------------------------------

REF_KIND = {
    **dict.fromkeys(["cpu_op", "operator"], "CPU_OP"),
    "user_annotation": "USER_ANNOTATION",
    "gpu_user_annotation": "GPU_USER_ANNOTATION",
    "kernel": "KERNEL",
    **dict.fromkeys(["gpu_memcpy", "memcpy"], "MEMCPY"),
    **dict.fromkeys(["gpu_memset", "memset"], "MEMSET"),
    **dict.fromkeys(["cuda_runtime", "runtime"], "RUNTIME"),
    "cuda_driver": "DRIVER",
    "python_function": "PYTHON_FUNCTION",
}


def reference(path: Path) -> dict[str, Any]:
    """What `json.load` (numbers as Decimal, so ns stay exact) says the trace holds."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    legacy = any(e.get("cat") == "Operator" for e in xs)

    def kind(e: dict[str, Any]) -> str:
        k = REF_KIND.get(e.get("cat", "").lower(), "OTHER")
        if (
            legacy
            and k == "CPU_OP"
            and e["name"].startswith(("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer."))
        ):
            return "USER_ANNOTATION"
        return k

    kernels = [e for e in xs if kind(e) == "KERNEL"]
    dist = doc.get("distributedInfo", {})
    return {
        "kinds": Counter(kind(e) for e in xs),
        "kernel_ns": sum(int(Decimal(e["dur"]) * 1000) for e in kernels),
        "first_ns": min(int(Decimal(e["ts"]) * 1000) for e in xs),
        "memory": sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]"),
        "rank": dist.get("rank", 0),
        "world": dist.get("world_size"),
        "devices": [d["name"] for d in doc.get("deviceProperties", [])],
    }


REAL = sorted(DATA.rglob("*.json.gz"))


def test_real_traces_are_present() -> None:
    assert len(REAL) == 13, "tests/data/traces is incomplete"  # (5 with compiled regions or graph launches)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_real_trace_matches_reference(path: Path) -> None:
    ref = reference(path)
    t = read_trace(path)
    assert t.warnings == ()
    assert Counter(Kind(k).name for k in t.events.kind.tolist()) == ref["kinds"]
    kernels = t.events.kind == Kind.KERNEL
    assert int(t.events.dur_ns[kernels].sum()) == ref["kernel_ns"]
    assert int(t.events.start_ns[0]) == ref["first_ns"]
    assert len(t.memory) == ref["memory"]
    assert (t.meta.rank, t.meta.world_size) == (ref["rank"], ref["world"])
    assert [d.name for d in t.meta.devices] == ref["devices"]


def test_real_trace_details() -> None:
    amd = read_trace(DATA / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert amd.meta.devices[0].vendor == "amd"
    assert amd.events.mask_names(lambda s: s.startswith("hip")).sum() == 21
    bert = read_trace(DATA / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    assert bert.meta.pytorch_version == "2.6.0" and bert.meta.base_time_ns == 1751410836000000000
    resnet = read_trace(
        DATA / "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    )
    assert resnet.meta.schema == "2021"
    steps = resnet.events.mask_names(lambda s: s.startswith("ProfilerStep#"))
    assert set(resnet.events.kind[steps].tolist()) == {Kind.USER_ANNOTATION}
    gpu = np.isin(resnet.events.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    assert set(resnet.events.stream[gpu].tolist()) == {7} and (resnet.events.correlation[gpu] >= 0).all()
    ranks = read_trace_dir(DATA / "hta/trace_filter")
    assert [(t.meta.rank, t.meta.world_size) for t in ranks] == [(0, 128), (1, 128)]
