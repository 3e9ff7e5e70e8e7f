"""From a run directory to a report: read, analyse, diagnose, write report.json. No torch needed."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pinchpoint.analysis.datasheet import gpu_peaks
from pinchpoint.analysis.gpu._common import GPU_KINDS, kind_mask
from pinchpoint.analysis.gpu.trace_analysis import GpuRunAnalysis, analyze_traces, combine_ranks
from pinchpoint.analysis.roofline import Ceilings, ceilings_from, roofline_summary, window_ceilings
from pinchpoint.analysis.run_analysis import RunAnalysis, analyze_run
from pinchpoint.analysis.steps import steady_step_ns
from pinchpoint.diagnosis.engine import diagnose, diagnose_gpu
from pinchpoint.errors import RunDirError, TraceError, UsageError
from pinchpoint.history import store as history
from pinchpoint.ingest.ceilings import gpu_matmul_flops, gpu_memory_bandwidth, load_cached, machine_key
from pinchpoint.ingest.kineto import read_trace, trace_files
from pinchpoint.ingest.opwindow import read_opwindow
from pinchpoint.ingest.rundir import opwindow_file, rank_dirs, read_run_dir
from pinchpoint.rank_map import map_ranks
from pinchpoint.report.flamegraph import flamegraph_svg, speedscope_json, write_stack_views
from pinchpoint.report.gpu_report import build_gpu_report, run_gpu_sections
from pinchpoint.report.html import render_html
from pinchpoint.report.json_report import build_report, write_report
from pinchpoint.report.names import process_names
from pinchpoint.report.perfetto import perfetto_trace
from pinchpoint.report.tensorboard import write_event_file
from pinchpoint.trace.run import OpWindow, Run

REPORT_NAME = "report.json"
HTML_NAME = "report.html"
NO_HISTORY_ENV = "PINCHPOINT_NO_HISTORY"
"""Set (to anything) to keep runs out of the history database."""


def report_run_dir(run_dir: Path, *, json_path: Path | None = None) -> dict[str, Any]:
    """Analyse `run_dir`, write its report.json (and a copy at `json_path`), return the report.

    When the op window of a CUDA program recorded kernels and copies, that window is analysed by the
    same code as `pinchpoint analyze` and its device timeline decides the step-time findings."""
    run = read_run_dir(run_dir)
    analysis = analyze_run(run)
    warnings: list[str] = []
    cached, device_name = _cached_gpu(run_dir, analysis)
    gpu = gpu_window(run_dir, warnings, matmul_flops=gpu_matmul_flops(cached, device_name))
    report = build_report(analysis, diagnose(analysis, gpu=gpu))
    if gpu is not None:
        report["gpu"] = run_gpu_sections(gpu)
    device = _gpu_ceilings(cached, device_name) if gpu is not None else None
    _add_rooflines(report, run, device)
    report["warnings"] = list(report.get("warnings") or []) + warnings
    if analysis.run.stacks is not None:
        report["stack_files"] = _write_stack_views(analysis, run_dir, report["warnings"])
    write_report(report, run_dir / REPORT_NAME)
    if json_path is not None:
        write_report(report, json_path)
    try:
        (run_dir / HTML_NAME).write_text(render_html(report, run, device_ceilings=device))
    except OSError as exc:
        print(f"pinchpoint: note: {HTML_NAME} was not written ({exc.strerror})", file=sys.stderr)
    _record(run_dir, report, run_step_ns(run))
    return report


def _add_rooflines(report: dict[str, Any], run: Run, device: Ceilings | None) -> None:
    """`ranks[].roofline` for every rank with an op window: CPU windows against their probes' ceilings,
    CUDA windows (ops timed by their kernels) against `device`."""
    by_rank = {r.get("rank"): r for r in report.get("ranks") or []}
    for rank in run.ranks:
        out = by_rank.get(rank.rank)
        if rank.opwindow is None or out is None:
            continue
        ceilings = window_ceilings(rank.opwindow, rank.probes, device)
        summary = roofline_summary(rank.opwindow, ceilings) if ceilings is not None else None
        if summary is not None:
            out["roofline"] = summary


def run_step_ns(run: Run) -> tuple[int, ...]:
    """Rank 0's (else the first rank's) steady step times: what a diff compares."""
    return steady_step_ns(run.ranks[0]) if run.ranks else ()


def _record(run_dir: Path, report: dict[str, Any], step_ns: tuple[int, ...]) -> None:
    """Add the run to the history database; a history that can't be written never fails a report."""
    if os.environ.get(NO_HISTORY_ENV):
        return
    try:
        report["history_id"] = history.record(run_dir, report, step_ns)
    except (sqlite3.Error, OSError) as exc:
        print(f"pinchpoint: note: the run was not added to the history ({exc})", file=sys.stderr)


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


EXPORT_FORMATS = ("perfetto", "speedscope", "flamegraph", "tensorboard")


def export_run(run_dir: Path, fmt: str, out: Path) -> None:
    """Write `run_dir` as `fmt`: a Chrome trace for Perfetto, TensorBoard event files into the log
    directory `out`, or the Python stacks for speedscope or as a flame-graph SVG (those need
    `pinchpoint run --stacks`)."""
    run = read_run_dir(run_dir)
    report_file = run_dir / REPORT_NAME
    report = json.loads(report_file.read_text()) if report_file.is_file() else report_run_dir(run_dir)
    title = " ".join(run.meta.command) or "program"
    if fmt == "tensorboard":  # a log directory, not a file
        write_event_file(run, report, out)
        return
    if fmt == "perfetto":
        windows = {}
        for rank, d in rank_dirs(run_dir):
            f = opwindow_file(d)
            if f is not None:
                try:
                    raw = f.read_bytes()
                    windows[rank] = json.loads(gzip.decompress(raw) if f.suffix == ".gz" else raw)
                except (OSError, ValueError) as exc:
                    raise RunDirError(f"{f} could not be read ({exc.__class__.__name__})") from exc
        text = json.dumps(perfetto_trace(run, report, windows))
    elif run.stacks is None:
        raise UsageError(f"{run_dir} has no Python stacks: record them with `pinchpoint run --stacks`")
    elif fmt == "speedscope":
        text = json.dumps(speedscope_json(run.stacks, name=title, process_names=process_names(run)))
    elif fmt == "flamegraph":
        text = flamegraph_svg(run.stacks, title=f"{title} — Python stacks", process_names=process_names(run))
    else:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    out.write_text(text)


def _cached_gpu(run_dir: Path, analysis: RunAnalysis) -> tuple[dict[str, Any] | None, str | None]:
    """(`pinchpoint calibrate`'s cache for this machine, if it was run here with the same torch; the
    first CUDA device's name). The key is read from the run's environment and its main process."""
    main = next((r.main for r in analysis.ranks if r.main is not None), None)
    if main is None or main.torch is None or not main.cuda_devices:
        return None, None
    name = main.cuda_devices[0].name
    try:
        env = json.loads((run_dir / "environment.json").read_text())
        cpu = env.get("cpu") or {}
        key = machine_key(
            cpu.get("model"),
            cpu.get("logical_cores"),
            main.torch.version,
            [d.name for d in main.cuda_devices],
        )
    except (OSError, ValueError, AttributeError):
        return None, name
    return load_cached(key), name


def _gpu_ceilings(cached: dict[str, Any] | None, name: str | None) -> Ceilings | None:
    """The GPU's matmul peaks and memory bandwidth for the roofline: measured by `pinchpoint calibrate`
    on this machine when cached (see `_cached_gpu`), else the datasheet's; None for an unknown device."""
    flops = gpu_matmul_flops(cached, name)
    if flops:
        return ceilings_from(flops, gpu_memory_bandwidth(cached, name), "measured by pinchpoint calibrate")
    return datasheet_ceilings(name)


def datasheet_ceilings(device_name: str | None) -> Ceilings | None:
    """A GPU's datasheet peaks as roofline ceilings; None for a device not in `analysis.datasheet`."""
    peaks = gpu_peaks(device_name)
    if peaks is None:
        return None
    sheet = {d: peaks.matmul_flops(d) or 0.0 for d in ("float32", "tf32", "bfloat16", "float16")}
    return ceilings_from(sheet, peaks.memory_bytes_per_s, f"{peaks.name} datasheet")


MAX_ROOFLINE_TRACE_BYTES = 256 << 20
"""The roofline re-reads rank 0's trace whole (json): larger files are left without one."""


def trace_roofline(path: Path) -> tuple[OpWindow, Ceilings] | None:
    """The first readable trace (of at most two: rank 0's, else the next) as ops timed by their kernels,
    and the datasheet ceilings of its GPU: what `analyze --html` draws on a roofline. None when no
    trace has kernels linked to ops, names a known GPU, or is small enough to re-read."""
    try:
        files = [path] if path.is_file() else trace_files(path)[:2]
    except (OSError, TraceError):
        return None
    for f in files:
        try:
            if f.stat().st_size > MAX_ROOFLINE_TRACE_BYTES:
                continue
            window = read_opwindow(f, None)
        except Exception:  # a file the analysis skipped (a truncated gzip raises EOFError): try the next
            continue
        ceilings = datasheet_ceilings(window.device_name)
        if ceilings is not None and any(o.device_ns for o in window.ops):
            return window, ceilings
    return None


def gpu_window(
    run_dir: Path, warnings: list[str], *, matmul_flops: dict[str, float] | None = None
) -> GpuRunAnalysis | None:
    """The op windows of a run directory that hold GPU work, analysed as traces; None if none do."""
    traces = []
    for rank, d in rank_dirs(run_dir):
        path = opwindow_file(d)
        if path is None or _probed_device(d) == "cpu":
            continue  # a CPU program's window (the op census): no device timeline to analyse
        try:
            trace = read_trace(path)
        except TraceError as exc:
            warnings.append(f"rank {rank}: the op window could not be read as a trace ({exc})")
            continue
        if kind_mask(trace.events, *GPU_KINDS).any():
            traces.append(replace(trace, meta=replace(trace.meta, rank=rank, rank_known=True)))
    return analyze_traces(traces, matmul_flops=matmul_flops) if traces else None


def _probed_device(rank_dir: Path) -> str | None:
    try:
        device = json.loads((rank_dir / "probes.json").read_text()).get("device")
    except (OSError, ValueError, AttributeError):
        return None
    return device if isinstance(device, str) else None


def report_traces(
    path: Path,
    *,
    json_path: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
    cluster: str | None = None,
) -> dict[str, Any]:
    """Analyse a profiler trace (`.json`, `.json.gz`) or a directory of per-rank traces; return the
    report (and write it to `json_path`). Ranks are analysed one by one here, on `workers` local
    processes, or on the Dask cluster at `cluster` (`rank_map`), then compared."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir() and (path / "meta.json").is_file() and (path / "ranks").is_dir():
        raise UsageError(f"{path} is a `pinchpoint run` directory: use `pinchpoint report {path}`")
    ranks = map_ranks(path, workers=workers, cluster=cluster, progress=progress)
    analysis = combine_ranks(ranks)
    report = build_gpu_report(analysis, diagnose_gpu(analysis), str(path))
    if json_path is not None:
        write_report(report, json_path)
    return report
