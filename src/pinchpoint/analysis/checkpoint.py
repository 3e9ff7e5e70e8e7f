"""What a checkpoint costs beyond the time inside `torch.save`: the steps after it.

`torch.save` returns once the bytes are in the page cache; the kernel writes them back while the next
steps run, and on a machine with few cores that write-back (and the cache it evicts) slows them. A
held-out program's saves took half of what removing them gained (priced x1.71, measured x3.79). When
only some steps save, the steps just after a save are compared with the steps far from any: their
extra time, and the saving step's own time outside the save, are the save's too. When every step
saves there is nothing to compare with, and only the time inside the save is known.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.analysis.steps import exposed_by_phase
from pinchpoint.stats.ranks import slower_p
from pinchpoint.trace.run import Phase, Step

AFTER_STEPS = 3
"""Steps after a save read as its aftermath (write-back of a few hundred MB lasts ~0.1-1 s)."""
BASELINE_MIN = 5
"""Steps far from every save needed to tell what a step costs without one."""
AFTER_P_MAX = 0.05
"""The steps after saves count as slower below this (one-sided rank test against the far steps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveCost:
    """Checkpoints among a rank's steady steps, and the time they cost outside `torch.save`."""

    steps: int
    """Steady steps read."""
    saves: int
    """Steady steps that saved."""
    every: int
    """Median steps from one save to the next."""
    save_ns: int
    """Mean time inside `torch.save` per saving step."""
    typical_ns: int
    """Median step far from every save (not within `AFTER_STEPS` after one, not saving)."""
    after_ns: int
    """Mean extra time per save: the saving step's time outside the save and the `AFTER_STEPS` steps
    after it, over `typical_ns` each (0 when those steps were not slower beyond chance)."""
    p_slower: float
    """Rank test: the chance of steps after saves this slow if they were drawn like the far ones."""

    @property
    def after_share(self) -> float:
        """The aftermath's share of the whole run's steps."""
        total = self.steps * self.typical_ns + self.saves * (self.save_ns + self.after_ns)
        return self.saves * self.after_ns / max(1, total)


def save_cost(steady: Sequence[Step]) -> SaveCost | None:
    """The saves' aftermath among `steady` steps; None when no step saved, every step did, or too few
    steps ran far from a save."""
    ordered = sorted(steady, key=lambda s: s.index)
    inside = {s.index: _inside_save(s) for s in ordered}
    saving = [s for s in ordered if inside[s.index] > 0]
    if not saving or len(saving) == len(ordered):
        return None
    by_index = {s.index: s for s in ordered}
    after: dict[int, list[Step]] = {}
    for s in saving:
        follow = [by_index[i] for i in range(s.index + 1, s.index + 1 + AFTER_STEPS) if i in by_index]
        after[s.index] = [f for f in follow if inside[f.index] == 0]
    near = {s.index for s in saving} | {f.index for fs in after.values() for f in fs}
    far = [s.dur_ns for s in ordered if s.index not in near]
    if len(far) < BASELINE_MIN:
        return None
    typical = int(statistics.median(far))
    following = [f.dur_ns for fs in after.values() for f in fs]
    outside = [max(0, s.dur_ns - inside[s.index]) for s in saving]
    p = slower_p([*following, *outside], far) if following else 1.0
    followed = sum(1 for fs in after.values() if fs)  # (the last save may end the run)
    extra = sum(max(0, o - typical) for o in outside) / len(saving) + (
        sum(d - typical for d in following) / followed if followed else 0.0
    )
    gaps = [b.index - a.index for a, b in itertools.pairwise(saving)]
    return SaveCost(
        steps=len(ordered),
        saves=len(saving),
        every=int(statistics.median(gaps)) if gaps else 0,
        save_ns=round(sum(inside[s.index] for s in saving) / len(saving)),
        typical_ns=typical,
        after_ns=max(0, round(extra)) if p <= AFTER_P_MAX else 0,
        p_slower=p,
    )


def _inside_save(step: Step) -> int:
    """Exposed time inside `torch.save` (only a step with a save interval is resolved by priority)."""
    if not any(iv.phase is Phase.CHECKPOINT_IO for iv in step.intervals):
        return 0
    return exposed_by_phase(step).get(Phase.CHECKPOINT_IO.value, 0)
