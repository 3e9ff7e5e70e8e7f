"""How a rank's run ended: steps to the end, or a last step it never finished while the run went on.

A hung collective leaves every rank in an unfinished step until a timeout or a kill: the rank that
waits in the collective records the collective (its wait ends with the timeout's error), the rank that
never joined it records no collective in that step. Its main thread's stack samples say where it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.analysis.run_time import SegmentCode, segment_code, stall_ns
from pinchpoint.trace.run import Phase, RankData, RunMeta
from pinchpoint.trace.stacks import Stacks


@dataclass(frozen=True, slots=True, kw_only=True)
class Stopped:
    """A rank that stopped making steps long before the run ended."""

    steps: int
    """Whole steps it made."""
    ns: int
    """From its last whole step's end to the run's end."""
    collective: str | None = None
    """The collective its unfinished step waited in at the end (None: it was not in one)."""
    collective_ns: int = 0
    code: SegmentCode | None = None
    """Where its main thread was meanwhile (pinchpoint's stack samples)."""


def stopped(
    meta: RunMeta, rank: RankData, stacks: Stacks | None = None, pid: int | None = None
) -> Stopped | None:
    """The rank's stop, when its time after the last whole step is a stall's length (`STALL_MIN_NS`,
    and `STALL_STEPS` of its median step); else None."""
    whole = sorted((s for s in rank.steps if not s.partial and s.dur_ns > 0), key=lambda s: s.end_ns)
    if not whole or meta.ended_ns is None:
        return None
    last = whole[-1].end_ns
    ns = meta.ended_ns - last
    if ns < stall_ns(whole):
        return None
    after = [s for s in rank.steps if s.partial and s.start_ns >= last]
    comm = [iv for s in after for iv in s.intervals if iv.phase is Phase.COMM and iv.dur_ns > 0]
    longest = max(comm, key=lambda iv: iv.dur_ns, default=None)
    waited = longest is not None and longest.dur_ns >= ns // 2
    code = None
    if stacks is not None and pid is not None:
        code = segment_code([(last, meta.ended_ns, "stopped", False)], stacks, pid, meta.cwd).get("stopped")
    return Stopped(
        steps=len(whole),
        ns=ns,
        collective=(longest.what or "collective") if waited and longest is not None else None,
        collective_ns=longest.dur_ns if waited and longest is not None else 0,
        code=code,
    )
