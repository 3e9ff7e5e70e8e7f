"""Python stack sampling with py-spy, in its own process (`pinchpoint run --stacks`).

py-spy reads the program's memory from outside (`process_vm_readv`), follows the DataLoader workers
and ranks (`--subprocesses`) and, with `--nonblocking`, never pauses the program. It writes folded
stacks (`stacks.folded`) when the program ends; the report turns them into a flame graph and a
speedscope file and cites the hottest functions. Attaching needs ptrace rights over the program: root,
CAP_SYS_PTRACE, or Yama's `ptrace_scope` at 0 — or, as here, the program allowing it: the bootstrap
calls `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` in each process when stacks are asked for.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

STACKS_ENV = "PINCHPOINT_STACKS"
FOLDED_FILE = "stacks.folded"
META_FILE = "stacks.json"
LOG_FILE = "stacks.log"
DEFAULT_RATE_HZ = 20
"""Samples per second. Each sample costs the program ~0.7 ms of a core on the reference machine
(2 cores, both busy): measured in one process with py-spy paused and resumed in blocks
(`benchmarks/hooks_inprocess.py --part stacks`), 100 Hz (py-spy's default) slowed steps by 6.6-7.8%,
50 Hz by 4.4-5.6%, 20 Hz by ~2%. Twenty a second still gives a thousand samples a minute."""


NATIVE_RATE_HZ = 5
"""Samples per second when py-spy also unwinds native frames (`run --stacks --native`): each sample
pauses the program, and at 20 Hz `healthy.py`'s steps were ×1.17 slower (`benchmarks/overhead.py --arm
stacks-native`); a quarter of the rate for a quarter of the cost."""


def find_py_spy() -> str | None:
    """The py-spy executable: beside this Python (a venv's bin/) or on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("py-spy")


def spawn_stack_sampler(
    run_dir: Path,
    pid: int,
    rate_hz: int = DEFAULT_RATE_HZ,
    *,
    native: bool = False,
    idle: bool = False,
    threads: bool = False,
) -> subprocess.Popen[bytes] | None:
    """Start py-spy on `pid` and its descendants; None (and a line in stacks.log) if it can't start.

    `native` (`run --stacks --native`): py-spy unwinds the native frames below each Python frame too
    (`--native`), so the flame graph shows the C++ op, BLAS or oneDNN kernel and OpenMP call under the
    Python line that ran it. py-spy cannot unwind a running thread, so each sample then pauses the
    program (no `--nonblocking`): the cost is in `benchmarks/README.md`.

    `idle`: waiting threads are sampled too (a thread asleep in a fetch counts its wait); `threads`: each
    sample names its thread (`attach --outside` reads the main thread's time from them)."""
    exe = find_py_spy()
    log = run_dir / LOG_FILE
    if exe is None:
        log.write_text("py-spy not found: pip install py-spy\n")
        return None
    cmd = [
        exe, "record", "--pid", str(pid), "--subprocesses", "--native" if native else "--nonblocking",
        "--rate", str(rate_hz), "--format", "raw", "--full-filenames", "--output", str(run_dir / FOLDED_FILE),
        *(["--idle"] if idle else []), *(["--threads"] if threads else []),
    ]  # fmt: skip
    (run_dir / META_FILE).write_text(
        json.dumps(
            {"sampler": "py-spy", "rate_hz": rate_hz, "idle": idle, "native": native, "threads": threads}
        )
        + "\n"
    )
    with open(log, "ab") as err:
        try:
            return subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True, close_fds=True
            )
        except OSError as exc:
            err.write(f"py-spy could not start: {exc}\n".encode())
            return None


def stop_stack_sampler(
    proc: subprocess.Popen[bytes] | None, *, program_ended: bool = True, timeout_s: float = 20.0
) -> None:
    """Have py-spy write its file and exit. After the program ended it does so on its own (wait up to
    `timeout_s`); otherwise (the Python API, whose program goes on) or if it lingers, interrupt it (it
    writes what it has on SIGINT); kill it as a last resort."""
    if proc is None:
        return
    steps = ((None, timeout_s),) if program_ended else ()
    for sig, wait in (*steps, (signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
        if sig is not None:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def allow_ptrace_from_any() -> None:
    """Let a sibling process (py-spy, started by the launcher) read this one under Yama ptrace_scope=1."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_ptracer, pr_set_ptracer_any = 0x59616D61, ctypes.c_ulong(-1).value
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_ptracer, ctypes.c_ulong(pr_set_ptracer_any), 0, 0, 0)
