"""`pipeline.bubble`: stages of a pipeline-parallel schedule idle while the others work.

Under GPipe or 1F1B with p stages and m microbatches a step takes m + p - 1 microbatch slots of which
each stage works m: every stage idles (p - 1) slots, waiting at a receive for its neighbour (the
bubble, (p - 1)/(m + p - 1) of the step). What each rank waited is measured (its `comm`: the
schedule's receives and sends); with m' microbatches of the same batch the work stays and the idle
slots shrink with the microbatch: about idle x m/m'. Priced for twice the microbatches (`MORE`): each
microbatch also has a fixed cost the count leaves out, so the first doubling is the one that holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject
from pinchpoint.trace.parallel import PipelineConfig

BUBBLE_SHARE_MIN = 0.10
"""A stage idle at least 10% of the step ..."""
BOUND_MIN = 0.10
"""... under a schedule whose own bound is at least 10% (more microbatches would shrink it)."""
MORE = 2
"""The fix priced: twice the microbatches ... (on a 2-core CPU, examples/pipeline_bubble.py: 1 -> 2
measured x1.30 of the ideal x1.33; 4 no better than 2, 8 slower: each microbatch has a fixed cost, a
transfer and a gradient accumulation, that the schedule's count leaves out)"""
MICROBATCHES_MAX = 32
"""... up to 32 (a microbatch of a few rows runs its matmuls poorly)."""


class PipelineBubble(Rule):
    """Pattern: a pipeline schedule with few microbatches for its stages: each stage waits at a receive
    for a share of the step near the schedule's bound (p - 1)/(m + p - 1).
    Why it's slow: the first stage waits for the last one's backward, the last for the first forward;
    with few microbatches those waits are a large part of every step.
    Fix: more microbatches (`n_microbatches`) of the same batch; an interleaved schedule (several
    virtual stages per rank, `ScheduleInterleaved1F1B`) cuts the bubble further; 1F1B holds fewer
    microbatches' activations than GPipe.
    Reference: GPipe (Huang et al. 2019), PipeDream-Flush / 1F1B (Narayanan et al. 2021); torch's
    `torch.distributed.pipelining` docs; torchtitan's pipeline settings.
    """

    id: ClassVar[Category] = Category.PIPELINE_BUBBLE
    title: ClassVar[str] = "Pipeline stages idle in the schedule's bubble"
    scope: ClassVar[Scope] = Scope.RANKS
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "comm"})

    def check(self, s: Subject) -> Iterable[Finding]:
        staged = [(r, c) for r in s.job.runs if (c := _config(r)) is not None and r.steps is not None]
        if not staged:
            return
        cfg = staged[0][1]
        p, m = cfg.stages, cfg.microbatches
        bound = (p - 1) / (m + p - 1)
        idle = {r.rank: _idle(r) for r, _ in staged}
        worst = max(staged, key=lambda rc: idle[rc[0].rank])[0]
        share = idle[worst.rank]
        more = min(MICROBATCHES_MAX, MORE * m)
        if share < BUBBLE_SHARE_MIN or bound < BOUND_MIN or more <= m:
            return
        speedup = 1.0 / max(1e-9, 1.0 - share * (1.0 - m / more))
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact(
                    "pipeline.bubble.schedule",
                    schedule=cfg.schedule,
                    stages=p,
                    microbatches=m,
                    bound_share=bound,
                ),
                *(Fact("pipeline.bubble.rank", rank=r, share=idle[r]) for r in sorted(idle)),
                Fact("pipeline.bubble.more", microbatches=more, bound_share=(p - 1) / (more + p - 1)),
            ),
            fix=Fact("pipeline.bubble.fix", microbatches=more, schedule=cfg.schedule),
            snippet=Fact("pipeline.bubble.snippet", microbatches=more),
            ranks=tuple(sorted(idle)),
            fix_kind=FixKind.MICROBATCHES,
            fix_params=(("microbatches", more),),
        )


def _config(r: RankAnalysis) -> PipelineConfig | None:
    return r.comm.pipeline if r.comm is not None else None


def _idle(r: RankAnalysis) -> float:
    """The share of the rank's step it spent waiting at the schedule's receives and sends."""
    assert r.steps is not None and r.comm is not None
    return min(1.0, r.comm.mean_ns / max(1.0, r.steps.mean_ns))
