"""Short steps share what the kernel counts: one reading of the counters for a run of steps shorter than
`SHARE_NS`, and one reading of resident memory every `RSS_EVERY_NS`.

Reading the counters at a step boundary (`step_state.read_counters`: four system calls) cost ~14 µs
between two 0.3 ms steps here, ~50 µs between 4 ms compiled steps (the OpenMP workers spinning on the
sibling core slow everything the main thread does right after a parallel region). A boundary inside a
run of short steps reads only what is free (the collector's and compiled graphs' counts, exact per step)
and keeps its step's line. Its CPU time is still read (a clock, no file): `cpu_ns` stays exact per
step. When the run ends (a step as long as `SHARE_NS`, `MAX_STEPS` steps, or a
boundary that must be exact: a profiled, trial or partial step, a live-tensor snapshot, `try`), the
counters are read once and their change since the run began is shared among its steps: page faults and
system time by each step's CPU time (they happen on a CPU), run-queue waits by wall time. The run's sums
stay exact, and each of its lines says `"shared": N`. A long step that ends a run shares it too (its
start was inside the run): a sleeping step then takes none of the faults and most of the waits.
"""

from __future__ import annotations

import os
from typing import Any

from pinchpoint.capture.procfs import ProcFile, statm_rss
from pinchpoint.capture.step_state import Counters, cheap_counters, kernel_changes

ENV = "PINCHPOINT_SHARE_COUNTERS"
"""`0` turns sharing off (every boundary reads the counters: benchmarks/overhead.py's comparison)."""
SHARE_NS = 0 if os.environ.get(ENV) == "0" else 10_000_000
MAX_STEPS = 64
RSS_EVERY_NS = 10_000_000
"""A step's resident memory is read again only this long after the last reading (`rss_bytes` is at most
this stale: memory.leak reads a floor rising over many steps)."""
BY_WALL = ("runq_ns",)
"""Shared by wall time; the other fields of `FIELDS` by CPU time."""
FIELDS = ("runq_ns", "minor_faults", "sys_ns", "main_sys_ns")
"""The lines' fields that come from the counters a shared reading gives (`step_state.kernel_changes`)."""


class SharedCounters:
    def __init__(self) -> None:
        self.held: list[dict[str, Any]] = []
        """Lines of the run of short steps so far, their counter fields not yet known."""
        self.since: Counters | None = None
        """The counters when the held run began."""
        self._statm = ProcFile("/proc/self/statm")
        self._rss: tuple[int, int | None] = (-RSS_EVERY_NS, None)

    def rss(self, end_ns: int, fresh: bool) -> int | None:
        """Resident bytes at most `RSS_EVERY_NS` old (`fresh`: read now)."""
        if fresh or end_ns - self._rss[0] >= RSS_EVERY_NS:
            self._rss = (end_ns, statm_rss(self._statm.read()))
        return self._rss[1]

    def may_hold(self, start_ns: int, end_ns: int) -> bool:
        """Whether a step from `start_ns` to `end_ns` may join the held run."""
        if end_ns - start_ns >= SHARE_NS or len(self.held) >= MAX_STEPS:
            return False
        return not self.held or end_ns - self.held[0]["start_ns"] < SHARE_NS

    def placeholder(self, start: Counters) -> Counters:
        """A boundary's counters inside a run: the run's start for what needs a reading, what is free now."""
        return cheap_counters(start)

    def hold(self, record: dict[str, Any], start: Counters) -> None:
        """A short step's line (its counter fields zero: `placeholder`); `start`: its step's counters."""
        if not self.held:
            self.since = start
        self.held.append(record)

    def release(self, last: dict[str, Any]) -> list[dict[str, Any]]:
        """The held lines and `last`, whose counter fields hold the change over the whole run (its step
        began at a placeholder), each given its part (`_share`); just `last` when nothing was held."""
        if not self.held:
            return [last]
        run = [*self.held, last]
        self.held, self.since = [], None
        _share(run, {f: last[f] for f in FIELDS})
        return run

    def release_now(self, now: Counters, end_ns: int) -> list[dict[str, Any]]:
        """The held lines, given the change from the run's start to `now` (read at `end_ns`, after the run's
        last step): the part of it within the run's own wall time."""
        if not self.held or self.since is None:
            return []
        run, since = self.held, self.since
        self.held, self.since = [], None
        span = max(1, end_ns - run[0]["start_ns"])
        within = min(1.0, (run[-1]["end_ns"] - run[0]["start_ns"]) / span)
        totals = kernel_changes(since, now)
        _share(run, {f: (None if v is None else int(v * within)) for f, v in totals.items()})
        return run


def _share(run: list[dict[str, Any]], totals: dict[str, int | None]) -> None:
    """Each line's part of `totals`, by its CPU time or its wall time (the last takes what rounding left)."""
    walls = [max(0, r["end_ns"] - r["start_ns"]) for r in run]
    cpus = [max(0, r["cpu_ns"]) for r in run]
    for field, total in totals.items():
        weights = walls if field in BY_WALL else cpus
        whole, given = sum(weights), 0
        for i, r in enumerate(run):
            if total is None:
                r[field] = None
                continue
            if i == len(run) - 1:
                part = total - given
            else:
                part = total * weights[i] // whole if whole else total // len(run)
            r[field], given = part, given + part
    for r in run:
        r["shared"] = len(run)
