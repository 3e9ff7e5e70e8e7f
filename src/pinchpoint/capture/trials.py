"""pinchpoint's reversible trials, one after the other once the op window is done: the thread trial
(`thread_trial.py`), the allocator trial (`alloc_trial.py`), then the DataLoader workers trial
(`worker_trial.py`). Each runs a few of the program's own steps with its fix applied, marks them
`trial` and writes what it measured. A trial starts on a suspicion of a gain, whatever pinchpoint has
spent; one whose measured steps lose stops once its budget inside the loop (`budget.py`) is spent."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture import alloc_trial, thread_trial, worker_trial
from pinchpoint.capture.alloc_trial import AllocTrialRunner
from pinchpoint.capture.budget import LoopBudget
from pinchpoint.capture.thread_trial import ThreadTrialRunner
from pinchpoint.capture.worker_trial import WorkerTrialRunner
from pinchpoint.capture.writer import write_json_atomic

CUT_FILE = "trial_cut.json"
TRIALS_ENV = "PINCHPOINT_TRIALS"
"""`off` (`pinchpoint run --no-trials`): no trial runs; the program's settings are never changed."""


def trials_enabled() -> bool:
    return os.environ.get(TRIALS_ENV, "").lower() != "off"


SPANS = {
    "threads": thread_trial.WARM + thread_trial.STEPS + 1,
    "alloc": len(alloc_trial.SCHEDULE),
    "workers": worker_trial.STEPS + 2,
}
"""The steps each trial takes from the program (warm-up and the step back included)."""
OWN_PACE_MIN = 3
"""Ordinary steps timed before an attach's time left is read in steps."""
ORDINARY_AFTER_MIN = 10
"""An attach's trial leaves at least this many ordinary steps after it, however short the trial (a 10 s
attach beside a busy process ran the thread, allocator and worker trials back to back, each with room
for itself twice, and kept 7 ordinary steps of 43)."""


def _measured(trial: str, offset: int) -> bool:
    """Whether a trial's step `offset` steps after its first runs with the fix, past its warm-up."""
    if trial == "alloc":
        return 0 <= offset < len(alloc_trial.SCHEDULE) and alloc_trial.SCHEDULE[offset] == "on"
    warm = thread_trial.WARM if trial == "threads" else worker_trial.WARM
    return warm <= offset < SPANS[trial] - 1


def steps_needed(trial: str) -> int:
    """Steps an attach's time left must hold for `trial` to start: the trial, then ordinary steps."""
    return SPANS[trial] + max(SPANS[trial], ORDINARY_AFTER_MIN)


class Trials:
    def __init__(self, rank_dir: Path, deadline_wall_s: float | None = None) -> None:
        self.threads = ThreadTrialRunner(rank_dir)
        self.alloc = AllocTrialRunner(rank_dir)
        self.workers = WorkerTrialRunner(rank_dir)
        self.deadline_wall_s = deadline_wall_s
        """An attach's detach time: a trial starts only when the steps left before it hold the trial
        and as many of the program's own steps again (a 10 s attach beside a busy process had its
        trials take 34 of 46 steps, and the worker trial's 5 steps read x0.47 at p = 0.63)."""
        self._own_ns: list[int] = []
        self.budget = LoopBudget()
        self._excess: dict[str, list[int]] = {}
        """How far each trial's measured steps ran past the program's typical step."""

    def room(self, trial: str) -> bool | None:
        """Whether `trial` may start now: always, but in an attach; there, None until the program's pace
        is known, then whether the time left holds it and as many ordinary steps again."""
        if self.deadline_wall_s is None:
            return True
        if len(self._own_ns) < OWN_PACE_MIN:
            return None
        pace_s = statistics.median(self._own_ns[-20:]) / 1e9
        left_s = self.deadline_wall_s - time.time()
        return left_s >= steps_needed(trial) * pace_s

    def observe(self, record: dict[str, Any]) -> None:
        """A finished step's steps.jsonl line."""
        own = not (record["profiled"] or record["trial"])
        index = record["step"]
        excess = self.budget.observe(record)
        running = self._running()
        if excess is not None and running is not None and _measured(running[0], index - running[1].first):
            self._excess.setdefault(running[0], []).append(excess)
        if own and self.deadline_wall_s is not None:
            self._own_ns.append(record["end_ns"] - record["start_ns"])
        self.alloc.observe(index, record["minor_faults"], own)
        if self.workers.state == "idle":  # (only until its trial: this runs at every step's end)
            waits = [iv[2] - iv[1] for iv in record["intervals"] if iv[0] == "data_wait"]
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
        running = self._running()
        if running is not None and self.budget.over():
            slowdown = self.budget.losing(self._excess.get(running[0], []))
            if slowdown is not None:
                return self._stop(torch, *running, next_step, slowdown)
        if self.threads.on_step_end(torch, next_step, ready and self._may("threads", self.threads, ready)):
            return True
        ready = ready and self.threads.state == "done"
        if self.alloc.on_step_end(next_step, ready=ready and self._may("alloc", self.alloc, ready)):
            return True
        ready = ready and self.alloc.state == "done"
        return self.workers.on_step_end(
            torch, next_step, ready=ready and self._may("workers", self.workers, ready)
        )

    def settled(self) -> bool:
        """Every trial ran or was declined: no step boundary will start one."""
        return self.threads.state == "done" and self.alloc.state == "done" and self.workers.state == "done"

    def _may(self, trial: str, runner: Any, ready: bool) -> bool:
        """A trial that started runs on; one that has not may start only with room for it. Without
        room it is skipped for good (an attach's time only runs out), so a shorter one may still fit."""
        if runner.state != "idle" or not ready:
            return True
        room = self.room(trial)
        if room is False:
            runner.state = "done"
        return bool(room)

    def _running(self) -> tuple[str, Any] | None:
        runners: tuple[tuple[str, Any], ...] = (
            ("threads", self.threads), ("alloc", self.alloc), ("workers", self.workers)
        )  # fmt: skip
        return next(((n, r) for n, r in runners if r.state == "running"), None)

    def _stop(self, torch: Any, name: str, runner: Any, next_step: int, slowdown: float) -> bool:
        """Stop a trial whose measured steps lose, pinchpoint's budget spent: the thread trial keeps the
        steps it measured (they say its fix does not pay); another says so in `CUT_FILE`, and its
        finding falls back to a model. The step after is not steady (the setting just went back)."""
        if name == "threads":
            self.threads.stop_early(torch, next_step)
            return True
        runner.restore()
        runner.state = "done"
        with contextlib.suppress(OSError):
            write_json_atomic(
                runner.rank_dir / CUT_FILE,
                {"trial": name, "first_step": runner.first, "steps_done": max(0, next_step - runner.first),
                 "steps_needed": SPANS[name], "reason": "budget", "slowdown": round(slowdown, 3)},
            )  # fmt: skip
        return True

    def restore(self, torch: Any, step: int | None = None) -> None:
        """The program's settings back (also when it ends mid-trial, at `step`: then `CUT_FILE` says
        which trial the program's end cut short, so its finding says it fell back to a model)."""
        cut = self._running()
        self.threads.restore(torch)
        self.alloc.restore()
        self.workers.restore()
        if cut is not None and step is not None:
            name, runner = cut
            with contextlib.suppress(OSError):
                write_json_atomic(
                    runner.rank_dir / CUT_FILE,
                    {"trial": name, "first_step": runner.first, "steps_done": max(0, step - runner.first),
                     "steps_needed": SPANS[name], "reason": "end"},
                )  # fmt: skip
