"""How findings combine: one per category across ranks, a straggler's cause folded in, the compute summary
net of what other findings took, and a device timeline's findings read against the run's own steps."""

from __future__ import annotations

from dataclasses import replace

from pinchpoint.analysis.cpu import CONTENDED_CORES
from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.rules.base import speedup_removing
from pinchpoint.diagnosis.rules.gpu_base import MIN_SHARE

HOST_BOUND = frozenset({Category.HOST_PYTHON, Category.HOST_DISPATCH})
INPUT = frozenset({Category.INPUT_FETCH, Category.INPUT_PREPROCESS})
NET_OF_COMPUTE = (Category.HOST_DISPATCH, Category.COMPUTE_MEMORY)
LOWER = {
    Confidence.HIGH: Confidence.MEDIUM,
    Confidence.MEDIUM: Confidence.LOW,
    Confidence.LOW: Confidence.LOW,
}
"""Findings inside forward, backward and optimizer that the compute-bound summary does not count as math."""


def sort_key(f: Finding) -> tuple[int, float, int, float]:
    # A finding with no share of the step (a leak: a risk, not time) after every one that has a share;
    # then the biggest predicted gain first; among equal gains, problems before the "compute-bound"
    # summary (which has no fix to gain from), then by share.
    informational = (
        f.estimated_speedup <= 1.0
        and f.share > 0
        and f.id in (Category.COMPUTE_MATH, Category.COMPUTE_MEMORY)
    )
    if f.id is Category.RUN_STALLED:
        return (-1, 0.0, 0, 0.0)  # (a run that stopped making steps: what it did before is secondary)
    return (0 if f.share > 0 else 1, -round(f.estimated_speedup, 3), 1 if informational else 0, -f.share)


def merge(by_id: dict[Category, Finding], f: Finding) -> None:
    """One finding per category: the rank with the biggest predicted gain speaks, every rank is listed."""
    prev = by_id.get(f.id)
    if prev is None:
        by_id[f.id] = f
        return
    best = f if f.estimated_speedup > prev.estimated_speedup else prev
    by_id[f.id] = replace(best, ranks=tuple(sorted(set(prev.ranks) | set(f.ranks))))


def net_compute_summary(by_id: dict[Category, Finding]) -> None:
    """The "compute-bound" summary counts every millisecond of forward, backward and optimizer; when
    per-op overhead (host.dispatch) or memory-bound elementwise work (compute.memory) was found inside
    those phases, that part is not math: take it off, so the shares of one step add up."""
    compute = by_id.get(Category.COMPUTE_MATH)
    if compute is None or compute.estimated_speedup > 1.0:
        return
    share = compute.share
    parts = []
    for cid in NET_OF_COMPUTE:
        other = by_id.get(cid)
        if other is not None:
            share = max(0.0, share - other.share)
            parts.append((cid.value, other.share))
    if not parts:
        return
    by_id[Category.COMPUTE_MATH] = replace(
        compute,
        share=share,
        evidence=(*compute.evidence, Fact("merge.compute_net", parts=tuple(parts), share=share)),
    )


def fold_explained(by_id: dict[Category, Finding]) -> None:
    """Across ranks: a straggler holds every rank back. When a per-rank finding on the straggler alone
    says why (its loader, its Python work), that finding is the straggler's cause: one finding, not two,
    with the cause's evidence and fix, and the whole job's speedup (`Finding.explained_by`)."""
    for key, f in list(by_id.items()):
        for cid in f.explained_by:
            cause = by_id.get(cid)
            if cause is None or not set(cause.ranks) <= set(f.ranks):
                continue
            del by_id[cid]
            why = Fact("merge.why_late", ranks=f.ranks, category=cid.value, title=cause.title)
            by_id[key] = replace(
                f,
                evidence=(*f.evidence, why, *cause.evidence),
                fix=Fact("merge.on_ranks", ranks=f.ranks, fix=cause.fix),
                snippet=cause.snippet,
            )
            break


def outside_the_window(
    f: Finding, windows: dict[int, GpuRankAnalysis], outside_ns: dict[int, int]
) -> Finding | None:
    """The profiler slows the host inside the op window (every op is recorded), so there the GPU waits
    for the host more than it does in the program's ordinary steps. A host-bound share is therefore
    re-judged against the steps outside the window: the GPU's work per step (from the window) against
    the ordinary step time. None when the host does not hold the GPU back outside the window."""
    if f.id not in HOST_BOUND or not f.ranks:
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
        evidence=(*f.evidence, Fact("merge.outside_window", step_ns=step, gpu_ns=busy_ns, idle_share=idle)),
    )


def with_loader_verdict(f: Finding, host: dict[Category, Finding]) -> Finding:
    """An input finding from the device timeline says how much the step waits; the run's own rules say
    why (what the loading processes did): keep the device's share and the host's category and evidence."""
    if f.id not in INPUT:
        return f
    verdict = host.get(Category.INPUT_FETCH) or host.get(Category.INPUT_PREPROCESS)
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


def on_a_shared_machine(
    findings: tuple[Finding, ...], ranks: tuple[RankAnalysis, ...]
) -> tuple[Finding, ...]:
    """Steps measured while other processes kept cores busy: every share and estimate drawn from them
    may include time those processes took, so each finding loses a level of confidence and says why;
    one that a trial measured on the program's own steps, beside the same neighbours, keeps its own."""
    cpu = next((r.cpu for r in ranks if r.cpu is not None), None)
    if cpu is None or cpu.foreign_cores < CONTENDED_CORES:
        return findings
    why = Fact("merge.contended", foreign_cores=cpu.foreign_cores, cores=cpu.usable_cores)
    return tuple(
        f
        if f.basis is Basis.TRIAL
        else replace(f, confidence=LOWER[f.confidence], evidence=(*f.evidence, why))
        for f in findings
    )
