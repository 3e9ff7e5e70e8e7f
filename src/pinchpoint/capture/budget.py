"""What pinchpoint may take of the program's time inside its loop (issue 33): `FIXED_NS` plus `SHARE` of
the loop so far. Spent: the time its own steps (the op window's, the trials') ran past the program's
typical step, and the time between steps that belonged to no step (the window's probes). The op window
closes early and a losing trial stops once the spending is past the allowance. A trial still starts
past it: it starts on a suspicion of a gain, and a short run's window and probes alone can spend the
allowance (decision 106).

The fixed part is half of the 0.5 s the issue allows: the other half is the launcher's and the agent's
start-up (~0.25 s measured, benchmarks/fixed_cost.py)."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

FIXED_NS = 250_000_000
SHARE = 0.01
"""Of the loop's time: the other 1% of the issue's 2% per step is the sampler's and the bookkeeping's."""
OWN_PACE = 21
"""The program's own steps whose median is its typical step."""
LOSS_MIN = 0.05
"""A trial's measured steps slower than the typical step by more than this share are a loss ..."""
LOSS_STEPS = 2
"""... over at least two measured steps (one noisy step beside another job is not a verdict), or over
one where it runs `LOSS_CLEAR` times as long."""
LOSS_CLEAR = 1.5


def own_step(record: dict[str, Any]) -> bool:
    """A steps.jsonl line that ran at the program's own settings, untouched by pinchpoint."""
    return not (record["profiled"] or record["trial"] or record.get("settling") or record.get("partial"))


class LoopBudget:
    def __init__(self) -> None:
        self._own: deque[int] = deque(maxlen=OWN_PACE)
        self.loop_ns = 0
        self.spent_ns = 0

    @property
    def typical_ns(self) -> int | None:
        return int(statistics.median(self._own)) if self._own else None  # (ints: an int median)

    def observe(self, record: dict[str, Any]) -> int | None:
        """A finished step: counted in the loop; one of pinchpoint's is counted against the allowance.
        Returns how far that one ran past the typical step (None for the program's own, or before one)."""
        dur = max(0, record["end_ns"] - record["start_ns"])
        self.loop_ns += dur
        if own_step(record):
            self._own.append(dur)
            return None
        typical = self.typical_ns
        if typical is None:
            return None
        excess = int(dur - typical)
        self.spent_ns += max(0, excess)
        return excess

    def note(self, ns: int) -> None:
        """Time pinchpoint took between two steps (no step holds it)."""
        self.spent_ns += max(0, ns)

    def allowance_ns(self) -> int:
        return FIXED_NS + int(SHARE * self.loop_ns)

    def over(self) -> bool:
        return self.spent_ns > self.allowance_ns()

    def losing(self, excess_ns: list[int]) -> float | None:
        """A trial's measured steps' excess over the typical step: their mean slowdown (>1) where they
        lose by more than `LOSS_MIN`, else None."""
        typical = self.typical_ns
        if not excess_ns or not typical:
            return None
        slowdown = 1.0 + statistics.fmean(excess_ns) / typical
        enough = len(excess_ns) >= LOSS_STEPS or slowdown >= LOSS_CLEAR
        return slowdown if enough and slowdown > 1.0 + LOSS_MIN else None
