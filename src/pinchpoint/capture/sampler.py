"""System sampler: a separate process that samples the program's process tree.

Run as ``python -m pinchpoint.capture.sampler --run-dir DIR --pid PID [--interval 0.1]``. Every
``interval`` seconds it appends one JSON line to ``DIR/system.jsonl`` (format: docs/run-directory.md,
section ``system.jsonl``) describing PID and all its descendants (re-discovered at every sample, since
DataLoader workers and torchrun ranks come and go), the per-core CPU utilisation and, when NVML is
available, the GPUs.

Design constraints:

* Start-up must be fast: this module imports only the standard library and psutil (pynvml is tried
  lazily). No numpy, torch or rich, and nothing from the rest of pinchpoint.
* It must never crash and never disturb the program: per-process errors (the process exited, is a
  zombie, access denied) are skipped; anything unexpected goes to ``DIR/sampler.log`` (rate limited)
  and sampling continues.
* Each line is written with a single ``write(2)`` on an ``O_APPEND`` descriptor, so a SIGKILL of
  everything leaves only complete lines.
* It stops when PID has exited (or is a zombie: its children have then been re-parented away), or on
  SIGTERM, after writing one last sample. SIGINT is ignored: Ctrl-C in a terminal goes to the whole
  foreground process group, and the sampler must keep going until the launcher stops it, so that the
  end of the program is captured. :func:`spawn_sampler` also starts it in its own session.

Cost (measured: about 0.8 ms of CPU per sample for a tree of 5 processes, i.e. under 1% of one core
at 10 Hz): on Linux the per-process numbers are read straight from ``/proc/PID/{stat,status,io}``
(the same values psutil gives, at a third of the cost when caches are cold, which they are after
100 ms of sleep); ``cmdline`` is read only when a process is first seen or its name changes (exec);
a PID's parent is read only when the PID is new or its parent exited; and ``/proc`` itself is listed
only when the kernel's last allocated PID moved or one of ours exited (and at least every
``_LIST_EVERY`` samples). Elsewhere (macOS) the same is done through cached ``psutil.Process``
objects with ``oneshot()``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

SYSTEM_FILE = "system.jsonl"
LOG_FILE = "sampler.log"
DEFAULT_INTERVAL_S = 0.1
MIN_INTERVAL_S = 0.01

# How many times a given error (same exception type and context) is written to sampler.log before
# further occurrences are only counted.
_MAX_LOGS_PER_ERROR = 5

# Per-process failures that mean "skip this process for this sample", not "something is wrong".
_PROC_ERRORS: tuple[type[BaseException], ...] = (
    psutil.NoSuchProcess,  # includes ZombieProcess
    psutil.AccessDenied,
    ProcessLookupError,
    FileNotFoundError,
    PermissionError,
)
_PPID_ERRORS: tuple[type[BaseException], ...] = (*_PROC_ERRORS, ValueError, IndexError)
_IO_ERRORS: tuple[type[BaseException], ...] = (*_PROC_ERRORS, AttributeError, NotImplementedError, OSError)


class _Log:
    """Appends timestamped lines to sampler.log; never raises; rate limits repeated errors."""

    def __init__(self, path: Path) -> None:
        self._fd: int | None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            self._fd = None
        self._counts: dict[str, int] = {}

    def write(self, message: str) -> None:
        if self._fd is None:
            return
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid={os.getpid()} {message}\n"
        with contextlib.suppress(OSError):
            os.write(self._fd, line.encode("utf-8", "replace"))

    def error(self, where: str, exc: BaseException) -> None:
        key = f"{where}:{type(exc).__name__}"
        n = self._counts.get(key, 0) + 1
        self._counts[key] = n
        if n <= _MAX_LOGS_PER_ERROR:
            suffix = " (further occurrences not logged)" if n == _MAX_LOGS_PER_ERROR else ""
            self.write(f"error in {where}: {type(exc).__name__}: {exc}{suffix}")

    def close(self) -> None:
        suppressed = {k: n - _MAX_LOGS_PER_ERROR for k, n in self._counts.items() if n > _MAX_LOGS_PER_ERROR}
        if suppressed:
            self.write(f"suppressed repeated errors: {suppressed}")
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _ends_without_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


class _Known:
    """What the sampler remembers about one PID between samples."""

    __slots__ = ("cmdline0", "comm", "name", "pid", "ppid", "proc")

    def __init__(self, pid: int, ppid: int, proc: Any = None) -> None:
        self.pid = pid
        self.ppid = ppid
        self.proc = proc  # psutil.Process (psutil path only)
        self.comm: str | None = None  # the kernel's (truncated) name, to notice an exec
        self.name: str | None = None
        self.cmdline0: str | None = None


# -- Linux: read /proc directly ------------------------------------------------------------------
#
# psutil reads the same files, but through several layers of wrappers per call; a sample wakes up
# with cold caches every 100 ms, and there those layers made psutil's per-process reads about 3x as
# expensive as reading stat/status/io directly. The values are the same ones psutil reports
# (tests/test_sampler.py compares the two).

_PROCFS = sys.platform.startswith("linux") and os.path.exists("/proc/self/stat")
_CLK_TCK = float(os.sysconf("SC_CLK_TCK")) if _PROCFS else 100.0
_PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE")) if _PROCFS else 4096
_READ_CHUNK = 16384
_LIST_EVERY = 10  # list /proc at least every this many samples


def _read_proc(path: str) -> bytes:
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


def _parse_stat(data: bytes) -> tuple[str, list[bytes]]:
    """(comm, fields after comm): fields[0] state, [1] ppid, [11] utime, [12] stime, [17] num_threads,
    [21] rss in pages (proc(5) numbering minus 3)."""
    lpar = data.index(b"(")
    rpar = data.rindex(b")")
    return data[lpar + 1 : rpar].decode("utf-8", "surrogateescape"), data[rpar + 2 :].split()


def _field(data: bytes, key: bytes) -> int | None:
    """The integer after ``key`` (``b"voluntary_ctxt_switches:"``) at the start of a line."""
    i = data.find(b"\n" + key)
    if i < 0:
        if not data.startswith(key):
            return None
        i = -1
    j = i + 1 + len(key)
    k = data.find(b"\n", j)
    return int(data[j : k if k >= 0 else len(data)].split()[0])


def _rss_bytes(status: bytes, stat_fields: list[bytes]) -> int:
    """VmRSS from status, as psutil's statm-based rss: exact, whereas the rss field of stat is an
    approximation on recent kernels (per-CPU counters, off by hundreds of KiB)."""
    kib = _field(status, b"VmRSS:")  # "VmRSS:\t    1828 kB"; absent for zombies and kernel threads
    if kib is not None:
        return kib * 1024
    return int(stat_fields[21]) * _PAGE_SIZE


def _procfs_ppid(pid: int) -> int:
    return int(_parse_stat(_read_proc(f"/proc/{pid}/stat"))[1][1])


def _procfs_last_pid() -> int | None:
    """The most recently allocated PID (5th field of /proc/loadavg), None if unreadable."""
    try:
        return int(_read_proc("/proc/loadavg").split()[4])
    except (OSError, ValueError, IndexError):
        return None


def _procfs_cmdline0(pid: int) -> str | None:
    data = _read_proc(f"/proc/{pid}/cmdline")
    if not data:
        return None
    if data.endswith(b"\0"):
        data = data[:-1]
    if b"\0" not in data and b" " in data:
        data = data.split(b" ", 1)[0]  # a process that rewrote its argv (setproctitle), as psutil does
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _full_name(comm: str, cmdline0: str | None) -> str:
    """The kernel truncates names to 15 characters; extend from argv[0] like psutil's name()."""
    if len(comm) >= 15 and cmdline0:
        base = os.path.basename(cmdline0)
        if base.startswith(comm):
            return base
    return comm


class _Gpus:
    """NVML access; ``available`` is False when pynvml is missing or nvmlInit fails."""

    def __init__(self, log: _Log) -> None:
        self._log = log
        self._nvml: Any = None
        self._handles: list[Any] = []
        self.available = False
        try:
            import pynvml

            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
            self.available = True
        except Exception:  # not installed, no driver, no GPU: simply no "gpus" key
            self._nvml = None

    def sample(self) -> list[dict[str, Any]]:
        nv = self._nvml
        out: list[dict[str, Any]] = []
        for index, h in enumerate(self._handles):
            gpu: dict[str, Any] = {
                "index": index,
                "util_percent": None,
                "mem_used_bytes": None,
                "mem_total_bytes": None,
                "power_w": None,
                "sm_clock_mhz": None,
            }
            try:
                gpu["util_percent"] = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception as exc:
                self._log.error("nvml utilization", exc)
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                gpu["mem_used_bytes"] = int(mem.used)
                gpu["mem_total_bytes"] = int(mem.total)
            except Exception as exc:
                self._log.error("nvml memory", exc)
            try:
                gpu["power_w"] = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0
            except Exception as exc:
                self._log.error("nvml power", exc)
            try:
                gpu["sm_clock_mhz"] = int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            except Exception as exc:
                self._log.error("nvml clock", exc)
            out.append(gpu)
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


class Sampler:
    """Samples the process tree rooted at ``pid``; see the module docstring."""

    def __init__(
        self, run_dir: Path, pid: int, interval_s: float = DEFAULT_INTERVAL_S, use_procfs: bool | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        # use_procfs: read /proc directly (Linux, default) or go through psutil (elsewhere; tests)
        self._procfs = _PROCFS if use_procfs is None else (use_procfs and _PROCFS)
        self.pid = pid
        self.interval_s = max(float(interval_s), MIN_INTERVAL_S)
        self.log = _Log(self.run_dir / LOG_FILE)
        out_path = self.run_dir / SYSTEM_FILE
        self._out_fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._partial_line = _ends_without_newline(out_path)
        self._self_pid = os.getpid()
        self._known: dict[int, _Known] = {}
        self._last_listing: frozenset[str] = frozenset()
        self._last_tree: list[_Known] = []
        self._last_pid: int | None = None
        self._since_listing = 0
        self._tree_dirty = True
        self._root_done = False  # root gone or zombie: the next sample is the last one
        self._term = False
        self._wake_r: int | None = None
        self._gpus = _Gpus(self.log)
        self.samples_written = 0
        try:
            psutil.cpu_percent(percpu=True)  # prime: the first sample then covers one interval
        except Exception as exc:
            self.log.error("cpu_percent prime", exc)

    # -- signals -------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM: finish with one last sample. SIGINT: ignored. Main thread only."""
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, self._on_term)
        except (ValueError, OSError) as exc:  # not the main thread
            self.log.error("signal setup", exc)
            return
        try:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            signal.set_wakeup_fd(w)
            self._wake_r = r
        except (ValueError, OSError) as exc:
            self.log.error("wakeup fd setup", exc)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self._term = True

    def request_stop(self) -> None:
        self._term = True

    def _wait(self, seconds: float) -> None:
        """Sleeps up to ``seconds``; returns early when a signal arrives (via the wakeup fd)."""
        if seconds <= 0 or self._term:
            return
        if self._wake_r is not None:
            try:
                ready, _, _ = select.select([self._wake_r], [], [], seconds)
                if ready:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 512)
                return
            except (OSError, ValueError) as exc:
                self.log.error("select", exc)
                self._wake_r = None
        end = time.monotonic() + seconds
        while not self._term:
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    # -- tree discovery ------------------------------------------------------------------------

    def _tree(self) -> list[_Known]:
        """The root and all its descendants (root first, then breadth first), minus the sampler."""
        if self._procfs:
            last_pid = _procfs_last_pid()
            self._since_listing += 1
            if (
                last_pid is not None
                and last_pid == self._last_pid
                and not self._tree_dirty
                and self._since_listing < _LIST_EVERY
            ):
                # No process was created since the last listing (the kernel's last allocated PID is
                # unchanged) and none of ours exited: same tree, without listing /proc (which costs
                # about as much as reading five processes). /proc is still listed every
                # _LIST_EVERY samples in case the last PID is not what it claims (sandboxes).
                return self._last_tree
            self._last_pid = last_pid
            self._since_listing = 0
            self._tree_dirty = False
            names = os.listdir("/proc")
            listing = frozenset(names)
            if listing == self._last_listing:
                # Same PIDs as last time, hence the same parents (a PID's parent changes only when
                # the parent exits) and the same tree.
                return self._last_tree
            pids = [int(x) for x in names if x.isdigit()]
        else:
            listing = frozenset()
            pids = psutil.pids()
        current = set(pids)
        complete = True  # every PID's parent is known: the tree may be reused while nothing changes
        for gone in [p for p in self._known if p not in current]:
            del self._known[gone]
        if self.pid not in current:
            self._root_done = True
            return []
        for pid in pids:
            k = self._known.get(pid)
            if k is None:
                try:
                    if self._procfs:
                        self._known[pid] = _Known(pid, _procfs_ppid(pid))
                    else:
                        proc = psutil.Process(pid)
                        self._known[pid] = _Known(pid, int(proc.ppid()), proc)
                except _PROC_ERRORS:
                    complete = False  # e.g. exited since the listing; look again next time
                except (ValueError, IndexError) as exc:  # unparsable stat: never seen, but don't die
                    complete = False
                    self.log.error("read ppid", exc)
            elif k.ppid not in current and k.ppid > 0:
                # The parent exited, so the process was re-parented: only then does ppid change, so
                # it is not re-read on every sample (psutil's ppid() even costs a second Process()
                # for its pid-reuse check).
                try:
                    k.ppid = _procfs_ppid(pid) if self._procfs else int(k.proc.ppid())
                except _PPID_ERRORS:
                    del self._known[pid]
                    complete = False
        children: dict[int, list[int]] = {}
        for pid, k in self._known.items():
            children.setdefault(k.ppid, []).append(pid)
        root = self._known.get(self.pid)
        if root is None:
            # Cannot read it at all (e.g. vanished between listing and reading).
            return []
        out = [root]
        seen = {self.pid, self._self_pid}
        i = 0
        while i < len(out):
            for child in children.get(out[i].pid, ()):
                if child not in seen:
                    seen.add(child)
                    out.append(self._known[child])
            i += 1
        if self._procfs and complete:
            self._last_listing = listing
            self._last_tree = out
        else:
            self._last_listing = frozenset()
        return out

    # -- one process ---------------------------------------------------------------------------

    def _proc_record(self, k: _Known, is_root: bool) -> dict[str, Any] | None:
        """One process's entry in ``procs``; None when it cannot be read (gone, access denied)."""
        if self._procfs:
            return self._procfs_record(k, is_root)
        return self._psutil_record(k, is_root)

    def _check_root_gone(self, is_root: bool) -> None:
        if is_root and not psutil.pid_exists(self.pid):
            self._root_done = True

    def _procfs_record(self, k: _Known, is_root: bool) -> dict[str, Any] | None:
        pid = k.pid
        try:
            comm, st = _parse_stat(_read_proc(f"/proc/{pid}/stat"))
            status = _read_proc(f"/proc/{pid}/status")
        except _PROC_ERRORS:
            self._tree_dirty = True  # exited: rebuild the tree next time
            self._check_root_gone(is_root)
            return None
        if is_root and st[0] in (b"Z", b"X"):
            self._root_done = True
        if comm != k.comm:
            # first sighting, or the process exec'd: refresh the (cached) argv[0]
            k.comm = comm
            try:
                k.cmdline0 = _procfs_cmdline0(pid)
            except _PROC_ERRORS:
                k.cmdline0 = None
            k.name = _full_name(comm, k.cmdline0)
            if k.cmdline0 is None:
                k.cmdline0 = k.name
        read_bytes: int | None = None
        write_bytes: int | None = None
        try:
            io = _read_proc(f"/proc/{pid}/io")
            read_bytes = _field(io, b"read_bytes:")
            write_bytes = _field(io, b"write_bytes:")
        except (OSError, ValueError):
            pass  # another user's process, or a kernel without task io accounting
        return {
            "pid": pid,
            "ppid": k.ppid,
            "name": k.name,
            "cmdline0": k.cmdline0,
            "user_s": int(st[11]) / _CLK_TCK,
            "sys_s": int(st[12]) / _CLK_TCK,
            "rss_bytes": _rss_bytes(status, st),
            "threads": int(st[17]),
            "ctx_vol": _field(status, b"voluntary_ctxt_switches:"),
            "ctx_invol": _field(status, b"nonvoluntary_ctxt_switches:"),
            "read_bytes": read_bytes,
            "write_bytes": write_bytes,
        }

    def _psutil_record(self, k: _Known, is_root: bool) -> dict[str, Any] | None:
        p = k.proc
        if p is None:
            return None
        try:
            with p.oneshot():
                if is_root and p.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    self._root_done = True
                name = str(p.name())
                if name != k.comm:
                    # first sighting, or the process exec'd: refresh the (cached) argv[0]
                    k.comm = k.name = name
                    try:
                        argv: list[str] = p.cmdline()
                        k.cmdline0 = argv[0] if argv else name
                    except _PROC_ERRORS:
                        k.cmdline0 = name
                cpu = p.cpu_times()
                mem = p.memory_info()
                threads = int(p.num_threads())
                ctx = p.num_ctx_switches()
                read_bytes: int | None = None
                write_bytes: int | None = None
                try:
                    io = p.io_counters()
                    read_bytes = int(io.read_bytes)
                    write_bytes = int(io.write_bytes)
                except _IO_ERRORS:
                    pass  # no io counters here (permissions, macOS, kernel without task io accounting)
        except _PROC_ERRORS:
            self._check_root_gone(is_root)
            return None
        return {
            "pid": k.pid,
            "ppid": k.ppid,
            "name": name,
            "cmdline0": k.cmdline0,
            "user_s": float(cpu.user),
            "sys_s": float(cpu.system),
            "rss_bytes": int(mem.rss),
            "threads": threads,
            "ctx_vol": int(ctx.voluntary),
            "ctx_invol": int(ctx.involuntary),
            "read_bytes": read_bytes,
            "write_bytes": write_bytes,
        }

    # -- one sample ----------------------------------------------------------------------------

    def sample(self) -> dict[str, Any] | None:
        """Builds one sample; None when the root has disappeared."""
        t_ns = time.monotonic_ns()
        try:
            tree = self._tree()
        except Exception as exc:
            self.log.error("process tree", exc)
            tree = []
        if self._root_done and not tree:
            return None
        procs: list[dict[str, Any]] = []
        for i, k in enumerate(tree):
            try:
                rec = self._proc_record(k, is_root=(i == 0))
            except Exception as exc:
                self.log.error("process record", exc)
                continue
            if rec is not None:
                procs.append(rec)
        if self._root_done and not (procs and procs[0]["pid"] == self.pid):
            return None  # the root is gone: nothing more to say (its children were re-parented)
        cores: list[float] = []
        try:
            cores = [float(c) for c in psutil.cpu_percent(percpu=True)]
        except Exception as exc:
            self.log.error("cpu_percent", exc)
        record: dict[str, Any] = {"t_ns": t_ns, "cpu_percent_per_core": cores, "procs": procs}
        if self._gpus.available:
            try:
                record["gpus"] = self._gpus.sample()
            except Exception as exc:
                self.log.error("gpus", exc)
        return record

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
        if self._partial_line:
            # The file ends in an incomplete line (left by someone else, or a short write on a full
            # disk): end it, so that it stays one bad line the reader skips and ours stays intact.
            data = b"\n" + data
        # One write(2) on an O_APPEND fd: complete line or nothing, even under SIGKILL.
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._out_fd, view[written:])
        except OSError:
            self._partial_line = self._partial_line if written == 0 else True
            raise
        self._partial_line = False
        self.samples_written += 1

    def sample_and_write(self) -> None:
        try:
            record = self.sample()
            if record is not None:
                self.write(record)
        except Exception as exc:
            self.log.error("sample", exc)

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Samples until the root exits or SIGTERM (then one last sample)."""
        next_t = time.monotonic()
        while True:
            term_before = self._term
            self.sample_and_write()
            if term_before or self._root_done:
                break
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (machine overloaded, suspended): don't burst
                next_t = now
            self._wait(next_t - now)

    def close(self) -> None:
        self._gpus.close()
        with contextlib.suppress(OSError):
            os.close(self._out_fd)
        self.log.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pinchpoint.capture.sampler",
        description="Samples a process tree into RUN_DIR/system.jsonl until the root exits or SIGTERM.",
    )
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--pid", required=True, type=int)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between samples")
    args = parser.parse_args(argv)
    # Ignore SIGINT right away, before the (short) set-up.
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        Path(args.run_dir).mkdir(parents=True, exist_ok=True)
        sampler = Sampler(args.run_dir, args.pid, args.interval)
    except Exception as exc:
        _Log(Path(args.run_dir) / LOG_FILE).write(f"sampler failed to start: {type(exc).__name__}: {exc}")
        return 1
    sampler.install_signal_handlers()
    sampler.log.write(f"sampling pid {args.pid} every {sampler.interval_s}s")
    try:
        while True:
            try:
                sampler.run()
                break
            except Exception as exc:  # run() guards everything; belt and braces
                sampler.log.error("main loop", exc)
                sampler._wait(sampler.interval_s)
    finally:
        sampler.log.write(f"stopped after {sampler.samples_written} samples")
        sampler.close()
    return 0


def _child_env() -> dict[str, str]:
    """The environment for the sampler: ours, plus this package's parent folder on PYTHONPATH when the
    package is not installed in a site directory (running from a source checkout), so that
    ``-m pinchpoint.capture.sampler`` finds this very code."""
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parents[2])
    try:
        import site

        site_dirs = {str(Path(d).resolve()) for d in site.getsitepackages()}
        site_dirs.add(str(Path(site.getusersitepackages()).resolve()))
    except Exception:
        site_dirs = set()
    if pkg_root in site_dirs:
        return env
    path = env.get("PYTHONPATH")
    if not path:
        env["PYTHONPATH"] = pkg_root
    elif pkg_root not in path.split(os.pathsep):
        env["PYTHONPATH"] = pkg_root + os.pathsep + path
    return env


def spawn_sampler(run_dir: Path, pid: int, interval_s: float = DEFAULT_INTERVAL_S) -> subprocess.Popen[bytes]:
    """Starts the sampler for the process tree rooted at ``pid``, writing into ``run_dir``.

    It runs in its own session, so a Ctrl-C in the terminal does not reach it; stop it with
    :func:`stop_sampler`. Its stderr goes to ``run_dir/sampler.log``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOG_FILE, "ab") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pinchpoint.capture.sampler",
                "--run-dir",
                str(run_dir),
                "--pid",
                str(pid),
                "--interval",
                repr(float(interval_s)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            env=_child_env(),
        )


def stop_sampler(proc: subprocess.Popen[bytes], timeout_s: float = 2.0) -> None:
    """SIGTERM (the sampler then writes one last sample), wait up to ``timeout_s``, then SIGKILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(OSError):
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)


if __name__ == "__main__":
    sys.exit(main())
