"""Writes the committed golden run directories next to this file (deterministic; no torch, no clock).

    python tests/data/rundirs/make_rundirs.py

Each directory is a small, hand-planned run (see README.md). The golden tests read the committed
files, not this script; rerun it only to change a fixture on purpose, then regenerate the goldens.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MS = 1_000_000
MIB = 1 << 20
T0 = 10_000_000_000  # monotonic ns of the first step
BASE = 1_700_000_000_000_000_000  # Kineto baseTimeNanoseconds (wall clock)
PID = 4242


def dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")


def dump_lines(path: Path, rows: list[Any], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows) + tail)


def meta(command: list[str], exit_code: int = 0) -> dict[str, Any]:
    return {
        "schema": "pinchpoint.run/1",
        "pinchpoint_version": "0.1.0",
        "command": command,
        "cwd": "/home/user/proj",
        "started_at": "2026-11-30T12:00:00+00:00",
        "clock": {"wall_time_ns": BASE + 9 * 10**9, "monotonic_ns": 9 * 10**9},
        "ended_at": "2026-11-30T12:00:05+00:00",
        "exit_code": exit_code,
        "signal": None,
        "world_size": 1,
        "launcher_pid": PID - 1,
        "child_pid": PID,
        "mode": "run",
    }


def environment(cores: int, matrix_units: list[str]) -> dict[str, Any]:
    return {
        "cpu": {
            "model": "Golden Test CPU",
            "logical_cores": cores,
            "physical_cores": cores,
            "usable_cores": cores,
            "flags": ["avx", "avx2", "fma", *matrix_units],
            "matrix_units": matrix_units,
        },
        "memory_bytes": 16 << 30,
        "os": "Linux 6.1",
        "python": "3.11.7",
        "hostname": "golden",
    }


def process(intra_op: int) -> dict[str, Any]:
    return {
        "pid": PID,
        "ppid": PID - 1,
        "rank": 0,
        "role": "main",
        "started_ns": T0 - 500 * MS,
        "torch": {
            "version": "2.13.0+cpu",
            "cuda": None,
            "mkl": True,
            "mkldnn": True,
            "openmp": True,
            "config_flags": ["USE_MKLDNN=ON", "USE_OPENMP=ON"],
        },
        "threads": {"intra_op": intra_op, "inter_op": intra_op, "env": {"OMP_NUM_THREADS": None}},
        "autocast": {"cpu": None},
    }


def loader(dataset: str) -> dict[str, Any]:
    return {
        "t_ns": T0 - MS,
        "num_workers": 0,
        "pin_memory": False,
        "prefetch_factor": None,
        "persistent_workers": False,
        "batch_size": 64,
        "dataset": dataset,
        "worker_pids": [],
    }


def steps(
    n: int,
    phases: list[tuple[str, float]],
    host_other_ms: float,
    *,
    warmup_extra_ms: float = 50,
    profiled: range = range(0),
    cpu_ms: float = 0,
    runq_ms: float = 0,
    rss: Any = lambda i: 300 * MIB,
    minor_faults: int = 64,
) -> list[dict[str, Any]]:
    """`n` back-to-back steps; warm-up steps (0, 1) have a longer forward."""
    out, t = [], T0
    for i in range(n):
        start, ivs = t, []
        for name, ms in phases:
            dur = round((ms + (warmup_extra_ms if i < 2 and name == "forward" else 0)) * MS)
            ivs.append([name, t, t + dur])
            t += dur
        t += round(host_other_ms * MS)
        out.append(
            {
                "step": i,
                "kind": "train",
                "start_ns": start,
                "end_ns": t,
                "profiled": i in profiled,
                "partial": False,
                "intervals": ivs,
                "cpu_ns": round(cpu_ms * MS),
                "runq_ns": round(runq_ms * MS),
                "rss_bytes": rss(i),
                "minor_faults": minor_faults,
            }
        )
    return out


def fetches(step_rows: list[dict[str, Any]], cpu_ms: float, runq_ms: float) -> list[dict[str, Any]]:
    """One fetch per step, covering its data_wait interval."""
    rows = []
    for s in step_rows:
        _, a, b = next(iv for iv in s["intervals"] if iv[0] == "data_wait")
        rows.append(
            {
                "start_ns": a,
                "end_ns": b,
                "cpu_ns": round(cpu_ms * MS),
                "runq_ns": round(runq_ms * MS),
                "worker_id": None,
            }
        )
    return rows


def system(
    end_ns: int, per_core: list[float], cores_used: float, rss: int = 300 * MIB
) -> list[dict[str, Any]]:
    rows, t, i = [], T0 - 100 * MS, 0
    while t <= end_ns + 100 * MS:
        cpu_s = round(0.5 + cores_used * 0.1 * i, 6)
        rows.append(
            {
                "t_ns": t,
                "cpu_percent_per_core": per_core,
                "procs": [
                    {
                        "pid": PID,
                        "ppid": PID - 1,
                        "name": "python",
                        "cmdline0": "python",
                        "user_s": cpu_s,
                        "sys_s": 0.0,
                        "rss_bytes": rss,
                        "threads": 6,
                        "ctx_vol": 10 * i,
                        "ctx_invol": 2 * i,
                        "read_bytes": 0,
                        "write_bytes": 0,
                    }
                ],
            }
        )
        t, i = t + 100 * MS, i + 1
    return rows


def fetch_bound(root: Path) -> None:
    """Steps wait 40% for a loader that sleeps (remote reads); the rest is model math."""
    dump(root / "meta.json", meta(["python", "train.py", "--data", "s3://bucket/images"]))
    dump(root / "environment.json", environment(2, []))
    rank = root / "ranks" / "rank0"
    rows = steps(
        14,
        [("data_wait", 40), ("forward", 25), ("backward", 25), ("optimizer", 6)],
        4,
        cpu_ms=58,
        runq_ms=1,
        rss=lambda i: 300 * MIB + (i % 3) * MIB,
    )
    dump_lines(rank / "steps.jsonl", rows)
    dump(rank / f"process-{PID}.json", process(2))
    dump_lines(rank / "loaders.jsonl", [loader("RemoteImages")])
    dump_lines(rank / f"fetch-{PID}.jsonl", fetches(rows, cpu_ms=3, runq_ms=0.4))
    dump_lines(root / "system.jsonl", system(rows[-1]["end_ns"], [60.0, 45.0], 0.62))


def two_causes(root: Path) -> None:
    """Data wait 30% (CPU-bound preprocessing in the main process) and Python in the loop 25%; op window."""
    dump(root / "meta.json", meta(["python", "train.py"]))
    dump(root / "environment.json", environment(4, ["amx_bf16", "amx_int8", "avx512_bf16"]))
    rank = root / "ranks" / "rank0"
    rows = steps(
        16,
        [("data_wait", 30), ("forward", 20), ("backward", 20), ("optimizer", 5)],
        25,
        profiled=range(5, 8),
        cpu_ms=85,
        runq_ms=2,
    )
    dump_lines(rank / "steps.jsonl", rows)
    dump(rank / f"process-{PID}.json", process(4))
    dump_lines(rank / "loaders.jsonl", [loader("AugmentedImages")])
    dump_lines(rank / f"fetch-{PID}.jsonl", fetches(rows, cpu_ms=27, runq_ms=1))
    dump_lines(root / "system.jsonl", system(rows[-1]["end_ns"], [95.0, 30.0, 10.0, 5.0], 1.1))
    # Op window over the profiled steps: ts in µs after BASE; probes' clock maps BASE + x onto T0 + x.
    events: list[dict[str, Any]] = []

    def op(
        name: str,
        a_ms: float,
        b_ms: float,
        s: dict[str, Any],
        dims: list[Any] | None = None,
        types: list[str] | None = None,
    ) -> None:
        ts = (s["start_ns"] - T0) / 1000 + a_ms * 1000
        args = {"Input Dims": dims or [], "Input type": types or []}
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": PID,
                "tid": PID,
                "ts": round(ts, 3),
                "dur": round((b_ms - a_ms) * 1000, 3),
                "args": args,
            }
        )

    for s in rows[5:8]:
        op("aten::stack", 0.5, 1.5, s, [[64, 3, 32, 32]], ["float"])
        op("aten::linear", 30.5, 34.5, s, [[64, 512], [256, 512], [256]], ["float", "float", "float"])
        op("aten::addmm", 31.0, 34.0, s, [[256], [64, 512], [512, 256]], ["float", "float", "float"])
        op("aten::relu", 35.0, 36.0, s, [[64, 256]], ["float"])
        op("aten::mm", 51.0, 54.0, s, [[256, 64], [64, 512]], ["float", "float"])
        op("aten::_foreach_add_", 70.0, 75.0, s)
        op("aten::cross_entropy_loss", 76.0, 78.0, s, [[64, 10], [64]], ["float", "long int"])
        op("aten::item", 99.0, 100.0, s, [[]], ["float"])
    events.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#5",
            "pid": PID,
            "tid": PID,
            "ts": 0,
            "dur": 1,
        }
    )
    dump(rank / "opwindow.json", {"schemaVersion": 1, "baseTimeNanoseconds": BASE, "traceEvents": events})
    dump(
        rank / "probes.json",
        {
            "dispatch_ns_per_op": 3000,
            "matmul": [
                {"shape": [64, 512, 256], "dtype": "float32", "ns": 1_000_000},
                {"shape": [64, 512, 256], "dtype": "bfloat16", "ns": 250_000},
            ],
            "page_fault_ns": 1800,
            "window_steps": 3,
            "clock": {"wall_time_ns": BASE + 5 * 10**9, "monotonic_ns": T0 + 5 * 10**9},
        },
    )


def crashed(root: Path) -> None:
    """Exit 1 mid-step: a partial step, truncated last lines; checkpoints every step and a leak."""
    dump(root / "meta.json", meta(["python", "train.py", "--resume"], exit_code=1))
    dump(root / "environment.json", environment(2, []))
    rank = root / "ranks" / "rank0"
    rows = steps(
        13,
        [("data_wait", 4), ("forward", 64), ("backward", 80), ("optimizer", 16), ("checkpoint_io", 30)],
        6,
        cpu_ms=150,
        runq_ms=3,
        rss=lambda i: 400 * MIB + 8 * i * MIB,
    )
    last = rows[-1]
    last.update(
        partial=True,
        end_ns=last["start_ns"] + 70 * MS,
        intervals=[iv for iv in last["intervals"] if iv[2] <= last["start_ns"] + 70 * MS],
    )
    half = json.dumps({"step": 13, "kind": "train", "start_ns": last["end_ns"]}, separators=(",", ":"))[:25]
    dump_lines(rank / "steps.jsonl", rows, tail=half)
    dump(rank / f"process-{PID}.json", process(2))
    samples = system(last["end_ns"], [85.0, 80.0], 1.6, rss=500 * MIB)
    dump_lines(root / "system.jsonl", samples, tail=json.dumps(samples[-1], separators=(",", ":"))[:40])


FIXTURES = {"fetch_bound": fetch_bound, "two_causes": two_causes, "crashed": crashed}


def main() -> None:
    for name, make in FIXTURES.items():
        root = HERE / name
        shutil.rmtree(root, ignore_errors=True)
        make(root)


if __name__ == "__main__":
    main()
