"""report.json for `pinchpoint analyze` (profiler traces): the same contract as a run's, plus `gpu`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pinchpoint.analysis.gpu.compiled import CompiledTrace
from pinchpoint.analysis.gpu.kernels import GpuWork
from pinchpoint.analysis.gpu.trace_analysis import STEP_BREAKDOWN_KEYS, GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.diagnosis.engine import Diagnosis
from pinchpoint.report import report_doc as d
from pinchpoint.report.build import NO_STEPS, finding_info, rounded
from pinchpoint.report.phrases import say

TOP_KERNELS = 10


def _steps(rank: GpuRankAnalysis | None) -> d.StepsInfo:
    if rank is None or not rank.steps.steps:
        return NO_STEPS
    st = rank.steps
    return d.StepsInfo(
        kind=rank.kind,
        count=len(st.steps),
        total=len(st.steps),
        median_ms=rounded(st.median_step_ns / 1e6, 3),
        mean_ms=rounded(st.mean_step_ns / 1e6, 3),
        p90_ms=rounded(st.p90_step_ns / 1e6, 3),
    )


def _breakdown(rank: GpuRankAnalysis) -> Mapping[str, float]:
    if rank.split is None:
        return {}
    return {k: rounded(rank.split.fractions.get(k, 0.0)) for k in STEP_BREAKDOWN_KEYS}


def _compiled(c: CompiledTrace) -> d.CompiledInfo | None:
    if not c.present:
        return None
    return d.CompiledInfo(
        regions=tuple(
            d.CompiledRegion(region=r.key, calls=r.calls, host_ms=rounded(r.host_ns / 1e6, 3))
            for r in c.regions
        ),
        compilations=len(c.compilations),
        recompilations=len(c.recompiles),
        compiling_ms=rounded(c.compiling_ns / 1e6, 3),
        graph_breaks=c.breaks,
        resumed_frames=c.resumed,
        fell_back=tuple(f"{f.frame}/{f.compile}" for f in c.fell_back),
        cache_lookups=c.cache_lookups,
        cache_lookup_ms=rounded(c.cache_lookup_ns / 1e6, 3),
        graph_launches=c.graph_launches,
        graph_kernels=c.graph_kernels,
        graph_kernel_ms=rounded(c.graph_kernel_ns / 1e6, 3),
    )


def _gpu(rank: GpuRankAnalysis) -> d.GpuSection:
    bd, idle = rank.breakdown, rank.idle
    if bd is None:
        return d.GpuSection(
            rank=rank.rank, span_ms=0.0, compute=0.0, communication=0.0, memory=0.0, idle=0.0,
            comm_overlap=None, no_gpu_activity=True, compiled=_compiled(rank.compiled),
        )  # fmt: skip
    tc = rank.tensor_cores
    return d.GpuSection(
        rank=rank.rank,
        span_ms=rounded(bd.span_ns / 1e6, 3),
        compute=rounded(bd.compute),
        communication=rounded(bd.communication),
        memory=rounded(bd.memory),
        idle=rounded(bd.idle),
        comm_overlap=None if bd.comm_overlap is None else rounded(bd.comm_overlap),
        idle_causes=None
        if idle is None or bd.span_ns <= 0
        else d.IdleCauses(
            host_wait=rounded(idle.wall.host_wait_ns / bd.span_ns),
            kernel_wait=rounded(idle.wall.kernel_wait_ns / bd.span_ns),
            other=rounded(idle.wall.other_ns / bd.span_ns),
        ),
        top_kernels=tuple(
            d.KernelRow(
                name=k.name,
                work=GpuWork(k.work).name.lower(),
                count=k.count,
                total_ms=rounded(k.total_ns / 1e6, 3),
                share_of_busy=rounded(k.share_of_busy),
            )
            for k in rank.kernels.top[:TOP_KERNELS]
        ),
        tensor_cores=d.TensorCores(
            status=tc.status.value,
            gemm_conv_share=rounded(tc.gemm_conv_share),
            on_tensor_cores_share=rounded(tc.matrix_unit_share),
        ),
        compiled=_compiled(rank.compiled),
        collectives=tuple(
            d.CollectiveRow(
                kind=c.kind,
                phase=c.phase,
                count=c.count,
                total_ms=rounded(c.ns / 1e6, 3),
                exposed_ms=rounded(c.exposed_ns / 1e6, 3),
            )
            for c in rank.collective_use
        )
        or None,
    )


def run_gpu_sections(analysis: GpuRunAnalysis) -> tuple[d.GpuSection, ...]:
    """`gpu[]` of a `pinchpoint run` report: each rank's op window as the device ran it, with the
    window's own (device-aligned) steps and step-time split."""
    return tuple(
        replace(_gpu(r), window_steps=_steps(r), window_breakdown=_breakdown(r)) for r in analysis.ranks
    )


def _environment(run: GpuRunAnalysis) -> d.Environment:
    first = run.ranks[0].meta if run.ranks else None
    gpus = []
    if first is not None:
        for g in first.devices:
            cc = g.compute_capability
            gpus.append(
                d.GpuInfo(
                    name=g.name,
                    capability=f"{cc[0]}.{cc[1]}" if cc else None,
                    memory_bytes=g.total_memory_bytes,
                    sm_count=g.sm_count,
                    vendor=g.vendor,
                )
            )
    version = first.pytorch_version if first is not None else None
    return d.Environment(
        cpu=None,
        gpus=tuple(gpus),
        torch=d.TorchVersion(version=version) if version else None,
        threads=None,
        autocast=None,
        python=None,
        dataloader=None,
    )


def build_gpu_report(analysis: GpuRunAnalysis, diagnosis: Diagnosis, source: str) -> d.ReportDoc:
    first = analysis.ranks[0] if analysis.ranks else None
    world = first.meta.world_size if first is not None else None
    return d.ReportDoc(
        schema=d.SCHEMA,
        run=d.RunInfo(
            mode="analyze",
            command=("pinchpoint", "analyze", source),
            source=source,
            traces=tuple(r.meta.path for r in analysis.ranks),
            exit_code=None,
            signal=None,
            started_at=None,
            ended_at=None,
            world_size=world if world is not None else len(analysis.ranks),
            complete=True,
        ),
        environment=_environment(analysis),
        steps=_steps(first),
        breakdown=_breakdown(first) if first is not None else {},
        ranks=tuple(
            d.RankInfo(rank=r.rank, steps=_steps(r), breakdown=_breakdown(r), memory=None)
            for r in analysis.ranks
        ),
        gpu=tuple(_gpu(r) for r in analysis.ranks),
        findings=tuple(finding_info(f) for f in diagnosis.findings),
        notes=tuple(say(n.fact) for n in diagnosis.notes),
        warnings=tuple(f"rank {r.rank}: {w}" for r in analysis.ranks for w in r.warnings),
    )
