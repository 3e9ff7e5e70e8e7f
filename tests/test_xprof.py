"""XProf XSpace ingest: the real JAX files (TraceLens's MI300X traces) checked against TraceLens's report
of them (per-GPU busy/idle, kernel counts and times), the HIP runtime calls linked to their kernels, a
TPU XSpace written here with the wire format by hand, dispatch by content, and hostile files."""

from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pinchpoint.analysis.gpu.breakdown import gpu_breakdown
from pinchpoint.analysis.gpu.steps import step_stats
from pinchpoint.errors import TraceError
from pinchpoint.ingest import protowire
from pinchpoint.ingest.xprof import is_xprof, is_xspace, read_xprof_ranks
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.trace.kineto import CopyKind, Kind, KinetoTrace

DATA = Path(__file__).parent / "data" / "xprof"
LEGACY = DATA / "jax_conv_legacy.xplane.pb"
JAX08 = DATA / "jax_conv_08.xplane.pb"
ORACLE = DATA / "tracelens"


def oracle_timeline() -> dict[int, dict[str, float]]:
    """TraceLens's gpu_timeline.csv: {device index: {type: ms}} (its gpu_pid is the device index + 1)."""
    out: dict[int, dict[str, float]] = {}
    with (ORACLE / "gpu_timeline.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            out.setdefault(int(r["gpu_pid"]) - 1, {})[r["type"]] = float(r["time ms"])
    return out


def kernels(trace: KinetoTrace) -> dict[str, tuple[int, int]]:
    """{kernel name: (count, total ns)}."""
    ev = trace.events
    out: dict[str, list[int]] = {}
    for i in np.flatnonzero(ev.kind == Kind.KERNEL).tolist():
        c = out.setdefault(ev.names[int(ev.name[i])], [0, 0])
        c[0] += 1
        c[1] += int(ev.dur_ns[i])
    return {k: (v[0], v[1]) for k, v in out.items()}


def analyze(path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", "analyze", str(path), *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def legacy() -> list[KinetoTrace]:
    return read_xprof_ranks(LEGACY)


def test_each_busy_gpu_is_a_trace_and_its_split_matches_tracelens(legacy: list[KinetoTrace]) -> None:
    oracle = oracle_timeline()
    assert [t.meta.devices[0].index for t in legacy] == sorted(oracle) == [0, 7]
    for trace in legacy:
        want = oracle[trace.meta.devices[0].index]
        got = gpu_breakdown(trace.events)
        assert got is not None
        assert got.span_ns / 1e6 == pytest.approx(want["total_time"], abs=1e-6)
        assert got.busy_ns / 1e6 == pytest.approx(want["busy_time"], abs=1e-6)  # well inside the 1 pt bar
        assert got.idle == pytest.approx(want["idle_time"] / want["total_time"], abs=1e-6)
        assert got.memory * got.span_ns / 1e6 == pytest.approx(want["exposed_memcpy_time"], abs=1e-6)


def test_kernel_counts_and_times_match_tracelens_exactly(legacy: list[KinetoTrace]) -> None:
    got = kernels(legacy[1])  # GPU 7 ran every kernel
    with (ORACLE / "kernel_launchers_summary.csv").open(newline="") as f:
        want = {r["name"]: (int(r["Count"]), r["total_direct_kernel_time_sum"]) for r in csv.DictReader(f)}
    assert set(got) == set(want)
    for name, (count, total_us) in want.items():
        assert got[name][0] == count
        assert got[name][1] == round(float(total_us) * 1000), name  # µs with 3 decimals: exact in ns
    assert not kernels(legacy[0])


def test_copies_devices_memory_and_host_rows(legacy: list[KinetoTrace]) -> None:
    gpu0, gpu7 = legacy
    ev = gpu0.events
    copies = ev.kind == Kind.MEMCPY
    assert int(copies.sum()) == 53 and set(ev.stream[copies].tolist()) == {7, 8, 9, 10}
    assert set(ev.copy_kind[copies].tolist()) == {CopyKind.D2D}  # `kind:Unknown`, named CopyDeviceToDevice
    assert set(ev.bytes[copies].tolist()) == {655360}
    dev = gpu7.meta.devices[0]
    assert (dev.vendor, dev.sm_count, dev.total_memory_bytes) == ("amd", 304, 206141652992)
    assert gpu7.meta.schema == "xprof-gpu" and not gpu7.meta.rank_known
    host = Counter(Kind(k).name for k in gpu7.events.kind.tolist())
    assert host["PYTHON_FUNCTION"] > 1000 and host["CPU_OP"] > 1000  # the python tracer, TraceMe ranges
    mem = gpu7.memory
    assert len(mem) > 0 and set(mem.device_id.tolist()) == {7} and (mem.total_allocated >= 0).all()


def test_hip_launches_link_to_their_kernels_on_their_device() -> None:
    traces = read_xprof_ranks(JAX08)
    assert [t.meta.devices[0].index for t in traces] == list(range(8))
    for t in traces:
        ev = t.events
        launches = ev.kind == Kind.RUNTIME
        work = np.isin(ev.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
        gpu_corr = set(ev.correlation[work].tolist())
        linked = [c for c in ev.correlation[launches].tolist() if c in gpu_corr]
        assert len(linked) >= int(work.sum()) - 1, t.meta.devices  # every kernel has its launch
        assert int((ev.kind == Kind.KERNEL).sum()) == (60 if t.meta.devices[0].index == 0 else 25)


def test_analyze_end_to_end_and_a_tensorboard_log_directory(tmp_path: Path) -> None:
    res = analyze(LEGACY, tmp_path, "--json", str(tmp_path / "report.json"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    split = {g["rank"]: g for g in report["gpu"]}
    assert split[1]["compute"] == pytest.approx(0.2276, abs=0.001) and split[0]["memory"] > 0.03
    assert "StepTraceAnnotation" in " ".join(report["notes"])  # how JAX marks steps, not torch's advice
    logdir = tmp_path / "logs" / "plugins" / "profile" / "2026_12_03"
    logdir.mkdir(parents=True)
    shutil.copyfile(JAX08, logdir / "host.xplane.pb")
    assert len(report_traces(tmp_path / "logs").to_dict()["gpu"]) == 8


# --- a TPU XSpace, written here with the wire format -----------------------------------------------


_varint = protowire.encode_varint


def _f(number: int, value: int | bytes | str | float) -> bytes:
    if isinstance(value, float):
        return _varint(number << 3 | 1) + struct.pack("<d", value)
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _meta(key: int, name: str) -> bytes:
    return _f(1, key) + _f(2, _f(1, key) + _f(2, name))


def _plane(
    name: str, events: dict[int, str], stats: dict[int, str], lines: list[bytes], *extra: bytes
) -> bytes:
    body = _f(2, name) + b"".join(_f(4, _meta(k, v)) for k, v in events.items())
    body += b"".join(_f(5, _meta(k, v)) for k, v in stats.items()) + b"".join(_f(3, ln) for ln in lines)
    return _f(1, body + b"".join(extra))


def _line(line_id: int, name: str, ts_ns: int, events: list[tuple[int, int, int, bytes]]) -> bytes:
    body = _f(1, line_id) + _f(2, name) + _f(3, ts_ns)
    return body + b"".join(_f(4, _f(1, m) + _f(2, off) + _f(3, dur) + stats) for m, off, dur, stats in events)


def tpu_space(host_steps: bool) -> bytes:
    """Two steps of 10 µs on TPU 0; each runs a 6 µs fusion and a 2 µs all-reduce (8 µs busy, 2 idle).
    The host marks them too (`StepTraceAnnotation`, step_num 5 and 6), or not."""
    ops = [(1, 0, 6_000_000, b""), (2, 6_500_000, 2_000_000, b"")]
    ops += [(1, 10_000_000, 6_000_000, b""), (2, 16_500_000, 2_000_000, b"")]
    steps = [(3, 0, 10_000_000, b""), (4, 10_000_000, 10_000_000, b"")]
    tpu = _plane(
        "/device:TPU:0",
        {1: "fusion.3", 2: "all-reduce.1", 3: "1", 4: "2"},
        {1: "device_vendor"},
        [_line(1, "XLA Ops", 1000, ops), _line(2, "Steps", 1000, steps), _line(3, "XLA Modules", 1000, ops)],
        _f(6, _f(1, 1) + _f(5, "Google")),
    )
    marks = [
        (1, 0, 9_000_000, _f(4, _f(1, 1) + _f(4, 5))),
        (1, 10_000_000, 9_000_000, _f(4, _f(1, 1) + _f(3, 6))),
    ]
    host = _plane(
        "/host:CPU", {1: "train"}, {1: "step_num"}, [_line(7, "main", 1000, marks if host_steps else [])]
    )
    return tpu + host + _f(2, "one error the profiler wrote")


@pytest.mark.parametrize("host_steps", [False, True])
def test_a_tpu_plane_gets_its_own_split_and_steps(tmp_path: Path, host_steps: bool) -> None:
    path = tmp_path / "tpu.xplane.pb"
    path.write_bytes(tpu_space(host_steps))
    assert is_xspace(path)
    (trace,) = read_xprof_ranks(path)
    assert trace.meta.devices[0].vendor == "google" and trace.meta.schema == "xprof-tpu"
    assert kernels(trace) == {"fusion.3": (2, 12_000), "all-reduce.1": (2, 4_000)}  # XLA Modules left out
    split = gpu_breakdown(trace.events)
    assert split is not None and split.span_ns == 18_500
    assert split.idle == pytest.approx(2_500 / 18_500)
    assert split.communication == pytest.approx(4_000 / 18_500)  # XLA's all-reduce is a collective
    # the host's marks when it made them (int64 and uint64 step numbers), else the device's Steps line
    assert [s.number for s in step_stats(trace).steps] == ([5, 6] if host_steps else [1, 2])
    assert trace.warnings == ("XSpace: one error the profiler wrote",)
    report = report_traces(path).to_dict()
    assert report["steps"] is not None and report["gpu"][0]["communication"] > 0


# --- dispatch and hostile files ----------------------------------------------------------------------


def test_dispatch_is_by_content_not_name(tmp_path: Path) -> None:
    disguised = tmp_path / "trace.json"
    shutil.copyfile(LEGACY, disguised)
    assert len(report_traces(disguised).to_dict()["gpu"]) == 2
    others = [
        Path(__file__).parent / "data" / "nsys" / "cloverleaf" / "perlmutter-cloverleaf-cuda.sqlite",
        Path(__file__).parent / "data" / "perf" / "torch_cpu_clock.txt",
        next((Path(__file__).parent / "data" / "traces").rglob("*.json.gz")),
    ]
    assert [is_xspace(p) for p in others] == [False, False, False]


def hostile_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    data = LEGACY.read_bytes()
    made = {
        "truncated": (data[: len(data) // 2], "not a readable XProf XSpace protobuf"),
        "cut_in_a_varint": (data[:40] + b"\xff\xff", "not a readable XProf XSpace protobuf"),
        "long_length": (
            _f(1, _f(2, "/device:GPU:0"))[:-1] + _varint(3 << 3 | 2) + _varint(1 << 40),
            "runs past",
        ),
        "group_wire_type": (_f(1, _f(2, "/device:GPU:0") + _varint(3 << 3 | 3)), "wire type 3"),
        "no_device": (_f(1, _f(2, "/host:CPU")), "no device with events"),
    }
    out = {}
    for what, (payload, message) in made.items():
        path = tmp_path / f"{what}.xplane.pb"
        path.write_bytes(payload)
        out[what] = (path, message)
    (tmp_path / "empty_logs" / "plugins").mkdir(parents=True)
    (tmp_path / "empty_logs" / "plugins" / "h.xplane.pb").write_bytes(data[:4000])
    out["log_directory"] = (tmp_path / "empty_logs", "not a readable XProf XSpace protobuf")
    return out


def test_hostile_files_give_one_line_and_a_nonzero_exit(tmp_path: Path) -> None:
    for what, (path, message) in hostile_files(tmp_path).items():
        assert path.is_dir() or is_xspace(path), what
        res = analyze(path, tmp_path, "--json", str(tmp_path / f"{what}.json"))
        assert res.returncode == 3, (what, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (what, res.stderr)
        assert lines[0].startswith("pinchpoint: error: ")
        assert not (tmp_path / f"{what}.json").exists()


def test_the_reader_raises_trace_error_only_on_random_bytes(tmp_path: Path) -> None:
    """Fuzz: the real file with bytes flipped at random, cut at random: a report or one TraceError."""
    rng = np.random.default_rng(19)
    data = bytearray(LEGACY.read_bytes())
    path = tmp_path / "fuzz.xplane.pb"
    outcomes: Counter[str] = Counter()
    for _ in range(40):
        mutated = bytearray(data)
        for at in rng.integers(0, len(data), size=8).tolist():
            mutated[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(mutated[: int(rng.integers(len(data) // 2, len(data) + 1))]))
        try:
            read_xprof_ranks(path)
            outcomes["read"] += 1
        except TraceError as exc:
            assert "\n" not in str(exc)
            outcomes["error"] += 1
    assert outcomes["error"] > 0, outcomes


def test_protowire_basics() -> None:
    buf = _f(1, 300) + _f(2, "hé") + _f(3, -5) + _f(4, 1.5)
    got = list(protowire.fields(buf))
    assert [(n, w) for n, w, _, _ in got] == [(1, 0), (2, 2), (3, 0), (4, 1)]
    assert got[0][2] == 300 and protowire.text(buf, got[1][2], got[1][3]) == "hé"
    assert protowire.signed(got[2][2]) == -5 and protowire.double(buf, got[3][2]) == 1.5
    with pytest.raises(protowire.WireError, match="field number 0"):
        list(protowire.fields(b"\x00\x01"))


# --- the trace viewer's JSON (`*.trace.json.gz`), written here from the real XSpace ----------------


def trace_viewer_json(space_path: Path) -> bytes:
    """What XProf's `trace_events_to_json` writes for an XSpace, made here from the decoded protobuf:
    a pid per plane (named by `process_name`), a tid per line, µs times with 5 decimals, stats as
    string args, a trailing `{}`."""
    from pinchpoint.ingest.xplane import decode_space

    space = decode_space(space_path.read_bytes())
    out = ['{"displayTimeUnit":"ns","metadata":{"highres-ticks":true},"traceEvents":[']
    for pid, plane in enumerate(space.planes, start=1):
        out.append(
            json.dumps({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": plane.name}}) + ","
        )
        for line in plane.lines:
            out.append(json.dumps({"ph": "M", "pid": pid, "tid": line.id, "name": "thread_name",
                                   "args": {"name": line.name}}) + ",")  # fmt: skip
    for pid, plane in enumerate(space.planes, start=1):
        for line in plane.lines:
            for ev in line.iter_events():
                ts = (line.timestamp_ns * 1000 + ev.offset_ps) / 1e6
                args = {k: str(v) for k, v in ev.stats.items()}
                name = json.dumps(plane.event_names[ev.metadata_id])
                out.append(f'{{"pid":{pid},"tid":{line.id},"ts":{ts:.5f},"name":{name},"ph":"X",'
                           f'"dur":{ev.duration_ps / 1e6:.5f},"args":{json.dumps(args)}}},')  # fmt: skip
    out.append("{}]}")
    return "\n".join(out).encode()


def test_the_trace_viewer_json_reads_as_its_xspace(tmp_path: Path, legacy: list[KinetoTrace]) -> None:
    import gzip

    path = tmp_path / "host.trace.json.gz"
    path.write_bytes(gzip.compress(trace_viewer_json(LEGACY)))
    assert is_xprof(path) and not is_xspace(path)
    traces = read_xprof_ranks(path)
    assert [t.meta.devices[0].index for t in traces] == [0, 7]
    for got, want in zip(traces, legacy, strict=True):
        assert got.events.kind.tolist() == want.events.kind.tolist()
        assert got.events.start_ns.tolist() == want.events.start_ns.tolist()  # µs with 5 decimals: exact ns
        assert got.events.dur_ns.tolist() == want.events.dur_ns.tolist()
        assert got.events.correlation.tolist() == want.events.correlation.tolist()
    assert kernels(traces[1]) == kernels(legacy[1])
    logdir = tmp_path / "logs" / "plugins" / "profile" / "run1"
    logdir.mkdir(parents=True)
    shutil.copyfile(path, logdir / "host.trace.json.gz")
    report = report_traces(tmp_path / "logs").to_dict()
    assert {g["rank"]: g["compute"] for g in report["gpu"]}[1] == pytest.approx(0.2276, abs=0.001)
    kineto = next((Path(__file__).parent / "data" / "traces").rglob("*.json.gz"))
    assert not is_xprof(kineto)  # a PyTorch profiler trace is not taken for one
    cut = tmp_path / "cut.trace.json"
    cut.write_bytes(trace_viewer_json(LEGACY)[:200_000])
    assert any("truncated" in w for w in read_xprof_ranks(cut)[0].warnings)
