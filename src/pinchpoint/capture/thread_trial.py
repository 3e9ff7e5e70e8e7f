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
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic

WARM = 1
"""Steps after a thread-count change that are not measured (the pool is rebuilt)."""
STEPS = 3
FILE = "thread_trial.json"


def fitting_threads() -> int:
    """One intra-op thread per usable core, shared among this machine's ranks (torchrun's
    LOCAL_WORLD_SIZE)."""
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    except ValueError:
        local = 1
    return max(1, len(os.sched_getaffinity(0)) // max(1, local))


class ThreadTrialRunner:
    def __init__(self, rank_dir: Path) -> None:
        self.rank_dir = rank_dir
        self.state = "idle"  # idle -> running -> done
        self.threads = 0
        self.fit = 0
        self.first = 0

    def on_step_end(self, torch: Any, next_step: int, ready: bool) -> bool:
        """At the boundary before step `next_step`; `ready`: the op window is done and its own tainted
        step is over. Returns whether `next_step` is a trial step (including the one after restoring)."""
        if self.state == "done" or torch is None:
            return False
        if self.state == "idle":
            if not ready:
                return False
            try:
                threads, fit = int(torch.get_num_threads()), fitting_threads()
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
        measured = list(range(self.first + WARM, self.first + WARM + STEPS))
        with contextlib.suppress(OSError):
            write_json_atomic(
                self.rank_dir / FILE, {"threads": self.threads, "fit": self.fit, "steps": measured}
            )
        return True  # the first step back at the program's setting rebuilds the pool: not steady either

    def restore(self, torch: Any) -> None:
        """Back to the program's thread count (also when the program ends mid-trial)."""
        if self.state != "running":
            return
        self.state = "done"
        with contextlib.suppress(Exception):
            torch.set_num_threads(self.threads)
