"""From a run directory to a report: read, analyse, diagnose, write report.json. No torch needed."""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

from pinchpoint.analysis.gpu._common import GPU_KINDS, kind_mask
from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis, analyze_traces
from pinchpoint.analysis.roofline import Ceilings, gpu_ceilings, window_ceilings
from pinchpoint.analysis.run_analysis import RunAnalysis, analyze_run
from pinchpoint.analysis.steps import steady_step_ns
from pinchpoint.analysis.views import process_names, run_views
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.errors import TraceError
from pinchpoint.history import store as history
from pinchpoint.ingest.captures import op_windows
from pinchpoint.ingest.ceilings import gpu_matmul_flops, gpu_memory_bandwidth, load_cached, run_machine_key
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.ingest.probes import probed_device
from pinchpoint.ingest.rundir import opwindow_file, rank_dirs, read_run_dir
from pinchpoint.report.build import build_report, roofline_info
from pinchpoint.report.document import JsonObject, from_dict
from pinchpoint.report.flamegraph import write_stack_views
from pinchpoint.report.gpu_report import run_gpu_sections
from pinchpoint.report.model import Report
from pinchpoint.report.renderers import RENDERERS
from pinchpoint.report.report_doc import OpWindowRefused, OpWindowTaken, ReportDoc, Roofline
from pinchpoint.trace.run import Run

REPORT_NAME = "report.json"
HTML_NAME = "report.html"
NO_HISTORY_ENV = "PINCHPOINT_NO_HISTORY"
"""Set (to anything) to keep runs out of the history database."""


def report_run_dir(run_dir: Path, *, json_path: Path | None = None) -> ReportDoc:
    """Analyse `run_dir`, write its report.json (and a copy at `json_path`), return the report.

    When the op window of a CUDA program recorded kernels and copies, that window is analysed by the
    same code as `pinchpoint analyze` and its device timeline decides the step-time findings. The
    report returned also carries `history_id` when the run was added to the history database (the
    files written don't: the id is known only once they are)."""
    run = read_run_dir(run_dir)
    analysis = analyze_run(run)
    warnings: list[str] = []
    cached, device_name = _cached_gpu(run_dir, analysis)
    gpu = gpu_window(run_dir, warnings, matmul_flops=gpu_matmul_flops(cached, device_name))
    device = None
    if gpu is not None:
        flops, bandwidth = gpu_matmul_flops(cached, device_name), gpu_memory_bandwidth(cached, device_name)
        device = gpu_ceilings(flops, bandwidth, device_name)
    diagnosis = diagnose(analysis, gpu=gpu)
    stack_files = _write_stack_views(analysis, run_dir, warnings) if run.stacks is not None else None
    report = build_report(
        analysis,
        diagnosis,
        rooflines=_rooflines(run, device),
        gpu=run_gpu_sections(gpu) if gpu is not None else None,
        warnings=warnings,
        stack_files=stack_files,
        op_windows=from_dict(tuple[OpWindowTaken | OpWindowRefused, ...], op_windows(run_dir)),
    )
    built = Report(doc=report, views=run_views(run, device), run=run)
    RENDERERS["json"].write(built, run_dir / REPORT_NAME)
    if json_path is not None:
        RENDERERS["json"].write(built, json_path)
    try:
        RENDERERS["html"].write(built, run_dir / HTML_NAME)
    except OSError as exc:
        print(f"pinchpoint: note: {HTML_NAME} was not written ({exc.strerror})", file=sys.stderr)
    history_id = _record(run_dir, report.to_dict(), run_step_ns(run))
    return report if history_id is None else replace(report, history_id=history_id)


def _rooflines(run: Run, device: Ceilings | None) -> dict[int, Roofline]:
    """Each rank's op window on its roofline: CPU windows against their probes' ceilings, CUDA
    windows (ops timed by their kernels) against `device`."""
    out: dict[int, Roofline] = {}
    for rank in run.ranks:
        if rank.opwindow is None:
            continue
        ceilings = window_ceilings(rank.opwindow, rank.probes, device)
        summary = roofline_info(rank.opwindow, ceilings) if ceilings is not None else None
        if summary is not None:
            out[rank.rank] = summary
    return out


def run_step_ns(run: Run) -> tuple[int, ...]:
    """Rank 0's (else the first rank's) steady step times: what a diff compares."""
    return steady_step_ns(run.ranks[0]) if run.ranks else ()


def _record(run_dir: Path, report: JsonObject, step_ns: tuple[int, ...]) -> int | None:
    """Add the run to the history database and return its id; a history that can't be written never
    fails a report (None, as when `NO_HISTORY_ENV` is set)."""
    if os.environ.get(NO_HISTORY_ENV):
        return None
    try:
        return history.record(run_dir, report, step_ns)
    except (sqlite3.Error, OSError) as exc:
        print(f"pinchpoint: note: the run was not added to the history ({exc})", file=sys.stderr)
        return None


def _write_stack_views(analysis: RunAnalysis, run_dir: Path, warnings: list[str]) -> list[str]:
    """flamegraph.svg and stacks.speedscope.json beside the report, processes named by their role."""
    run = analysis.run
    assert run.stacks is not None
    title = " ".join(run.meta.command) or "program"
    try:
        paths = write_stack_views(
            run.stacks, run_dir, title=f"{title} — Python stacks", process_names=process_names(run)
        )
    except OSError as exc:
        warnings.append(f"the stack views could not be written ({exc.strerror})")
        return []
    return [p.name for p in paths]


def _cached_gpu(run_dir: Path, analysis: RunAnalysis) -> tuple[JsonObject | None, str | None]:
    """(`pinchpoint calibrate`'s cache for this machine, if it was run here with the same torch; the
    first CUDA device's name). The key is read from the run's environment and its main process."""
    main = next((r.main for r in analysis.ranks if r.main is not None), None)
    if main is None or main.torch is None or not main.cuda_devices:
        return None, None
    key = run_machine_key(run_dir, main.torch.version, [d.name for d in main.cuda_devices])
    return (load_cached(key) if key is not None else None), main.cuda_devices[0].name


def gpu_window(
    run_dir: Path, warnings: list[str], *, matmul_flops: dict[str, float] | None = None
) -> GpuRunAnalysis | None:
    """The op windows of a run directory that hold GPU work, analysed as traces; None if none do."""
    traces = []
    for rank, d in rank_dirs(run_dir):
        path = opwindow_file(d)
        if path is None or probed_device(d) == "cpu":
            continue  # a CPU program's window (the op census): no device timeline to analyse
        try:
            trace = read_trace(path)
        except TraceError as exc:
            warnings.append(f"rank {rank}: the op window could not be read as a trace ({exc})")
            continue
        if kind_mask(trace.events, *GPU_KINDS).any():
            traces.append(replace(trace, meta=replace(trace.meta, rank=rank, rank_known=True)))
    return analyze_traces(traces, matmul_flops=matmul_flops) if traces else None
