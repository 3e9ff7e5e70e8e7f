"""The notes a diagnosis carries beside its findings: rules that could not judge, what a trace lacks, and
the run's circumstances. Notes are typed (`Note`); renderers print their text."""

from __future__ import annotations

from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Note, NoteKind
from pinchpoint.diagnosis.rules.base import Rule

MISSING_DATA = {
    "steps": "no steps were recorded (no optimizer step, model call or prof.step() was seen)",
    "ops": "needs an op window (the run had too few steps, or it was turned off)",
    "traffic": "needs an op window with tensor shapes (the run had too few steps, or it was turned off)",
    "loader": "the DataLoader's fetch activity was not recorded",
    "cpu": "needs system samples over the steps (run too short?)",
    "memory": "needs RSS at five or more steps",
    "faults": "needs page-fault counts at five or more steps",
    "main": "the training process's torch settings were not recorded",
    "comm": "no collectives were recorded",
}
"""Why a rule was not judged, by the first `RankAnalysis` field it needs that is missing."""

QUIET_SHARE = 0.005
"""A rank that spends under 0.5% of its step in a rule's `quiet_without` phase gives it nothing to judge."""

FOREIGN_LOAD_NOTE = 0.3
"""Other processes using this many cores' worth of CPU during the steps disturb every timing."""

CUDA_SOURCE = Note(
    kind=NoteKind.SOURCE,
    text="CUDA program: step-time findings come from the op window's device timeline "
    "(the host only enqueues work; its phase times show when it waited, not what limits the step)",
)


def missing(rule: Rule, rank: RankAnalysis) -> list[str]:
    """The `RankAnalysis` fields `rule` needs that this rank lacks, in a stable order."""
    return [name for name in sorted(rule.requires) if getattr(rank, name) is None]


def nothing_to_judge(rule: Rule, rank: RankAnalysis) -> bool:
    """A rule whose phase this rank (almost) never spends time in (an input rule on a program that never
    waits for data) has nothing to judge: saying its data was missing would only mislead."""
    if rule.quiet_without is None or rank.steps is None:
        return False
    return rank.steps.share(rule.quiet_without) < QUIET_SHARE


def not_judged(rule: Rule, rank: RankAnalysis, field: str) -> Note:
    reason = MISSING_DATA.get(field, f"missing {field}")
    return Note(
        kind=NoteKind.NOT_JUDGED,
        category=rule.id,
        text=f"{rule.id.value}: not judged on rank {rank.rank}: {reason}",
    )


def trace_notes(analysis: GpuRunAnalysis) -> list[Note]:
    """What the device timelines lack, judged on the first rank (and across ranks)."""
    notes = []
    idle_ranks = [r.rank for r in analysis.ranks if r.breakdown is None]
    if idle_ranks:
        notes.append(
            Note(
                kind=NoteKind.TRACE,
                text=f"no GPU kernels, copies or memsets in the trace of rank(s) {idle_ranks}: a CPU-only "
                "profile? GPU findings need `ProfilerActivity.CUDA`",
            )
        )
    first = analysis.ranks[0] if analysis.ranks else None
    if first is not None:
        if first.steps.note:
            kind = NoteKind.TRACE if first.steps.steps else NoteKind.TRACE_STEPS
            notes.append(Note(kind=kind, text=first.steps.note))
        if first.memory.note:
            notes.append(Note(kind=NoteKind.TRACE, text=first.memory.note))
        if first.split is not None and not first.split.over_steps:
            notes.append(
                Note(
                    kind=NoteKind.TRACE_STEPS,
                    text="shares are of the GPU-activity span: the trace has no ProfilerStep ranges",
                )
            )
    if analysis.comparison is not None and analysis.comparison.note:
        notes.append(Note(kind=NoteKind.TRACE, text=analysis.comparison.note))
    return notes


def context_notes(ranks: tuple[RankAnalysis, ...]) -> list[Note]:
    """Facts about the run that qualify every finding (a shared machine, too few steps)."""
    notes = []
    for rank in ranks[:1]:
        cpu = rank.cpu
        if cpu is not None:
            foreign = cpu.machine_busy_cores - cpu.process_cores
            if foreign >= FOREIGN_LOAD_NOTE:
                notes.append(
                    Note(
                        kind=NoteKind.CONTEXT,
                        text=f"other processes kept {foreign:.1f} of {cpu.usable_cores} cores busy during the "
                        "steps: timings (and contention findings) reflect a shared machine",
                    )
                )
        if rank.steps is not None and rank.steps.count < 10:
            notes.append(
                Note(
                    kind=NoteKind.CONTEXT,
                    text=f"only {rank.steps.count} steady steps were measured: statistics are rough",
                )
            )
    return notes


def unique(notes: list[Note]) -> tuple[Note, ...]:
    """Each note's text once, first occurrence kept."""
    seen: dict[str, Note] = {}
    for n in notes:
        seen.setdefault(n.text, n)
    return tuple(seen.values())
