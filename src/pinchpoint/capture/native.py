"""Native stack sampling with Linux perf, in its own process (`pinchpoint run --native`).

`perf record -g -e cpu-clock -p PID` samples the program's threads (and the processes it forks after
the attach, such as DataLoader workers) in the kernel and in native code: what the Python stacks cannot
show (OpenMP barrier spin, page faults and zeroing, memcpy, which BLAS or oneDNN kernel ran). perf
ends on its own when the program does; the launcher then turns its data into text (`perf script`,
`native.txt.gz`) and removes the binary file. The program's oneDNN is asked for a perf map
(`ONEDNN_JIT_PROFILE=2`, unless the program set it) so its JIT kernels are named.

Needs perf (Debian: `linux-perf`) and the right to sample the program: root, CAP_PERFMON, or
`kernel.perf_event_paranoid` at most 1. What stopped it is written to `native.log` and the report says
so; the run goes on without native stacks.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import signal
import subprocess
from pathlib import Path

NATIVE_ENV = "PINCHPOINT_NATIVE"
DATA_FILE = "native.perf.data"
TEXT_FILE = "native.txt.gz"
META_FILE = "native.json"
LOG_FILE = "native.log"
DEFAULT_RATE_HZ = 99
"""Samples a second per thread (perf's `-F`): an odd rate does not beat with 10 ms timers."""
SCRIPT_TIMEOUT_S = 300.0
MAX_DATA = "256M"
"""perf's own cap on the binary data (`--max-size`): a long run keeps its first ~hour at 99 Hz."""
CHUNK = 1 << 20
JIT_PROFILE_ENV = {"ONEDNN_JIT_PROFILE": "2", "DNNL_JIT_PROFILE": "2"}
"""oneDNN writes /tmp/perf-PID.map for its JIT kernels (2: perf map), so `perf script` names them."""


def find_perf() -> str | None:
    return shutil.which("perf")


def spawn_native_sampler(
    run_dir: Path, pid: int, rate_hz: int = DEFAULT_RATE_HZ
) -> subprocess.Popen[bytes] | None:
    """Start perf on `pid`; None (and a line in native.log) if it can't start."""
    exe = find_perf()
    log = run_dir / LOG_FILE
    if exe is None:
        log.write_text("perf not found (Debian: apt-get install linux-perf)\n")
        return None
    cmd = [
        exe, "record", "-q", "-g", "-e", "cpu-clock", "-F", str(rate_hz), "-p", str(pid),
        "--max-size", MAX_DATA, "-o", str(run_dir / DATA_FILE),
    ]  # fmt: skip
    (run_dir / META_FILE).write_text(
        json.dumps({"sampler": "perf", "rate_hz": rate_hz, "event": "cpu-clock"}) + "\n"
    )
    with open(log, "ab") as err:
        try:
            return subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True, close_fds=True
            )
        except OSError as exc:
            err.write(f"perf could not start: {exc}\n".encode())
            return None


def stop_native_sampler(proc: subprocess.Popen[bytes] | None, run_dir: Path, timeout_s: float = 20.0) -> None:
    """Wait for perf to end (it does when the program has), interrupt it if it lingers, then write
    `native.txt.gz` with `perf script` and remove the binary data."""
    if proc is None:
        return
    for sig, wait in ((None, timeout_s), (signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
        if sig is not None:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    data = run_dir / DATA_FILE
    exe = find_perf()
    if exe is None or not data.is_file() or data.stat().st_size == 0:
        return
    with gzip.open(run_dir / TEXT_FILE, "wb", compresslevel=6) as out, open(run_dir / LOG_FILE, "ab") as err:
        try:
            script = subprocess.Popen(
                [exe, "script", "-i", str(data)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err
            )
            assert script.stdout is not None
            shutil.copyfileobj(script.stdout, out, CHUNK)
            script.wait(timeout=SCRIPT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            err.write(f"perf script failed: {exc}\n".encode())
    with contextlib.suppress(OSError):
        data.unlink()
