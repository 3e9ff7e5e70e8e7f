"""What comes after a fix: the step each finding predicts, and the limit that takes over.

A finding's estimate says how much of the step its fix removes; the rest of the step is still there.
Its time is taken out of the phases the finding lives in (the DataLoader wait for `input.*`, the host
work outside framework calls for `host.python`, ...; compute findings shrink forward, backward and the
optimizer step together), and what remains is judged against the new, shorter step: the other finding
with the largest share of it, or else the largest phase. "After this, host.python at 56% of a 31 ms step
is the limit": what the engineer should expect to see when they rerun, and what `pinchpoint diff` checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pinchpoint.diagnosis.finding import Category, Fact, Finding
from pinchpoint.trace.run import HOST_OTHER, Phase

COMPUTE = (Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value)
PHASES_OF: Mapping[Category, tuple[str, ...]] = {
    Category.INPUT_FETCH: (Phase.DATA_WAIT.value,),
    Category.INPUT_PREPROCESS: (Phase.DATA_WAIT.value,),
    Category.HOST_PYTHON: (HOST_OTHER,),
    Category.IO_CHECKPOINT: (Phase.CHECKPOINT_IO.value,),
    Category.HOST_GC: (HOST_OTHER,),
    Category.COMM_EXPOSED: (Phase.COMM.value, Phase.BACKWARD.value),
    Category.PIPELINE_BUBBLE: (Phase.COMM.value,),
    Category.COMM_TENSOR_PARALLEL: (Phase.COMM.value,),
    Category.HOST_SYNC: (Phase.SYNC_WAIT.value,),
    Category.TRANSFER_H2D: (Phase.H2D_COPY.value,),
    Category.IMBALANCE_STRAGGLER: (Phase.COMM.value, Phase.BACKWARD.value),
}
"""Where a finding's time sits in the step; everything else is compute (forward, backward, optimizer)."""
NEXT_FINDING_MIN = 0.10
"""Another finding takes over when it holds at least this share of the shorter step."""


def next_limit(
    f: Finding, others: Sequence[Finding], step_ns: float, phase_ns: Mapping[str, float]
) -> Fact | None:
    """What limits the step once `f` is fixed (the next finding, or else the largest phase, with its share
    of the shorter step); None when `f` predicts no gain."""
    if f.estimated_speedup <= 1.005 or step_ns <= 0:
        return None
    new_step = step_ns / f.estimated_speedup
    saved = step_ns - new_step
    where = PHASES_OF.get(f.id, COMPUTE)
    remaining = dict(phase_ns)
    pool = sum(remaining.get(p, 0.0) for p in where)
    for p in where:
        if pool > 0:
            remaining[p] = max(0.0, remaining.get(p, 0.0) - saved * remaining.get(p, 0.0) / pool)
    best = max(
        (g for g in others if g.id is not f.id and g.share > 0 and not g.of_run),
        key=lambda g: g.share,
        default=None,
    )
    if best is not None and best.share * step_ns / new_step >= NEXT_FINDING_MIN:
        share = min(1.0, best.share * step_ns / new_step)
        return Fact("whatif.next_finding", category=best.id.value, share=share, step_ns=new_step)
    phase = max(remaining, key=lambda p: remaining[p], default=None)
    if phase is None:
        return None
    share = min(1.0, remaining[phase] / new_step)
    return Fact("whatif.next_phase", phase=phase, share=share, step_ns=new_step)


def with_next_limits(
    findings: Sequence[Finding], step_ns: float, phase_ns: Mapping[str, float]
) -> tuple[Finding, ...]:
    return tuple(
        f if f.of_run else replace(f, next_limit=next_limit(f, findings, step_ns, phase_ns)) for f in findings
    )
