"""Checkpoints written synchronously inside the step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, speedup_removing
from pinchpoint.trace.run import Phase

CHECKPOINT_EVERY = 500
"""The fix's period in saves, as its snippet writes it (`step % 500`)."""
CHECKPOINT_SHARE_MIN = 0.05
"""torch.save time above 5% of the step (same floor as the other exposed-time rules)."""


class IoCheckpoint(Rule):
    """Pattern: torch.save (model/optimizer state) runs synchronously inside the training loop.
    Why it's slow: serialising and writing state blocks the step; nothing overlaps it.
    Fix: checkpoint every N steps or minutes; write from a background thread (or torch.distributed
    .checkpoint.async_save) after copying state to CPU memory.
    Reference: DESIGN.md io.checkpoint; PyTorch distributed checkpoint docs (async_save).
    """

    id: ClassVar[Category] = Category.IO_CHECKPOINT
    title: ClassVar[str] = "Synchronous checkpoint writes inside the step"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        steps = rank.steps
        if steps is None:
            return
        share = steps.share(Phase.CHECKPOINT_IO.value)
        if share < CHECKPOINT_SHARE_MIN:
            return
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=Confidence.HIGH,
            evidence=(
                Fact(
                    "io.checkpoint.save",
                    share=share,
                    per_step_ns=steps.phase_ns.get(Phase.CHECKPOINT_IO.value, 0.0),
                ),
            ),
            fix=Fact("io.checkpoint.fix"),
            snippet=Fact("io.checkpoint.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.CHECKPOINT_LESS,
            fix_params=(("every", CHECKPOINT_EVERY),),
        )
