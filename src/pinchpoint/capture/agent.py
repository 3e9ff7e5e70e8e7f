"""The in-process agent: finds steps and times their phases inside an unmodified PyTorch program.

Installed by the bootstrap `sitecustomize` (for `pinchpoint run`) or by `pinchpoint.profile()`. It
waits for `torch` to be imported, then wraps a handful of framework entry points:

  DataLoader iterator `__next__`    -> data_wait       dataset fetcher `fetch`  -> fetch-{pid}.jsonl
  top-level `nn.Module.__call__`    -> forward         `torch.autograd.backward/grad` -> backward
  optimizer step (global hooks)     -> optimizer       `torch.save`             -> checkpoint_io

Steps end at optimizer steps (training), at top-level model calls under no_grad (inference) or at an
explicit `step()`. One line per step is written to `steps.jsonl` and flushed, so a killed program
keeps every finished step. Costs per step: a few clock reads and one `os.write`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from pinchpoint.capture import frameworks, loader_probe, loop_shapes, opwindow
from pinchpoint.capture.annotate import ANNOTATE_ENV, make_annotator
from pinchpoint.capture.loop_site import loop_site
from pinchpoint.capture.thread_trial import ThreadTrialRunner
from pinchpoint.capture.writer import JsonlWriter, write_json_atomic

RUN_DIR_ENV = "PINCHPOINT_RUN_DIR"
OPWINDOW_ENV = "PINCHPOINT_OPWINDOW"  # "START:STEPS", or "off"
DEFAULT_OPWINDOW = (10, 3)
"""After warm-up and after enough untouched steps to see the program as it runs without a profiler
(the profiler's own allocations can change how glibc treats the program's memory afterwards)."""
INFERENCE_AFTER_CALLS = 3
"""Top-level calls of one module with grad enabled and no backward in between: then it is inference."""

_now = time.monotonic_ns
_thread_cpu = time.thread_time_ns


class _ProcFile:
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


_thread_files = threading.local()


def thread_schedstat() -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) of the calling thread, or None where Linux doesn't say. Each
    thread keeps its own `/proc/thread-self/schedstat` open (opening it per read cost the DataLoader
    fetch hook ~80 µs a batch on the reference machine)."""
    f: _ProcFile | None = getattr(_thread_files, "schedstat", None)
    if f is None:
        f = _thread_files.schedstat = _ProcFile("/proc/thread-self/schedstat")
    return _schedstat_of(f.read())


def _forget_thread_files() -> None:
    """In a forked child: the inherited handles name the parent's threads."""
    global _thread_files
    f: _ProcFile | None = getattr(_thread_files, "schedstat", None)
    if f is not None:
        f.reset()
    _thread_files = threading.local()


def _schedstat_of(raw: bytes | None) -> tuple[int, int] | None:
    try:
        parts = raw.split() if raw is not None else []
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def _rss_of(raw: bytes | None) -> int | None:
    try:
        return int(raw.split()[1]) * PAGE_SIZE if raw is not None else None
    except (ValueError, IndexError):
        return None


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class Counters(NamedTuple):
    """What a step boundary reads (once: the end of one step is the start of the next)."""

    cpu_ns: int
    """The main thread's on-CPU time."""
    sched: tuple[int, int] | None
    faults: int
    """Minor page faults of this process (all threads): each is a fresh page the kernel had to map and
    zero, the cost of an allocator that hands memory back to the OS and asks again."""
    sys_ns: int
    """System (kernel) time of the process, all threads."""
    main_sys_ns: int | None
    """System time of the main thread (None when read from another thread): faults taken on it, and
    any other syscall it makes, lengthen the step one for one."""


_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)  # Linux


def _counters(main_tid: int) -> Counters:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    main_sys = None
    if _RUSAGE_THREAD is not None and threading.get_ident() == main_tid:
        main_sys = int(resource.getrusage(_RUSAGE_THREAD).ru_stime * 1e9)
    return Counters(_thread_cpu(), thread_schedstat(), ru.ru_minflt, int(ru.ru_stime * 1e9), main_sys)


class Agent:
    """Per-process capture state. One instance per process (`AGENT`); forked children reset it."""

    def __init__(self, run_dir: Path, rank: int, window: tuple[int, int] | None) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.rank_dir = run_dir / "ranks" / f"rank{rank}"
        self.role = "main"
        self.torch: Any = None
        self.tid = threading.get_ident()
        self.mode = "unknown"  # unknown | train | manual | inference | explicit
        self.step_index = 0
        self.step_start_ns: int | None = None
        self._statm = _ProcFile("/proc/self/statm")
        self.step_counters = _counters(self.tid)
        """The counters when the step in progress started."""
        self.intervals: list[list[Any]] = []
        self.in_module = False
        self.calls_without_backward: dict[int, int] = {}
        self.lead_optimizer: int | None = None
        """The optimizer whose step ends a training step: the last of the first iteration's cycle."""
        self.opt_cycle: list[int] = []
        """The optimizers of the first iteration, until one steps again
        (`loop_shapes.optimizer_stepped_first_cycle`)."""
        self.opt_start_ns = 0
        self.in_optimizer = False
        """Inside an optimizer's step (its closure's backwards are that step's, not manual updates)."""
        self.trained_modules: set[int] = set()
        """Top-level modules called with grad enabled in train mode: their no-grad eval-mode calls are
        evaluation steps, not part of the next training step."""
        self.trained_refs: list[Any] = []
        """Weak references to those modules (`loop_shapes.note_trained`)."""
        self.update_watch: Any = None
        """The torch-function mode noting a manual update's ops (`loop_shapes.start_update_watch`)."""
        self.await_boundary = False
        """A backward ended and no optimizer has ever stepped: the next data fetch or top-level call
        may start a new step (a manual update loop)."""
        self.last_backward_end_ns = 0
        self.pending: list[tuple[int, Counters, list[Any] | None]] = []
        """Candidate step ends of a loop not yet known to update its parameters by hand: (time,
        counters then, the update interval since the last backward)."""
        self.autocast_dtype: str | None = None
        self.loop: dict[str, Any] | None = None
        """The program's loop statement around its steps (`capture/loop_site.py`), found at the first step."""
        self._loop_sought = False
        self.explicit_kind = "explicit"
        """What the marked steps are (`explicit_step`): the last partial step is one too."""
        self.framework: dict[str, Any] | None = None
        """The framework driving the loop and its settings (`capture/frameworks.py`)."""
        self.steps = JsonlWriter(self.rank_dir / "steps.jsonl")
        self.device_clock: Any = None
        """CUDA events at step boundaries (`cuda_steps.DeviceStepClock`), once the program uses CUDA."""
        self.device_clock_failed = False
        self.loaders = JsonlWriter(self.rank_dir / "loaders.jsonl")
        self.fetches = JsonlWriter(self.rank_dir / f"fetch-{os.getpid()}.jsonl")
        self.distributed = JsonlWriter(self.rank_dir / "distributed.jsonl")
        self.ddp_on_cpu = False
        """A CPU model is wrapped in DDP: backward's blocked time is its gradient all-reduce wait."""
        self.window_spec = window
        self.window = opwindow.OpWindow(self.rank_dir, window)
        self.taint_next = False
        self.trial = ThreadTrialRunner(self.rank_dir)
        self.trial_now = False
        """The step in progress runs at the trial's thread count (`thread_trial`)."""
        self.closed = False
        self.annot: Any = None
        """An `annotate.Annotator` with `--annotate nvtx|itt`: phases as native-profiler ranges."""

    # ---- lifecycle -------------------------------------------------------------------------------

    def attach(self, torch: Any) -> None:
        """Called once `torch` is importable: wrap its entry points and write process-{pid}.json."""
        self.torch = torch
        from pinchpoint.capture.hooks import install_hooks

        install_hooks(self, torch)
        self._start_annotations(torch)
        self.write_process_info()
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.close)

    def _start_annotations(self, torch: Any) -> None:
        kind = os.environ.get(ANNOTATE_ENV)
        if not kind:
            return
        try:
            self.annot = make_annotator(kind, torch)
        except Exception as exc:
            message = f"--annotate {kind}: {exc}; running without annotations"
            _log(self.run_dir, message)
            with contextlib.suppress(OSError):
                sys.stderr.write(f"pinchpoint: {message}\n")

    def begin(self, phase: str) -> None:
        """A phase starts now on the training thread (only with `--annotate`)."""
        if self.annot is not None:
            self.annot.begin(phase, self.step_index)

    def end(self) -> None:
        if self.annot is not None:
            self.annot.end()

    def _after_fork(self) -> None:
        # A forked child (usually a DataLoader worker) keeps the hooks but records only its fetches;
        # the loader probe's worker records nothing.
        self.role = "probe" if loader_probe.ACTIVE else "worker"
        self.tid = threading.get_ident()
        _forget_thread_files()
        self._statm.reset()
        self.annot = None
        for w in (self.steps, self.loaders, self.fetches, self.distributed):
            w.forget()
        self.fetches = JsonlWriter(self.rank_dir / f"fetch-{os.getpid()}.jsonl")
        self.window.disable()
        self.closed = False

    def become_rank(self, rank: int) -> None:
        """`torch.distributed.init_process_group` returned here: this is rank `rank`'s training process.
        A torchrun rank already knew (from $RANK); a `torch.multiprocessing.spawn` child started as a
        worker in rank 0's folder and now moves to its own, with its own op window."""
        if self.role == "launcher" or (self.role == "main" and rank == self.rank):
            return
        old_info = self.rank_dir / f"process-{os.getpid()}.json"
        self.role = "main"
        self.tid = threading.get_ident()
        if rank != self.rank:
            self.rank = rank
            self.rank_dir = self.run_dir / "ranks" / f"rank{rank}"
            for w in (self.steps, self.loaders, self.fetches, self.distributed):
                w.move(self.rank_dir / w.path.name)
            with contextlib.suppress(OSError):
                old_info.unlink()
        if not self.window.active:
            self.window = opwindow.OpWindow(self.rank_dir, self.window_spec)
            self.trial = ThreadTrialRunner(self.rank_dir)
        self.write_process_info()

    def become_launcher(self) -> None:
        """This process starts the ranks (`torch.multiprocessing.spawn`) and runs no steps itself."""
        if self.role == "main" and self.step_start_ns is None and self.step_index == 0:
            self.role = "launcher"
            self.window.disable()
            self.write_process_info()

    def write_process_info(self) -> None:
        from pinchpoint.capture import environment

        torch = self.torch
        info: dict[str, Any] = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "rank": self.rank,
            "role": self.role,
            "started_ns": _now(),
            "torch": environment.torch_info(torch) if torch is not None else None,
            "threads": environment.thread_info(torch) if torch is not None else None,
            "autocast": {"cpu": self.autocast_dtype},
        }
        if self.loop is not None:
            info["loop"] = self.loop
        if self.framework is not None:
            info["framework"] = self.framework
        write_json_atomic(self.rank_dir / f"process-{os.getpid()}.json", info)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # A profiler left running into interpreter teardown crashes the process (SIGSEGV in Kineto):
        # stop the op window first, whatever happens next.
        with contextlib.suppress(Exception):
            self.window.stop(self.torch)
        self.trial.restore(self.torch)
        if self.pending and self.role == "main":
            with contextlib.suppress(Exception):
                loop_shapes.declare_manual(self)  # a short loop that never called an optimizer
        if (
            self.step_start_ns is not None
            and self.intervals
            and self.role == "main"
            and self.mode != "unknown"
        ):
            # The unfinished last step is still evidence (a crash mid-step): keep it, marked partial.
            with contextlib.suppress(Exception):
                self.partial_step()
        if self.annot is not None:
            with contextlib.suppress(Exception):
                self.annot.end_step()
        if self.role == "main":
            with contextlib.suppress(Exception):
                self.write_process_info()
        for w in (self.steps, self.loaders, self.fetches, self.distributed):
            with contextlib.suppress(OSError):
                w.close()
        if self.device_clock is not None:
            with contextlib.suppress(Exception):
                self.device_clock.close()

    # ---- intervals and steps ---------------------------------------------------------------------

    def interval(self, phase: str, start_ns: int, end_ns: int) -> None:
        if self.step_start_ns is None:
            self.step_start_ns = start_ns
        self.intervals.append([phase, start_ns, end_ns])

    def counters(self) -> Counters:
        return _counters(self.tid)

    def end_step(
        self,
        kind: str,
        end_ns: int | None = None,
        partial: bool = False,
        counters: Counters | None = None,
    ) -> None:
        end = _now() if end_ns is None else end_ns
        start = self.step_start_ns if self.step_start_ns is not None else end
        now = counters if counters is not None else self.counters()
        c0 = self.step_counters
        runq = now.sched[1] - c0.sched[1] if (now.sched is not None and c0.sched is not None) else None
        main_sys = (
            now.main_sys_ns - c0.main_sys_ns
            if now.main_sys_ns is not None and c0.main_sys_ns is not None
            else None
        )
        profiled = self.window.active or self.taint_next
        self.taint_next = False
        self.steps.add(
            {
                "step": self.step_index,
                "kind": kind,
                "start_ns": start,
                "end_ns": end,
                "profiled": profiled,
                "trial": self.trial_now,
                "partial": partial,
                "intervals": self.intervals,
                "cpu_ns": now.cpu_ns - c0.cpu_ns,
                "runq_ns": runq,
                "rss_bytes": _rss_of(self._statm.read()),
                "minor_faults": now.faults - c0.faults,
                "sys_ns": now.sys_ns - c0.sys_ns,
                "main_sys_ns": main_sys,
            }
        )
        self.steps.flush()
        if self.annot is not None:
            self.annot.end_step()
        self.fetches.flush()  # batches fetched in this process (num_workers=0)
        self._mark_device_step()
        self.intervals = []
        self.step_index += 1
        if not self._loop_sought and not partial and self.role == "main":
            # Once, after step 0 is written: its cost (a stack walk, one parse) lands in a warm-up step.
            self._loop_sought = True
            with contextlib.suppress(Exception):
                self.loop = loop_site(sys._getframe(1))
            if self.framework is None:
                with contextlib.suppress(Exception):
                    self.framework = frameworks.detect(sys._getframe(1))
            if self.loop is not None or self.framework is not None:
                with contextlib.suppress(Exception):
                    self.write_process_info()  # now, not only at exit: a killed run keeps them
        if self.window.on_step_end(self.torch, self.step_index):
            # The op window just opened (live-tensor snapshot) or closed (probes): no step's time.
            self.taint_next = True
            end = _now()
            now = self.counters()
        if self.role == "main" and self.window.done and self.window.spec is not None:
            self.trial_now = self.trial.on_step_end(self.torch, self.step_index, ready=not self.taint_next)
        # The next step starts where this one ended: its counters too (one reading, not two).
        self.step_start_ns = end
        self.step_counters = now

    def _mark_device_step(self) -> None:
        """On a CUDA program, an event at the step boundary (never initialises CUDA; never raises)."""
        if self.device_clock_failed or self.torch is None or self.role != "main":
            return
        try:
            if self.device_clock is None:
                if not self.torch.cuda.is_initialized():
                    return
                from pinchpoint.capture.cuda_steps import DeviceStepClock

                self.device_clock = DeviceStepClock(self.torch, self.rank_dir)
            self.device_clock.mark(self.step_index)
        except Exception:
            self.device_clock_failed = True

    def partial_step(self) -> None:
        """Write the step in progress (at exit); analysis treats it like the others."""
        self.window.disable()
        self.pending = []  # (their intervals stay in the partial step)
        kind = {"train": "train", "manual": "train", "inference": "inference"}.get(
            self.mode, self.explicit_kind
        )
        self.end_step(kind, partial=True)

    def explicit_step(self, kind: str = "explicit") -> None:
        """A step marked by the program (`prof.step()`) or a framework callback (`kind` train or eval)."""
        self.mode = "explicit"
        self.pending = []
        self.await_boundary = False
        if kind != "eval":
            self.explicit_kind = kind
        self.end_step(kind)

    def note_autocast(self) -> None:
        torch = self.torch
        with contextlib.suppress(Exception):
            for device in ("cpu", "cuda"):
                if torch.is_autocast_enabled(device):
                    self.autocast_dtype = str(torch.get_autocast_dtype(device)).replace("torch.", "")
                    return


def parse_window(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "":
        return DEFAULT_OPWINDOW
    if spec == "off":
        return None
    try:
        start, steps = spec.split(":")
        return int(start), max(1, int(steps))
    except ValueError:
        return DEFAULT_OPWINDOW


# ---- installation ---------------------------------------------------------------------------------

AGENT: Agent | None = None


def current() -> Agent | None:
    return AGENT


def start(run_dir: Path, rank: int | None = None, window: str | None = None) -> Agent:
    """Create this process's agent and attach it to torch now or when torch is first imported.

    `window` is the op window as "START:STEPS" or "off" (default: $PINCHPOINT_OPWINDOW, else 10:3).
    """
    global AGENT
    if AGENT is not None:
        return AGENT
    if rank is None:
        rank = int(os.environ.get("RANK", "0") or 0)
    AGENT = Agent(run_dir, rank, parse_window(window if window is not None else os.environ.get(OPWINDOW_ENV)))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "nn"):
        AGENT.attach(torch)
    else:
        from pinchpoint.capture.import_hook import TorchImportHook

        sys.meta_path.insert(0, TorchImportHook(AGENT))
    return AGENT


def _log(run_dir: Path, message: str) -> None:
    with contextlib.suppress(OSError), open(run_dir / "agent.log", "a") as f:
        f.write(f"[pid {os.getpid()}] {message}\n")
