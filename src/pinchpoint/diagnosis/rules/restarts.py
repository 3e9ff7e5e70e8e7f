"""A training DataLoader whose workers start again at every epoch (`analysis/restarts.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, short_site, speedup_removing

SHARE_MIN = 0.05
"""The restarts cost at least 5% of the steps' time."""


class WorkerRestart(Rule):
    """Pattern: a training DataLoader with workers and no `persistent_workers`, over several epochs:
    each epoch's first step waits far longer than the rest.
    Why it's slow: the workers exit at each epoch's end; the next epoch starts new ones, and each pays
    its start-up and whatever the dataset opens on first use before its first batch.
    Fix: DataLoader(..., persistent_workers=True): the workers, and what they opened, live for the run.
    Reference: PyTorch DataLoader docs (persistent_workers); Lightning's and transformers' loader options.
    """

    id: ClassVar[Category] = Category.INPUT_WORKER_RESTART
    title: ClassVar[str] = "DataLoader workers start again every epoch"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        r = rank.restarts
        if r is None or r.share < SHARE_MIN:
            return
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=r.share,
            estimated_speedup=speedup_removing(r.share),
            basis=Basis.REMOVED,
            confidence=Confidence.HIGH if r.iterators >= 4 else Confidence.MEDIUM,
            evidence=(
                Fact("input.restart.steps", iterators=r.iterators, workers=r.workers, site=short_site(r.site) or ""),
                Fact(
                    "input.restart.first",
                    first_ns=r.first_ns,
                    other_ns=r.other_ns,
                    saved_ns=r.saved_ns,
                    steps=r.steps,
                    share=r.share,
                ),
            ),
            fix=Fact("input.restart.fix", workers=r.workers),
            snippet=Fact("input.restart.snippet", workers=r.workers),
            ranks=(rank.rank,),
            fix_kind=FixKind.PERSISTENT_WORKERS,
        )
