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
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject
from pinchpoint.trace.run import HOST_OTHER, Environment, Phase

STRAGGLER_GAP_MIN = 0.10
"""The slowest rank's own time exceeds the fastest's by 10% of the step (HTA's straggler view compares
ranks the same way; rules-catalog §7)."""
WAIT_EXPLAINS_MIN = 0.5
"""And the fast ranks wait in backward at least half of that gap: they are held back, not just idle."""
BACKWARD = Phase.BACKWARD.value
COMM = Phase.COMM.value
CULPRITS: dict[str, tuple[Category, ...]] = {
    Phase.DATA_WAIT.value: (Category.INPUT_FETCH, Category.INPUT_PREPROCESS),
    HOST_OTHER: (Category.HOST_PYTHON,),
    Phase.CHECKPOINT_IO.value: (Category.IO_CHECKPOINT,),
}
"""The per-rank findings that say why a straggler's extra time goes to a phase (what the phase is, in
words, is the phrasebook's: report/phrases/comm.py)."""


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
    late_ranks = tuple(r.rank for r in late)
    diffs = {
        p: slow.steps.phase_ns.get(p, 0.0) - fast.steps.phase_ns.get(p, 0.0)
        for p in slow.steps.phase_ns
        if p not in (BACKWARD, COMM)
    }
    culprit = max(diffs, key=lambda p: diffs[p])
    categories = CULPRITS.get(culprit, ())
    balanced = own(fast) + bwd(slow)
    speedup = step / max(1.0, balanced)
    evidence = (
        Fact(
            "imbalance.straggler.own_time",
            slow_rank=slow.rank,
            fast_rank=fast.rank,
            slow_ns=own(slow),
            fast_ns=own(fast),
            gap_ns=gap,
        ),
        Fact(
            "imbalance.straggler.wait",
            slow_rank=slow.rank,
            fast_rank=fast.rank,
            slow_backward_ns=bwd(slow),
            fast_backward_ns=bwd(fast),
            wait_ns=waited,
            share=waited / step,
        ),
        Fact("imbalance.straggler.culprit", rank=slow.rank, phase=culprit, extra_ns=diffs[culprit]),
        Fact("imbalance.straggler.balanced", balanced_ns=balanced, step_ns=step),
    )
    return (
        Finding(
            id=Category.IMBALANCE_STRAGGLER,
            title=Fact("imbalance.straggler.title", ranks=late_ranks, phase=culprit),
            share=min(1.0, waited / step),
            estimated_speedup=max(1.0, speedup),
            basis=Basis.MODEL,
            confidence=Confidence.HIGH if waited >= 0.8 * gap else Confidence.MEDIUM,
            evidence=evidence,
            fix=Fact("imbalance.straggler.fix", ranks=late_ranks, phase=culprit),
            ranks=late_ranks,
        ),
        categories,
    )
