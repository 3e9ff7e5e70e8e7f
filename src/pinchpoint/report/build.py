"""The one place a run's report is built: the analyses and the diagnosis in, a `ReportDoc` out, every
fact phrased (`report/phrases`). Traces' reports are built in `gpu_report.py` from the same parts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pinchpoint.analysis.load import LoadSplit
from pinchpoint.analysis.roofline import DTYPE_LABELS, Ceilings, roofline_points, timed_on_device
from pinchpoint.analysis.run_analysis import RankAnalysis, RunAnalysis
from pinchpoint.analysis.run_time import SegmentCode as RunSegmentCode
from pinchpoint.analysis.steps import StepStats
from pinchpoint.diagnosis.engine import Diagnosis
from pinchpoint.diagnosis.finding import Finding
from pinchpoint.report import report_doc as d
from pinchpoint.report.load_doc import serving_info
from pinchpoint.report.phrases import say, say_all
from pinchpoint.trace.run import HOST_OTHER, LoaderConfig, OpWindow, Phase, ProcessInfo, RankData, Run

MIB = 1 << 20
BREAKDOWN_KEYS = (*(p.value for p in Phase), HOST_OTHER)
NO_STEPS = d.StepsInfo(kind=None, count=0, total=0, median_ms=None, mean_ms=None, p90_ms=None)


def rounded(x: float, nd: int = 4) -> float:
    return round(float(x), nd)


def _ms(ns: float) -> float:
    return rounded(ns / 1e6, 3)


def steps_info(stats: StepStats | None, missing: str | None = None) -> d.StepsInfo:
    if stats is None:
        return replace(NO_STEPS, missing=missing)
    gpu = stats.device_timed
    return d.StepsInfo(
        kind=stats.kind.value,
        count=stats.count,
        total=stats.total_steps,
        median_ms=_ms(stats.median_ns),
        mean_ms=_ms(stats.mean_ns),
        p90_ms=_ms(stats.p90_ns),
        eval_count=stats.eval_steps or None,
        timed_on="gpu" if gpu else None,
        host_median_ms=_ms(stats.host_median_ns) if gpu else None,
        host_mean_ms=_ms(stats.host_mean_ns) if gpu else None,
        missing=missing,
    )


def _breakdown(stats: StepStats | None) -> Mapping[str, float]:
    if stats is None:
        return {}
    return {k: rounded(stats.breakdown.get(k, 0.0)) for k in BREAKDOWN_KEYS}


def finding_info(f: Finding) -> d.FindingInfo:
    return d.FindingInfo(
        id=f.id.value,
        title=say(f.title),
        share=rounded(f.share),
        estimated_speedup=rounded(f.estimated_speedup, 3),
        estimate_basis=f.basis.value,
        confidence=f.confidence.value,
        evidence=tuple(say_all(f.evidence)),
        fix=say(f.fix),
        ranks=tuple(f.ranks),
        snippet=say(f.snippet) if f.snippet else None,
        next_limit=say(f.next_limit) if f.next_limit else None,
        fix_kind=f.fix_kind.value if f.fix_kind is not None else None,
        fix_params=dict(f.fix_params) if f.fix_kind is not None and f.fix_params else None,
        framework_fix=say(f.framework_fix) if f.framework_fix else None,
        estimate_without_load=None
        if f.unloaded is None
        else d.Range(low=rounded(f.unloaded[0], 3), high=rounded(f.unloaded[1], 3), basis="model"),
        estimate_as_was=None
        if f.as_was is None
        else d.Range(low=rounded(f.as_was[0], 3), high=rounded(f.as_was[1], 3)),
        share_of="run" if f.of_run else "request" if f.of_request else None,
        estimated_run_speedup=rounded(f.run_speedup, 3) if f.run_speedup is not None else None,
    )


def _main_process(analysis: RunAnalysis) -> ProcessInfo | None:
    return next((r.main for r in analysis.ranks if r.main is not None), None)


def _environment(analysis: RunAnalysis) -> d.Environment:
    run = analysis.run
    main = _main_process(analysis)
    cpu = run.environment.cpu
    first = analysis.ranks[0] if analysis.ranks else None
    rank0 = next((r for r in run.ranks if first is not None and r.rank == first.rank), None)
    t = main.torch if main is not None else None
    fw = main.framework if main is not None else None
    return d.Environment(
        cpu=d.CpuInfo(
            model=cpu.model,
            logical_cores=cpu.logical_cores,
            physical_cores=cpu.physical_cores,
            usable_cores=cpu.usable_cores,
            flags=tuple(cpu.flags),
            matrix_units=tuple(cpu.matrix_units),
        ),
        memory_bytes=run.environment.memory_bytes,
        gpus=tuple(
            d.GpuInfo(
                name=g.name,
                capability=g.capability,
                memory_bytes=g.total_memory_bytes,
                sm_count=g.multiprocessor_count,
            )
            for g in (main.cuda_devices if main is not None else ())
        ),
        torch=None
        if t is None
        else d.TorchBuild(
            version=t.version,
            cuda=t.cuda,
            hip=t.hip,
            mkl=t.mkl,
            mkldnn=t.mkldnn,
            openmp=t.openmp,
            config=tuple(t.config_flags),
        ),
        threads=None
        if main is None
        else d.ThreadsInfo(
            intra_op=main.threads.intra_op, inter_op=main.threads.inter_op, env=dict(main.threads.env)
        ),
        autocast=main.autocast_dtype if main is not None else None,
        python=run.environment.python,
        os=run.environment.os,
        framework=None
        if fw is None
        else d.FrameworkInfo(name=fw.name.value, version=fw.version, settings=dict(fw.settings), via=fw.via),
        dataloader=_loader(first) if first is not None else None,
        dataloaders=_loaders(rank0, first.loader.config if first and first.loader else None)
        if rank0 is not None and rank0.loaders
        else None,
    )


def _loader(rank: RankAnalysis) -> d.LoaderSettings | None:
    if rank.loader is None or rank.loader.config is None:
        return None
    c = rank.loader.config
    return d.LoaderSettings(
        num_workers=c.num_workers,
        pin_memory=c.pin_memory,
        prefetch_factor=c.prefetch_factor,
        persistent_workers=c.persistent_workers,
        batch_size=c.batch_size,
        site=c.site,
    )


def _loaders(rank: RankData, feeding: LoaderConfig | None) -> tuple[d.LoaderUse, ...]:
    """Every DataLoader the rank iterated, one entry per place it was built and its settings: how many
    iterators it made and whether it fed the steady steps (the training loader) or not (evaluation)."""
    seen: dict[tuple[object, ...], list[LoaderConfig]] = {}
    for c in rank.loaders:
        key = (c.site, c.dataset, c.num_workers, c.batch_size, c.pin_memory, c.persistent_workers)
        seen.setdefault(key, []).append(c)
    return tuple(
        d.LoaderUse(
            site=c.site,
            dataset=c.dataset,
            num_workers=c.num_workers,
            batch_size=c.batch_size,
            pin_memory=c.pin_memory,
            persistent_workers=c.persistent_workers,
            iterators=len(made),
            feeds_steps=any(feeding is not None and m.serial == feeding.serial for m in made),
        )
        for made in seen.values()
        for c in made[:1]
    )


def _run_time(analysis: RunAnalysis) -> d.RunTimeInfo | None:
    """The whole run's wall clock by segment (`analysis/run_time.py`)."""
    t = analysis.run_time
    if t is None:
        return None
    return d.RunTimeInfo(
        wall_s=rounded(t.wall_ns / 1e9, 3),
        ended=t.ended,
        segments=tuple(
            d.Segment(
                name=g.name,
                s=rounded(g.ns / 1e9, 3),
                share=rounded(g.ns / max(1, t.wall_ns), 4),
                steps=g.count,
                code=_segment_code(g.code) if g.code is not None and g.code.scope.top else None,
            )
            for g in t.segments
        ),
        checkpoint_s=rounded(t.checkpoint_ns / 1e9, 3),
        pinchpoint_s=rounded(t.pinchpoint_ns / 1e9, 3),
        unattributed_share=rounded(t.share("between steps"), 4),
    )


def _segment_code(code: RunSegmentCode) -> d.SegmentCode:
    """Where a segment's main thread was: its hottest functions (share of the segment's samples) and
    the share of the segment it was on a CPU."""
    return d.SegmentCode(
        on_cpu=rounded(code.cpu_frac, 3),
        imports=rounded(code.imports_frac, 3),
        top=tuple(
            d.SegmentHot(function=h.label, share=rounded(h.share, 3), inside=h.calls_into)
            for h in code.scope.top
        ),
    )


def _memory(rank: RankAnalysis) -> d.MemoryInfo | None:
    """Host RSS over the steps and, on CUDA, the caching allocator's peaks."""
    m, c = rank.memory, rank.cuda_memory
    if m is None and c is None:
        return None
    return d.MemoryInfo(
        rss=None
        if m is None
        else d.RssInfo(
            first_mib=rounded(m.first_rss_bytes / MIB, 1),
            last_mib=rounded(m.last_rss_bytes / MIB, 1),
            slope_mib_per_step=rounded(m.slope_bytes_per_step / MIB, 3),
            r2=rounded(m.r2, 3),
            steps=m.steps,
        ),
        cuda=None
        if c is None
        else d.CudaMemoryInfo(
            peak_allocated_mib=rounded(c.peak_allocated_bytes / MIB, 1),
            peak_reserved_mib=rounded(c.peak_reserved_bytes / MIB, 1),
            last_allocated_mib=rounded(c.last_allocated_bytes / MIB, 1),
            device_total_mib=None if c.device_total_bytes is None else rounded(c.device_total_bytes / MIB, 1),
            steps=c.steps,
        ),
    )


def _stacks(rank: RankAnalysis) -> Mapping[str, d.StackScope] | None:
    """Where the Python stack samples of this rank landed: per scope, the hottest functions."""
    if rank.stacks is None:
        return None
    return {
        scope.name: d.StackScope(
            samples=scope.samples,
            seconds=None if scope.seconds is None else rounded(scope.seconds, 2),
            top=tuple(
                d.HotFunction(function=h.label, share=rounded(h.share, 3), calls_into=h.calls_into)
                for h in scope.top
            ),
            within=scope.within or None,
        )
        for scope in (rank.stacks.loader, rank.stacks.host)
        if scope is not None
    }


def _native(rank: RankAnalysis) -> d.NativeInfo | None:
    """Where the native samples of this rank went (`pinchpoint run --native`)."""
    n = rank.native
    if n is None:
        return None
    return d.NativeInfo(
        samples_weight=n.total,
        shares={c: rounded(v, 3) for c, v in n.shares.items()},
        threads=n.threads,
        busy_threads=n.busy_threads,
        kernels=tuple(
            d.NativeKernel(kernel=k.family, isa=k.isa, share=rounded(k.share, 3)) for k in n.kernels
        ),
        isa_shares={k: rounded(v, 3) for k, v in n.isa_shares.items()},
    )


def _load(load: LoadSplit | None) -> d.LoadInfo | None:
    """Which steady steps ran beside other processes' work, and whether the statistics left them out."""
    if load is None:
        return None
    return d.LoadInfo(
        steps=load.steps,
        clean_steps=load.clean,
        foreign_cores_loaded=rounded(load.foreign_loaded, 2),
        loaded_slowdown=rounded(load.slowdown, 2) if load.loaded and load.clean else None,
        clean_only=load.used,
        trials_not_read=tuple(load.trials_dropped),
        window_steps_not_read=load.window_steps_dropped,
    )


def _run_info(run: Run) -> d.RunInfo:
    m = run.meta
    return d.RunInfo(
        command=tuple(m.command),
        exit_code=m.exit_code,
        signal=m.signal,
        started_at=m.started_at,
        ended_at=m.ended_at,
        world_size=m.world_size,
        complete=m.ended_at is not None and m.exit_code == 0,
        attach=m.attach,
    )


def build_report(
    analysis: RunAnalysis,
    diagnosis: Diagnosis,
    *,
    rooflines: Mapping[int, d.Roofline] | None = None,
    gpu: Sequence[d.GpuSection] | None = None,
    warnings: Sequence[str] = (),
    stack_files: Sequence[str] | None = None,
    op_windows: Sequence[d.OpWindowTaken | d.OpWindowRefused] = (),
) -> d.ReportDoc:
    """A run's report: its analyses and diagnosis, with what the pipeline read beside them (each op
    window's roofline by rank, the device timelines, the stack views written, the op windows asked
    for, warnings of its own after the run's)."""
    run = analysis.run
    first = analysis.ranks[0] if analysis.ranks else None
    rooflines = rooflines or {}
    return d.ReportDoc(
        schema=d.SCHEMA,
        run=_run_info(run),
        environment=_environment(analysis),
        steps=steps_info(first.steps if first else None, analysis.no_steps or None),
        breakdown=_breakdown(first.steps if first else None),
        run_time=_run_time(analysis),
        serving=serving_info(analysis.serving),
        ranks=tuple(
            d.RankInfo(
                rank=r.rank,
                steps=steps_info(r.steps),
                breakdown=_breakdown(r.steps),
                memory=_memory(r),
                stacks=_stacks(r),
                native=_native(r),
                load=_load(r.load),
                roofline=rooflines.get(r.rank),
            )
            for r in analysis.ranks
        ),
        gpu=tuple(gpu) if gpu is not None else None,
        findings=tuple(finding_info(f) for f in diagnosis.findings),
        notes=tuple(say(n.fact) for n in diagnosis.notes),
        warnings=(*run.warnings, *warnings),
        stack_files=tuple(stack_files) if stack_files is not None else None,
        op_windows=tuple(op_windows) or None,
    )


def roofline_info(window: OpWindow, ceilings: Ceilings, limit: int = 20) -> d.Roofline | None:
    """An op window on its roofline (`ranks[].roofline`): the ceilings, then each kind of op with its
    FLOPs, bytes, achieved and attainable FLOP/s per step; None when nothing can be placed."""
    points = roofline_points(window, limit)
    if not points or not ceilings.matmul_flops:
        return None
    ops = []
    for p in points:
        attainable = ceilings.attainable(p.intensity, p.dtype, p.achieved_flops)
        ops.append(
            d.RooflineOp(
                op=p.name,
                shape=tuple(p.shape),
                dtype=DTYPE_LABELS.get(p.dtype, p.dtype),
                calls_per_step=round(p.calls_per_step, 2),
                ms_per_step=round(p.ns_per_step / 1e6, 4),
                gflop_per_step=round(p.flops_per_step / 1e9, 4),
                mb_per_step=round(p.bytes_per_step / 1e6, 4),
                flops_per_byte=round(p.intensity, 4),
                achieved_gflops=round(p.achieved_flops / 1e9, 2),
                attainable_gflops=round(attainable / 1e9, 2) if attainable else None,
            )
        )
    bw = ceilings.memory_bytes_per_s
    return d.Roofline(
        source=ceilings.source,
        timed_by="kernels" if timed_on_device(window) else "ops",
        matmul_peak_gflops={
            DTYPE_LABELS.get(k, k): round(v / 1e9, 1) for k, v in ceilings.matmul_flops.items()
        },
        memory_gb_per_s=round(bw / 1e9, 1) if bw else None,
        ops=tuple(ops),
    )
