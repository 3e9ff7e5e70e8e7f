"""What can be judged of a training process from outside it, when `pinchpoint attach` cannot put its
agent in: the main thread's Python stacks (py-spy, idle samples included, so a wait counts as the
time it takes) and /proc (CPU per thread, the DataLoader workers' CPU, memory).

The main thread's samples give its time by phase, each sample charged to the deepest phase it is
in (a closure's backward inside `optimizer.step(closure)` is backward, as the agent counts it):

  data_wait   inside torch.utils.data: fetching a batch in the process, or waiting for a worker's
  forward     inside a module call
  backward    inside autograd
  optimizer   inside torch.optim
  checkpoint  inside torch.serialization (torch.save, torch.load)
  loop        none of these: the loop's own code, and torch ops it calls outside any module
  other       a main thread not in the program's code (nothing under `<module>`)

With no step boundaries, no op window and no trials, the shares are of the main thread's time over
the attach, not of a step, and nothing is measured by applying a fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from pinchpoint.analysis.cpu import CpuUsage, cores_busy, cpu_usage
from pinchpoint.analysis.stacks import display_label, is_library
from pinchpoint.trace.run import Run
from pinchpoint.trace.stacks import Frame, Stacks, StackSample

PHASES = ("data_wait", "forward", "backward", "optimizer", "checkpoint", "loop", "other")
_MARKERS = (
    ("torch/utils/data/", None, "data_wait"),
    ("torch/serialization.py", None, "checkpoint"),
    ("torch/optim/", None, "optimizer"),
    ("torch/autograd/", None, "backward"),
    ("torch/_tensor.py", "backward", "backward"),
    ("torch/nn/modules/module.py", "_call_impl", "forward"),
)
"""(file fragment, function or None, phase): a frame that puts a sample inside a phase."""
_MAIN_ROOTS = frozenset({"<module>", "_run_module_as_main", "_run_code"})
TOP_LINES = 3
BUSY_THREAD_CORES = 0.05
"""A thread that used this much of a core over the attach counts as one competing for the cores (an
OpenMP pool's threads each run a share of every op: sixteen on two cores use ~0.12 each)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MainThread:
    samples: int
    shares: dict[str, float]
    """Phase -> fraction of the main thread's samples (`PHASES`; they sum to 1)."""
    hot: dict[str, list[tuple[str, float]]]
    """Phase -> its hottest lines of the program's own code, with their share of all samples."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Threads:
    wall_s: float
    main_cores: float | None
    """Cores' worth of CPU the main thread used over the attach (1.0: on a CPU all the time)."""
    busy: int
    """Threads of the main process that used at least `BUSY_THREAD_CORES`."""
    total: int


def main_thread(stacks: Stacks, pid: int, cwd: str = "") -> MainThread | None:
    """The main thread's time by phase, from py-spy's `--threads --idle` samples of process `pid`."""
    mine = [s for s in stacks.samples if s.frames and (s.pid is None or s.pid == pid) and _is_main(s, pid)]
    total = sum(s.count for s in mine)
    if total == 0:
        return None
    counts: Counter[str] = Counter()
    lines: dict[str, Counter[str]] = {}
    for s in mine:
        phase = phase_of(s.frames)
        counts[phase] += s.count
        own = _deepest_own(s.frames)
        if own is not None:
            lines.setdefault(phase, Counter())[display_label(own, cwd)] += s.count
    shares = {p: counts[p] / total for p in PHASES}
    hot = {p: [(label, n / total) for label, n in c.most_common(TOP_LINES)] for p, c in lines.items()}
    return MainThread(samples=total, shares=shares, hot=hot)


def phase_of(frames: tuple[Frame, ...]) -> str:
    """The deepest phase marker among `frames` (root first)."""
    if not frames or frames[0].function not in _MAIN_ROOTS:
        return "other"
    for f in reversed(frames):
        name = f.function.rpartition(".")[2]  # py-spy writes qualified names: Module._call_impl
        for fragment, function, phase in _MARKERS:
            if fragment in f.file and (function is None or name == function):
                return phase
    return "loop"


def threads(cpu_s: dict[str, float], pid: int, wall_s: float) -> Threads | None:
    """From each thread's CPU seconds over the attach (thread id -> seconds)."""
    if wall_s <= 0 or not cpu_s:
        return None
    main = cpu_s.get(str(pid))
    return Threads(
        wall_s=wall_s,
        main_cores=None if main is None else main / wall_s,
        busy=sum(1 for v in cpu_s.values() if v / wall_s >= BUSY_THREAD_CORES),
        total=len(cpu_s),
    )


def _is_main(s: StackSample, pid: int) -> bool:
    if s.thread is not None and s.thread.isdigit():
        return int(s.thread) == pid  # py-spy 0.4: the OS thread id; the main thread's is the pid
    return s.frames[0].function in _MAIN_ROOTS


def _deepest_own(frames: tuple[Frame, ...]) -> Frame | None:
    return next((f for f in reversed(frames) if not is_library(f)), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutsideWatch:
    """Everything read of a process watched from outside, what the outside rules judge."""

    main: MainThread | None
    """The main thread's time by phase (None without py-spy's stacks)."""
    threads: Threads | None
    usage: CpuUsage | None
    """The process tree's cores over the attach (the system sampler)."""
    workers: Mapping[int, float]
    """The main process's children (DataLoader workers): pid -> the cores each kept busy."""
    usable_cores: int
    rss_bytes: tuple[int, ...]
    """The main process's resident memory at each system sample."""
    watched_ns: int
    """From the first system sample to the last."""


def outside_watch(run: Run, pid: int, wall_s: float, thread_cpu_s: Mapping[str, float]) -> OutsideWatch:
    """The watch of process `pid` from its run directory's recordings and the attach's per-thread CPU."""
    usage = cpu_usage(run, run.system[0].t_ns, run.system[-1].t_ns, pid) if len(run.system) >= 2 else None
    children = {p.pid for s in run.system for p in s.procs if p.ppid == pid}
    workers = {
        p: sum(c for _, c in series) / len(series)
        for (p, _), series in cores_busy(run.system).items()
        if p in children and series
    }
    return OutsideWatch(
        main=main_thread(run.stacks, pid, run.meta.cwd) if run.stacks is not None else None,
        threads=threads(dict(thread_cpu_s), pid, wall_s),
        usage=usage,
        workers=workers,
        usable_cores=run.environment.cpu.usable_cores,
        rss_bytes=tuple(p.rss_bytes for s in run.system for p in s.procs if p.pid == pid),
        watched_ns=run.system[-1].t_ns - run.system[0].t_ns if run.system else 0,
    )
