"""Runs every rule on every rank and merges what they find into one ranked list."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.analysis.run_analysis import RankAnalysis, RunAnalysis
from pinchpoint.diagnosis.finding import Category, Finding
from pinchpoint.diagnosis.frameworks import in_framework_terms
from pinchpoint.diagnosis.gpu import GPU_RULES, MIN_SHARE, GpuRule
from pinchpoint.diagnosis.registry import RULES
from pinchpoint.diagnosis.rules.base import Rule, ms, pct, speedup_removing
from pinchpoint.diagnosis.rules.comm import comm_exposed
from pinchpoint.diagnosis.rules.ranks import straggler
from pinchpoint.diagnosis.whatif import with_next_limits

MISSING_DATA = {
    "steps": "no steps were recorded (no optimizer step, model call or prof.step() was seen)",
    "ops": "needs an op window (the run had too few steps, or it was turned off)",
    "traffic": "needs an op window with tensor shapes (the run had too few steps, or it was turned off)",
    "loader": "the DataLoader's fetch activity was not recorded",
    "cpu": "needs system samples over the steps (run too short?)",
    "memory": "needs RSS at five or more steps",
    "faults": "needs page-fault counts at five or more steps",
    "main": "the training process's torch settings were not recorded",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    """Rules that could not judge, and why (honest gaps, not findings)."""


def _missing(rule: Rule, rank: RankAnalysis) -> list[str]:
    return [name for name in sorted(rule.requires) if getattr(rank, name) is None]


def sort_key(f: Finding) -> tuple[float, int, float]:
    # Biggest predicted gain first; among equal gains, problems before the "compute-bound" summary
    # (which has no fix to gain from), then by share.
    informational = (
        f.estimated_speedup <= 1.0 and f.share > 0 and f.id.value in ("compute.math", "compute.memory")
    )
    return (-round(f.estimated_speedup, 3), 1 if informational else 0, -f.share)


def _net_compute_summary(by_id: dict[str, Finding]) -> None:
    """The "compute-bound" summary counts every millisecond of forward, backward and optimizer; when
    per-op overhead (host.dispatch) or memory-bound elementwise work (compute.memory) was found inside
    those phases, that part is not math: take it off, so the shares of one step add up."""
    compute = by_id.get(Category.COMPUTE_MATH.value)
    if compute is None or compute.estimated_speedup > 1.0:
        return
    share = compute.share
    notes = []
    for cid, what in (
        (Category.HOST_DISPATCH, "per-op overhead"),
        (Category.COMPUTE_MEMORY, "memory-bound elementwise work"),
    ):
        other = by_id.get(cid.value)
        if other is not None:
            share = max(0.0, share - other.share)
            notes.append(f"{pct(other.share)} {what} ({cid.value})")
    if not notes:
        return
    by_id[Category.COMPUTE_MATH.value] = replace(
        compute,
        share=share,
        evidence=(
            *compute.evidence,
            f"Of those phases, {' and '.join(notes)}: the math itself is {pct(share)} of the step",
        ),
    )


def _fold_straggler(by_id: dict[str, Finding], analysis: RunAnalysis) -> None:
    """Across ranks: a straggler holds every rank back. When a per-rank finding on the straggler alone
    says why (its loader, its Python work), that finding is the straggler's cause: one finding, not two,
    with the cause's evidence and fix, and the whole job's speedup."""
    found = straggler(analysis.environment, analysis.ranks)
    if found is None:
        return
    f, causes = found
    for cid in causes:
        cause = by_id.get(cid.value)
        if cause is None or not set(cause.ranks) <= set(f.ranks):
            continue
        del by_id[cid.value]
        f = replace(
            f,
            evidence=(
                *f.evidence,
                f"Why rank {', '.join(map(str, f.ranks))} is late ({cid.value}): {cause.title}",
                *cause.evidence,
            ),
            fix=f"On rank {', '.join(map(str, f.ranks))}: {cause.fix}",
            snippet=cause.snippet,
        )
        break
    by_id[f.id.value] = f


def _nothing_to_judge(rule: Rule, rank: RankAnalysis) -> bool:
    """An input rule on a program that never waits for data (no DataLoader, or batches already in
    memory) has nothing to judge: saying its data was missing would only mislead."""
    if rule.id not in (Category.INPUT_FETCH, Category.INPUT_PREPROCESS) or rank.steps is None:
        return False
    return rank.steps.share("data_wait") < 0.005


def _merge(by_id: dict[str, Finding], f: Finding) -> None:
    """One finding per category: the rank with the biggest predicted gain speaks, every rank is listed."""
    prev = by_id.get(f.id.value)
    if prev is None:
        by_id[f.id.value] = f
        return
    best = f if f.estimated_speedup > prev.estimated_speedup else prev
    by_id[f.id.value] = replace(best, ranks=tuple(sorted(set(prev.ranks) | set(f.ranks))))


HOST_BOUND = (Category.HOST_PYTHON.value, Category.HOST_DISPATCH.value)


def _outside_the_window(
    f: Finding, windows: dict[int, GpuRankAnalysis], outside_ns: dict[int, int]
) -> Finding | None:
    """The profiler slows the host inside the op window (every op is recorded), so there the GPU waits
    for the host more than it does in the program's ordinary steps. A host-bound share is therefore
    re-judged against the steps outside the window: the GPU's work per step (from the window) against
    the ordinary step time. None when the host does not hold the GPU back outside the window."""
    if f.id.value not in HOST_BOUND or not f.ranks:
        return f
    rank = windows.get(f.ranks[0])
    step = outside_ns.get(f.ranks[0])
    if rank is None or rank.split is None or not rank.steps.steps or not step:
        return f
    busy_frac = 1.0 - rank.split.fractions["gpu_idle"] - rank.split.fractions["data_wait"]
    busy_ns = busy_frac * rank.steps.median_step_ns
    idle = 1.0 - busy_ns / step
    if idle < MIN_SHARE:
        return None
    share = min(f.share, idle)
    return replace(
        f,
        share=share,
        estimated_speedup=min(f.estimated_speedup, speedup_removing(share)),
        evidence=(
            *f.evidence,
            f"Outside the op window (which slows the host) a step takes {ms(step)} and its GPU work "
            f"{ms(busy_ns)}: the GPU waits {pct(idle)} of the step",
        ),
    )


def _with_loader_verdict(f: Finding, host: dict[str, Finding]) -> Finding:
    """An input finding from the device timeline says how much the step waits; the run's own rules say
    why (what the loading processes did): keep the device's share and the host's category and evidence."""
    if f.id.value not in (Category.INPUT_FETCH.value, Category.INPUT_PREPROCESS.value):
        return f
    verdict = host.get(Category.INPUT_FETCH.value) or host.get(Category.INPUT_PREPROCESS.value)
    if verdict is None:
        return f
    return replace(
        f,
        id=verdict.id,
        title=verdict.title,
        evidence=f.evidence + verdict.evidence[1:],
        fix=verdict.fix,
        snippet=verdict.snippet,
    )


def diagnose_gpu(analysis: GpuRunAnalysis, rules: Sequence[GpuRule] = GPU_RULES) -> Diagnosis:
    """The rules over profiler traces (`pinchpoint analyze`)."""
    by_id: dict[str, Finding] = {}
    notes: list[str] = []
    for rank in analysis.ranks:
        for rule in rules:
            for f in rule.check(rank, analysis):
                _merge(by_id, f)
    idle_ranks = [r.rank for r in analysis.ranks if r.breakdown is None]
    if idle_ranks:
        notes.append(
            f"no GPU kernels, copies or memsets in the trace of rank(s) {idle_ranks}: a CPU-only profile? "
            "GPU findings need `ProfilerActivity.CUDA`"
        )
    first = analysis.ranks[0] if analysis.ranks else None
    if first is not None:
        for note in (first.steps.note, first.memory.note):
            if note:
                notes.append(note)
        if first.split is not None and not first.split.over_steps:
            notes.append("shares are of the GPU-activity span: the trace has no ProfilerStep ranges")
    if analysis.comparison is not None and analysis.comparison.note:
        notes.append(analysis.comparison.note)
    findings = tuple(sorted(by_id.values(), key=sort_key))
    return Diagnosis(findings=findings, notes=tuple(dict.fromkeys(notes)))


GPU_OWNED = frozenset(
    c.value
    for c in (
        Category.INPUT_FETCH,
        Category.INPUT_PREPROCESS,
        Category.HOST_PYTHON,
        Category.HOST_DISPATCH,
        Category.HOST_SYNC,
        Category.TRANSFER_H2D,
        Category.COMPUTE_MATH,
        Category.COMPUTE_MEMORY,
        Category.COMM_EXPOSED,
        Category.IMBALANCE_STRAGGLER,
    )
)
"""On a CUDA program the host only enqueues work, so its phases say little about what limits a step:
these categories are judged on the op window's device timeline. Host-level ones (memory, threads,
checkpoints) stay with the run's own rules."""


def diagnose(
    analysis: RunAnalysis, rules: Sequence[Rule] = RULES, *, gpu: GpuRunAnalysis | None = None
) -> Diagnosis:
    """The rules over a run directory; with `gpu` (the op windows of a CUDA program, analysed as
    traces) the step-time categories come from the GPU rules instead (GPU_OWNED)."""
    by_id: dict[str, Finding] = {}
    notes: list[str] = []
    for rank in analysis.ranks:
        for rule in rules:
            missing = _missing(rule, rank)
            if missing:
                reason = MISSING_DATA.get(missing[0], f"missing {missing[0]}")
                note = f"{rule.id.value}: not judged on rank {rank.rank}: {reason}"
                if (rank.rank == 0 or len(analysis.ranks) == 1) and not _nothing_to_judge(rule, rank):
                    notes.append(note)
                continue
            for f in rule.check(analysis.environment, rank):
                _merge(by_id, f)
    if gpu is None:
        _fold_straggler(by_id, analysis)
        found = comm_exposed(analysis.ranks)
        if found is not None:
            by_id[found.id.value] = found
    if gpu is not None:
        host = {k: by_id.pop(k) for k in list(by_id) if k in GPU_OWNED}
        notes = [n for n in notes if n.split(":", 1)[0] not in GPU_OWNED]
        device = diagnose_gpu(gpu)
        outside = {r.rank: r.steps.median_ns for r in analysis.ranks if r.steps is not None}
        windows = {r.rank: r for r in gpu.ranks}
        for found in device.findings:
            judged = _outside_the_window(found, windows, outside)
            if judged is not None:
                _merge(by_id, _with_loader_verdict(judged, host))
        notes.extend(n for n in device.notes if "ProfilerStep" not in n)
        notes.append(
            "CUDA program: step-time findings come from the op window's device timeline "
            "(the host only enqueues work; its phase times show when it waited, not what limits the step)"
        )
    _net_compute_summary(by_id)
    findings = tuple(sorted(by_id.values(), key=sort_key))
    lead = next((r.steps for r in analysis.ranks if r.steps is not None), None)
    if lead is not None and gpu is None:
        findings = with_next_limits(findings, lead.host_mean_ns or lead.mean_ns, lead.phase_ns)
    framework = next((r.main.framework for r in analysis.ranks if r.main and r.main.framework), None)
    findings = in_framework_terms(findings, framework)
    notes.extend(context_notes(analysis))
    return Diagnosis(findings=findings, notes=tuple(dict.fromkeys(notes)))


FOREIGN_LOAD_NOTE = 0.3
"""Other processes using this many cores' worth of CPU during the steps disturb every timing."""


def context_notes(analysis: RunAnalysis) -> list[str]:
    """Facts about the run that qualify every finding (a shared machine, too few steps)."""
    notes = []
    for rank in analysis.ranks[:1]:
        cpu = rank.cpu
        if cpu is not None:
            foreign = cpu.machine_busy_cores - cpu.process_cores
            if foreign >= FOREIGN_LOAD_NOTE:
                notes.append(
                    f"other processes kept {foreign:.1f} of {cpu.usable_cores} cores busy during the steps: "
                    "timings (and contention findings) reflect a shared machine"
                )
        if rank.steps is not None and rank.steps.count < 10:
            notes.append(f"only {rank.steps.count} steady steps were measured: statistics are rough")
    return notes
