"""A measured fix for too many intra-op threads: a few steps run with one thread per core.

More runnable threads than cores is cheap to spot and hard to price: the cost depends on how OpenMP's
threads spin at barriers and evict each other's caches, on op sizes, on the other processes. A model
of it (the main thread's run-queue wait) underestimated the planted example by a third. So, once the
op window is done, when the training process runs more intra-op threads than the usable cores allow
it (per local rank), pinchpoint runs the next steps with `torch.set_num_threads(fit)` — one warm-up
step, then `STEPS` measured — and restores the program's setting. Those steps are marked `trial` in
steps.jsonl (left out of every statistic) and `thread_trial.json` says which were measured. Results
can differ in the last bits (reductions split over fewer threads), as they do between any two thread
settings; `--opwindow off` turns the trial off with the window.

Cores other processes keep busy count too: a program that fits the machine alone (two intra-op threads
on two cores) but shares it with a busy process spins OpenMP barriers against a thread that is not
running (a small model went from 5 ms to 28 ms a step here). From the first step to the end of the op
window the runner measures what other processes took of this process's cores (`/proc/stat` against this
process and its children); at `FOREIGN_CORES_MIN` cores or more, a program whose threads fit the cores
alone is tried at the cores left free. (One that oversubscribes the cores by itself is tried at one
thread per core: beside a busy process, 16 threads measured faster than one here — the scheduler shares
the cores among threads, so fewer threads also means a smaller share.)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from pinchpoint.capture import procfs
from pinchpoint.capture.writer import write_json_atomic

WARM = 2
"""Steps after a thread-count change that are not measured: the pool is rebuilt, and on an EPYC the
second step after 16 -> 2 threads was still slower than those after it."""
STEPS = 8
"""Measured steps, against the twelve around them. Beside a busy process steps alternate fast and slow
(2.3 and 6.4 ms): three steps could not tell the modes from a gain, and five at a steady 2.6 ms left
p = 0.07 against twelve such steps (the permutation test of the means); eight leave p < 0.01."""
FILE = "thread_trial.json"
FOREIGN_CORES_MIN = 0.5
"""Cores' worth of CPU other processes used, on average, before the trial counts them as taken."""


def fitting_threads() -> int:
    """One intra-op thread per usable core, shared among this machine's ranks (torchrun's
    LOCAL_WORLD_SIZE)."""
    return max(1, len(os.sched_getaffinity(0)) // _local_ranks())


def _local_ranks() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


class ForeignLoad:
    """Cores' worth of CPU that processes other than this one and its children used, on the CPUs this
    process may run on, between `start()` and `cores()`."""

    def __init__(self) -> None:
        self.cpus: set[int] = set()
        self.start_ticks: tuple[int, int, float] | None = None
        self.started = False

    def start(self) -> None:
        self.started = True
        if _local_ranks() > 1:
            return  # the other ranks on this machine are the program too (`fitting_threads` shares)
        try:
            self.cpus = set(os.sched_getaffinity(0))
        except OSError:
            return
        busy = procfs.busy_ticks(self.cpus)
        if busy is not None:
            self.start_ticks = (busy, procfs.family_ticks(os.getpid()), time.monotonic())

    def cores(self) -> float | None:
        if self.start_ticks is None:
            return None
        busy = procfs.busy_ticks(self.cpus)
        if busy is None:
            return None
        busy0, own0, t0 = self.start_ticks
        wall = time.monotonic() - t0
        if wall < 0.05:
            return None
        own = procfs.family_ticks(os.getpid())
        return max(0.0, ((busy - busy0) - (own - own0)) / procfs.CLK_TCK / wall)


def compiled() -> bool:
    """torch.compile has built graphs in this process: dynamo guards them on the thread count
    (GLOBAL_STATE), so steps at another count recompile every compiled frame (a token model's trial
    step took 5 s on a CPU, and the recompiles pushed its frame past the recompile limit, to eager)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return False
    try:
        return bool(utils.counters["stats"]["unique_graphs"])
    except Exception:
        return True


def free_fit(fit: int, foreign: float | None) -> int:
    """Threads that fit once other processes' cores are taken off: `fit` less what they used (rounded),
    at least one; `fit` itself below `FOREIGN_CORES_MIN`."""
    if foreign is None or foreign < FOREIGN_CORES_MIN:
        return fit
    return max(1, min(fit, int(fit - foreign + 0.5)))


class ThreadTrialRunner:
    def __init__(self, rank_dir: Path) -> None:
        self.rank_dir = rank_dir
        self.state = "idle"  # idle -> running -> done
        self.threads = 0
        self.fit = 0
        self.first = 0
        self.foreign: float | None = None
        self.load = ForeignLoad()

    def on_step_end(self, torch: Any, next_step: int, ready: bool) -> bool:
        """At the boundary before step `next_step`; `ready`: the op window is done and its own tainted
        step is over. Returns whether `next_step` is a trial step (including the one after restoring)."""
        if self.state == "done" or torch is None:
            return False
        if self.state == "idle":
            if not self.load.started:
                self.load.start()
            if not ready:
                return False
            if compiled():
                self.state = "done"
                return False
            try:
                self.foreign = self.load.cores()
                threads, fit = int(torch.get_num_threads()), fitting_threads()
                if threads <= fit:  # it fits the machine alone; does it beside the other processes?
                    fit = free_fit(fit, self.foreign)
            except Exception:
                self.state = "done"
                return False
            if threads <= fit:
                self.state = "done"
                return False
            try:
                torch.set_num_threads(fit)
            except Exception:
                self.state = "done"
                return False
            self.threads, self.fit, self.first, self.state = threads, fit, next_step, "running"
            return True
        # running
        if next_step < self.first + WARM + STEPS:
            return True
        self.restore(torch)
        self._write(list(range(self.first + WARM, self.first + WARM + STEPS)))
        return True  # the first step back at the program's setting rebuilds the pool: not steady either

    def stop_early(self, torch: Any, next_step: int) -> None:
        """Back to the program's threads before `next_step` (its steps lost, pinchpoint's budget is
        spent): the steps measured so far stand as the trial."""
        measured = list(range(self.first + WARM, next_step))
        self.restore(torch)
        if measured:
            self._write(measured, stopped="budget")

    def _write(self, measured: list[int], **extra: str) -> None:
        with contextlib.suppress(OSError):
            write_json_atomic(
                self.rank_dir / FILE,
                {"threads": self.threads, "fit": self.fit, "steps": measured, "foreign_cores": self.foreign,
                 **extra},
            )  # fmt: skip

    def restore(self, torch: Any) -> None:
        """Back to the program's thread count (also when the program ends mid-trial)."""
        if self.state != "running":
            return
        self.state = "done"
        with contextlib.suppress(Exception):
            torch.set_num_threads(self.threads)
