"""pinchpoint's reversible trials, one after the other once the op window is done: the thread trial
(`thread_trial.py`), then the allocator trial (`alloc_trial.py`). Each runs a few of the program's own
steps with its fix applied, marks them `trial` and writes what it measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pinchpoint.capture.alloc_trial import AllocTrialRunner
from pinchpoint.capture.thread_trial import ThreadTrialRunner


class Trials:
    def __init__(self, rank_dir: Path) -> None:
        self.threads = ThreadTrialRunner(rank_dir)
        self.alloc = AllocTrialRunner(rank_dir)

    def observe(self, index: int, faults: int, own_settings: bool) -> None:
        """A finished step's minor faults; `own_settings`: no window or trial touched it."""
        self.alloc.observe(index, faults, own_settings)

    def on_step_end(self, torch: Any, next_step: int, ready: bool) -> bool:
        """At the boundary before `next_step` (`ready`: the op window and its tainted step are over):
        whether `next_step` is a trial step."""
        if self.threads.on_step_end(torch, next_step, ready):
            return True
        return self.alloc.on_step_end(next_step, ready=ready and self.threads.state == "done")

    def restore(self, torch: Any) -> None:
        """The program's settings back (also when it ends mid-trial)."""
        self.threads.restore(torch)
        self.alloc.restore()
