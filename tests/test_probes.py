"""The op window's micro-benchmarks (`capture/opwindow.py`): what they time, and what they cost."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.capture.opwindow import SCALE_ROWS, SLOW_X, _probe_matmul, _slow_dtype_ns

torch = pytest.importorskip("torch")


def _sleeping(per_row_ns: int, calls: list[int]):  # type: ignore[no-untyped-def]
    def call(rows: int) -> None:
        calls.append(rows)
        time.sleep(rows * per_row_ns / 1e9)

    return call


def test_a_precision_already_slower_on_a_slice_is_not_timed_in_full() -> None:
    calls: list[int] = []
    # 64 rows at 2 ms a row: 128 ms in full, against a 10 ms fp32 call (12.8x slower).
    out = _slow_dtype_ns(10_000_000, 64, _sleeping(2_000_000, calls))
    assert calls == [64 // SCALE_ROWS] * 2  # 1/8 of the rows, once more warm
    assert out["rows_timed"] == 8 and out["ns"] >= SLOW_X * 10_000_000


def test_a_slice_slow_only_on_its_first_call_is_timed_again_warm() -> None:
    # The first call chose and compiled the kernel (9 ms on this EPYC for a 0.2 ms bf16 slice):
    # scaled x8 it read slower than fp32; warm, it can pay, so the whole call is timed.
    calls: list[int] = []
    first = _sleeping(2_000_000, calls)
    warm = _sleeping(100_000, calls)
    out = _slow_dtype_ns(10_000_000, 64, lambda rows: (first if not calls else warm)(rows))
    assert calls[:2] == [8, 8] and all(c == 64 for c in calls[2:]) and len(calls) > 2
    assert "rows_timed" not in out and out["ns"] < SLOW_X * 10_000_000


def test_a_precision_that_could_pay_is_timed_on_the_whole_call() -> None:
    calls: list[int] = []
    out = _slow_dtype_ns(100_000_000, 64, _sleeping(200_000, calls))  # 12.8 ms against 100 ms
    assert "rows_timed" not in out and calls[0] == 8 and all(c == 64 for c in calls[1:]) and len(calls) > 1
    assert 10_000_000 < out["ns"] < 60_000_000


def test_a_small_call_is_timed_whole_however_slow_a_precision_may_be() -> None:
    """A 10 µs fp32 matmul: even emulated x200, its whole bf16 call costs 2 ms; a slice would time the
    kernel's first use (x50 "slower" than fp32 read for a native bf16 matmul that was x2 slower)."""
    calls: list[int] = []
    out = _slow_dtype_ns(10_000, 640, _sleeping(30, calls))
    assert calls and all(c == 640 for c in calls) and "rows_timed" not in out


def test_the_matmul_probe_times_both_precisions_of_the_programs_shape() -> None:
    fp32, bf16 = _probe_matmul(torch, (256, 128, 64))
    assert (fp32["dtype"], bf16["dtype"]) == ("float32", "bfloat16")
    assert fp32["shape"] == bf16["shape"] == [256, 128, 64] and fp32["ns"] > 0 and bf16["ns"] > 0


def test_no_bf16_probe_where_nothing_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 is timed only where the CPU multiplies it natively or the program autocasts to it: on a CPU
    that emulates bf16 an fp32 program's heaviest matmul in bf16 cost it 57 s."""
    from pinchpoint.capture import opwindow

    torch = pytest.importorskip("torch")
    assert [m["dtype"] for m in opwindow.run_probes(torch, (64, 32, 16), bf16=False)["matmul"]] == ["float32"]
    window = opwindow.OpWindow(tmp_path, None)
    monkeypatch.setattr(opwindow, "native_bf16", lambda: False)
    assert not window._bf16()
    window.autocast_bf16 = True
    assert window._bf16()
    window.autocast_bf16 = False
    monkeypatch.setattr(opwindow, "native_bf16", lambda: True)
    assert window._bf16()


def test_live_tensors_are_taken_only_once_memory_rose(tmp_path: Path) -> None:
    """The two walks over every object cost a small program 115 ms when taken at every op window: now
    only a program whose own steps' memory floor rose 16 MiB, and beyond its first swings, pays for them
    (memory.leak, their only reader, needs 32 MiB of growth), `SPAN` steps apart, in live_tensors.json."""
    from pinchpoint.capture.live_tensors import FILE, FLOOR_STEPS, RISE_BYTES, SPAN, LeakWatch

    torch = pytest.importorskip("torch")
    base = 400 << 20

    def feed(rss: list[int], profiled: frozenset[int] = frozenset()) -> list[int]:
        watch, taken = LeakWatch(), []
        for i, r in enumerate(rss):
            rec = {"step": i, "rss_bytes": r, "profiled": i in profiled, "trial": False, "partial": False}
            if watch.observe(torch, rec, tmp_path):
                taken.append(i)
        return taken

    wobble = [base + (i % 2) * (5 << 20) for i in range(30)]  # a healthy loop's 5 MiB to and fro
    assert feed(wobble) == []
    mib = [721, 705, 799, 713, 745, 781, 725, 725, 830, 830, 736, 728, 748]  # a 48-layer MLP's step ends
    assert feed([m << 20 for m in mib * 3]) == []  # a wide swing, no leak
    assert feed([base + (40 << 20)] * 2 + [base] * 28) == []  # warm-up steps are not watched
    trial = [base] * 12 + [base + RISE_BYTES * 2] * 4 + [base] * 14
    assert feed(trial, profiled=frozenset(range(12, 16))) == []  # nor trial or profiled steps
    leak = [base + i * (2 << 20) for i in range(30)]  # 2 MiB a step
    (tmp_path / FILE).unlink(missing_ok=True)
    taken = feed(leak)
    assert len(taken) == 2 and taken[1] - taken[0] == SPAN
    # 2 MiB a step: the first floor (steps 2-5) is 4 MiB; the last four's floor, 2 × (step − 3) MiB,
    # stands 16 MiB above it at step 13
    assert FLOOR_STEPS == 4 and taken[0] == 13
    record = json.loads((tmp_path / FILE).read_text())
    assert record["steps"] == SPAN and record["from_step"] == taken[0]
    assert record["before"]["count"] >= 0 and record["after"]["count"] >= 0


def test_the_machine_probes_measure_something_plausible() -> None:
    """Faults, memory bandwidth and dispatch, after their passes were cut to fit the fixed budget."""
    from pinchpoint.capture import machine_probes

    torch = pytest.importorskip("torch")
    fault_ns = machine_probes.probe_page_faults()
    assert fault_ns is None or 50 < fault_ns < 100_000  # None: huge pages back the mapping
    assert 1e8 < machine_probes.probe_memory_bandwidth(torch) < 1e13
    assert 10 < machine_probes.probe_dispatch(torch) < 10_000_000


def _stub_probes(monkeypatch: pytest.MonkeyPatch, others: float) -> dict[str, int]:
    """The probes replaced by counters that return fixed values, other processes' load set."""
    from pinchpoint.capture import machine_probes as mp

    calls = {"dispatch": 0, "bandwidth": 0, "faults": 0}

    def count(name: str, value: float) -> Any:
        def probe(*_: Any) -> float:
            calls[name] += 1
            return value + calls[name]  # each run reads a little differently

        return probe

    monkeypatch.setattr(mp, "probe_dispatch", count("dispatch", 900))
    monkeypatch.setattr(mp, "probe_memory_bandwidth", count("bandwidth", 1e10))
    monkeypatch.setattr(mp, "probe_page_faults", count("faults", 2000))
    monkeypatch.setattr(mp, "_others_cores", lambda *_: others)
    return calls


def test_the_machine_probes_are_kept_from_idle_runs_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three idle runs measure and are kept; the fourth takes the best of them without measuring; a
    value a run did not want (the faults) is measured only once a run wants it."""
    from pinchpoint.capture import machine_probes as mp

    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PINCHPOINT_HOME", str(tmp_path))
    monkeypatch.delenv(mp.CACHE_ENV, raising=False)
    calls = _stub_probes(monkeypatch, others=0.0)
    for _ in range(mp.RUNS_KEPT):
        out = mp.measure(torch, faults=False)
        assert out["machine"]["source"] == {"dispatch_ns_per_op": "measured", "memory_bytes_per_s": "measured"}
        assert out["page_fault_ns"] is None
    out = mp.measure(torch, faults=True)
    assert calls == {"dispatch": 3, "bandwidth": 3, "faults": 1}
    assert out["machine"]["source"]["dispatch_ns_per_op"] == "cache"
    assert out["machine"]["source"]["page_fault_ns"] == "measured"
    assert out["dispatch_ns_per_op"] == 901 and out["memory_bytes_per_s"] == 1e10 + 3  # the best
    for _ in range(2):
        mp.measure(torch, faults=True)
    out = mp.measure(torch, faults=True)
    assert calls == {"dispatch": 3, "bandwidth": 3, "faults": 3}
    assert out["page_fault_ns"] == 2001 and set(out["machine"]["source"].values()) == {"cache"}
    kept = json.loads(next((tmp_path / "probes").iterdir()).read_text())["runs"]
    assert sum("page_fault_ns" in r for r in kept) == mp.RUNS_KEPT


def test_a_machine_probe_measured_beside_other_work_is_used_but_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinchpoint.capture import machine_probes as mp

    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PINCHPOINT_HOME", str(tmp_path))
    monkeypatch.delenv(mp.CACHE_ENV, raising=False)
    calls = _stub_probes(monkeypatch, others=0.8)
    for _ in range(mp.RUNS_KEPT + 1):
        out = mp.measure(torch, faults=True)
        assert out["machine"]["others_cores"] == 0.8 and out["dispatch_ns_per_op"] is not None
    assert calls["dispatch"] == mp.RUNS_KEPT + 1 and not (tmp_path / "probes").exists()


def test_the_machine_probe_cache_can_be_turned_off_and_survives_a_broken_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinchpoint.capture import machine_probes as mp

    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PINCHPOINT_HOME", str(tmp_path))
    monkeypatch.setenv(mp.CACHE_ENV, "off")
    calls = _stub_probes(monkeypatch, others=0.0)
    for _ in range(mp.RUNS_KEPT + 1):
        mp.measure(torch, faults=True)
    assert calls["dispatch"] == mp.RUNS_KEPT + 1 and not (tmp_path / "probes").exists()
    monkeypatch.delenv(mp.CACHE_ENV)
    mp.measure(torch, faults=True)
    (path,) = (tmp_path / "probes").iterdir()
    for broken in ("{not json", '{"schema": "pinchpoint.machine_probes/1", "runs": [{"at": "x"}, 3]}', ""):
        path.write_text(broken)
        assert mp.measure(torch, faults=True)["machine"]["source"]["dispatch_ns_per_op"] == "measured"
    old = {"at": 0, "dispatch_ns_per_op": 5, "memory_bytes_per_s": 5, "page_fault_ns": 5}
    path.write_text(json.dumps({"schema": mp.SCHEMA, "runs": [old] * 5}))  # too old to trust
    assert mp.measure(torch, faults=True)["dispatch_ns_per_op"] != 5
