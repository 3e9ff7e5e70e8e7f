"""`run --live` and `pinchpoint watch` in a pseudo-terminal: the panel redraws as steps come in, says
what leads, shows the program's last lines, and the report printed at the end is `pinchpoint report`'s.
The snapshot is also read from a run directory written here by hand (no program)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from pinchpoint.pipeline.live import snapshot, tail
from pinchpoint.report.live_terminal import live_panel
from pinchpoint.trace.live import Snapshot

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    env.update({"COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color", "PINCHPOINT_NO_HISTORY": "1"})
    return env


def _in_pty(cmd: list[str], cwd: Path, timeout_s: float = 240.0) -> tuple[int, str]:
    """Run `cmd` with a pseudo-terminal as its stdin/stdout/stderr; (exit code, all it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=_env(), close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the other side closed: EIO on Linux
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=30)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
    return code, text.replace("\r\n", "\n").replace("\r", "\n")  # a terminal's line ends


def _report_text(run_dir: Path, cwd: Path) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "report", "--no-color", str(run_dir)],
        cwd=cwd, capture_output=True, text=True, env=_env(), timeout=120,
    )  # fmt: skip
    return res.stdout


def _finding_lines(text: str) -> list[str]:
    return re.findall(r"^\d+\. .*\[[a-z_.]+\]\s*$", text, re.M)


@pytest.mark.e2e
def test_run_live_draws_a_panel_that_updates_then_prints_the_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    code, out = _in_pty(
        [sys.executable, "-m", "pinchpoint", "run", "--live", "--no-color", "-o", str(run_dir), "--",
         sys.executable, str(EXAMPLES / "input_fetch.py"), "--steps", "45"],
        tmp_path,
    )  # fmt: skip
    assert code == 0, out[-3000:]
    counts = [int(n) for n in re.findall(r"(\d+) steps · ", out)]
    assert len(set(counts)) >= 3 and counts == sorted(counts), counts  # it redrew as steps came in
    assert "leading so far: " in out and "[input.fetch]" in out  # the planted cause, before the end
    assert "median step " in out
    assert (run_dir / "output.log").is_file()
    assert "median_step_ms=" in (run_dir / "output.log").read_text()  # the program's own output
    assert "│ steps=" in out  # ...and its last lines in the panel
    final = out[out.rindex("What holds it back") :]
    assert _finding_lines(final) == _finding_lines(_report_text(run_dir, tmp_path))


@pytest.mark.e2e
def test_watch_follows_a_run_started_elsewhere_and_prints_its_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    program = subprocess.Popen(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(run_dir), "--",
         sys.executable, str(EXAMPLES / "input_fetch.py"), "--steps", "45"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        code, out = _in_pty(
            [sys.executable, "-m", "pinchpoint", "watch", "--interval", "1", "--no-color", str(run_dir)],
            tmp_path,
        )
    finally:
        program.wait(timeout=300)
    assert code == 0, out[-3000:]
    assert len(set(re.findall(r"(\d+) steps · ", out))) >= 2, out[-2000:]
    assert "ended (exit 0)" in out
    assert _finding_lines(out) == _finding_lines(_report_text(run_dir, tmp_path)) != []


def test_watch_refuses_what_is_not_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "watch", str(tmp_path / "file")],
        capture_output=True, text=True, env=_env(), timeout=60,
    )  # fmt: skip
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "not a pinchpoint run directory" in res.stderr


def _render(snap: Snapshot) -> str:
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(live_panel(snap, None))
    return console.export_text()


def _write_run(run_dir: Path, steps_ms: list[float], flags: dict[int, str] | None = None) -> None:
    (run_dir / "ranks" / "rank0").mkdir(parents=True)
    meta = {"command": ["python", "train.py"], "clock": {"monotonic_ns": 0}, "ended_at": None}
    (run_dir / "meta.json").write_text(json.dumps(meta))
    t, lines = 0, []
    for i, ms in enumerate(steps_ms):
        end = t + int(ms * 1e6)
        phases = [["data_wait", t, t + int(ms * 0.25e6)], ["forward", t + int(ms * 0.25e6), end]]
        flag = {(flags or {}).get(i, "none"): True}
        lines.append(json.dumps({"step": i, "start_ns": t, "end_ns": end, "intervals": phases, **flag}))
        t = end
    lines.append('{"step": 999, "start_ns": ')  # a line still being written
    (run_dir / "ranks" / "rank0" / "steps.jsonl").write_text("\n".join(lines))
    sample = {"t_ns": t, "cpu_percent_per_core": [80.0, 40.0], "procs": [{"pid": 1, "rss_bytes": 2 << 30}]}
    (run_dir / "system.jsonl").write_text(json.dumps(sample) + "\n")


def test_the_snapshot_reads_the_ends_of_the_files(tmp_path: Path) -> None:
    _write_run(tmp_path, [100.0] * 50 + [150.0] * 50)
    snap = snapshot(tmp_path)
    assert snap.steps == 100 and snap.last_ms == 150.0 and snap.before_ms == 100.0  # 50% slower
    assert snap.phases == {"forward": pytest.approx(0.75), "data_wait": pytest.approx(0.25)}
    assert snap.cores_busy == pytest.approx(1.2) and snap.rss_bytes == 2 << 30 and not snap.ended
    assert snap.elapsed_s == pytest.approx(12.5)
    big = tmp_path / "big.jsonl"
    big.write_text("".join(f'{{"i": {i}}}\n' for i in range(100_000)))
    got = tail(big, 1000)
    assert got[-1] == '{"i": 99999}' and all(line.startswith('{"i": ') for line in got)  # cut line dropped


def test_the_count_moves_while_pinchpoints_own_steps_run(tmp_path: Path) -> None:
    """Beside a busy process the op window and the trials took every step after the tenth of a 45-step
    run, and the panel said "10 steps" for 8 s: the count is the program's progress, the times are the
    ordinary steps', and the panel says whose steps are running."""
    flags = {i: "profiled" for i in range(10, 14)} | {i: "trial" for i in range(14, 45)}
    _write_run(tmp_path, [100.0] * 10 + [300.0] * 35, flags)
    snap = snapshot(tmp_path)
    assert snap.steps == 45 and snap.timed == 10 and snap.last_ms == 100.0 and snap.measuring == "trial"
    text = _render(snap)
    assert "45 steps · " in text and "trying a fix" in text and "over the last 10 steps" in text
