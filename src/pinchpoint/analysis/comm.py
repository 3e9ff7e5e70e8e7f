"""Communication per step: exposed time in collectives, per rank and across ranks.

A rank's `comm` time in a step is what its training thread spent in collectives called from Python
and, under DDP on CPU, blocked at the gradient all-reduce inside backward (`capture/dist_hooks.py`).
It holds two things: the transfer itself, and waiting for a rank that arrived late. The same step's
collective takes every rank at least the transfer, so across ranks the minimum of a step's comm time
is the transfer and each rank's excess over it is waiting (HTA's min-across-ranks rule for the same
collective, applied per step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pinchpoint.analysis.steps import exposed_by_phase, steady_steps
from pinchpoint.trace.run import DdpConfig, Phase, RankData

COMM = Phase.COMM.value


@dataclass(frozen=True, slots=True, kw_only=True)
class CommActivity:
    """One rank's communication over its steady steps."""

    per_step_ns: Mapping[int, int]
    """Exposed comm nanoseconds per step index."""
    mean_ns: float
    backward_calls: float
    """backward() calls per step (more than one: gradient accumulation)."""
    synced_backwards: float
    """Of them, calls that waited at a gradient all-reduce (DDP without no_sync)."""
    ddp: DdpConfig | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossRankComm:
    matched_steps: int
    """Steps every rank measured (by index)."""
    transfer_ns: float
    """Mean over those steps of the least comm time any rank had: the transfer every rank pays."""
    wait_ns: Mapping[int, float]
    """Per rank: mean comm time beyond the transfer (waiting for another rank)."""


def comm_activity(rank: RankData) -> CommActivity | None:
    """None when the program did no communication this can see (no DDP, no collective from Python)."""
    steps = steady_steps(rank.steps)
    has_comm = any(iv.phase is Phase.COMM for s in steps for iv in s.intervals)
    if not steps or not (has_comm or rank.ddp):
        return None
    per_step = {s.index: exposed_by_phase(s).get(COMM, 0) for s in steps}
    calls = synced = 0
    for s in steps:
        backwards = [iv for iv in s.intervals if iv.phase is Phase.BACKWARD]
        waits = [iv for iv in s.intervals if iv.phase is Phase.COMM]
        calls += len(backwards)
        synced += sum(
            1 for b in backwards if any(b.start_ns <= w.start_ns and w.end_ns <= b.end_ns for w in waits)
        )
    return CommActivity(
        per_step_ns=per_step,
        mean_ns=sum(per_step.values()) / len(per_step),
        backward_calls=calls / len(steps),
        synced_backwards=synced / len(steps),
        ddp=rank.ddp[-1] if rank.ddp else None,
    )


def cross_rank_comm(ranks: Sequence[tuple[int, CommActivity]]) -> CrossRankComm | None:
    """Transfer and waiting across ranks, over the steps all of them measured; None for one rank."""
    if len(ranks) < 2:
        return None
    common = set.intersection(*(set(c.per_step_ns) for _, c in ranks))
    if not common:
        return None
    mins = {i: min(c.per_step_ns[i] for _, c in ranks) for i in common}
    transfer = sum(mins.values()) / len(common)
    wait = {r: sum(c.per_step_ns[i] - mins[i] for i in common) / len(common) for r, c in ranks}
    return CrossRankComm(matched_steps=len(common), transfer_ns=transfer, wait_ns=wait)
