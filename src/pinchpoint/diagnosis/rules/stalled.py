"""A run that stopped making steps: ranks waiting in a collective for a rank that never joined it.

A hung collective leaves every rank in a step it never finishes until a timeout or a kill ends the run
(`analysis/stopped.py`): the ranks whose unfinished step waited in a collective (or whose main thread
was sampled inside one) waited; the ranks that did not are the ones they waited for, and their main
thread's samples name the code they were in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.stopped import Stopped
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject

WAITING = 0.5
"""A rank whose main thread sat inside a torch.distributed call for half its stalled time waited (when its
steps did not record the collective: a wait that never returned before a kill)."""


class StalledRun(Rule):
    """Pattern: the ranks stop making steps long before the run ends; their main threads wait inside a
    collective (all-reduce, barrier, a send's wait) that one rank never joined.
    Why it's slow: a collective completes only when every rank of its group calls it: one rank stuck
    in its own code (a loader that hangs, a branch only it takes, an exception it swallowed) or dead
    holds the rest until the collective's timeout (30 min by default) or a kill.
    Fix: find what the rank that did not wait was doing (its code is named); give the process group a
    short timeout (`init_process_group(timeout=...)`) so a hang fails fast with the rank named.
    Reference: PyTorch "Debugging hangs" (TORCH_DISTRIBUTED_DEBUG, the flight recorder); torchrun's
    rendezvous and collective timeouts.
    """

    id: ClassVar[Category] = Category.RUN_STALLED
    title: ClassVar[str] = "The run stopped making steps: ranks wait in a collective"
    scope: ClassVar[Scope] = Scope.RANKS
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        stops = [(r.rank, r.stopped) for r in s.job.runs if r.stopped is not None]
        waiting = [(rank, x) for rank, x in stops if _waits(x)]
        if not waiting:
            return
        wall = max((r.run_time.wall_ns for r in s.job.runs if r.run_time is not None), default=0)
        others = [(rank, x) for rank, x in stops if not _waits(x)]
        held = tuple(sorted({rank for rank, _ in others} | {r.rank for r in s.job.runs if r.stopped is None}))
        longest = max(x.ns for _, x in waiting)
        yield Finding(
            id=self.id,
            title=Fact("run.stalled.title", ranks=held),
            share=min(1.0, longest / max(1, wall)) if wall else 1.0,
            estimated_speedup=1.0,
            basis=Basis.NONE,
            confidence=Confidence.HIGH if held else Confidence.MEDIUM,
            evidence=tuple(_stopped_fact(rank, x) for rank, x in sorted(stops)),
            fix=Fact("run.stalled.fix", ranks=held),
            ranks=tuple(sorted(rank for rank, _ in stops)),
            of_run=True,
        )


def _waits(x: Stopped) -> bool:
    """It waited in a collective: its unfinished step recorded one, or its samples sat in one."""
    return x.collective is not None or (x.code is not None and x.code.collective_frac >= WAITING)


def _stopped_fact(rank: int, x: Stopped) -> Fact:
    code = x.code
    top = code.scope.top[0] if code is not None and code.scope.top else None
    waits = _waits(x)
    return Fact(
        "run.stalled.rank",
        rank=rank,
        steps=x.steps,
        ns=x.ns,
        waits=waits,
        collective=(x.collective or (code.collective if code is not None else None)) if waits else None,
        code=top.label if top is not None else None,
        inside=top.calls_into if top is not None else None,
    )
