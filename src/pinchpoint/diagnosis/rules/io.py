"""Checkpoints written synchronously inside the step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import Rule, Subject, ms, pct, speedup_removing
from pinchpoint.trace.run import Phase

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
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=Confidence.HIGH,
            evidence=(
                f"torch.save takes {pct(share)} of the step ({ms(steps.phase_ns.get(Phase.CHECKPOINT_IO.value, 0.0))} "
                f"per step on average)",
            ),
            fix="Checkpoint less often (every N steps or minutes) and off the critical path: snapshot the "
            "state dict, then write it from a background thread.",
            snippet=(
                "if step % 500 == 0:\n"
                "    state = {k: v.detach().clone() for k, v in model.state_dict().items()}\n"
                "    threading.Thread(target=torch.save, args=(state, path)).start()"
            ),
            ranks=(rank.rank,),
        )
