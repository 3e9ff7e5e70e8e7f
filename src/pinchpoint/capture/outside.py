"""`pinchpoint attach` from outside the process: when the agent cannot be put in (no gdb, gdb failed,
the interpreter never ran it) or `--outside` asks, nothing enters the program. py-spy samples every
thread's Python stack, idle ones included (`analysis/outside.py` reads the main thread's time by
phase from them), and each thread's CPU time is read from /proc at the start and, every second, until
the end (the last reading stands if the process exits)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from pinchpoint.capture.procfs import CLK_TCK, parse_stat, read_proc
from pinchpoint.capture.stacks import spawn_stack_sampler, stop_stack_sampler

RATE_HZ = 50
"""py-spy's rate from outside: its samples are all there is (20 s give 1000 of the main thread)."""
POLL_S = 0.1
READ_EVERY_S = 1.0


def watch_outside(pid: int, run_dir: Path, duration_s: float, reason: str) -> tuple[str, dict[str, Any]]:
    """Watch `pid` for `duration_s`: (how it ended, the run's `attach.outside` record)."""
    before = thread_cpu_s(pid)
    t0 = time.monotonic()
    last, last_t = before, t0
    py_spy = spawn_stack_sampler(run_dir, pid, RATE_HZ, idle=True, threads=True)
    ended = "detached"
    try:
        end = t0 + duration_s
        next_read = t0 + READ_EVERY_S
        while time.monotonic() < end:
            if not alive(pid):
                ended = "exited"
                break
            if time.monotonic() >= next_read:
                last, last_t = thread_cpu_s(pid) or last, time.monotonic()
                next_read += READ_EVERY_S
            time.sleep(POLL_S)
        else:
            last, last_t = thread_cpu_s(pid) or last, time.monotonic()
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        stop_stack_sampler(py_spy, program_ended=not alive(pid))
    used = {tid: round(max(0.0, cpu - before.get(tid, 0.0)), 3) for tid, cpu in last.items()}
    return ended, {"reason": reason, "wall_s": round(last_t - t0, 3), "thread_cpu_s": used}


def thread_cpu_s(pid: int) -> dict[str, float]:
    """Each thread's CPU time so far (user + system, seconds), by thread id; {} when unreadable."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            _, fields = parse_stat(read_proc(f"/proc/{pid}/task/{tid}/stat"))
            out[tid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie, our own child in tests, has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def environ(pid: int) -> dict[str, str]:
    """The process's environment (/proc/PID/environ); {} when unreadable."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (e.decode(errors="replace").partition("=") for e in raw.split(b"\0") if b"=" in e)
    return {k: v for k, _, v in pairs}
