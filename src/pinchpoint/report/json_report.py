"""report.json (schema `pinchpoint.report/1`, see DESIGN.md): the machine-readable report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pinchpoint.analysis.load import LoadSplit
from pinchpoint.analysis.run_analysis import RankAnalysis, RunAnalysis
from pinchpoint.analysis.run_time import SegmentCode
from pinchpoint.analysis.steps import StepStats
from pinchpoint.diagnosis.engine import Diagnosis
from pinchpoint.diagnosis.finding import Finding
from pinchpoint.report.phrases import say, say_all
from pinchpoint.trace.run import HOST_OTHER, Attach, LoaderConfig, Phase, ProcessInfo, RankData, Run

SCHEMA = "pinchpoint.report/1"
MIB = 1 << 20
BREAKDOWN_KEYS = (*(p.value for p in Phase), HOST_OTHER)


def rounded(x: float, nd: int = 4) -> float:
    return round(float(x), nd)


def _steps(stats: StepStats | None) -> dict[str, Any]:
    if stats is None:
        return {"kind": None, "count": 0, "median_ms": None, "p90_ms": None}
    return {
        "kind": stats.kind.value,
        "count": stats.count,
        "total": stats.total_steps,
        "median_ms": rounded(stats.median_ns / 1e6, 3),
        "mean_ms": rounded(stats.mean_ns / 1e6, 3),
        "p90_ms": rounded(stats.p90_ns / 1e6, 3),
        **({"eval_count": stats.eval_steps} if stats.eval_steps else {}),
        **(
            {
                "timed_on": "gpu",
                "host_median_ms": rounded(stats.host_median_ns / 1e6, 3),
                "host_mean_ms": rounded(stats.host_mean_ns / 1e6, 3),
            }
            if stats.device_timed
            else {}
        ),
    }


def _breakdown(stats: StepStats | None) -> dict[str, float]:
    if stats is None:
        return {}
    return {k: rounded(stats.breakdown.get(k, 0.0)) for k in BREAKDOWN_KEYS}


def finding_dict(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f.id.value,
        "title": say(f.title),
        "share": rounded(f.share),
        "estimated_speedup": rounded(f.estimated_speedup, 3),
        "estimate_basis": f.basis.value,
        "confidence": f.confidence.value,
        "evidence": say_all(f.evidence),
        "fix": say(f.fix),
        "ranks": list(f.ranks),
    }
    if f.snippet:
        out["snippet"] = say(f.snippet)
    if f.next_limit:
        out["next_limit"] = say(f.next_limit)
    if f.fix_kind is not None:
        out["fix_kind"] = f.fix_kind.value
        if f.fix_params:
            out["fix_params"] = dict(f.fix_params)
    if f.framework_fix:
        out["framework_fix"] = say(f.framework_fix)
    if f.unloaded is not None:
        out["estimate_without_load"] = {
            "low": rounded(f.unloaded[0], 3),
            "high": rounded(f.unloaded[1], 3),
            "basis": "model",
        }
    if f.as_was is not None:
        out["estimate_as_was"] = {"low": rounded(f.as_was[0], 3), "high": rounded(f.as_was[1], 3)}
    if f.of_run:
        out["share_of"] = "run"
    if f.run_speedup is not None:
        out["estimated_run_speedup"] = rounded(f.run_speedup, 3)
    return out


def _main_process(analysis: RunAnalysis) -> ProcessInfo | None:
    for r in analysis.ranks:
        if r.main is not None:
            return r.main
    return None


def _environment(run: Run, main: ProcessInfo | None) -> dict[str, Any]:
    cpu = run.environment.cpu
    env: dict[str, Any] = {
        "cpu": {
            "model": cpu.model,
            "logical_cores": cpu.logical_cores,
            "physical_cores": cpu.physical_cores,
            "usable_cores": cpu.usable_cores,
            "flags": list(cpu.flags),
            "matrix_units": list(cpu.matrix_units),
        },
        "memory_bytes": run.environment.memory_bytes,
        "gpus": [],
        "torch": None,
        "threads": None,
        "autocast": None,
        "python": run.environment.python,
        "os": run.environment.os,
    }
    if main is not None:
        if main.torch is not None:
            t = main.torch
            env["torch"] = {
                "version": t.version,
                "cuda": t.cuda,
                "hip": t.hip,
                "mkl": t.mkl,
                "mkldnn": t.mkldnn,
                "openmp": t.openmp,
                "config": list(t.config_flags),
            }
        env["threads"] = {
            "intra_op": main.threads.intra_op,
            "inter_op": main.threads.inter_op,
            "env": dict(main.threads.env),
        }
        env["autocast"] = main.autocast_dtype
        if main.framework is not None:
            fw = main.framework
            env["framework"] = {
                "name": fw.name.value,
                "version": fw.version,
                "settings": dict(fw.settings),
                "via": fw.via,
            }
        env["gpus"] = [
            {
                "name": d.name,
                "capability": d.capability,
                "memory_bytes": d.total_memory_bytes,
                "sm_count": d.multiprocessor_count,
            }
            for d in main.cuda_devices
        ]
    return env


def _loader(rank: RankAnalysis) -> dict[str, Any] | None:
    if rank.loader is None or rank.loader.config is None:
        return None
    c = rank.loader.config
    return {
        "num_workers": c.num_workers,
        "pin_memory": c.pin_memory,
        "prefetch_factor": c.prefetch_factor,
        "persistent_workers": c.persistent_workers,
        "batch_size": c.batch_size,
        "site": c.site,
    }


def _loaders(rank: RankData, feeding: LoaderConfig | None) -> list[dict[str, Any]]:
    """Every DataLoader the rank iterated, one entry per place it was built and its settings: how many
    iterators it made and whether it fed the steady steps (the training loader) or not (evaluation)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in rank.loaders:
        key = (c.site, c.dataset, c.num_workers, c.batch_size, c.pin_memory, c.persistent_workers)
        entry = out.setdefault(
            key,
            {"site": c.site, "dataset": c.dataset, "num_workers": c.num_workers, "batch_size": c.batch_size,
             "pin_memory": c.pin_memory, "persistent_workers": c.persistent_workers, "iterators": 0,
             "feeds_steps": False},
        )  # fmt: skip
        entry["iterators"] += 1
        entry["feeds_steps"] = entry["feeds_steps"] or (feeding is not None and c.serial == feeding.serial)
    return list(out.values())


def _run_time(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The whole run's wall clock by segment (`analysis/run_time.py`)."""
    t = analysis.run_time
    if t is None:
        return None
    return {
        "wall_s": rounded(t.wall_ns / 1e9, 3),
        "ended": t.ended,
        "segments": [
            {
                "name": g.name,
                "s": rounded(g.ns / 1e9, 3),
                "share": rounded(g.ns / max(1, t.wall_ns), 4),
                "steps": g.count,
                **({"code": _segment_code(g.code)} if g.code is not None and g.code.scope.top else {}),
            }
            for g in t.segments
        ],
        "checkpoint_s": rounded(t.checkpoint_ns / 1e9, 3),
        "pinchpoint_s": rounded(t.pinchpoint_ns / 1e9, 3),
        "unattributed_share": rounded(t.share("between steps"), 4),
    }


def _segment_code(code: SegmentCode) -> dict[str, Any]:
    """Where a segment's main thread was: its hottest functions (share of the segment's samples) and
    the share of the segment it was on a CPU."""
    return {
        "on_cpu": rounded(code.cpu_frac, 3),
        "imports": rounded(code.imports_frac, 3),
        "top": [
            {"function": h.label, "share": rounded(h.share, 3), "inside": h.calls_into}
            for h in code.scope.top
        ],
    }


def _memory(rank: RankAnalysis) -> dict[str, Any] | None:
    """Host RSS over the steps and, on CUDA, the caching allocator's peaks."""
    out: dict[str, Any] = {}
    if rank.memory is not None:
        m = rank.memory
        out["rss"] = {
            "first_mib": rounded(m.first_rss_bytes / MIB, 1),
            "last_mib": rounded(m.last_rss_bytes / MIB, 1),
            "slope_mib_per_step": rounded(m.slope_bytes_per_step / MIB, 3),
            "r2": rounded(m.r2, 3),
            "steps": m.steps,
        }
    if rank.cuda_memory is not None:
        c = rank.cuda_memory
        out["cuda"] = {
            "peak_allocated_mib": rounded(c.peak_allocated_bytes / MIB, 1),
            "peak_reserved_mib": rounded(c.peak_reserved_bytes / MIB, 1),
            "last_allocated_mib": rounded(c.last_allocated_bytes / MIB, 1),
            "device_total_mib": None
            if c.device_total_bytes is None
            else rounded(c.device_total_bytes / MIB, 1),
            "steps": c.steps,
        }
    return out or None


def _stacks(rank: RankAnalysis) -> dict[str, Any] | None:
    """Where the Python stack samples of this rank landed: per scope, the hottest functions."""
    if rank.stacks is None:
        return None
    out: dict[str, Any] = {}
    for scope in (rank.stacks.loader, rank.stacks.host):
        if scope is None:
            continue
        out[scope.name] = {
            "samples": scope.samples,
            "seconds": None if scope.seconds is None else rounded(scope.seconds, 2),
            "top": [
                {"function": h.label, "share": rounded(h.share, 3), "calls_into": h.calls_into}
                for h in scope.top
            ],
        } | ({"within": scope.within} if scope.within else {})
    return out


def _native(rank: RankAnalysis) -> dict[str, Any] | None:
    """Where the native samples of this rank went (`pinchpoint run --native`)."""
    n = rank.native
    if n is None:
        return None
    return {
        "samples_weight": n.total,
        "shares": {c: rounded(v, 3) for c, v in n.shares.items()},
        "threads": n.threads,
        "busy_threads": n.busy_threads,
        "kernels": [{"kernel": k.family, "isa": k.isa, "share": rounded(k.share, 3)} for k in n.kernels],
        "isa_shares": {k: rounded(v, 3) for k, v in n.isa_shares.items()},
    }


def build_report(analysis: RunAnalysis, diagnosis: Diagnosis) -> dict[str, Any]:
    run = analysis.run
    first = analysis.ranks[0] if analysis.ranks else None
    main = _main_process(analysis)
    env = _environment(run, main)
    if first is not None:
        env["dataloader"] = _loader(first)
        rank0 = next((r for r in run.ranks if r.rank == first.rank), None)
        if rank0 is not None and rank0.loaders:
            env["dataloaders"] = _loaders(rank0, first.loader.config if first.loader else None)
    return {
        "schema": SCHEMA,
        "run": {
            "command": list(run.meta.command),
            "exit_code": run.meta.exit_code,
            "signal": run.meta.signal,
            "started_at": run.meta.started_at,
            "ended_at": run.meta.ended_at,
            "world_size": run.meta.world_size,
            "complete": run.meta.ended_at is not None and run.meta.exit_code == 0,
        }
        | _attach(run.meta.attach),
        "environment": env,
        "steps": _steps(first.steps if first else None)
        | ({"missing": analysis.no_steps} if analysis.no_steps else {}),
        "breakdown": _breakdown(first.steps if first else None),
        **({"run_time": whole} if (whole := _run_time(analysis)) is not None else {}),
        "ranks": [
            {"rank": r.rank, "steps": _steps(r.steps), "breakdown": _breakdown(r.steps), "memory": _memory(r)}
            | ({"stacks": _stacks(r)} if r.stacks is not None else {})
            | ({"native": _native(r)} if r.native is not None else {})
            | ({"load": _load(r.load)} if r.load is not None else {})
            for r in analysis.ranks
        ],
        "findings": [finding_dict(f) for f in diagnosis.findings],
        "notes": [say(n.fact) for n in diagnosis.notes],
        "warnings": list(run.warnings),
    }


def write_report(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)


def _attach(attach: Attach | None) -> dict[str, Any]:
    """`pinchpoint attach`'s run: the process, how long, how it ended, what the agent left behind."""
    if attach is None:
        return {}
    return {
        "attach": {
            "pid": attach.pid,
            "duration_s": attach.duration_s,
            "ended": attach.ended,
            "restored": attach.restored,
            "left": list(attach.left),
        }
    }


def _load(load: LoadSplit) -> dict[str, Any]:
    """Which steady steps ran beside other processes' work, and whether the statistics left them out."""
    return {
        "steps": load.steps,
        "clean_steps": load.clean,
        "foreign_cores_loaded": rounded(load.foreign_loaded, 2),
        "loaded_slowdown": rounded(load.slowdown, 2) if load.loaded and load.clean else None,
        "clean_only": load.used,
        "trials_not_read": list(load.trials_dropped),
        "window_steps_not_read": load.window_steps_dropped,
    }
