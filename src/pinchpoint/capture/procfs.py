"""Linux only: reads numbers straight from ``/proc``, for the system sampler and for the agent.

The sampler's readers (:func:`read_proc`, :func:`parse_stat`, ...): psutil reads the same files, but
through several layers of wrappers per call; a sample wakes up with cold caches every 100 ms, and there
those layers made psutil's per-process reads about 3x as expensive as reading stat/status/io directly.
The values are the same ones psutil reports (tests/test_sampler.py compares the two).

The agent's (:class:`ProcFile`, :func:`thread_schedstat`, :func:`statm_rss`): files it re-reads at
every step boundary and every batch, kept open.

Standard library only: the sampler process imports this at start-up (see :mod:`.sampler`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

PROCFS = sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")
CLK_TCK = float(os.sysconf("SC_CLK_TCK")) if PROCFS else 100.0
_PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE")) if PROCFS else 4096
_READ_CHUNK = 16384


def read_proc(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, _READ_CHUNK)
        if len(data) < _READ_CHUNK:
            return data
        chunks = [data]
        while data:
            data = os.read(fd, _READ_CHUNK)
            chunks.append(data)
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_stat(data: bytes) -> tuple[str, list[bytes]]:
    """(comm, fields after comm): fields[0] state, [1] ppid, [11] utime, [12] stime, [17] num_threads,
    [21] rss in pages (proc(5) numbering minus 3)."""
    lpar = data.index(b"(")
    rpar = data.rindex(b")")
    return data[lpar + 1 : rpar].decode("utf-8", "surrogateescape"), data[rpar + 2 :].split()


def field(data: bytes, key: bytes) -> int | None:
    """The integer after ``key`` (``b"voluntary_ctxt_switches:"``) at the start of a line."""
    i = data.find(b"\n" + key)
    if i < 0:
        if not data.startswith(key):
            return None
        i = -1
    j = i + 1 + len(key)
    k = data.find(b"\n", j)
    return int(data[j : k if k >= 0 else len(data)].split()[0])


def rss_bytes(status: bytes, stat_fields: list[bytes]) -> int:
    """VmRSS from status, as psutil's statm-based rss: exact, whereas the rss field of stat is an
    approximation on recent kernels (per-CPU counters, off by hundreds of KiB)."""
    kib = field(status, b"VmRSS:")  # "VmRSS:\t    1828 kB"; absent for zombies and kernel threads
    if kib is not None:
        return kib * 1024
    return int(stat_fields[21]) * _PAGE_SIZE


def ppid(pid: int) -> int:
    return int(parse_stat(read_proc(f"/proc/{pid}/stat"))[1][1])


def last_pid() -> int | None:
    """The most recently allocated PID (5th field of /proc/loadavg), None if unreadable."""
    try:
        return int(read_proc("/proc/loadavg").split()[4])
    except (OSError, ValueError, IndexError):
        return None


def cmdline0(pid: int) -> str | None:
    data = read_proc(f"/proc/{pid}/cmdline")
    if not data:
        return None
    if data.endswith(b"\0"):
        data = data[:-1]
    if b"\0" not in data and b" " in data:
        data = data.split(b" ", 1)[0]  # a process that rewrote its argv (setproctitle), as psutil does
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def full_name(comm: str, cmdline0: str | None) -> str:
    """The kernel truncates names to 15 characters; extend from argv[0] like psutil's name()."""
    if len(comm) >= 15 and cmdline0:
        base = os.path.basename(cmdline0)
        if base.startswith(comm):
            return base
    return comm


# ---- files the agent keeps open ------------------------------------------------------------------


class ProcFile:
    """A /proc file kept open and re-read with pread. Opening, reading and closing it at every step
    boundary cost ~70 µs of the step on the reference machine (right after a parallel region the
    OpenMP workers still spin on the sibling core); pread of an open file costs a fraction of that.
    `/proc/thread-self` and `/proc/self` resolve when opened: open from the thread that reads, and
    `reset()` in a forked child."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def read(self) -> bytes | None:
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDONLY)
            return os.pread(self.fd, 256, 0)
        except OSError:
            return None

    def reset(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None


def tasks_run_delay_s(pid: int) -> float | None:
    """Seconds the process's threads have waited, runnable, for a CPU (all threads, so far: their
    `schedstat` run delays summed); None where Linux doesn't say. A thread that has exited takes its
    share with it, so the sum is read as a rate over a run's steady stretch."""
    total, seen = 0, False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids[:MAX_TASKS]:
        try:
            parts = read_proc(f"/proc/{pid}/task/{tid}/schedstat").split()
            total += int(parts[1])
            seen = True
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9 if seen else None


MAX_TASKS = 256
"""Threads read per process and sample (a program with more is read in part: a lower bound)."""


_thread_files = threading.local()


def thread_schedstat() -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) of the calling thread, or None where Linux doesn't say. Each
    thread keeps its own `/proc/thread-self/schedstat` open (opening it per read cost the DataLoader
    fetch hook ~80 µs a batch on the reference machine)."""
    f: ProcFile | None = getattr(_thread_files, "schedstat", None)
    if f is None:
        f = _thread_files.schedstat = ProcFile("/proc/thread-self/schedstat")
    return _schedstat_of(f.read())


def forget_thread_files() -> None:
    """In a forked child: the inherited handles name the parent's threads."""
    global _thread_files
    f: ProcFile | None = getattr(_thread_files, "schedstat", None)
    if f is not None:
        f.reset()
    _thread_files = threading.local()


def _schedstat_of(raw: bytes | None) -> tuple[int, int] | None:
    try:
        parts = raw.split() if raw is not None else []
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def statm_rss(raw: bytes | None) -> int | None:
    """Resident bytes from the text of `/proc/self/statm` (a `ProcFile`), None if unreadable."""
    try:
        return int(raw.split()[1]) * _PAGE_SIZE if raw is not None else None
    except (ValueError, IndexError):
        return None


# ---- who else uses this process's cores ---------------------------------------------------------


def busy_ticks(cpus: set[int]) -> int | None:
    """Clock ticks the CPUs in `cpus` spent busy since boot (/proc/stat: user, nice, system, irq,
    softirq; idle, iowait and the hypervisor's steal are not busy here)."""
    try:
        lines = read_proc("/proc/stat").splitlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        if not line.startswith(b"cpu") or line[3:4] == b" ":
            continue
        parts = line.split()
        try:
            if int(parts[0][3:]) in cpus:
                total += sum(int(parts[i]) for i in (1, 2, 3, 6, 7))
        except (ValueError, IndexError):
            continue
    return total


def family_ticks(pid: int) -> int:
    """CPU ticks (user + system) of process `pid` and its live descendants (DataLoader workers), with
    the children each has waited for (a compiler inductor ran and reaped): a child's time moves to its
    parent's count when it ends, so the total only grows."""
    total = 0
    pids, seen = [pid], set[int]()
    while pids and len(seen) < 256:
        p = pids.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            fields = parse_stat(read_proc(f"/proc/{p}/stat"))[1]
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
            for task in os.listdir(f"/proc/{p}/task"):
                pids.extend(int(c) for c in read_proc(f"/proc/{p}/task/{task}/children").split())
        except (OSError, ValueError, IndexError):
            continue
    return total
