"""`pinchpoint capture RUN_DIR|PID`: op windows on demand in a run going on, kept one per request,
the latest analysed; bad targets get one line and an exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pinchpoint.errors import AttachError
from programs import EXAMPLES


def _capture(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", "capture", *args], capture_output=True, text=True, timeout=150
    )


def _steps(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "ranks" / "rank0" / "steps.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.e2e
def test_windows_on_demand_by_run_dir_and_by_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    prog = subprocess.Popen(
        [sys.executable, "-m", "pinchpoint", "run", "--no-color", "--opwindow", "3:2", "-o", str(run_dir), "--",
         sys.executable, str(EXAMPLES / "input_fetch.py"), "--steps", "110"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while len(_steps(run_dir)) < 12 and time.monotonic() < deadline:  # past the first window (3:2)
            time.sleep(0.2)
        first = _capture(str(run_dir), "--steps", "2")
        assert first.returncode == 0, first.stderr
        pid = json.loads((run_dir / "meta.json").read_text())["child_pid"]
        second = _capture(str(pid), "--steps", "3")
        assert second.returncode == 0, second.stderr
        _, err = prog.communicate(timeout=120)
    finally:
        prog.kill()
    assert prog.returncode == 0, err[-2000:]
    rank = run_dir / "ranks" / "rank0"
    assert (rank / "opwindow-1.json").is_file() and (rank / "opwindow-2.json").is_file()
    assert (rank / "opwindow.json").is_file() and (rank / "probes.json").is_file()
    report = json.loads((run_dir / "report.json").read_text())
    windows = report["op_windows"]
    assert [(w["request"], w["steps"], w["kept"]) for w in windows] == [
        (1, 2, "opwindow-1.json"),
        (2, 3, "opwindow-2.json"),
    ]
    assert 12 <= windows[0]["start_step"] < windows[1]["start_step"]
    profiled = {s["step"] for s in _steps(run_dir) if s["profiled"]}
    for w in windows:  # the window's steps are out of the statistics like the first window's
        assert set(range(w["start_step"], w["start_step"] + w["steps"])) <= profiled, (w, sorted(profiled))
    assert "op windows on demand" in err and "steps" in err


def test_a_process_pinchpoint_did_not_start() -> None:
    res = _capture(str(os.getpid()))
    assert res.returncode == AttachError.exit_code
    assert res.stderr.count("\n") == 1 and "was not started by pinchpoint run" in res.stderr, res.stderr


def test_a_run_that_has_ended(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"schema": "pinchpoint.run/1", "ended_at": "2026-12-04"}))
    res = _capture(str(tmp_path))
    assert res.returncode == AttachError.exit_code and "has ended" in res.stderr, res.stderr
    assert not (tmp_path / "capture.json").exists()


def test_not_a_run_directory(tmp_path: Path) -> None:
    res = _capture(str(tmp_path))
    assert res.returncode == 2 and "neither a pid nor a run directory" in res.stderr, res.stderr


def test_the_page_fault_probe_runs_only_for_a_program_that_faults() -> None:
    """A window whose steps mapped few fresh pages skips the page-fault probe (~60 ms of the program's
    time): there is no churn to price; one whose steps fault, or where it is not known, is probed."""
    torch = pytest.importorskip("torch")
    from pinchpoint.capture.opwindow import FAULTS_PROBED, run_probes

    quiet = run_probes(torch, None, faults=3.0)
    assert quiet["page_fault_ns"] is None and quiet["window_faults_per_step"] == 3
    assert quiet["dispatch_ns_per_op"] is not None
    for faults in (float(FAULTS_PROBED), 5000.0, None):
        probed = run_probes(torch, None, faults=faults)
        # (None where the kernel backs the pages with huge pages: faults are not the cost there)
        assert "page_fault_ns" in probed and (probed["page_fault_ns"] is None or probed["page_fault_ns"] > 0)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not (thp.is_file() and "[always]" in thp.read_text()):
        assert run_probes(torch, None, faults=5000.0)["page_fault_ns"] is not None
