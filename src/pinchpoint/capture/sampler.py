"""System sampler: a separate process that samples the program's process tree.

Run as ``python -m pinchpoint.capture.sampler --run-dir DIR --pid PID [--interval 0.5]``. Every
``interval`` seconds it appends one JSON line to ``DIR/system.jsonl`` (docs/run-directory.md) describing
PID and its descendants (re-discovered at every sample: DataLoader workers and torchrun ranks come and
go), the per-core CPU utilisation, pinchpoint's own CPU and, when NVML is available, the GPUs.

Design constraints:

* Start-up must be fast: this module and its helpers (:mod:`.procfs`, :mod:`.procinfo`, :mod:`.nvml`,
  :mod:`.sampler_files`) import only the standard library and psutil (pynvml is tried lazily). No
  numpy, torch or rich, and nothing else from pinchpoint.
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
(:mod:`.procfs`: the same values psutil gives, at a third of the cost when caches are cold, which
they are after 100 ms of sleep); ``cmdline`` is read only when a process is first seen or its name
changes (exec); a PID's parent is read only when the PID is new or its parent exited; and ``/proc``
itself is listed only when the kernel's last allocated PID moved or one of ours exited (and at least
every ``_LIST_EVERY`` samples). Elsewhere (macOS) the same is done through cached ``psutil.Process``
objects with ``oneshot()`` (:mod:`.procinfo`).
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

from pinchpoint.capture import procfs, procinfo
from pinchpoint.capture.nvml import Gpus
from pinchpoint.capture.procinfo import PROC_ERRORS, Known
from pinchpoint.capture.sampler_files import SamplerLog, ends_without_newline

SYSTEM_FILE = "system.jsonl"
LOG_FILE = "sampler.log"
DEFAULT_INTERVAL_S = 0.5
"""Every sample costs the program ~1 ms of a core even under SCHED_IDLE; at 0.1 s that was ~1% of its
steps (benchmarks/hooks_inprocess.py --part sampler), at 0.5 s ~0.3%. The rules use cumulative counters
(first and last sample), so fewer samples lose no accuracy; `--interval` sets it."""
MIN_INTERVAL_S = 0.01

_PPID_ERRORS: tuple[type[BaseException], ...] = (*PROC_ERRORS, ValueError, IndexError)
_LIST_EVERY = 10  # list /proc at least every this many samples


class Sampler:
    """Samples the process tree rooted at ``pid``; see the module docstring."""

    def __init__(
        self, run_dir: Path, pid: int, interval_s: float = DEFAULT_INTERVAL_S, use_procfs: bool | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        # use_procfs: read /proc directly (Linux, default) or go through psutil (elsewhere; tests)
        self._procfs = procfs.PROCFS if use_procfs is None else (use_procfs and procfs.PROCFS)
        self.pid = pid
        self.interval_s = max(float(interval_s), MIN_INTERVAL_S)
        self.log = SamplerLog(self.run_dir / LOG_FILE)
        out_path = self.run_dir / SYSTEM_FILE
        self._out_fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._partial_line = ends_without_newline(out_path)
        self._self_pid = os.getpid()
        self._known: dict[int, Known] = {}
        self._last_listing: frozenset[str] = frozenset()
        self._last_tree: list[Known] = []
        self._last_pid: int | None = None
        self._since_listing = 0
        self._tree_dirty = True
        self._root_done = False  # root gone or zombie: the next sample is the last one
        self._term = False
        self._wake_r: int | None = None
        self._gpus = Gpus(self.log)
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

    def _tree(self) -> list[Known]:
        """The root and all its descendants (root first, then breadth first), minus the sampler."""
        listed = self._list_pids()
        if listed is None:
            return self._last_tree
        pids, listing = listed
        current = set(pids)
        for gone in [p for p in self._known if p not in current]:
            del self._known[gone]
        if self.pid not in current:
            self._root_done = True
            return []
        complete = self._learn_parents(pids, current)
        root = self._known.get(self.pid)
        if root is None:
            # Cannot read it at all (e.g. vanished between listing and reading).
            return []
        out = self._descendants(root)
        if self._procfs and complete:
            self._last_listing = listing
            self._last_tree = out
        else:
            self._last_listing = frozenset()
        return out

    def _list_pids(self) -> tuple[list[int], frozenset[str]] | None:
        """Every PID on the machine, with the listing of /proc they came from (empty through psutil);
        None when the tree is known to be the same as last time."""
        if not self._procfs:
            return psutil.pids(), frozenset()
        last_pid = procfs.last_pid()
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
            return None
        self._last_pid = last_pid
        self._since_listing = 0
        self._tree_dirty = False
        names = os.listdir("/proc")
        listing = frozenset(names)
        if listing == self._last_listing:
            # Same PIDs as last time, hence the same parents (a PID's parent changes only when
            # the parent exits) and the same tree.
            return None
        return [int(x) for x in names if x.isdigit()], listing

    def _learn_parents(self, pids: list[int], current: set[int]) -> bool:
        """Know every PID's parent: read it for new PIDs and for those whose parent exited. True when
        every one is known (the tree may then be reused while nothing changes)."""
        complete = True
        for pid in pids:
            k = self._known.get(pid)
            if k is None:
                try:
                    if self._procfs:
                        self._known[pid] = Known(pid, procfs.ppid(pid))
                    else:
                        proc = psutil.Process(pid)
                        self._known[pid] = Known(pid, int(proc.ppid()), proc)
                except PROC_ERRORS:
                    complete = False  # e.g. exited since the listing; look again next time
                except (ValueError, IndexError) as exc:  # unparsable stat: never seen, but don't die
                    complete = False
                    self.log.error("read ppid", exc)
            elif k.ppid not in current and k.ppid > 0:
                # The parent exited, so the process was re-parented: only then does ppid change, so
                # it is not re-read on every sample (psutil's ppid() even costs a second Process()
                # for its pid-reuse check).
                try:
                    k.ppid = procfs.ppid(pid) if self._procfs else int(k.proc.ppid())
                except _PPID_ERRORS:
                    del self._known[pid]
                    complete = False
        return complete

    def _descendants(self, root: Known) -> list[Known]:
        """`root` and the known processes below it, breadth first, without the sampler itself."""
        children: dict[int, list[int]] = {}
        for pid, k in self._known.items():
            children.setdefault(k.ppid, []).append(pid)
        out = [root]
        seen = {self.pid, self._self_pid}
        i = 0
        while i < len(out):
            for child in children.get(out[i].pid, ()):
                if child not in seen:
                    seen.add(child)
                    out.append(self._known[child])
            i += 1
        return out

    # -- one process ---------------------------------------------------------------------------

    def _proc_record(self, k: Known, is_root: bool) -> dict[str, Any] | None:
        """One process's entry in ``procs``; None when it cannot be read (gone, access denied)."""
        if not self._procfs:
            try:
                return procinfo.psutil_record(k, self._end_of_root if is_root else None)
            except PROC_ERRORS:
                self._check_root_gone(is_root)
                return None
        try:
            comm, st = procfs.parse_stat(procfs.read_proc(f"/proc/{k.pid}/stat"))
            status = procfs.read_proc(f"/proc/{k.pid}/status")
        except PROC_ERRORS:
            self._tree_dirty = True  # exited: rebuild the tree next time
            self._check_root_gone(is_root)
            return None
        if is_root and st[0] in (b"Z", b"X"):
            self._root_done = True
        return procinfo.procfs_record(k, comm, st, status)

    def _check_root_gone(self, is_root: bool) -> None:
        if is_root and not psutil.pid_exists(self.pid):
            self._root_done = True

    def _end_of_root(self) -> None:
        self._root_done = True

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
        try:  # user time machine-wide: other programs' work, not the kernel's (writeback, reclaim)
            record["cpu_user_s"] = float((times := psutil.cpu_times()).user + times.nice)
        except Exception as exc:
            self.log.error("cpu_times", exc)
        record["tool"] = procinfo.tool_cpu({k.pid for k in tree}, self._procfs)
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
        SamplerLog(Path(args.run_dir) / LOG_FILE).write(
            f"sampler failed to start: {type(exc).__name__}: {exc}"
        )
        return 1
    sampler.install_signal_handlers()
    policy = _yield_the_cpu()
    sampler.log.write(f"sampling pid {args.pid} every {sampler.interval_s}s ({policy})")
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


SCHED_ENV = "PINCHPOINT_SAMPLER_SCHED"
"""`normal` keeps the sampler at the default priority (for measuring what SCHED_IDLE saves)."""


def _yield_the_cpu() -> str:
    """Run the sampler under SCHED_IDLE: it then takes a core only when the program leaves one idle, so
    it never preempts one of the program's compute threads (with OpenMP, one preempted thread holds up
    the whole parallel region). A program that saturates every core delays samples, but they carry
    their own timestamps, and a stuck program leaves cores idle."""
    if os.environ.get(SCHED_ENV) == "normal":
        return "normal priority"
    return lowest_priority()


def lowest_priority() -> str:
    """This process under SCHED_IDLE, else at nice 19 (the sampler; the live panel's watcher, from its
    preexec_fn). Returns which."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined,unused-ignore]
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)
        return "nice 19"


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
