"""report.json for `pinchpoint analyze` (profiler traces): the same contract as a run's, plus `gpu`."""

from __future__ import annotations

from typing import Any

import numpy as np

from pinchpoint.analysis.gpu.kernels import GpuWork
from pinchpoint.analysis.gpu.trace_analysis import STEP_BREAKDOWN_KEYS, GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.diagnosis.engine import Diagnosis
from pinchpoint.report.json_report import SCHEMA, finding_dict, rounded
from pinchpoint.report.phrases import say

TOP_KERNELS = 10


def _steps(rank: GpuRankAnalysis | None) -> dict[str, Any]:
    if rank is None or not rank.steps.steps:
        return {"kind": None, "count": 0, "total": 0, "median_ms": None, "mean_ms": None, "p90_ms": None}
    st = rank.steps
    durs = np.array([s.dur_ns for s in st.steps], dtype=np.float64)
    return {
        "kind": rank.kind,
        "count": len(st.steps),
        "total": len(st.steps),
        "median_ms": rounded(st.median_step_ns / 1e6, 3),
        "mean_ms": rounded(st.mean_step_ns / 1e6, 3),
        "p90_ms": rounded(float(np.percentile(durs, 90)) / 1e6, 3),
    }


def _breakdown(rank: GpuRankAnalysis) -> dict[str, float]:
    if rank.split is None:
        return {}
    return {k: rounded(rank.split.fractions.get(k, 0.0)) for k in STEP_BREAKDOWN_KEYS}


def _gpu(rank: GpuRankAnalysis) -> dict[str, Any]:
    bd, idle = rank.breakdown, rank.idle
    out: dict[str, Any] = {"rank": rank.rank}
    if bd is None:
        return {
            **out,
            "span_ms": 0.0,
            "compute": 0.0,
            "communication": 0.0,
            "memory": 0.0,
            "idle": 0.0,
            "comm_overlap": None,
            "no_gpu_activity": True,
        }
    out.update(
        span_ms=rounded(bd.span_ns / 1e6, 3),
        compute=rounded(bd.compute),
        communication=rounded(bd.communication),
        memory=rounded(bd.memory),
        idle=rounded(bd.idle),
        comm_overlap=None if bd.comm_overlap is None else rounded(bd.comm_overlap),
    )
    if idle is not None and bd.span_ns > 0:
        w = idle.wall
        out["idle_causes"] = {
            "host_wait": rounded(w.host_wait_ns / bd.span_ns),
            "kernel_wait": rounded(w.kernel_wait_ns / bd.span_ns),
            "other": rounded(w.other_ns / bd.span_ns),
        }
    kb = rank.kernels
    out["top_kernels"] = [
        {
            "name": k.name,
            "class": GpuWork(k.work).name.lower(),
            "count": k.count,
            "total_ms": rounded(k.total_ns / 1e6, 3),
            "share_of_busy": rounded(k.share_of_busy),
        }
        for k in kb.top[:TOP_KERNELS]
    ]
    tc = rank.tensor_cores
    out["tensor_cores"] = {
        "status": tc.status.value,
        "gemm_conv_share": rounded(tc.gemm_conv_share),
        "on_tensor_cores_share": rounded(tc.matrix_unit_share),
    }
    return out


def run_gpu_sections(analysis: GpuRunAnalysis) -> list[dict[str, Any]]:
    """`gpu[]` of a `pinchpoint run` report: each rank's op window as the device ran it, with the
    window's own (device-aligned) steps and step-time split."""
    return [{**_gpu(r), "window_steps": _steps(r), "window_breakdown": _breakdown(r)} for r in analysis.ranks]


def _environment(run: GpuRunAnalysis) -> dict[str, Any]:
    first = run.ranks[0].meta if run.ranks else None
    gpus = []
    if first is not None:
        for d in first.devices:
            cc = d.compute_capability
            gpus.append(
                {
                    "name": d.name,
                    "capability": f"{cc[0]}.{cc[1]}" if cc else None,
                    "memory_bytes": d.total_memory_bytes,
                    "sm_count": d.sm_count,
                    "vendor": d.vendor,
                }
            )
    version = first.pytorch_version if first is not None else None
    return {
        "cpu": None,
        "gpus": gpus,
        "torch": {"version": version} if version else None,
        "threads": None,
        "autocast": None,
        "python": None,
    }


def build_gpu_report(analysis: GpuRunAnalysis, diagnosis: Diagnosis, source: str) -> dict[str, Any]:
    first = analysis.ranks[0] if analysis.ranks else None
    world = first.meta.world_size if first is not None else None
    warnings = [f"rank {r.rank}: {w}" for r in analysis.ranks for w in r.warnings]
    return {
        "schema": SCHEMA,
        "run": {
            "mode": "analyze",
            "command": ["pinchpoint", "analyze", source],
            "source": source,
            "traces": [r.meta.path for r in analysis.ranks],
            "exit_code": None,
            "signal": None,
            "started_at": None,
            "ended_at": None,
            "world_size": world if world is not None else len(analysis.ranks),
            "complete": True,
        },
        "environment": _environment(analysis),
        "steps": _steps(first),
        "breakdown": _breakdown(first) if first is not None else {},
        "ranks": [{"rank": r.rank, "steps": _steps(r), "breakdown": _breakdown(r)} for r in analysis.ranks],
        "gpu": [_gpu(r) for r in analysis.ranks],
        "findings": [finding_dict(f) for f in diagnosis.findings],
        "notes": [say(n.fact) for n in diagnosis.notes],
        "warnings": warnings,
    }
