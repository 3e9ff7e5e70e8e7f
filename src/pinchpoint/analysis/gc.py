"""Python's garbage collector in the steady steps: how much of them it takes, whether it comes as a
periodic stall, and which lines call `gc.collect()` (`capture/gc_watch.py` records it)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.trace.run import Step
from pinchpoint.trace.trials import GcRecord, GcSite

STALL_X = 2.0
"""A step whose collections took more than twice the median step holds a stall."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GcStats:
    steps: int
    share: float
    """Time inside collections over the steps' time."""
    ns_per_step: float
    collections_per_step: float
    full_per_step: float
    explicit_share: float
    """Of the steps' time, inside `gc.collect()` calls the program made."""
    stall_steps: int
    """Steps whose collections took over `STALL_X` median steps."""
    stall_every: int
    """Median steps from one stall to the next (0: fewer than two)."""
    stall_ns: int
    """Median collection time in a stalled step."""
    median_step_ns: int
    sites: tuple[GcSite, ...] = ()
    """Lines that called `gc.collect()`, longest total first."""
    frozen: int = 0
    cwd: str | None = None
    """The program's working directory: a call site under it is the program's own code."""


def gc_stats(steady: Sequence[Step], record: GcRecord | None, cwd: str | None = None) -> GcStats | None:
    """None when the steps carry no collector counts (older run directories, other sources)."""
    counted = [s for s in steady if s.gc_ns is not None]
    if not counted:
        return None
    total = sum(s.dur_ns for s in counted)
    gc_ns = [min(s.gc_ns or 0, s.dur_ns) for s in counted]
    explicit = sum(min(s.gc_explicit_ns or 0, s.dur_ns) for s in counted)
    median = int(statistics.median(s.dur_ns for s in counted))
    stalls = [s for s, g in zip(counted, gc_ns, strict=True) if g > STALL_X * median]
    gaps = [b.index - a.index for a, b in itertools.pairwise(stalls)]
    n = len(counted)
    return GcStats(
        steps=n,
        share=sum(gc_ns) / max(1, total),
        ns_per_step=sum(gc_ns) / n,
        collections_per_step=sum(s.gc_collections or 0 for s in counted) / n,
        full_per_step=sum(s.gc_full or 0 for s in counted) / n,
        explicit_share=explicit / max(1, total),
        stall_steps=len(stalls),
        stall_every=int(statistics.median(gaps)) if gaps else 0,
        stall_ns=int(statistics.median(min(s.gc_ns or 0, s.dur_ns) for s in stalls)) if stalls else 0,
        median_step_ns=median,
        sites=record.explicit if record is not None else (),
        frozen=record.frozen if record is not None else 0,
        cwd=cwd,
    )
