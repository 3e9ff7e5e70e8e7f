"""Periodic stalls: a few steps far slower than the rest, and what those steps have in common.

A median step says nothing of a stall every N steps, yet the stalls can be most of the run: a
knowledge-graph library's epoch-end `gc.collect()` made one step in seven 150 ms against a 2.2 ms
median. The slow steps (over `STALL_X` the median) are explained by where their extra time went:
Python's collector, `torch.save`, the DataLoader (a new iterator: an epoch's start, workers started
again), or else the phase that grew most.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pinchpoint.analysis.stacks import StackScope, scope_of
from pinchpoint.analysis.steps import exposed_by_phase
from pinchpoint.trace.run import HOST_OTHER, Phase, Step
from pinchpoint.trace.stacks import StackSample, TimedSample

STALL_X = 3.0
"""A step over three times the median is a stall (ordinary steps spread ±10-30% on these machines)."""
SHARE_MIN = 0.05
"""Stalls worth saying: their time over the median at least 5% of the steps' time."""
CAUSE_MIN = 0.5
"""A cause explains a stall when it holds at least half of the step's time over the median."""
REGULAR = 0.6
"""Gaps between stalls within one step of their median, at least this often: "every N steps"."""
NAMED = ("gc", "checkpoint", "loader", "data")
"""Causes with a fix of their own (not merely the phase that grew)."""
ALSO_MIN = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class Stalls:
    steps: int
    """Steady steps read."""
    stalls: int
    median_ns: int
    stall_ns: int
    """Median duration of a stalled step."""
    share: float
    """The stalls' time over the median step, as a share of all the steps' time."""
    every: int
    """Steps from one stall to the next when they come regularly, else 0."""
    cause: str
    """`gc`, `checkpoint`, `loader` (a new iterator), `data`, a phase name, or `mixed`."""
    explained: float
    """Share of the stalls the cause explains."""
    code: StackScope | None = None
    """Where the main thread was during the stalled steps (pinchpoint's stack samples, by wall time)."""
    also: str | None = None
    """A named cause (`NAMED`) besides `cause` that explains at least `ALSO_MIN` of the stalls: beside a
    load, barrier waits in backward outnumbered an epoch's new DataLoader iterator, which still stalls."""
    also_stalls: int = 0


def stalls(steady: Sequence[Step], samples: Sequence[TimedSample] = (), cwd: str = "") -> Stalls | None:
    """The steps' stalls, or None when there are none worth saying (or too few steps to tell).
    `samples`: the main thread's stack samples in time, to name the stalled steps' code."""
    ordered = sorted(steady, key=lambda s: s.index)
    if len(ordered) < 10:
        return None
    median = int(statistics.median(s.dur_ns for s in ordered))
    slow = [s for s in ordered if s.dur_ns > STALL_X * median]
    total = sum(s.dur_ns for s in ordered)
    extra = sum(s.dur_ns - median for s in slow)
    if not slow or extra < SHARE_MIN * total:
        return None
    previous = {b.index: a for a, b in itertools.pairwise(ordered)}
    causes = [_cause(s, median, previous.get(s.index)) for s in slow]
    counts = {c: causes.count(c) for c in set(causes)}
    cause = max(counts, key=lambda c: counts[c])
    explained = counts[cause] / len(slow)
    named = cause if explained >= CAUSE_MIN else "mixed"
    # (a named cause that leads without explaining half still stalls: beside a load, an epoch's new
    # iterator was 4 of 9 stalls and the rest split between phases)
    also = max((c for c in counts if c in NAMED and c != named), key=lambda c: counts[c], default=None)
    if also is not None and counts[also] < ALSO_MIN * len(slow):
        also = None
    at = {
        s.index: k for k, s in enumerate(ordered)
    }  # (steps of this kind: an RL loop's rollout calls between)
    gaps = [at[b.index] - at[a.index] for a, b in itertools.pairwise(slow)]
    every = 0
    if len(gaps) >= 2:
        g = int(statistics.median(gaps))
        if sum(abs(x - g) <= 1 for x in gaps) >= REGULAR * len(gaps):
            every = g
    return Stalls(
        steps=len(ordered),
        stalls=len(slow),
        median_ns=median,
        stall_ns=int(statistics.median(s.dur_ns for s in slow)),
        share=extra / max(1, total),
        every=every,
        cause=named,
        explained=explained,
        code=_code(slow, samples, cwd),
        also=also,
        also_stalls=counts[also] if also is not None else 0,
    )


CODE_MIN_SAMPLES = 5


def _code(slow: Sequence[Step], samples: Sequence[TimedSample], cwd: str) -> StackScope | None:
    """The functions the main thread's samples inside the stalled steps landed in."""
    spans = sorted((s.start_ns, s.end_ns) for s in slow)
    starts = [a for a, _ in spans]
    weight: dict[StackSample, int] = {}
    for t in samples:
        i = bisect.bisect_right(starts, t.t_ns) - 1
        if i >= 0 and t.t_ns < spans[i][1]:
            weight[t.stack] = weight.get(t.stack, 0) + 1
    picked = [replace(s, count=n) for s, n in weight.items()]
    scope = scope_of("stalls", picked, None, cwd)
    return scope if scope is not None and scope.samples >= CODE_MIN_SAMPLES and scope.top else None


def _cause(step: Step, median: int, before: Step | None) -> str:
    over = step.dur_ns - median
    if (step.gc_ns or 0) >= CAUSE_MIN * over:
        return "gc"
    exposed = exposed_by_phase(step)
    if exposed.get(Phase.CHECKPOINT_IO.value, 0) >= CAUSE_MIN * over:
        return "checkpoint"
    new_iterator = step.loader is not None and before is not None and before.loader != step.loader
    # (a new iterator starts its workers in `iter(loader)`, outside the data wait, then waits for them)
    if (
        new_iterator
        and exposed.get(Phase.DATA_WAIT.value, 0) + exposed.get(HOST_OTHER, 0) >= CAUSE_MIN * over
    ):
        return "loader"
    if exposed.get(Phase.DATA_WAIT.value, 0) >= CAUSE_MIN * over:
        return "data"
    return max(exposed, key=lambda k: exposed[k]) if exposed else "mixed"
