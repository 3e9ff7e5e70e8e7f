"""Reading run directories written by hand: the model read back, and damaged input handled."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import MIB, MS, make_steps
from pinchpoint.errors import PinchpointError, RunDirError
from pinchpoint.ingest.rundir import read_run_dir
from pinchpoint.pipeline.rundir import report_run_dir
from pinchpoint.trace.run import (
    Fetch,
    Interval,
    MatmulProbe,
    Phase,
    ProcSample,
    Role,
    Step,
    StepKind,
)

# ----------------------------------------------------------------------------- writing run dirs


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")


def write_jsonl(path: Path, rows: Iterable[Any], *, tail: str = "") -> None:
    """One JSON value per line; `tail` is appended raw (e.g. a truncated last line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows) + tail)


def step_row(step: Step) -> dict[str, Any]:
    """A steps.jsonl line for `step`, as the agent writes it."""
    row: dict[str, Any] = {
        "step": step.index,
        "kind": step.kind.value,
        "start_ns": step.start_ns,
        "end_ns": step.end_ns,
        "profiled": step.profiled,
        "intervals": [[iv.phase.value, iv.start_ns, iv.end_ns] for iv in step.intervals],
        "cpu_ns": step.cpu_ns,
        "runq_ns": step.runq_ns,
        "rss_bytes": step.rss_bytes,
    }
    if step.partial:
        row["partial"] = True
    return row


def meta_obj(**over: Any) -> dict[str, Any]:
    meta = {
        "schema": "pinchpoint.run/1",
        "pinchpoint_version": "0.1.0",
        "command": ["python", "train.py"],
        "cwd": "/work",
        "started_at": "2026-01-01T00:00:00+00:00",
        "clock": {"wall_time_ns": 1_700_000_000_000_000_000, "monotonic_ns": 1_000_000_000},
        "ended_at": "2026-01-01T00:01:00+00:00",
        "exit_code": 0,
        "signal": None,
        "world_size": 1,
        "launcher_pid": 99,
        "child_pid": 100,
        "mode": "run",
    }
    meta.update(over)
    return meta


def environment_obj(cores: int = 2, matrix_units: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "cpu": {
            "model": "Test CPU",
            "logical_cores": cores,
            "physical_cores": cores,
            "usable_cores": cores,
            "flags": ["avx2", *matrix_units],
            "matrix_units": list(matrix_units),
        },
        "memory_bytes": 16 << 30,
        "os": "Linux 6.1",
        "python": "3.11.7",
        "hostname": "test",
    }


def process_obj(
    pid: int = 100, *, intra_op: int = 2, role: str = "main", autocast: str | None = None
) -> dict[str, Any]:
    return {
        "pid": pid,
        "ppid": 99,
        "rank": 0,
        "role": role,
        "started_ns": 0,
        "torch": {
            "version": "2.13.0+cpu",
            "cuda": None,
            "mkl": True,
            "mkldnn": True,
            "openmp": True,
            "config_flags": ["USE_MKLDNN=ON"],
        },
        "threads": {"intra_op": intra_op, "inter_op": intra_op, "env": {"OMP_NUM_THREADS": None}},
        "autocast": {"cpu": autocast, "cuda": None},
    }


def write_minimal_run_dir(root: Path, *, n_steps: int = 10) -> Path:
    """A small, valid run directory: meta, environment, one rank with steps, a process, fetches, samples."""
    write_json(root / "meta.json", meta_obj())
    write_json(root / "environment.json", environment_obj())
    rank = root / "ranks" / "rank0"
    steps = make_steps(
        n_steps,
        {"data_wait": 20, "forward": 30, "backward": 40, "optimizer": 5},
        5,
        start_ns=2 * 10**9,
        cpu_ms=80,
        runq_ms=1,
    )
    write_jsonl(rank / "steps.jsonl", [step_row(s) for s in steps])
    write_json(rank / "process-100.json", process_obj())
    write_jsonl(
        rank / "fetch-100.jsonl",
        [
            {
                "start_ns": s.start_ns,
                "end_ns": s.start_ns + 20 * MS,
                "cpu_ns": 2 * MS,
                "runq_ns": 0,
                "worker_id": None,
            }
            for s in steps
        ],
    )
    write_jsonl(
        root / "system.jsonl",
        [
            {
                "t_ns": 2 * 10**9 + i * 100 * MS,
                "cpu_percent_per_core": [90.0, 20.0],
                "procs": [
                    {
                        "pid": 100,
                        "ppid": 99,
                        "name": "python",
                        "user_s": 0.1 * i,
                        "sys_s": 0.0,
                        "rss_bytes": 100 * MIB,
                        "threads": 3,
                        "ctx_invol": i,
                    }
                ],
            }
            for i in range(n_steps + 1)
        ],
    )
    return root


T0 = 5_000_000_000_123  # odd on purpose: nanoseconds must survive exactly

STEP_ROWS = [
    {
        "step": 0,
        "kind": "train",
        "start_ns": T0,
        "end_ns": T0 + 100 * MS + 7,
        "profiled": False,
        "intervals": [
            ["data_wait", T0, T0 + 30 * MS + 1],
            ["forward", T0 + 30 * MS + 1, T0 + 60 * MS],
            ["backward", T0 + 60 * MS, T0 + 90 * MS],
            ["optimizer", T0 + 90 * MS, T0 + 100 * MS + 7],
        ],
        "cpu_ns": 70 * MS,
        "runq_ns": 3,
        "rss_bytes": 200 * MIB,
    },
    {
        "step": 1,
        "kind": "train",
        "start_ns": T0 + 100 * MS + 7,
        "end_ns": T0 + 200 * MS,
        "profiled": True,
        "intervals": [["forward", T0 + 110 * MS, T0 + 150 * MS]],
        "cpu_ns": None,
        "runq_ns": None,
        "rss_bytes": None,
    },
    {
        "step": 2,
        "kind": "train",
        "start_ns": T0 + 200 * MS,
        "end_ns": T0 + 230 * MS,
        "partial": True,
        "intervals": [["data_wait", T0 + 200 * MS, T0 + 230 * MS]],
        "cpu_ns": 1,
        "runq_ns": 0,
        "rss_bytes": 1,
    },
]

OPWINDOW = {
    "schemaVersion": 1,
    "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    "traceEvents": [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::linear",
            "pid": 1,
            "tid": 1,
            "ts": 1000.0,
            "dur": 30.0,
            "args": {},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::addmm",
            "pid": 1,
            "tid": 1,
            "ts": 1000.5,
            "dur": 20.25,
            "args": {"Input Dims": [[64], [32, 64], [64, 64]], "Input type": ["float", "float", "float"]},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 1,
            "tid": 2,
            "ts": 1040.001,
            "dur": 0.999,
            "args": {"Input Dims": [[2], [2]], "Input type": ["float", "float"]},
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#5",
            "pid": 1,
            "tid": 1,
            "ts": 900,
            "dur": 500,
        },
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0, "args": {"name": "python"}},
    ],
}

PROBES = {
    "dispatch_ns_per_op": 3100,
    "matmul": [
        {"shape": [256, 512, 512], "dtype": "float32", "ns": 1000},
        {"shape": [256, 512, 512], "dtype": "bfloat16", "ns": 150},
    ],
    "window_steps": 3,
}


def write_full_run_dir(root: Path, *, probes: dict[str, Any] | None = None) -> Path:
    write_json(root / "meta.json", meta_obj(exit_code=1, signal=None, world_size=1))
    write_json(root / "environment.json", environment_obj(cores=4, matrix_units=["amx_bf16"]))
    rank = root / "ranks" / "rank0"
    write_jsonl(rank / "steps.jsonl", STEP_ROWS)
    write_json(rank / "process-100.json", process_obj(100, intra_op=4, autocast="bfloat16"))
    write_json(rank / "process-101.json", process_obj(101, intra_op=1, role="worker"))
    write_jsonl(
        rank / "loaders.jsonl",
        [
            {
                "t_ns": T0,
                "num_workers": 1,
                "pin_memory": True,
                "prefetch_factor": 2,
                "persistent_workers": False,
                "batch_size": 64,
                "dataset": "DS",
                "worker_pids": [101],
            }
        ],
    )
    write_jsonl(
        rank / "fetch-101.jsonl",
        [
            {"start_ns": T0 + 5, "end_ns": T0 + 25 * MS, "cpu_ns": 2 * MS, "runq_ns": None, "worker_id": 0},
            {
                "start_ns": T0 - 50 * MS,
                "end_ns": T0 - 20 * MS,
                "cpu_ns": 3 * MS,
                "runq_ns": 7,
                "worker_id": 0,
            },
        ],
    )
    write_json(rank / "opwindow.json", OPWINDOW)
    write_json(rank / "probes.json", PROBES if probes is None else probes)
    write_jsonl(
        root / "system.jsonl",
        [
            {
                "t_ns": T0,
                "cpu_percent_per_core": [50.0, 25.0, 0.0, 100.0],
                "procs": [
                    {
                        "pid": 100,
                        "ppid": 99,
                        "name": "python",
                        "cmdline0": "python",
                        "user_s": 1.5,
                        "sys_s": 0.25,
                        "rss_bytes": 123,
                        "threads": 5,
                        "ctx_vol": 10,
                        "ctx_invol": 4,
                        "read_bytes": 0,
                        "write_bytes": 9,
                    }
                ],
                "gpus": [
                    {
                        "index": 0,
                        "util_percent": 97,
                        "mem_used_bytes": 1,
                        "mem_total_bytes": 2,
                        "power_w": 300.0,
                    }
                ],
            },
        ],
    )
    return root


# ------------------------------------------------------------------------------------ read back


def test_full_run_dir_reads_back(tmp_path: Path) -> None:
    run = read_run_dir(write_full_run_dir(tmp_path))

    assert run.meta.command == ("python", "train.py")
    assert run.meta.exit_code == 1 and run.meta.signal is None
    assert (run.meta.wall_time_ns, run.meta.monotonic_ns) == (1_700_000_000_000_000_000, 1_000_000_000)
    assert run.meta.started_at == "2026-01-01T00:00:00+00:00" and run.meta.mode == "run"

    cpu = run.environment.cpu
    assert (cpu.model, cpu.logical_cores, cpu.usable_cores) == ("Test CPU", 4, 4)
    assert cpu.matrix_units == ("amx_bf16",) and "avx2" in cpu.flags
    assert run.environment.memory_bytes == 16 << 30

    (rank,) = run.ranks
    assert rank.rank == 0
    assert [s.index for s in rank.steps] == [0, 1, 2]
    s0, s1, s2 = rank.steps
    assert s0 == Step(
        index=0,
        kind=StepKind.TRAIN,
        start_ns=T0,
        end_ns=T0 + 100 * MS + 7,
        intervals=(
            Interval(phase=Phase.DATA_WAIT, start_ns=T0, end_ns=T0 + 30 * MS + 1),
            Interval(phase=Phase.FORWARD, start_ns=T0 + 30 * MS + 1, end_ns=T0 + 60 * MS),
            Interval(phase=Phase.BACKWARD, start_ns=T0 + 60 * MS, end_ns=T0 + 90 * MS),
            Interval(phase=Phase.OPTIMIZER, start_ns=T0 + 90 * MS, end_ns=T0 + 100 * MS + 7),
        ),
        cpu_ns=70 * MS,
        runq_ns=3,
        rss_bytes=200 * MIB,
    )
    assert s1.profiled and not s1.partial and s1.cpu_ns is None and s1.runq_ns is None
    assert s2.partial and not s2.profiled

    main = rank.main
    assert main is not None and main.pid == 100 and main.role is Role.MAIN
    assert main.threads.intra_op == 4 and main.threads.env == ()  # unset variables are dropped
    assert main.autocast_dtype == "bfloat16"
    assert main.torch is not None and main.torch.version == "2.13.0+cpu" and main.torch.mkldnn is True
    assert [p.role for p in rank.processes] == [Role.MAIN, Role.WORKER]

    (loader,) = rank.loaders
    assert (loader.num_workers, loader.pin_memory, loader.prefetch_factor, loader.worker_pids) == (
        1,
        True,
        2,
        (101,),
    )

    assert rank.fetches == (  # sorted by start, pid from the file name
        Fetch(pid=101, start_ns=T0 - 50 * MS, end_ns=T0 - 20 * MS, cpu_ns=3 * MS, runq_ns=7, worker_id=0),
        Fetch(pid=101, start_ns=T0 + 5, end_ns=T0 + 25 * MS, cpu_ns=2 * MS, runq_ns=None, worker_id=0),
    )

    assert rank.probes.dispatch_ns_per_op == 3100
    assert rank.probes.matmul == (
        MatmulProbe(shape=(256, 512, 512), dtype="float32", ns=1000),
        MatmulProbe(shape=(256, 512, 512), dtype="bfloat16", ns=150),
    )

    (sample,) = run.system
    assert sample.t_ns == T0 and sample.cpu_percent_per_core == (50.0, 25.0, 0.0, 100.0)
    assert sample.procs == (
        ProcSample(
            pid=100,
            ppid=99,
            name="python",
            user_s=1.5,
            sys_s=0.25,
            rss_bytes=123,
            threads=5,
            ctx_vol=10,
            ctx_invol=4,
            read_bytes=0,
            write_bytes=9,
        ),
    )
    assert sample.gpus[0].util_percent == 97 and sample.gpus[0].mem_total_bytes == 2
    assert run.warnings == ()


def test_opwindow_keeps_nanoseconds_and_nesting(tmp_path: Path) -> None:
    run = read_run_dir(write_full_run_dir(tmp_path, probes={**PROBES}))  # no clock: stamps kept as written
    window = run.ranks[0].opwindow
    assert window is not None and window.steps == 3
    linear, addmm, add = window.ops  # cpu ops only, by thread then start
    assert (addmm.name, addmm.start_ns, addmm.dur_ns) == ("aten::addmm", 1_000_500, 20_250)
    assert (add.start_ns, add.dur_ns) == (1_040_001, 999)
    assert all(isinstance(o.start_ns, int) and isinstance(o.dur_ns, int) for o in window.ops)
    assert (linear.depth, addmm.depth, add.depth) == (0, 1, 0)  # addmm inside linear; other thread restarts
    assert addmm.input_dims == ((64,), (32, 64), (64, 64)) and addmm.input_types == ("float",) * 3
    assert addmm.flops == 2 * 32 * 64 * 64
    assert linear.flops is None
    assert (window.start_ns, window.end_ns) == (1_000_000, 1_041_000)


def test_opwindow_is_mapped_onto_the_monotonic_clock(tmp_path: Path) -> None:
    wall, mono = 1_700_000_000_500_000_000, 7_000_000_000
    run = read_run_dir(
        write_full_run_dir(tmp_path, probes={**PROBES, "clock": {"wall_time_ns": wall, "monotonic_ns": mono}})
    )
    window = run.ranks[0].opwindow
    assert window is not None
    base = OPWINDOW["baseTimeNanoseconds"]
    assert window.ops[1].start_ns == base + 1_000_500 - (wall - mono)


def test_only_meta_is_required(tmp_path: Path) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    run = read_run_dir(tmp_path)
    assert run.ranks == () and run.system == ()
    assert run.environment.cpu.usable_cores == 1
    assert any("environment.json is missing" in w for w in run.warnings)


def test_rank_without_optional_files(tmp_path: Path) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    write_jsonl(tmp_path / "ranks" / "rank0" / "steps.jsonl", STEP_ROWS[:1])
    (tmp_path / "ranks" / "rank3").mkdir()
    (tmp_path / "ranks" / "rankX").mkdir()  # not a rank folder
    (tmp_path / "ranks" / "rank10").mkdir()
    run = read_run_dir(tmp_path)
    assert [r.rank for r in run.ranks] == [0, 3, 10]  # numeric order
    r0 = run.ranks[0]
    assert len(r0.steps) == 1 and r0.processes == () and r0.fetches == () and r0.opwindow is None
    assert r0.main is None and r0.probes.matmul == ()
    assert not any("probes" in w or "opwindow" in w for w in run.warnings)


# ------------------------------------------------------------------------------ damaged input


@pytest.mark.parametrize("name", ["steps", "fetch", "system"])
def test_truncated_last_line_is_a_warning_and_the_rest_is_kept(tmp_path: Path, name: str) -> None:
    root = write_minimal_run_dir(tmp_path)
    path = {
        "steps": root / "ranks/rank0/steps.jsonl",
        "fetch": root / "ranks/rank0/fetch-100.jsonl",
        "system": root / "system.jsonl",
    }[name]
    full = read_run_dir(root)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines) + lines[-1][: len(lines[-1]) // 2])  # a half-written extra line
    run = read_run_dir(root)
    assert len(run.ranks[0].steps) == len(full.ranks[0].steps)
    assert len(run.ranks[0].fetches) == len(full.ranks[0].fetches)
    assert len(run.system) == len(full.system)
    assert any(path.name in w and "skipped 1 unreadable line" in w for w in run.warnings), run.warnings
    report = report_run_dir(root).to_dict()
    assert any(path.name in w for w in report["warnings"])


def test_garbage_lines_are_counted_and_skipped(tmp_path: Path) -> None:
    root = write_minimal_run_dir(tmp_path)
    path = root / "ranks/rank0/steps.jsonl"
    good = path.read_text().splitlines()
    path.write_text(
        "\n".join([good[0], "\x00\x01 not json", "[1, 2]", '"a string"', "", good[1], "{", *good[2:]]) + "\n"
    )
    run = read_run_dir(root)
    assert len(run.ranks[0].steps) == len(good)
    assert any("steps.jsonl: skipped 4 unreadable line(s)" in w for w in run.warnings), run.warnings


def test_invalid_utf8_is_tolerated(tmp_path: Path) -> None:
    root = write_minimal_run_dir(tmp_path)
    path = root / "system.jsonl"
    path.write_bytes(path.read_bytes() + b'\xff\xfe{"t_ns": 1}\n')
    run = read_run_dir(root)
    assert len(run.system) == 11


@pytest.mark.parametrize(
    ("row", "kept"),
    [
        pytest.param({"start_ns": 10, "end_ns": 5}, False, id="negative-duration"),
        pytest.param({"start_ns": float("nan"), "end_ns": 5}, False, id="nan-start"),
        pytest.param({"start_ns": 0, "end_ns": float("nan")}, False, id="nan-end"),
        pytest.param({"start_ns": "0", "end_ns": 5}, False, id="string-start"),
        pytest.param({"end_ns": 5}, False, id="missing-start"),
        pytest.param({"start_ns": 5, "end_ns": 5}, True, id="zero-duration-kept"),
        pytest.param({"start_ns": 5, "end_ns": 9, "kind": "nonsense"}, True, id="unknown-kind-kept"),
    ],
)
def test_bad_step_rows_are_dropped(tmp_path: Path, row: dict[str, Any], kept: bool) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    write_jsonl(tmp_path / "ranks/rank0/steps.jsonl", [row])
    steps = read_run_dir(tmp_path).ranks[0].steps
    assert len(steps) == (1 if kept else 0)


@pytest.mark.parametrize(
    ("agent_ns", "start", "cpu"),
    [
        (40, 1040, 960),  # pinchpoint's bookkeeping: the step starts after it, its CPU comes off
        (None, 1000, 1000),  # a run directory written before the field
        (-5, 1000, 1000),
        (10**9, 1100, 900),  # never past the step's first phase
        ("x", 1000, 1000),
    ],
)
def test_the_agents_bookkeeping_is_left_out_of_the_step(
    tmp_path: Path, agent_ns: Any, start: int, cpu: int
) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    row = {"step": 0, "kind": "train", "start_ns": 1000, "end_ns": 3000, "cpu_ns": 1000,
           "intervals": [["forward", 1100, 2000], ["backward", 2000, 2900]]}  # fmt: skip
    if agent_ns is not None:
        row["agent_ns"] = agent_ns
    write_jsonl(tmp_path / "ranks/rank0/steps.jsonl", [row])
    (step,) = read_run_dir(tmp_path).ranks[0].steps
    assert (step.start_ns, step.end_ns, step.cpu_ns) == (start, 3000, cpu)


def test_bad_intervals_are_dropped(tmp_path: Path) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    write_jsonl(
        tmp_path / "ranks/rank0/steps.jsonl",
        [
            {
                "step": 0,
                "kind": "train",
                "start_ns": 0,
                "end_ns": 100,
                "intervals": [
                    ["forward", 10, 5],
                    ["backward", float("nan"), 50],
                    ["teleport", 0, 10],
                    ["forward", 0],
                    "x",
                    ["optimizer", 60, 90],
                ],
            }
        ],
    )
    (step,) = read_run_dir(tmp_path).ranks[0].steps
    assert step.intervals == (Interval(phase=Phase.OPTIMIZER, start_ns=60, end_ns=90),)


def test_bad_fetch_rows_are_dropped(tmp_path: Path) -> None:
    write_json(tmp_path / "meta.json", meta_obj())
    write_jsonl(
        tmp_path / "ranks/rank0/fetch-7.jsonl",
        [
            {"start_ns": 10, "end_ns": 5, "cpu_ns": 1},
            {"start_ns": 0, "end_ns": 5, "cpu_ns": float("nan")},
            {"start_ns": 0, "end_ns": 5},
            {"start_ns": 0, "end_ns": 5, "cpu_ns": -3},
        ],
    )
    (fetch,) = read_run_dir(tmp_path).ranks[0].fetches
    assert fetch == Fetch(pid=7, start_ns=0, end_ns=5, cpu_ns=0)


def test_large_nanosecond_values_stay_exact(tmp_path: Path) -> None:
    big = 2**62 + 1  # beyond float precision
    write_json(tmp_path / "meta.json", meta_obj())
    write_jsonl(
        tmp_path / "ranks/rank0/steps.jsonl",
        [{"start_ns": big, "end_ns": big + 3, "intervals": [["forward", big + 1, big + 2]]}],
    )
    (step,) = read_run_dir(tmp_path).ranks[0].steps
    assert (step.start_ns, step.end_ns, step.intervals[0].start_ns) == (big, big + 3, big + 1)


def test_unreadable_opwindow_is_a_warning(tmp_path: Path) -> None:
    root = write_minimal_run_dir(tmp_path)
    (root / "ranks/rank0/opwindow.json").write_text('{"traceEvents": [')
    run = read_run_dir(root)
    assert run.ranks[0].opwindow is None
    assert any("opwindow.json could not be read" in w for w in run.warnings)


def test_bad_opwindow_events_are_skipped(tmp_path: Path) -> None:
    root = write_minimal_run_dir(tmp_path)
    write_json(
        root / "ranks/rank0/opwindow.json",
        {
            "traceEvents": [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "dur": 3},  # no ts
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": "soon", "dur": 3},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": float("nan"), "dur": 3},
                "not an event",
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": 5, "dur": 3},
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::cat",
                    "tid": 2,
                    "ts": 9,
                    "dur": 1,
                    "args": {"Input Dims": [[[2, 3], [2, 3]], []], "Input type": "TensorList"},
                },
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 3, "ts": 9, "dur": 1, "args": [1]},
            ]
        },
    )
    window = read_run_dir(root).ranks[0].opwindow
    assert window is not None
    assert [(o.tid, o.start_ns, o.dur_ns) for o in window.ops] == [
        (1, 5000, 3000),
        (2, 9000, 1000),
        (3, 9000, 1000),
    ]
    cat = window.ops[1]
    assert cat.input_dims == ((), ()) and cat.input_types == () and cat.flops is None


# ----------------------------------------------------------------------------- refused input


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg
    return msg


def test_missing_meta_is_refused(tmp_path: Path) -> None:
    write_minimal_run_dir(tmp_path)
    (tmp_path / "meta.json").unlink()
    with pytest.raises(RunDirError) as info:
        read_run_dir(tmp_path)
    assert "meta.json" in _one_line(info.value) and str(tmp_path) in str(info.value)


def test_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunDirError) as info:
        read_run_dir(tmp_path)
    assert "meta.json" in _one_line(info.value)


def test_nonexistent_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RunDirError) as info:
        read_run_dir(tmp_path / "nope")
    assert str(tmp_path / "nope") in _one_line(info.value)


def test_a_file_is_not_a_run_dir(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("{}")
    with pytest.raises(RunDirError):
        read_run_dir(tmp_path / "f")


@pytest.mark.parametrize("text", ["[1, 2]", '"meta"', "null", "{", "", "\xff"])
def test_meta_not_an_object_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "meta.json").write_text(text, errors="surrogateescape")
    with pytest.raises(RunDirError) as info:
        read_run_dir(tmp_path)
    assert "meta.json" in _one_line(info.value)


def test_run_dir_error_is_a_pinchpoint_error_with_its_exit_code() -> None:
    assert issubclass(RunDirError, PinchpointError)
    assert RunDirError.exit_code == 3


# --------------------------------------------------------------- wrong types in the other files

# Each case replaces one file of a valid run directory; reading and reporting it must give a report
# (with a warning) or a PinchpointError, never another exception.
WRONG_TYPES = [
    pytest.param(
        "meta.json",
        {**meta_obj(), "clock": "monotonic"},
        id="meta-clock-string",
    ),
    pytest.param(
        "meta.json",
        {**meta_obj(), "command": 5},
        id="meta-command-int",
    ),
    pytest.param("meta.json", {**meta_obj(), "exit_code": "1", "world_size": None}, id="meta-odd-scalars"),
    pytest.param(
        "environment.json",
        {"cpu": "x86"},
        id="env-cpu-string",
    ),
    pytest.param("environment.json", [1, 2], id="env-not-object"),
    pytest.param(
        "ranks/rank0/process-100.json",
        {**process_obj(), "threads": [2]},
        id="process-threads-list",
    ),
    pytest.param(
        "ranks/rank0/process-100.json",
        {**process_obj(), "autocast": "bfloat16"},
        id="process-autocast-string",
    ),
    pytest.param(
        "ranks/rank0/process-100.json",
        {**process_obj(intra_op=0)},
        id="process-intra-op-zero",
    ),
    pytest.param(
        "ranks/rank0/probes.json",
        {"matmul": [{"shape": ["a", 1, 1], "dtype": "float32", "ns": 1}]},
        id="probes-shape-strings",
    ),
    pytest.param(
        "ranks/rank0/probes.json", {"matmul": "none", "dispatch_ns_per_op": "fast"}, id="probes-odd"
    ),
]


@pytest.mark.parametrize(("name", "content"), WRONG_TYPES)
def test_wrong_types_give_a_report_or_a_pinchpoint_error(tmp_path: Path, name: str, content: Any) -> None:
    root = write_minimal_run_dir(tmp_path)
    write_json(root / name, content)
    try:
        report = report_run_dir(root).to_dict()
    except PinchpointError:
        return
    assert report["schema"] == "pinchpoint.report/1"


# --------------------------------------------------------------------------- fuzzing the inputs

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_value = _json_scalars | _json  # lean towards scalars where a list or object is expected


def _keyed(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects using the real field names with random values: what a half-right writer produces."""
    return st.dictionaries(st.sampled_from(keys), _value, max_size=len(keys))


_STEP_KEYS = [
    "step",
    "kind",
    "start_ns",
    "end_ns",
    "profiled",
    "partial",
    "intervals",
    "cpu_ns",
    "runq_ns",
    "rss_bytes",
]
_SYSTEM_KEYS = ["t_ns", "cpu_percent_per_core", "procs", "gpus"]
_PROC_KEYS = ["pid", "ppid", "name", "user_s", "sys_s", "rss_bytes", "threads", "ctx_vol", "ctx_invol"]
_EVENT_KEYS = ["ph", "cat", "name", "tid", "ts", "dur", "args"]

_ns_value = st.integers(0, 10**9) | st.integers(0, 10**9) | _value
_step_lines = st.lists(
    st.fixed_dictionaries(
        {"start_ns": _ns_value, "end_ns": _ns_value},
        optional={k: _value for k in _STEP_KEYS if not k.endswith("_ns")},
    )
    | st.fixed_dictionaries(
        {
            "start_ns": st.integers(0, 10**9),
            "end_ns": st.integers(0, 10**9),
            "intervals": st.lists(
                st.tuples(st.sampled_from(["forward", "data_wait"]), _json, _json).map(list), max_size=3
            ),
        }
    )
    | _keyed(_STEP_KEYS)
    | _json,
    max_size=6,
)
_system_lines = st.lists(
    _keyed(_SYSTEM_KEYS)
    | st.fixed_dictionaries(
        {
            "t_ns": st.integers(0, 10**10),
            "procs": st.lists(_keyed(_PROC_KEYS), max_size=2),
            "cpu_percent_per_core": st.lists(_json, max_size=2),
        }
    )
    | _json,
    max_size=6,
)
_events = st.lists(
    st.fixed_dictionaries(
        {"ph": st.just("X"), "cat": st.just("cpu_op")},
        optional={k: _value for k in ["name", "tid", "ts", "dur", "args"]},
    )
    | st.fixed_dictionaries(
        {
            "ph": st.just("X"),
            "cat": st.just("cpu_op"),
            "name": st.just("aten::mm"),
            "ts": st.floats(0, 1e6),
            "dur": st.floats(0, 1e3),
            "args": st.fixed_dictionaries({}, optional={"Input Dims": _json, "Input type": _json}),
        }
    )
    | _keyed(_EVENT_KEYS),
    max_size=5,
)
_opwindow = st.fixed_dictionaries({"traceEvents": _events}, optional={"baseTimeNanoseconds": _json}) | _json


def _jsonl_text(rows: list[Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _report_or_pinchpoint_error(file: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_minimal_run_dir(Path(tmp) / "run")
        write_json(root / "ranks/rank0/probes.json", {"dispatch_ns_per_op": 3000, "window_steps": 3})
        target = root / file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        try:
            report = report_run_dir(root).to_dict()
        except PinchpointError:
            return
        assert report["schema"] == "pinchpoint.report/1"
        json.dumps(report)


FILES = ["ranks/rank0/steps.jsonl", "system.jsonl", "ranks/rank0/opwindow.json"]
_FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None)


@_FUZZ
@given(file=st.sampled_from(FILES), data=st.binary(max_size=300))
def test_random_bytes_give_a_report_or_a_pinchpoint_error(file: str, data: bytes) -> None:
    _report_or_pinchpoint_error(file, data)


@_FUZZ
@example(rows=[{"start_ns": 0, "end_ns": 10, "intervals": 5}])
@example(rows=[{"start_ns": 0, "end_ns": float("inf")}])
# Steps of 0 ns but one: the chart's scale (90th percentile) is 0 and one bar is drawn.
@example(rows=[{"start_ns": 0, "end_ns": 1, "intervals": []}] + [{"start_ns": 0, "end_ns": 0}] * 10)
@given(rows=_step_lines)
def test_random_steps_give_a_report_or_a_pinchpoint_error(rows: list[Any]) -> None:
    _report_or_pinchpoint_error(FILES[0], _jsonl_text(rows).encode())


@_FUZZ
@example(rows=[{"t_ns": 0, "procs": [{"pid": 1, "user_s": "fast"}]}])
@example(rows=[{"t_ns": 0, "cpu_percent_per_core": ["busy"]}])
@example(rows=[{"t_ns": 0, "procs": 3}])
@given(rows=_system_lines)
def test_random_system_samples_give_a_report_or_a_pinchpoint_error(rows: list[Any]) -> None:
    _report_or_pinchpoint_error(FILES[1], _jsonl_text(rows).encode())


@_FUZZ
@example(doc={"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": float("inf"), "dur": 1}]})
@example(doc={"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "tid": [1]}]})
@given(doc=_opwindow)
def test_random_opwindow_gives_a_report_or_a_pinchpoint_error(doc: Any) -> None:
    _report_or_pinchpoint_error(FILES[2], json.dumps(doc).encode())


def test_fuzz_harness_accepts_the_valid_run_dir() -> None:
    # The harness itself must not be what fails: the untouched minimal run dir reports cleanly.
    with tempfile.TemporaryDirectory() as tmp:
        root = write_minimal_run_dir(Path(tmp) / "run")
        report = report_run_dir(root).to_dict()
        assert report["steps"]["count"] == 8 and report["warnings"] == []
        shutil.rmtree(root)


def test_nan_system_samples_do_not_make_findings(tmp_path: Path) -> None:
    root = write_minimal_run_dir(tmp_path)
    write_json(root / "environment.json", environment_obj(cores=4))  # 2 intra-op threads on 4 cores
    rows = [json.loads(line) for line in (root / "system.jsonl").read_text().splitlines()]
    for row in rows:
        row["cpu_percent_per_core"] = [float("nan")] * 4
    write_jsonl(root / "system.jsonl", rows)
    report = report_run_dir(root).to_dict()
    for f in report["findings"]:
        assert "nan" not in " ".join(f["evidence"]).lower().split(), f
