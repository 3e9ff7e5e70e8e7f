"""GPU rules across ranks: exposed communication and stragglers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, speedup_removing
from pinchpoint.diagnosis.rules.gpu_base import (
    MIN_SHARE,
    confidence_for,
    per_step,
)


class GpuCommExposed(Rule):
    """Pattern: collective kernels run while no compute kernel does.
    Why it's slow: the GPU waits on the network instead of overlapping communication with backward.
    Fix: let DDP/FSDP overlap (bucket sizes, no sync points between buckets), fewer/larger collectives,
    check stragglers first (their wait shows up as communication on the other ranks).
    Reference: XProf CollectiveBoundRule (≥ 30%), device-collectives bound (≥ 3% / ≥ 15%).
    """

    id: ClassVar[Category] = Category.COMM_EXPOSED
    title: ClassVar[str] = "Communication is not hidden behind compute"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank, run = s.timeline, s.devices
        split, bd = rank.split, rank.breakdown
        if split is None or bd is None:
            return
        wait = _straggler_wait(rank, run)
        share = split.fractions["gpu_communication"] * (1 - wait)
        if share < MIN_SHARE:
            return
        exposed_ns, stepped = per_step(rank, share)
        evidence = [
            Fact("gpu.comm.exposed", share=share, exposed_ns=exposed_ns, per_step=stepped),
            Fact(
                "gpu.comm.overlap",
                comm_ns=bd.communication_total_ns,
                overlap_share=bd.comm_overlap,
                wait_share=wait,
            ),
        ]
        exposed = sorted((c for c in rank.collective_use if c.exposed_ns > 0), key=lambda c: -c.exposed_ns)
        if exposed:
            evidence.append(
                Fact(
                    "gpu.comm.by_kind",
                    rows=tuple((c.kind, c.phase, c.count, c.exposed_ns, c.ns) for c in exposed[:3]),
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=confidence_for(share),
            evidence=tuple(evidence),
            fix=Fact("gpu.comm.fix"),
            ranks=(rank.rank,),
        )


def _straggler_wait(rank: GpuRankAnalysis, run: GpuRunAnalysis) -> float:
    """Fraction of this rank's collective time spent waiting for a straggler: `imbalance.straggler`
    reports it, so `comm.exposed` leaves it out (else the wait counts twice, and ×10 on a wait-bound rank)."""
    cmp = run.comparison
    if cmp is None or not cmp.stragglers or cmp.matched == 0:
        return 0.0
    me = next((r for r in cmp.ranks if r.rank == rank.rank), None)
    return me.wait_ns / me.collective_ns if me is not None and me.collective_ns > 0 else 0.0


class GpuStraggler(Rule):
    """Pattern: one rank computes longer per step and the others wait in collectives for it.
    Reference: XProf BarrierCoresRule / straggler detection; HTA's min-across-ranks collective trick.
    """

    id: ClassVar[Category] = Category.IMBALANCE_STRAGGLER
    title: ClassVar[str] = "A straggler rank makes the others wait"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank, run = s.timeline, s.devices
        cmp = run.comparison
        # Without a matched collective nobody is seen waiting: a slower rank alone costs the others nothing.
        if cmp is None or not cmp.stragglers or cmp.matched == 0 or rank.rank != run.ranks[0].rank:
            return
        share = cmp.wait_share
        slow = [r for r in cmp.ranks if r.straggler]
        fast = [r for r in cmp.ranks if not r.straggler and r.compute_per_step_ns]
        med = sorted(r.compute_per_step_ns or 0 for r in fast)
        evidence: list[Fact] = [
            Fact(
                "gpu.straggler.late",
                rank=r.rank,
                compute_ns=r.compute_per_step_ns or 0,
                last_arrivals=r.last_arrivals,
                collectives=cmp.matched,
            )
            for r in slow
        ]
        if med:
            evidence.append(Fact("gpu.straggler.others", compute_ns=med[len(med) // 2]))
        evidence.append(Fact("gpu.straggler.wait", wait_frac=share))
        if cmp.note:
            evidence.append(Fact("note.analysis", text=cmp.note))
        step_share = share * split_comm(run)
        if step_share < MIN_SHARE:
            return
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=step_share,
            estimated_speedup=speedup_removing(step_share),
            basis=Basis.REMOVED,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("gpu.straggler.fix"),
            ranks=tuple(r.rank for r in slow),
        )


def split_comm(run: GpuRunAnalysis) -> float:
    """Mean share of step time in exposed communication across ranks (where the waiting shows)."""
    fr = [r.split.fractions["gpu_communication"] for r in run.ranks if r.split is not None]
    return sum(fr) / len(fr) if fr else 0.0
