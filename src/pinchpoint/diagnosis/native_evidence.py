"""Native stacks (`pinchpoint run --native`) as evidence in the findings they bear on.

The rules judge from step timings, counters and trials; perf's samples say the same thing from below,
in the binary that ran, and a finding carries that line when the samples show its cause:

  memory.pressure       the share of the process's CPU time in page faults and zeroing, and unmapping
  cpu.oversubscription  how many threads were busy on how few cores, and the OpenMP runtime's and the
  cpu.underuse          scheduler's share
  compute.math          which math kernels ran, with the instruction set their names carry (torch's
                        reference gemm where no BLAS kernel serves the dtype on this CPU)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pinchpoint.analysis.native import NativeBreakdown
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Fact, Finding
from pinchpoint.trace.run import Environment

FAULTS_MIN = 0.03
"""Page faults, zeroing and unmapping at least this share of the CPU time: worth a line."""
KERNELS_SHOWN = 3


def with_native_evidence(
    findings: Sequence[Finding], runs: Sequence[RankAnalysis], env: Environment | None
) -> tuple[Finding, ...]:
    native = {r.rank: r.native for r in runs if r.native is not None}
    if not native:
        return tuple(findings)
    out = []
    for f in findings:
        n = native.get(f.ranks[0] if f.ranks else runs[0].rank)
        fact = _fact(f.id, n, env) if n is not None else None
        out.append(replace(f, evidence=(*f.evidence, fact)) if fact is not None else f)
    return tuple(out)


def _fact(category: Category, n: NativeBreakdown, env: Environment | None) -> Fact | None:
    if category is Category.MEMORY_PRESSURE:
        faults, unmap = n.shares["page_faults"], n.shares["unmap"]
        if faults + unmap < FAULTS_MIN:
            return None
        return Fact("native.page_faults", faults=faults, unmap=unmap)
    if category in (Category.CPU_OVERSUBSCRIPTION, Category.CPU_UNDERUSE):
        cores = env.cpu.usable_cores if env is not None else None
        return Fact(
            "native.threads",
            busy=n.busy_threads,
            threads=n.threads,
            cores=cores,
            omp=n.shares["omp_runtime"],
            sched=n.shares["sched"],
        )
    if category is Category.COMPUTE_MATH and n.kernels:
        top = tuple((k.family, k.isa or "", k.share) for k in n.kernels[:KERNELS_SHOWN])
        return Fact("native.kernels", kernels=top, math=n.shares["math"])
    return None
