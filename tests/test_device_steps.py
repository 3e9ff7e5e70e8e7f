"""Steps timed on the GPU: CUDA events at step boundaries (capture), `device_steps.jsonl` (run dir),
device-timed step statistics (analysis and report). The CUDA side itself ran on an H200
(docs/gpu-checks.md); here the event logic runs against a stand-in clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.capture.cuda_steps import FILE, DeviceStepClock
from pinchpoint.pipeline.rundir import report_run_dir
from test_rundir_ingest import write_jsonl, write_minimal_run_dir


class _Gpu:
    """A GPU that reaches recorded events when told to: `now_ms` is where its queue has got to."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.queue_ms = 0.0

    def enqueue(self, ms: float) -> None:
        self.queue_ms += ms


class _Event:
    gpu: _Gpu

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at_ms: float | None = None

    def record(self) -> None:
        self.at_ms = self.gpu.queue_ms

    def query(self) -> bool:
        return self.at_ms is not None and self.at_ms <= self.gpu.now_ms

    def elapsed_time(self, end: _Event) -> float:
        assert self.query() and end.query()
        return float(end.at_ms) - float(self.at_ms)  # type: ignore[arg-type]


class _Torch:
    def __init__(self, gpu: _Gpu) -> None:
        _Event.gpu = gpu
        self.allocated = 0
        self.cuda = type(
            "cuda",
            (),
            {
                "Event": _Event,
                "memory_allocated": staticmethod(lambda: self.allocated),
                "memory_reserved": staticmethod(lambda: 2 * self.allocated),
            },
        )


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_device_steps_are_written_as_the_gpu_reaches_them_and_never_waited_for(tmp_path: Path) -> None:
    gpu = _Gpu()
    torch = _Torch(gpu)
    clock = DeviceStepClock(torch, tmp_path)
    for step in range(5):  # the host enqueues 30 ms of GPU work per step, far ahead of the GPU
        gpu.enqueue(30.0)
        torch.allocated = (step + 1) << 20  # the allocator's counter when the host ended the step
        clock.mark(step)
    assert not (tmp_path / FILE).exists() or _rows(tmp_path / FILE) == []  # nothing reached yet
    gpu.now_ms = 95.0  # the GPU has finished steps 0-2
    clock.drain()
    assert _rows(tmp_path / FILE) == [
        {"step": 1, "device_ns": 30_000_000, "cuda_allocated": 2 << 20, "cuda_reserved": 4 << 20},
        {"step": 2, "device_ns": 30_000_000, "cuda_allocated": 3 << 20, "cuda_reserved": 6 << 20},
    ]
    clock.close()  # steps 3 and 4 are still queued: dropped, not waited for
    assert [r["step"] for r in _rows(tmp_path / FILE)] == [1, 2]


def test_a_run_with_device_steps_reports_the_gpu_step_time(tmp_path: Path) -> None:
    run = write_minimal_run_dir(tmp_path / "run", n_steps=12)
    # The host steps of the minimal run are 100 ms; say the GPU needed 250 ms for each.
    write_jsonl(
        run / "ranks" / "rank0" / FILE,
        [
            {
                "step": i,
                "device_ns": 250_000_000,
                "cuda_allocated": (100 + i) << 20,
                "cuda_reserved": 300 << 20,
            }
            for i in range(12)
        ],
    )
    report = report_run_dir(run).to_dict()
    steps = report["steps"]
    cuda = report["ranks"][0]["memory"]["cuda"]
    assert (cuda["peak_reserved_mib"], cuda["last_allocated_mib"]) == (300.0, 111.0)
    assert steps["timed_on"] == "gpu"
    assert steps["median_ms"] == pytest.approx(250.0)
    assert steps["host_median_ms"] == pytest.approx(100.0)
    assert steps["host_mean_ms"] == pytest.approx(100.0)  # the breakdown's milliseconds are the host's


def test_without_device_steps_the_host_times_the_steps(tmp_path: Path) -> None:
    steps = report_run_dir(write_minimal_run_dir(tmp_path / "run", n_steps=12)).to_dict()["steps"]
    assert "timed_on" not in steps
    assert steps["median_ms"] == pytest.approx(100.0)
