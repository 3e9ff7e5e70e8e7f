"""Python stacks by default: a thread inside the program that reads every Python thread's stack a few
times a second (`faulthandler.dump_traceback` into a memfd), so findings name their function and line
without `--stacks`.

py-spy (`--stacks`, `capture/stacks.py`) reads from outside, follows DataLoader workers and costs a
process on a 2-core machine: at 5 Hz it added 5-9% to short runs (its start-up, mostly), too much to be
on by default. This thread costs a stack dump (~75 µs) and a CPU-clock read per thread per sample: at
`RATE_HZ` well under 0.2% of a core. torch's ops release the GIL, so a thread in a
matmul or a backward is seen at the Python line that called it; a C call that holds the GIL (a full
`gc.collect()`) delays the sample to its return, and the sample then carries the time it waited.

Each sample records, per thread, the stack, the wall time and the CPU time the thread used since its
previous sample (from its CPU-time clock): the flame graph and the host scope weigh
stacks by CPU time (as py-spy, which skips idle threads), the run's segments by wall time (where the
main thread was, asleep or not). Written at exit as `pystacks-PID.json` in the run directory
(`docs/run-directory.md`). Standard library only; never raises into the program.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import json
import os
import random
import re
import sys
import threading
import time
from pathlib import Path

ENV = "PINCHPOINT_PYSTACKS"
"""`0` turns the default sampler off (`run --stacks` replaces it with py-spy)."""
RATE_HZ = 10
"""Samples per second: six hundred a minute, enough to name a function holding a tenth of a run (20 Hz
cost 1-2% of a Python-bound step with the stack dump, `benchmarks/pysampler_cost.py`)."""
MAX_SAMPLES = 400_000
"""Per process (5.5 hours at `RATE_HZ`), then sampling stops: a bounded file."""
JOIN_S = 0.5
THREAD_CPUCLOCK = 6
"""Linux: a per-thread (4) scheduler-time (2) CPU clock, `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`."""
WINDOW_S = 0.001
"""After reading the stacks, how long the sampler watches each thread's CPU clock: running or waiting."""
RUNNING_FRACTION = 0.25
"""A thread on a CPU for at least this share of the window is running (a preempted one still is)."""
FAST_SWITCH_S = 5e-5
"""The switch interval while the sampler waits for its sample (Python's default: 5 ms)."""
PAUSE_S = (0.001, 0.005)
"""The sample is taken this long after the sampler's wake, at random."""
LATE_NS = 2_000_000
"""A sample held up this long: a call held the GIL (Python code lets go within ~0.1 ms here)."""
MAX_DEPTH = 128
DUMP_MAX = 1 << 20
PARSED_MAX = 2_000
"""Distinct dumps kept parsed (~2 KB each: a few MB of the program's memory at most); beyond, each is
parsed anew."""
Stack = tuple[tuple[str, int, str], ...]
"""(file, line, function) per frame, root first."""
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')
MAX_THREADS = 16
FILE_PREFIX = "pystacks-"
OWN_FRAME = "pinchpoint (<pinchpoint>)"
"""The leaf of a stack with a frame of pinchpoint's own work in it (a probe's matmul, the op window's
profiler starting, a record being written), whatever it called below, hooks of its own included (the
loader probe's DataLoader goes through pinchpoint's DataLoader hook); its wrappers around the
program's calls (hooks) are left out, as py-spy's files are read."""
_OWN = ("pinchpoint/capture/", "pinchpoint/notebook.py")
OWN_WORK = tuple(
    f"pinchpoint/capture/{m}.py"
    for m in (
        "agent", "alloc_trial", "calibrate", "loader_probe", "loop_shapes", "loop_site", "opcensus",
        "opwindow", "step_state", "thread_trial", "trials", "worker_trial", "writer", "environment",
        "live_tensors", "procinfo", "procfs", "on_demand", "cuda_steps", "frameworks", "nvml",
        "attached", "bootstrap", "stacks", "native", "sampler_files",
    )
)  # fmt: skip
"""pinchpoint's modules that do its own work; the others (hooks, patches) wrap the program's calls."""


class PySampler(threading.Thread):
    def __init__(self, run_dir: Path, rate_hz: float = RATE_HZ) -> None:
        super().__init__(name="pinchpoint-stacks", daemon=True)
        self.run_dir = run_dir
        self.period = 1.0 / rate_hz
        self.rate_hz = rate_hz
        self.pid = os.getpid()
        self.stop_event = threading.Event()
        self._fd: int | None = None
        self._stacks: dict[Stack, Stack] = {}
        self._parsed: dict[bytes, dict[int, Stack]] = {}
        self.stack_ids: dict[tuple[int, Stack], int] = {}
        self.samples: list[tuple[int, int, int, int]] = []
        """(monotonic ns, stack id, CPU ns and wall ns it stands for)."""
        self.threads: dict[int, str] = {}
        self._last: dict[int, tuple[int, int | None]] = {}
        """native thread id -> (monotonic ns, CPU ns) at its previous sample."""
        self.written = False

    def run(self) -> None:
        me = threading.get_ident()
        jitter = random.Random(self.pid)
        while not self.stop_event.wait(self.period * jitter.uniform(0.5, 1.5)):
            if len(self.samples) >= MAX_SAMPLES:
                return
            with contextlib.suppress(Exception):
                self.sample(me, jitter.uniform(*PAUSE_S))

    def sample(self, me: int, pause: float) -> None:
        """Each Python thread's stack, with the wall time since its previous sample and the CPU time of
        it this sample stands for: the thread's CPU since then where it is running, none where it waits.

        The sampler's wait ended where a thread let the GIL go (an op, a blocking call): a biased
        moment. So it pauses (`pause`, the GIL free) with the switch interval shortened, and reads the
        stacks when the GIL comes back: within ~0.1 ms wherever the thread is, in Python code that runs
        a few ms between ops too (an environment step between policy forwards). Running: the thread's
        CPU clock moved through the pause before the stack was read and through `WINDOW_S` after it; a
        thread that waits (a queue, I/O, sleep) does not get the compute before its wait put on the
        line that waits. A call that holds the GIL (`gc.collect()`) keeps the sampler out until the
        thread next checks for a switch (a loop's jump, a function's entry): the time it was held up, as
        far as the thread used CPU meanwhile, goes to where the thread is then."""
        threads = [
            (t.name, t.ident, t.native_id)
            for t in threading.enumerate()[:MAX_THREADS]
            if t.ident is not None and t.ident != me and t.native_id is not None
        ]
        start = [self._thread_cpu(tid) for _, _, tid in threads]
        self._empty()
        old = sys.getswitchinterval()
        try:
            sys.setswitchinterval(FAST_SWITCH_S)
            t0 = time.monotonic_ns()
            time.sleep(pause)
        finally:
            sys.setswitchinterval(old)
        if self._fd is None:
            return
        faulthandler.dump_traceback(self._fd, all_threads=True)  # (first: it keeps the GIL)
        now = time.monotonic_ns()
        before = [self._thread_cpu(tid) for _, _, tid in threads]
        dumped = self._read()
        walked = [dumped.get(ident, ()) for _, ident, _ in threads]
        late = max(0, now - t0 - int(pause * 1e9))
        time.sleep(WINDOW_S)
        window = time.monotonic_ns() - now
        after = [self._thread_cpu(tid) for _, _, tid in threads]
        for (name, _, tid), stack, ca, c0, c1 in zip(threads, walked, start, before, after, strict=True):
            prev = self._last.get(tid)
            self._last[tid] = (now, c0)
            if prev is None or not stack:
                continue  # (a thread's first sample: nothing to weigh yet)
            wall = now - prev[0]
            used = min(wall, c0 - prev[1]) if c0 is not None and prev[1] is not None else wall
            if ca is None or c0 is None or c1 is None:
                running = True
            else:
                running = c0 - ca >= RUNNING_FRACTION * (now - t0) and c1 - c0 >= RUNNING_FRACTION * window
            held = min(used, late) if late >= LATE_NS else 0
            key = (tid, stack)
            sid = self.stack_ids.get(key)
            if sid is None:
                sid = self.stack_ids[key] = len(self.stack_ids)
                self.threads.setdefault(tid, name)
            self.samples.append((now, sid, max(0, used if running else held), wall))

    def _read(self) -> dict[int, Stack]:
        """Every thread's Python stack, root first, by thread ident, as dumped. `faulthandler` writes them in one C
        call, holding the GIL throughout: walking `sys._current_frames()` in Python can lose the GIL
        midway (a switch request) and then read a frame its thread has since left, which crashed
        programs in Python 3.11 (SIGSEGV in `PyFrame_GetLineNumber`, twice in a suite). The file was
        emptied before the pause (`_empty`): truncating releases the GIL, and the dump must be the first
        thing the sampler does when it gets the GIL back."""
        raw = os.pread(self._fd, DUMP_MAX, 0) if self._fd is not None else b""
        seen = self._parsed.get(raw)
        if seen is not None:
            return seen  # (a loop's dumps repeat: parsed once)
        text = raw.decode("utf-8", "replace")
        out: dict[int, Stack] = {}
        frames: list[tuple[str, int, str]] = []
        ident = None
        for line in text.splitlines():
            head = _THREAD.match(line)
            if head is not None:
                if ident is not None:
                    out[ident] = self._intern(frames)
                ident, frames = int(head.group(1), 16), []
            elif (m := _FRAME.match(line)) is not None and len(frames) < MAX_DEPTH:
                frames.append((m.group(1), int(m.group(2)), m.group(3)))
        if ident is not None:
            out[ident] = self._intern(frames)
        if len(self._parsed) < PARSED_MAX:
            self._parsed[raw] = out
        return out

    def _empty(self) -> None:
        if self._fd is None:
            self._fd = os.memfd_create("pinchpoint-stacks")
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)

    def _intern(self, frames: list[tuple[str, int, str]]) -> Stack:
        stack = tuple(reversed(frames))
        return self._stacks.setdefault(stack, stack)

    def _thread_cpu(self, tid: int) -> int | None:
        """Thread `tid`'s CPU time now, from its CPU-time clock: the kernel brings a running thread's
        count up to date for the clock, while `/proc/.../schedstat` lags by up to a tick. The clock id
        is built from the kernel thread id as glibc builds it; `pthread_getcpuclockid` reads the thread's
        descriptor, and a thread that exited between `threading.enumerate()` and the call crashed the
        program (SIGSEGV, once in a suite). A dead id here is an `OSError`."""
        try:
            return time.clock_gettime_ns(((~tid) << 3) | THREAD_CPUCLOCK)
        except (OSError, OverflowError):
            return None

    def write(self) -> None:
        """`pystacks-PID.json`: the stacks in py-spy's folded form and the samples that point at them."""
        if self.written or os.getpid() != self.pid:
            return
        self.written = True
        self.stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=JOIN_S)  # (gone before the interpreter finalizes: no daemon mid-sample)
        if self._fd is not None and not self.is_alive():  # (a number reused by the program's next file)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        self._parsed.clear()
        stacks = [""] * len(self.stack_ids)
        for (tid, frames), sid in self.stack_ids.items():
            name = self.threads.get(tid, "")
            parts = [f'process {self.pid}:"python"', f"thread ({tid}): {name}"]
            labels = [self._label(frame) for frame in frames]
            parts += [label for label in labels if label is not None]
            if any(self._own_work(f[0]) for f in frames):
                # (pinchpoint's own code was running, or what it called: a probe's matmul, the op
                # window's profiler starting, a record written; not a hook around the program's call
                # alone, which no own-work frame holds)
                parts.append(OWN_FRAME)
            stacks[sid] = ";".join(parts)
        doc = {
            "sampler": "pinchpoint",
            "pid": self.pid,
            "rate_hz": self.rate_hz,
            "stacks": stacks,
            "samples": self.samples,
        }
        path = self.run_dir / f"{FILE_PREFIX}{self.pid}.json"
        tmp = path.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
            os.replace(tmp, path)

    @staticmethod
    def _own_work(file: str) -> bool:
        """A frame of pinchpoint's own work (a probe, a trial, a record written), not of a wrapper
        around the program's call (`.tolist()`, `gc.collect()`, a module call: the program's time)."""
        return file.endswith(OWN_WORK)

    @staticmethod
    def _label(frame: tuple[str, int, str]) -> str | None:
        file, line, name = frame
        if any(own in file for own in _OWN):
            return None
        return f"{name} ({file}:{line})".replace(";", ":")


SAMPLER: PySampler | None = None


def start(run_dir: Path) -> PySampler | None:
    """Start sampling this process, unless turned off (`PINCHPOINT_PYSTACKS=0`) or py-spy samples it."""
    global SAMPLER
    if SAMPLER is not None or os.environ.get(ENV, "1") == "0":
        return SAMPLER
    sampler = PySampler(run_dir)
    try:
        sampler.start()
    except RuntimeError:
        return None
    SAMPLER = sampler
    atexit.register(sampler.write)
    os.register_at_fork(after_in_child=_forget)
    return sampler


def _forget() -> None:
    """A forked child (a DataLoader worker) has no sampling thread: it writes nothing."""
    global SAMPLER
    SAMPLER = None
