"""Cross-rank findings of a data-parallel run: one rank's own work holds every other rank back.

Under DDP the gradients are all-reduced during backward, so a rank that reaches backward late makes
the others wait there: their backward phase grows by the wait, the late rank's does not. A rank's
*own* time per step is everything outside backward (data, forward, optimizer, host work); the
straggler is the rank with the most of it. The wait shows on the fast ranks as backward time the slow
rank does not have. Balanced, every rank would run at the fastest rank's own time plus a backward
without waiting (the slow rank's backward): that is the estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, ms, pct
from pinchpoint.trace.run import HOST_OTHER, Environment, Phase

STRAGGLER_GAP_MIN = 0.10
"""The slowest rank's own time exceeds the fastest's by 10% of the step (HTA's straggler view compares
ranks the same way; rules-catalog §7)."""
WAIT_EXPLAINS_MIN = 0.5
"""And the fast ranks wait in backward at least half of that gap: they are held back, not just idle."""
BACKWARD = Phase.BACKWARD.value
COMM = Phase.COMM.value
CULPRITS = {
    Phase.DATA_WAIT.value: ("its DataLoader", (Category.INPUT_FETCH, Category.INPUT_PREPROCESS)),
    HOST_OTHER: ("work in the loop outside the framework", (Category.HOST_PYTHON,)),
    Phase.CHECKPOINT_IO.value: ("checkpoint writes", (Category.IO_CHECKPOINT,)),
    Phase.FORWARD.value: ("its forward pass", ()),
    Phase.OPTIMIZER.value: ("its optimizer step", ()),
}
"""What a straggler's extra time is spent on, and the per-rank findings that say why."""


class Straggler(Rule):
    """Pattern: one rank's own work (outside backward) is longer, and the other ranks wait for it at the
    gradient all-reduce inside backward.
    Why it's slow: every rank runs at the slowest rank's pace.
    Fix: remove what the late rank pays that the others don't (its loader, its extra Python, its writes).
    Reference: HTA's straggler view; XProf BarrierCoresRule (rules-catalog §7).
    """

    id: ClassVar[Category] = Category.IMBALANCE_STRAGGLER
    title: ClassVar[str] = "A straggler rank holds the others back"
    scope: ClassVar[Scope] = Scope.RANKS
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        found = straggler(s.environment, s.job.runs)
        if found is not None:
            f, causes = found
            yield replace(f, explained_by=causes)


def straggler(env: Environment, ranks: Sequence[RankAnalysis]) -> tuple[Finding, tuple[Category, ...]] | None:
    """The straggler finding, and the categories of per-rank findings that explain it (to fold in)."""
    rs = [r for r in ranks if r.steps is not None and r.steps.mean_ns > 0]
    if len(rs) < 2:
        return None

    def bwd(r: RankAnalysis) -> float:  # backward with its all-reduce wait
        assert r.steps is not None
        return r.steps.phase_ns.get(BACKWARD, 0.0) + r.steps.phase_ns.get(COMM, 0.0)

    def own(r: RankAnalysis) -> float:
        assert r.steps is not None
        return r.steps.mean_ns - bwd(r)

    slow = max(rs, key=own)
    fast = min(rs, key=own)
    assert slow.steps is not None and fast.steps is not None
    step = max(r.steps.mean_ns for r in rs if r.steps is not None)
    gap = own(slow) - own(fast)
    waited = bwd(fast) - bwd(slow)
    if gap < STRAGGLER_GAP_MIN * step or waited < WAIT_EXPLAINS_MIN * gap:
        return None
    late = [r for r in rs if own(r) - own(fast) >= STRAGGLER_GAP_MIN * step]
    names = ", ".join(str(r.rank) for r in late)
    diffs = {
        p: slow.steps.phase_ns.get(p, 0.0) - fast.steps.phase_ns.get(p, 0.0)
        for p in slow.steps.phase_ns
        if p not in (BACKWARD, COMM)
    }
    culprit = max(diffs, key=lambda p: diffs[p])
    what, categories = CULPRITS.get(culprit, (culprit, ()))
    balanced = own(fast) + bwd(slow)
    speedup = step / max(1.0, balanced)
    evidence = (
        f"Rank {slow.rank} spends {ms(own(slow))} per step outside backward, rank {fast.rank} {ms(own(fast))}: "
        f"rank {slow.rank} is {ms(gap)} behind every step",
        f"Rank {fast.rank}'s backward takes {ms(bwd(fast))} against rank {slow.rank}'s {ms(bwd(slow))}: it waits "
        f"{ms(waited)} ({pct(waited / step)} of the step) at the gradient all-reduce for the late rank",
        f"Rank {slow.rank}'s extra time is {culprit} (+{ms(diffs[culprit])} per step): {what}",
        f"Balanced, every rank would take ≈ {ms(balanced)} a step (the fastest rank's own time plus a backward "
        f"without waiting) instead of {ms(step)}",
    )
    return (
        Finding(
            id=Category.IMBALANCE_STRAGGLER,
            title=f"Straggler: rank {names} holds the other ranks back ({what})",
            share=min(1.0, waited / step),
            estimated_speedup=max(1.0, speedup),
            confidence=Confidence.HIGH if waited >= 0.8 * gap else Confidence.MEDIUM,
            evidence=evidence,
            fix=f"Make rank {names} as fast as the others: remove what its {culprit} costs that the other "
            "ranks don't pay (every rank waits for the slowest at each all-reduce).",
            ranks=tuple(r.rank for r in late),
        ),
        categories,
    )
