"""Checkpoints written synchronously inside the step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.checkpoint import AFTER_STEPS
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
        inside = steps.share(Phase.CHECKPOINT_IO.value)
        saves = rank.saves
        after = saves.after_share if saves is not None else 0.0
        # the steps after a save pay for its write-back too: the save's share of the run is both
        share = min(0.95, inside + after * (1.0 - inside))
        if share < CHECKPOINT_SHARE_MIN:
            return
        evidence = [
            Fact(
                "io.checkpoint.save",
                share=inside,
                per_step_ns=steps.phase_ns.get(Phase.CHECKPOINT_IO.value, 0.0),
            )
        ]
        if saves is not None:
            evidence.append(
                Fact(
                    "io.checkpoint.after",
                    saves=saves.saves,
                    every=saves.every,
                    save_ns=saves.save_ns,
                    after_ns=saves.after_ns,
                    typical_ns=saves.typical_ns,
                    steps=AFTER_STEPS,
                    share=after,
                    p=saves.p_slower,
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=Confidence.HIGH,
            evidence=tuple(evidence),
            fix=Fact("io.checkpoint.fix"),
            snippet=Fact("io.checkpoint.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.CHECKPOINT_LESS,
            fix_params=(("every", CHECKPOINT_EVERY),),
        )
