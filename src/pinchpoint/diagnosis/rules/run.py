"""Time outside the training steps that holds the run: rollouts collected one environment step at a
time, evaluation passes run every epoch, start-up that builds what it could load. Findings of the whole
run (`Finding.of_run`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.between_updates import BetweenUpdates
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.run_time import KIND_SEGMENT, SegmentCode
from pinchpoint.analysis.stacks import is_library
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, stack_evidence
from pinchpoint.diagnosis.whole_run import program_ns
from pinchpoint.trace.run import StepKind

SHARE_MIN = 0.10
"""Calls between updates holding at least 10% of the run (the floor of `note.run_time`'s segments)."""
ROLLOUT_CALLS_MIN = 16
"""A rollout of at least 16 sequential calls per update: something to batch."""
ROLLOUT_CALL_MAX_NS = 5_000_000
"""Calls this short pay mostly their ops' fixed cost: a batched call costs about what one does (a
64-wide MLP's forward: the same ~0.1 ms at batch 1 and 8)."""
ENVS = 8
"""Environments stepped together in the fix (a common vectorised default; the same transitions per
update, in 1/8 the calls)."""
EVAL_EVERY = 2
"""The evaluation fix priced: passes half as often."""
SEGMENT = KIND_SEGMENT[StepKind.EVAL]


class Rollouts(Rule):
    """Pattern: between updates, a policy-gradient loop collects its transitions one environment step
    and one policy forward at a time (thousands of batch-1 calls per update).
    Why it's slow: each call pays its ops' fixed cost (module calls, the action distribution, tensors
    built from Python lists) for one environment; the environment's own Python is the rest.
    Fix: step several environments together (vectorised environments): one batched call serves them.
    Reference: gymnasium's vector environments; Stable-Baselines3's `n_envs`; CleanRL's PPO.
    """

    id: ClassVar[Category] = Category.RUN_ROLLOUTS
    title: ClassVar[str] = "Rollouts one environment step at a time hold the run"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        found = _calls(rank, "rollouts")
        if found is None:
            return
        b, wall, share, code = found
        if b.calls_per_pass < ROLLOUT_CALLS_MIN or b.median_call_ns > ROLLOUT_CALL_MAX_NS:
            return
        batched = b.batched_frac if b.batched_frac is not None else b.forward_ns / max(1, b.ns)
        saved = (b.ns * batched + b.after_pass_ns) * (1 - 1 / ENVS)
        gain = wall / max(1.0, wall - saved)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM if b.batched_frac is not None else Confidence.LOW,
            evidence=_evidence(b, share, wall, code),
            fix=Fact("run.rollouts.fix", envs=ENVS, batched_share=batched),
            snippet=Fact("run.rollouts.snippet", envs=ENVS),
            ranks=(rank.rank,),
            fix_kind=FixKind.VECTORISE,
            fix_params=(("envs", ENVS),),
            of_run=True,
            run_speedup=gain,
        )


class Evaluation(Rule):
    """Pattern: evaluation passes over a DataLoader hold a large part of the run (every epoch, on the
    training set as well as the test set).
    Why it's slow: it is work the training does not need at that rate.
    Fix: evaluate less often (every N epochs, or on a subset), under `torch.inference_mode()`.
    Reference: Lightning's `check_val_every_n_epoch`, transformers' `eval_steps`.
    """

    id: ClassVar[Category] = Category.RUN_EVALUATION
    title: ClassVar[str] = "Evaluation passes hold the run"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        found = _calls(rank, "evaluation")
        if found is None or found[0].passes < 2:
            return
        b, wall, share, code = found
        gain = wall / max(1.0, wall - b.ns * (1 - 1 / EVAL_EVERY))
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.HIGH,
            evidence=_evidence(b, share, wall, code),
            fix=Fact("run.evaluation.fix", every=EVAL_EVERY, ceiling_x=1 / max(1e-6, 1 - share)),
            ranks=(rank.rank,),
            fix_kind=FixKind.EVALUATE_LESS,
            fix_params=(("every", EVAL_EVERY),),
            of_run=True,
            run_speedup=gain,
        )


STARTUP_BUILD_MIN_NS = 3_000_000_000
"""Start-up's own work (imports aside) worth a finding: 3 s every run. The examples' start-ups build a
model and a few tensors in 0.2-0.5 s beside 1.5-3 s of imports (torch's own, and lazily in its first
calls)."""
STARTUP_SHARE_MIN = 0.30
"""And at least 30% of the run's wall clock: a shorter share is noted (`note.run_time`), not found."""
STARTUP_WAITS = 0.5
"""Start-up whose main thread is on a CPU under half its time waits (reads, downloads), not builds."""
LONGER_X = 10
"""The run length the finding also prices: the same program with 10x the loop."""


class StartUp(Rule):
    """Pattern: each run spends seconds before its first step building what it could load: a corpus
    tokenised word by word, an index, features computed from raw files.
    Why it's slow: the work is the same every run and every restart, and no step is slow, so step
    profilers never show it.
    Fix: build it once, save it (torch.save, a NumPy memmap, datasets' save_to_disk) and load it on
    later runs; or build lazily in DataLoader workers.
    Reference: Hugging Face datasets' cache (`map` results cached on disk); nanoGPT's prepare.py (tokens
    written once to a .bin, memmapped by train.py).
    """

    id: ClassVar[Category] = Category.RUN_STARTUP
    title: ClassVar[str] = "Start-up builds, every run, what a cache would load"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        whole = rank.run_time
        seg = next((g for g in whole.segments if g.name == "start-up"), None) if whole is not None else None
        if whole is None or seg is None or seg.code is None:
            return  # (no run clock, or no stack samples to say what start-up does: `note.run_time` only)
        code = seg.code
        building = round(seg.ns * (1 - code.imports_frac))
        if building < STARTUP_BUILD_MIN_NS or building < STARTUP_SHARE_MIN * whole.wall_ns:
            return
        gain = whole.wall_ns / max(1, whole.wall_ns - building)
        loop = program_ns(whole)
        longer = (whole.wall_ns + (LONGER_X - 1) * loop) / max(
            1, whole.wall_ns + (LONGER_X - 1) * loop - building
        )
        top = code.scope.top[0] if code.scope.top else None
        evidence = [
            Fact(
                "run.startup.time",
                ns=seg.ns,
                wall_ns=whole.wall_ns,
                imports_share=code.imports_frac,
                building_ns=building,
                cpu_share=code.cpu_frac,
            ),
            stack_evidence(code.scope, Fact("where.segment", name="start-up")),
            Fact("run.startup.once", building_ns=building, times=LONGER_X, longer_x=longer),
        ]
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=building / whole.wall_ns,
            estimated_speedup=gain,
            basis=Basis.REMOVED,
            confidence=Confidence.MEDIUM,
            evidence=tuple(f for f in evidence if f is not None),
            fix=Fact(
                "run.startup.fix",
                waits=code.cpu_frac < STARTUP_WAITS,
                code=top.label if top is not None else None,
                own=top is not None and not is_library(top.frame),
            ),
            snippet=Fact("run.startup.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.CACHE_STARTUP,
            of_run=True,
            run_speedup=gain,
        )


def _calls(rank: RankAnalysis, kind: str) -> tuple[BetweenUpdates, int, float, SegmentCode | None] | None:
    """The rank's calls between updates when they are `kind` and hold `SHARE_MIN` of the run's loop:
    (them, the loop's ns, their share of it, the code the segment was sampled in); else None (none, or
    no run clock: another profiler's files or an attach, nothing to judge and no note)."""
    b, whole = rank.between, rank.run_time
    if b is None or whole is None or b.kind != kind:
        return None
    wall = program_ns(whole)
    if b.ns < SHARE_MIN * wall:
        return None
    return b, wall, b.ns / wall, next((g.code for g in whole.segments if g.name == SEGMENT), None)


def _evidence(b: BetweenUpdates, share: float, wall: int, code: SegmentCode | None) -> tuple[Fact, ...]:
    out = [
        Fact(
            "run.between.time",
            kind=b.kind,
            share=share,
            ns=b.ns,
            wall_ns=wall,
            passes=b.passes,
            calls=b.calls,
            call_ns=b.median_call_ns,
        ),
        Fact(
            "run.between.parts",
            kind=b.kind,
            forward_share=b.forward_ns / max(1, b.ns),
            wait_share=b.data_wait_ns / max(1, b.ns),
            batched_share=b.batched_frac,
            after_pass_ns=b.after_pass_ns,
            passes=b.passes,
        ),
    ]
    top = stack_evidence(code.scope if code is not None else None, Fact("where.segment", name=b.kind))
    if top is not None:
        out.append(top)
    return tuple(out)
