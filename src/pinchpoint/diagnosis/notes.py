"""The notes a diagnosis carries beside its findings: rules that could not judge, what a trace lacks, and
the run's circumstances. Notes are typed (`Note`) and state facts; `report/phrases/notes.py` words them."""

from __future__ import annotations

from pinchpoint.analysis.gpu.compiled import CompiledTrace
from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Fact, Note, NoteKind
from pinchpoint.diagnosis.rules.base import Rule
from pinchpoint.diagnosis.whole_run import judged_segment

QUIET_SHARE = 0.005
"""A rank that spends under 0.5% of its step in a rule's `quiet_without` phase gives it nothing to judge."""

FOREIGN_LOAD_NOTE = 0.3
"""Other processes using this many cores' worth of CPU during the steps disturb every timing."""

CUDA_SOURCE = Note(kind=NoteKind.SOURCE, fact=Fact("note.cuda_source"))


def missing(rule: Rule, rank: RankAnalysis) -> list[str]:
    """The `RankAnalysis` fields `rule` needs that this rank lacks, in a stable order."""
    return [name for name in sorted(rule.requires) if getattr(rank, name) is None]


def nothing_to_judge(rule: Rule, rank: RankAnalysis) -> bool:
    """A rule whose phase this rank (almost) never spends time in (an input rule on a program that never
    waits for data) has nothing to judge: saying its data was missing would only mislead. So has a rule of
    served programs (`serving`) on a program that was not loaded as a server."""
    if "serving" in rule.requires and rank.serving is None:
        return True
    if rule.quiet_without is None or rank.steps is None:
        return False
    return rank.steps.share(rule.quiet_without) < QUIET_SHARE


def not_judged(rule: Rule, rank: RankAnalysis, field: str) -> Note:
    """`rule` was not judged on `rank`: `field`, the first `RankAnalysis` field it needs, is missing."""
    return Note(
        kind=NoteKind.NOT_JUDGED,
        category=rule.id,
        fact=Fact("note.not_judged", category=rule.id.value, rank=rank.rank, missing=field),
    )


def trace_notes(analysis: GpuRunAnalysis) -> list[Note]:
    """What the device timelines lack, judged on the first rank (and across ranks)."""
    notes = []
    idle_ranks = [r.rank for r in analysis.ranks if r.breakdown is None]
    if idle_ranks:
        notes.append(Note(kind=NoteKind.TRACE, fact=Fact("note.no_gpu_work", ranks=tuple(idle_ranks))))
    first = analysis.ranks[0] if analysis.ranks else None
    if first is not None:
        if first.steps.note:
            kind = NoteKind.TRACE if first.steps.steps else NoteKind.TRACE_STEPS
            notes.append(Note(kind=kind, fact=Fact("note.analysis", text=first.steps.note)))
        if first.memory.note:
            notes.append(Note(kind=NoteKind.TRACE, fact=Fact("note.analysis", text=first.memory.note)))
        if first.split is not None and not first.split.over_steps:
            notes.append(Note(kind=NoteKind.TRACE_STEPS, fact=Fact("note.span_shares")))
        notes.extend(_compiled_notes(first.compiled))
    if analysis.comparison is not None and analysis.comparison.note:
        notes.append(Note(kind=NoteKind.TRACE, fact=Fact("note.analysis", text=analysis.comparison.note)))
    return notes


TRACE_COMPILING_NOTE = 0.10
"""First compilations over 10% of the profiled steps: the trace caught the warm-up."""


def _compiled_notes(c: CompiledTrace) -> list[Note]:
    """A trace that caught first compilations (its steps are not steady), or that ran recompiled frames
    whose recompiles happened before it started."""
    notes = []
    first_ns = c.compiling_ns - c.recompile_ns
    if c.window_ns > 0 and first_ns >= TRACE_COMPILING_NOTE * c.window_ns:
        notes.append(
            Note(
                kind=NoteKind.TRACE,
                fact=Fact(
                    "note.trace_compiling", ns=first_ns, share=first_ns / c.window_ns, steps=c.steps_compiling
                ),
            )
        )
    before = tuple(r.key for r in c.regions if r.compile > 0 and not any(
        x.frame == r.frame and x.compile == r.compile for x in c.compilations
    ))  # fmt: skip
    if before:
        notes.append(Note(kind=NoteKind.TRACE, fact=Fact("note.trace_recompiled_before", regions=before)))
    return notes


STEPS_NOTE_BELOW = 0.6
"""Training steps under 60% of the run: the findings judge only part of it, and the report says so."""


def context_notes(ranks: tuple[RankAnalysis, ...]) -> list[Note]:
    """Facts about the run that qualify every finding (a shared machine, too few steps)."""
    notes = []
    for rank in ranks[:1]:
        load = rank.load
        if load is not None and load.used:
            notes.append(
                Note(
                    kind=NoteKind.CONTEXT,
                    fact=Fact(
                        "note.clean_steps",
                        loaded=load.loaded,
                        steps=load.steps,
                        clean=load.clean,
                        foreign_cores=load.foreign_loaded,
                        slowdown=load.slowdown,
                    ),
                )
            )
        if load is not None and load.trials_dropped:
            notes.append(
                Note(kind=NoteKind.CONTEXT, fact=Fact("note.trials_disturbed", trials=load.trials_dropped))
            )
        if load is not None and load.window_steps_dropped:
            notes.append(
                Note(
                    kind=NoteKind.CONTEXT,
                    fact=Fact(
                        "note.window_disturbed", steps=load.window_steps_dropped, slowdown=load.slowdown
                    ),
                )
            )
        cpu = rank.cpu
        if cpu is not None:
            foreign = cpu.foreign_cores
            if foreign >= FOREIGN_LOAD_NOTE and rank.waits is None:  # (else note.unloaded says more)
                notes.append(
                    Note(
                        kind=NoteKind.CONTEXT,
                        fact=Fact(
                            "note.shared_machine", foreign_cores=foreign, usable_cores=cpu.usable_cores
                        ),
                    )
                )
        if rank.waits is not None:
            w = rank.waits
            notes.append(
                Note(
                    kind=NoteKind.CONTEXT,
                    fact=Fact(
                        "note.unloaded",
                        foreign_cores=w.foreign_cores,
                        usable_cores=cpu.usable_cores if cpu is not None else None,
                        step_ns=w.step_ns,
                        main_ns=w.main_ns,
                        all_ns=w.all_ns,
                        low_ns=w.idle_low_ns,
                        high_ns=w.idle_high_ns,
                    ),
                )
            )
        notes.extend(run_notes(rank))
        if rank.steps is not None and rank.steps.count < 10:
            notes.append(Note(kind=NoteKind.CONTEXT, fact=Fact("note.few_steps", steps=rank.steps.count)))
    return notes


def run_notes(rank: RankAnalysis) -> list[Note]:
    """What the steps' statistics leave out: the run outside its training steps, and periodic stalls."""
    notes: list[Note] = []
    whole = rank.run_time
    judged = judged_segment(whole)
    if whole is not None and whole.share(judged) < STEPS_NOTE_BELOW and rank.steps is not None:
        others = sorted(
            (g for g in whole.segments if g.name != judged and g.ns >= 0.01 * whole.wall_ns),
            key=lambda g: -g.ns,
        )
        notes.append(
            Note(
                kind=NoteKind.CONTEXT,
                fact=Fact(
                    "note.run_time",
                    judged=judged,
                    steps_share=whole.share(judged),
                    wall_ns=whole.wall_ns,
                    others=tuple(
                        (g.name, g.ns / max(1, whole.wall_ns))
                        + ((g.code.scope.top[0].label,) if g.code is not None and g.code.scope.top else ())
                        for g in others[:3]
                    ),
                ),
            )
        )
    if rank.stalls is not None:
        st = rank.stalls
        notes.append(
            Note(
                kind=NoteKind.CONTEXT,
                fact=Fact(
                    "note.stalls",
                    stalls=st.stalls,
                    steps=st.steps,
                    every=st.every,
                    stall_ns=st.stall_ns,
                    median_ns=st.median_ns,
                    share=st.share,
                    cause=st.cause,
                    explained=st.explained,
                    restarted=_workers_restart(rank) if "loader" in (st.cause, st.also) else False,
                    also=(st.also, st.also_stalls) if st.also is not None else None,
                    code=(st.code.top[0].label, st.code.top[0].share) if st.code is not None else None,
                ),
            )
        )
    return notes


def _workers_restart(rank: RankAnalysis) -> bool:
    """The loader feeding the steps starts its worker processes again with each iterator (an epoch)."""
    config = rank.loader.config if rank.loader is not None else None
    return config is not None and config.num_workers > 0 and not config.persistent_workers


def unique(notes: list[Note]) -> tuple[Note, ...]:
    """Each note's fact once (one fact reads as one sentence), first occurrence kept."""
    seen: dict[Fact, Note] = {}
    for n in notes:
        seen.setdefault(n.fact, n)
    return tuple(seen.values())
