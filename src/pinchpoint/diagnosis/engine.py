"""Runs every rule of the registry on a job and merges what they find into one ranked list.

One path for every input: a run's recordings (`pinchpoint run`), profiler traces (`pinchpoint analyze`),
or both (a CUDA program's run, whose op window is a device timeline). Each rule is called on the
subjects its scope names; where both sources judged a category, `registry.DEVICE_OWNS` says which one
decides (`merge.py` says how the other one's evidence is kept).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis
from pinchpoint.analysis.outside import OutsideWatch
from pinchpoint.analysis.run_analysis import RunAnalysis
from pinchpoint.diagnosis.finding import Category, Fact, Finding, Note, NoteKind
from pinchpoint.diagnosis.frameworks import in_framework_terms
from pinchpoint.diagnosis.merge import (
    fold_explained,
    merge,
    net_compute_summary,
    on_a_shared_machine,
    outside_the_window,
    sort_key,
    with_loader_verdict,
)
from pinchpoint.diagnosis.native_evidence import with_native_evidence
from pinchpoint.diagnosis.notes import (
    CUDA_SOURCE,
    context_notes,
    missing,
    not_judged,
    nothing_to_judge,
    trace_notes,
    unique,
)
from pinchpoint.diagnosis.registry import DEVICE_OWNS, RULES
from pinchpoint.diagnosis.rules.base import Job, Rule, Scope, Subject
from pinchpoint.diagnosis.rules.outside import loop_waits
from pinchpoint.diagnosis.shares import bound_shares
from pinchpoint.diagnosis.unloaded import without_the_load
from pinchpoint.diagnosis.whatif import with_next_limits
from pinchpoint.diagnosis.whole_run import with_run_gains


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    notes: tuple[Note, ...]
    """Rules that could not judge, and why; what the data lacks; the run's circumstances (honest gaps,
    not findings): each states a fact, worded by the report (`report/phrases/notes.py`)."""


def diagnose(
    analysis: RunAnalysis, rules: Sequence[Rule] = RULES, *, gpu: GpuRunAnalysis | None = None
) -> Diagnosis:
    """The rules over a run directory; with `gpu` (the op windows of a CUDA program, analysed as
    traces) the device timeline decides the categories it owns (`registry.DEVICE_OWNS`)."""
    return diagnose_job(Job(env=analysis.environment, runs=analysis.ranks, devices=gpu), rules)


def diagnose_gpu(analysis: GpuRunAnalysis, rules: Sequence[Rule] = RULES) -> Diagnosis:
    """The rules over profiler traces (`pinchpoint analyze`)."""
    return diagnose_job(Job(devices=analysis), rules)


def diagnose_outside(watch: OutsideWatch, rules: Sequence[Rule] = RULES) -> Diagnosis:
    """The OUTSIDE rules over a process watched from outside (`pinchpoint attach` without its agent):
    findings by their share of the main thread's time, a note where the loop's share is a wait."""
    job = Job(outside=watch)
    subject = Subject(rank=0, job=job)
    found = [f for rule in rules if rule.scope is Scope.OUTSIDE for f in rule.check(subject)]
    notes = []
    if loop_waits(watch) and watch.main is not None and watch.threads is not None:
        loop, cores = watch.main.shares["loop"], watch.threads.main_cores
        notes.append(
            Note(kind=NoteKind.CONTEXT, fact=Fact("outside.loop_waits", loop_share=loop, main_cores=cores))
        )
    return Diagnosis(findings=tuple(sorted(found, key=lambda f: -f.share)), notes=tuple(notes))


def diagnose_job(job: Job, rules: Sequence[Rule] = RULES) -> Diagnosis:
    by_id: dict[Category, Finding] = {}
    notes: list[Note] = []
    if job.runs:
        by_id, notes = _judge_recordings(job, rules)
        if job.devices is None:
            fold_explained(by_id)
    if job.devices is not None:
        device = _judge_timelines(job, rules)
        if job.runs:
            _device_decides(job, by_id, notes, device)
        else:
            by_id = device
            notes = trace_notes(job.devices)
    if job.runs:
        net_compute_summary(by_id)
        if job.devices is None:  # (a device timeline's shares are of its own window's steps)
            bound_shares(by_id, job.runs)
    findings = tuple(sorted(by_id.values(), key=sort_key))
    if job.runs:
        findings = on_a_shared_machine(_in_context(job, findings), job.runs)
        findings = without_the_load(findings, job.runs, job.env)
        findings = with_native_evidence(findings, job.runs, job.env)
        findings = with_run_gains(findings, job.runs)
        notes.extend(context_notes(job.runs))
    return Diagnosis(findings=findings, notes=unique(notes))


def _judge_recordings(job: Job, rules: Sequence[Rule]) -> tuple[dict[Category, Finding], list[Note]]:
    """Every RANK rule on every rank's recordings, then the RANKS rules once; a rule whose data is
    missing is noted (on rank 0, or the only rank) instead of guessed."""
    by_id: dict[Category, Finding] = {}
    notes: list[Note] = []
    single = len(job.runs) == 1
    for rank in job.runs:
        subject = Subject(rank=rank.rank, job=job, run=rank)
        for rule in rules:
            if rule.scope is not Scope.RANK:
                continue
            lacking = missing(rule, rank)
            if lacking:
                if (rank.rank == 0 or single) and not nothing_to_judge(rule, rank):
                    notes.append(not_judged(rule, rank, lacking[0]))
                continue
            for f in rule.check(subject):
                merge(by_id, f)
    lead = job.runs[0]
    # A cross-rank rule whose categories the device timeline decides would only be set aside.
    device_decides = job.devices is not None
    for rule in rules:
        if rule.scope is not Scope.RANKS or (device_decides and rule.yields <= DEVICE_OWNS):
            continue
        if any(not missing(rule, r) for r in job.runs):
            for f in rule.check(Subject(rank=lead.rank, job=job, run=lead)):
                merge(by_id, f)
    return by_id, notes


def _device_subjects(job: Job) -> Iterator[Subject]:
    assert job.devices is not None
    for rank in job.devices.ranks:
        yield Subject(rank=rank.rank, job=job, device=rank)


def _judge_timelines(job: Job, rules: Sequence[Rule]) -> dict[Category, Finding]:
    """Every DEVICE rule on every rank's device timeline."""
    by_id: dict[Category, Finding] = {}
    for subject in _device_subjects(job):
        for rule in rules:
            if rule.scope is Scope.DEVICE:
                for f in rule.check(subject):
                    merge(by_id, f)
    return by_id


def _device_decides(
    job: Job, by_id: dict[Category, Finding], notes: list[Note], device: dict[Category, Finding]
) -> None:
    """Recordings and device timelines of one job: the device's findings decide the categories it owns,
    read against the steps outside the op window; the recordings' findings there lend their verdict."""
    assert job.devices is not None
    host = {c: by_id.pop(c) for c in list(by_id) if c in DEVICE_OWNS}
    notes[:] = [n for n in notes if not (n.kind is NoteKind.NOT_JUDGED and n.category in DEVICE_OWNS)]
    outside = {r.rank: r.steps.median_ns for r in job.runs if r.steps is not None}
    windows = {r.rank: r for r in job.devices.ranks}
    for found in sorted(device.values(), key=sort_key):
        judged = outside_the_window(found, windows, outside)
        if judged is not None:
            merge(by_id, with_loader_verdict(judged, host))
    notes.extend(n for n in trace_notes(job.devices) if n.kind is not NoteKind.TRACE_STEPS)
    notes.append(CUDA_SOURCE)


def _in_context(job: Job, findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """What limits the step once each fix is applied (a CPU program's phases), and each fix in the words
    of the framework the program runs under."""
    lead = next((r.steps for r in job.runs if r.steps is not None), None)
    if job.devices is None and lead is not None:
        findings = with_next_limits(findings, lead.host_mean_ns or lead.mean_ns, lead.phase_ns)
    framework = next((r.main.framework for r in job.runs if r.main and r.main.framework), None)
    return in_framework_terms(findings, framework)
