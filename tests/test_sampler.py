"""The system sampler, run for real on real process trees (no mocks of psutil or /proc)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pinchpoint.capture import procfs
from pinchpoint.capture import sampler as sampler_mod
from pinchpoint.capture.sampler import Sampler, spawn_sampler, stop_sampler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the test trees use os.fork")

PROC_KEYS = {
    "pid",
    "ppid",
    "name",
    "cmdline0",
    "user_s",
    "sys_s",
    "rss_bytes",
    "threads",
    "ctx_vol",
    "ctx_invol",
    "read_bytes",
    "write_bytes",
    "runq_s",
    "cuser_s",
}

# Root forks a busy child and a sleeping child at once, and a third (sleeping) child later, prints
# the children's pids, and exits when they are done.
TREE = """
import os, sys, time
dur = float(sys.argv[1])

def child(busy, seconds):
    pid = os.fork()
    if pid:
        return pid
    if busy:
        end = time.monotonic() + seconds
        x = 0
        while time.monotonic() < end:
            x += 1
    else:
        time.sleep(seconds)
    os._exit(0)

busy = child(True, dur)
sleeper = child(False, dur)
print(busy, sleeper, flush=True)
time.sleep(dur / 2)
late = child(False, dur / 2)
print(late, flush=True)
for pid in (busy, sleeper, late):
    os.waitpid(pid, 0)
"""

SLEEPER = "import time; time.sleep(120)"


def _read_samples(run_dir: Path) -> list[dict[str, Any]]:
    raw = (run_dir / "system.jsonl").read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "the sampler only ever writes complete lines"
    return [json.loads(line) for line in raw.decode().splitlines()]


def _wait_for_lines(run_dir: Path, n: int, timeout_s: float = 30.0) -> None:
    path = run_dir / "system.jsonl"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.02)
    log = (run_dir / "sampler.log").read_text() if (run_dir / "sampler.log").exists() else ""
    raise AssertionError(f"fewer than {n} samples after {timeout_s}s; sampler.log:\n{log}")


def _check_format(sample: dict[str, Any]) -> None:
    assert set(sample) <= {"t_ns", "cpu_percent_per_core", "cpu_user_s", "procs", "gpus", "tool"}
    assert isinstance(sample["t_ns"], int)
    assert isinstance(sample["cpu_percent_per_core"], list)
    assert all(isinstance(c, float) for c in sample["cpu_percent_per_core"])
    for p in sample["procs"]:
        assert set(p) == PROC_KEYS
        for key in ("pid", "ppid", "rss_bytes", "threads", "ctx_vol", "ctx_invol"):
            assert isinstance(p[key], int), key
        assert isinstance(p["user_s"], float) and isinstance(p["sys_s"], float)
        assert isinstance(p["name"], str) and isinstance(p["cmdline0"], str)
        for key in ("read_bytes", "write_bytes"):
            assert p[key] is None or isinstance(p[key], int)
    if "gpus" in sample:
        assert isinstance(sample["gpus"], list)


def test_samples_a_changing_tree_and_exits_with_its_root(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    root = subprocess.Popen([sys.executable, str(script), "1.5"], stdout=subprocess.PIPE, text=True)
    run_dir = tmp_path / "run"
    proc = spawn_sampler(run_dir, root.pid, interval_s=0.05)
    try:
        assert root.stdout is not None
        busy, sleeper = (int(x) for x in root.stdout.readline().split())
        late = int(root.stdout.readline())
        # The root is not reaped before the sampler is done: the sampler must notice that it exited
        # although the PID is still there (a zombie), and stop by itself.
        proc.wait(timeout=60)
    finally:
        stop_sampler(proc)
        root.wait(timeout=30)
    assert proc.returncode == 0

    samples = _read_samples(run_dir)
    assert len(samples) >= 5
    for s in samples:
        _check_format(s)
    t = [s["t_ns"] for s in samples]
    assert t == sorted(t)
    assert len(samples[0]["cpu_percent_per_core"]) == psutil.cpu_count()

    by_pid: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        for p in s["procs"]:
            by_pid.setdefault(p["pid"], []).append(p)
    assert {root.pid, busy, sleeper, late} <= set(by_pid)
    assert proc.pid not in by_pid
    assert all(p["ppid"] == root.pid for pid in (busy, sleeper, late) for p in by_pid[pid])
    assert samples[0]["procs"][0]["pid"] == root.pid  # root first

    busy_user = [p["user_s"] for p in by_pid[busy]]
    assert busy_user[-1] > busy_user[0]
    assert busy_user[-1] > max(p["user_s"] for p in by_pid[sleeper])
    assert all(p["rss_bytes"] > 0 for p in by_pid[sleeper])
    assert by_pid[root.pid][0]["cmdline0"] == sys.executable
    assert "python" in by_pid[root.pid][0]["name"].lower()


def test_exits_when_root_is_reaped_or_never_existed(tmp_path: Path) -> None:
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    proc = spawn_sampler(tmp_path / "a", root.pid)
    try:
        root.wait(timeout=30)
        proc.wait(timeout=30)
    finally:
        stop_sampler(proc)
    assert proc.returncode == 0
    for s in _read_samples(tmp_path / "a"):
        _check_format(s)

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    proc = spawn_sampler(tmp_path / "b", gone.pid)
    try:
        proc.wait(timeout=30)
    finally:
        stop_sampler(proc)
    assert proc.returncode == 0
    assert _read_samples(tmp_path / "b") == []


def test_sigint_is_ignored_and_sigterm_writes_a_last_sample(tmp_path: Path) -> None:
    root = subprocess.Popen([sys.executable, "-c", SLEEPER])
    run_dir = tmp_path / "run"
    # A long interval: any sample after the first is the one SIGTERM asked for.
    proc = spawn_sampler(run_dir, root.pid, interval_s=30.0)
    try:
        _wait_for_lines(run_dir, 1)
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        assert proc.poll() is None, "SIGINT must not stop the sampler"
        before_ns = time.monotonic_ns()
        stop_sampler(proc, timeout_s=20.0)
        assert proc.returncode == 0, "the sampler should exit by itself on SIGTERM, not be killed"
    finally:
        stop_sampler(proc)
        root.kill()
        root.wait()
    samples = _read_samples(run_dir)
    assert len(samples) == 2
    assert samples[-1]["t_ns"] >= before_ns
    assert [p["pid"] for p in samples[-1]["procs"]] == [root.pid]
    assert "stopped after 2 samples" in (run_dir / "sampler.log").read_text()


def test_excludes_itself_when_sampling_its_own_parent(tmp_path: Path) -> None:
    proc = spawn_sampler(tmp_path, os.getpid(), interval_s=0.05)
    try:
        _wait_for_lines(tmp_path, 3)
    finally:
        stop_sampler(proc)
    pids = {p["pid"] for s in _read_samples(tmp_path) for p in s["procs"]}
    assert os.getpid() in pids
    assert proc.pid not in pids


def test_ends_a_truncated_line_left_in_the_file(tmp_path: Path) -> None:
    (tmp_path / "system.jsonl").write_bytes(b'{"t_ns": 1, "cpu_perc')
    s = Sampler(tmp_path, os.getpid())
    try:
        s.sample_and_write()
        s.sample_and_write()
    finally:
        s.close()
    lines = (tmp_path / "system.jsonl").read_bytes().split(b"\n")
    assert lines[0] == b'{"t_ns": 1, "cpu_perc'
    assert lines[-1] == b""
    good = [json.loads(x) for x in lines[1:-1]]
    assert len(good) == 2
    for g in good:
        _check_format(g)


def test_unexpected_errors_are_logged_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: bytes) -> tuple[str, list[bytes]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(procfs, "parse_stat", broken)
    s = Sampler(tmp_path, os.getpid(), use_procfs=True)
    try:
        for _ in range(8):
            s.sample_and_write()
    finally:
        s.close()
    if procfs.PROCFS:
        log = (tmp_path / "sampler.log").read_text()
        assert "RuntimeError: boom" in log
        assert log.count("boom") <= 5  # rate limited
    for sample in _read_samples(tmp_path):
        _check_format(sample)


@pytest.mark.skipif(not procfs.PROCFS, reason="the /proc fast path is Linux only")
def test_procfs_and_psutil_paths_agree(tmp_path: Path) -> None:
    code = (
        "import os, time\nfor _ in range(2):\n    os.fork() or (time.sleep(30), os._exit(0))\ntime.sleep(30)"
    )
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        fast = Sampler(tmp_path, root.pid, use_procfs=True)
        slow = Sampler(tmp_path, root.pid, use_procfs=False)
        deadline = time.monotonic() + 30
        while True:
            a, b = fast.sample(), slow.sample()
            assert a is not None and b is not None
            if (len(a["procs"]) == 3 and len(b["procs"]) == 3) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        fast.close()
        slow.close()
    finally:
        root.kill()
        root.wait()
    assert [p["pid"] for p in a["procs"]] == [p["pid"] for p in b["procs"]]
    for x, y in zip(a["procs"], b["procs"], strict=True):
        for key in ("pid", "ppid", "name", "cmdline0", "threads", "read_bytes", "write_bytes"):
            assert x[key] == y[key], key
        assert abs(x["rss_bytes"] - y["rss_bytes"]) <= 0.05 * y["rss_bytes"]
        assert abs(x["user_s"] - y["user_s"]) <= 0.1
        assert abs(x["sys_s"] - y["sys_s"]) <= 0.1
        assert abs(x["ctx_vol"] - y["ctx_vol"]) <= 5
        assert abs(x["ctx_invol"] - y["ctx_invol"]) <= 5


def test_start_up_imports_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys, pinchpoint.capture.sampler\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'rich')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_main_rejects_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        sampler_mod.main(["--pid", "1"])
