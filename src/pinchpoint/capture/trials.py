"""pinchpoint's reversible trials, one after the other once the op window is done: the thread trial
(`thread_trial.py`), the allocator trial (`alloc_trial.py`), then the DataLoader workers trial
(`worker_trial.py`). Each runs a few of the program's own steps with its fix applied, marks them
`trial` and writes what it measured."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.alloc_trial import AllocTrialRunner
from pinchpoint.capture.thread_trial import ThreadTrialRunner
from pinchpoint.capture.worker_trial import WorkerTrialRunner

TRIALS_ENV = "PINCHPOINT_TRIALS"
"""`off` (`pinchpoint run --no-trials`): no trial runs; the program's settings are never changed."""


def trials_enabled() -> bool:
    return os.environ.get(TRIALS_ENV, "").lower() != "off"


class Trials:
    def __init__(self, rank_dir: Path) -> None:
        self.threads = ThreadTrialRunner(rank_dir)
        self.alloc = AllocTrialRunner(rank_dir)
        self.workers = WorkerTrialRunner(rank_dir)

    def observe(self, record: dict[str, Any]) -> None:
        """A finished step's steps.jsonl line."""
        own = not (record["profiled"] or record["trial"])
        index = record["step"]
        self.alloc.observe(index, record["minor_faults"], own)
        if self.workers.state == "idle":  # (only until its trial: this runs at every step's end)
            waits = [end - start for phase, start, end in record["intervals"] if phase == "data_wait"]
            self.workers.observe(index, record["end_ns"] - record["start_ns"], sum(waits), len(waits), own)

    def note_fetch(self, wall_ns: int, cpu_ns: int) -> None:
        """A batch fetched in the training process."""
        self.workers.note_fetch(wall_ns, cpu_ns)

    def next_batch(self, it: Any, orig_next: Callable[[Any], Any]) -> Any:
        """The program's `next(it)` (the workers trial may serve it)."""
        return self.workers.next_batch(it, orig_next)

    def on_step_end(self, torch: Any, next_step: int, ready: bool) -> bool:
        """At the boundary before `next_step` (`ready`: the op window and its tainted step are over):
        whether `next_step` is a trial step."""
        if self.threads.on_step_end(torch, next_step, ready):
            return True
        ready = ready and self.threads.state == "done"
        if self.alloc.on_step_end(next_step, ready=ready):
            return True
        return self.workers.on_step_end(torch, next_step, ready=ready and self.alloc.state == "done")

    def restore(self, torch: Any) -> None:
        """The program's settings back (also when it ends mid-trial)."""
        self.threads.restore(torch)
        self.alloc.restore()
        self.workers.restore()
