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
