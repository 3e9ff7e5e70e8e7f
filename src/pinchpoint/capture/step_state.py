"""What the agent keeps about the step in progress (`capture/agent.py`): where it started, the counters
read then, and the events that mark its boundary on a GPU. Standard library only; no agent import."""

from __future__ import annotations

import resource
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pinchpoint.capture.gc_watch import WATCH as GC
from pinchpoint.capture.graph_watch import WATCH as GRAPHS
from pinchpoint.capture.procfs import thread_schedstat

_thread_cpu = time.thread_time_ns
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)  # Linux


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
    gc: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Python's collector so far (`capture/gc_watch.py`): ns inside collections, collections, full
    ones, ns inside explicit `gc.collect()` calls."""
    graphs: tuple[int, int] = (0, 0)
    """torch.compile's graphs so far (`capture/graph_watch.py`): calls, ns inside them."""


def read_counters(main_tid: int) -> Counters:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    main_sys = None
    if _RUSAGE_THREAD is not None and threading.get_ident() == main_tid:
        main_sys = int(resource.getrusage(_RUSAGE_THREAD).ru_stime * 1e9)
    return Counters(
        _thread_cpu(), thread_schedstat(), ru.ru_minflt, int(ru.ru_stime * 1e9), main_sys, *_python_counts()
    )


def cheap_counters(start: Counters) -> Counters:
    """`start`'s readings with what is cheap read now: the thread's CPU time (the vDSO's clock, no
    file), the collector's and compiled graphs' counts (`shared_counters`)."""
    gc, graphs = _python_counts()
    return start._replace(cpu_ns=_thread_cpu(), gc=gc, graphs=graphs)


def _python_counts() -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    return (GC.ns, GC.collections, GC.full, GC.explicit_ns), (GRAPHS.calls, GRAPHS.ns)


def kernel_changes(c0: Counters, c1: Counters) -> dict[str, int | None]:
    """What the kernel counted between two readings: the main thread's run-queue wait, the process's
    minor faults and system time, the main thread's system time (None where either reading lacks it)."""
    runq = c1.sched[1] - c0.sched[1] if c1.sched is not None and c0.sched is not None else None
    main_sys = (
        c1.main_sys_ns - c0.main_sys_ns if c1.main_sys_ns is not None and c0.main_sys_ns is not None else None
    )
    return {
        "runq_ns": runq,
        "minor_faults": c1.faults - c0.faults,
        "sys_ns": c1.sys_ns - c0.sys_ns,
        "main_sys_ns": main_sys,
    }


@dataclass(slots=True)
class StepState:
    """The step in progress (its phase intervals are `Agent.intervals`, which `loop_shapes` edits)."""

    counters: Counters
    """The counters when it started."""
    index: int = 0
    start_ns: int | None = None
    """When it started: the previous step's end, else its first interval's start."""
    tainted: bool = False
    """The op window opened or closed at its start (a live-tensor snapshot, the probes): its time is
    not the program's, and it is written as profiled."""
    trial: bool = False
    """It runs at the thread trial's thread count (`thread_trial`)."""
    loader: int | None = None
    """The serial of the DataLoader iterator that last gave it a batch (`hooks._wrap_loader`)."""
    agent_ns: int = 0
    """pinchpoint's own bookkeeping at its start (writing the previous step, reading counters): not the
    program's time; analysis starts the step after it."""
    tokens: int | None = None
    """The sequence length of the token ids its last top-level model call took (`hooks._tokens`)."""
    tail: tuple[int, int] | None = None
    """Those ids' first row's last two, where read without a device sync."""
    rows: int | None = None
    """The first dimension (the batch) of its last top-level model call's first tensor argument."""

    def record(
        self,
        kind: str,
        end: int,
        partial: bool,
        now: Counters,
        profiled: bool,
        intervals: list[list[Any]],
        rss: int | None,
    ) -> dict[str, Any]:
        """This step as its steps.jsonl line (docs/run-directory.md), ending at `end` with `now`."""
        c0 = self.counters
        loader, self.loader = self.loader, None  # (the next step says which fed it)
        kernel = kernel_changes(c0, now)
        record = {
            "step": self.index,
            "kind": kind,
            "start_ns": self.start_ns if self.start_ns is not None else end,
            "end_ns": end,
            "profiled": profiled,
            "trial": self.trial,
            "partial": partial,
            "intervals": intervals,
            "cpu_ns": now.cpu_ns - c0.cpu_ns,
            "runq_ns": kernel["runq_ns"],
            "rss_bytes": rss,
            "minor_faults": kernel["minor_faults"],
            "sys_ns": kernel["sys_ns"],
            "main_sys_ns": kernel["main_sys_ns"],
            "agent_ns": self.agent_ns,
            "loader": loader,
            "gc_ns": now.gc[0] - c0.gc[0],
            "gc_collections": now.gc[1] - c0.gc[1],
            "gc_full": now.gc[2] - c0.gc[2],
            "gc_explicit_ns": now.gc[3] - c0.gc[3],
        }
        if self.tokens is not None:
            record["tokens"], self.tokens = self.tokens, None
        if self.tail is not None:
            record["tail"], self.tail = list(self.tail), None
        if self.rows is not None:
            record["rows"], self.rows = self.rows, None
        if now.graphs[0] != c0.graphs[0]:  # (only where torch.compile's graphs ran)
            record["graph_calls"] = now.graphs[0] - c0.graphs[0]
            record["graph_ns"] = now.graphs[1] - c0.graphs[1]
        return record


class DeviceMarks:
    """On a CUDA program, a CUDA event at each step boundary (`cuda_steps.DeviceStepClock`), from the
    first boundary after the program initialised CUDA. Never initialises CUDA, never raises: after
    one error it stops marking."""

    def __init__(self) -> None:
        self.clock: Any = None
        self.failed = False

    def mark(self, torch: Any, rank_dir: Path, step_index: int) -> None:
        if self.failed or torch is None:
            return
        try:
            if self.clock is None:
                if not torch.cuda.is_initialized():
                    return
                from pinchpoint.capture.cuda_steps import DeviceStepClock  # (CUDA programs only)

                self.clock = DeviceStepClock(torch, rank_dir)
            self.clock.mark(step_index)
        except Exception:
            self.failed = True

    def close(self) -> None:
        if self.clock is not None:
            self.clock.close()
