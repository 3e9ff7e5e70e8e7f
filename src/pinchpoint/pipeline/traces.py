"""From profiler traces another tool wrote to a report: `pinchpoint analyze`. No torch needed."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.analysis.gpu.trace_analysis import analyze_trace, combine_ranks
from pinchpoint.analysis.roofline import datasheet_ceilings
from pinchpoint.analysis.views import RooflineView, roofline_view
from pinchpoint.diagnosis.engine import diagnose_gpu
from pinchpoint.errors import TraceError, UsageError
from pinchpoint.ingest.kineto import trace_files
from pinchpoint.ingest.nsys import read_nsys_ranks
from pinchpoint.ingest.opwindow import read_opwindow
from pinchpoint.ingest.sniff import is_sqlite
from pinchpoint.ingest.xprof import is_xprof, read_xprof_ranks, xspace_files
from pinchpoint.pipeline.ranks import map_ranks
from pinchpoint.report.gpu_report import build_gpu_report
from pinchpoint.report.json_report import write_report
from pinchpoint.report.report_doc import ReportDoc


def report_traces(
    path: Path,
    *,
    json_path: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
    cluster: str | None = None,
) -> ReportDoc:
    """Analyse a profiler trace (Kineto `.json`, `.json.gz`, an Nsight Systems SQLite export or an XProf
    `.xplane.pb`, told apart by content) or a directory of per-rank Kineto traces or of XProf files;
    return the report (and write it to `json_path`). Ranks are analysed one by one here, on `workers`
    local processes, or on the Dask cluster at `cluster` (`pipeline.ranks`), then compared. An Nsight
    export's GPU processes are its ranks, read in one pass here (a directory of exports: one file after
    another); so are an XSpace's devices."""
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    if path.is_dir() and (path / "meta.json").is_file() and (path / "ranks").is_dir():
        raise UsageError(f"{path} is a `pinchpoint run` directory: use `pinchpoint report {path}`")
    if path.is_file() and is_sqlite(path):
        ranks = [analyze_trace(t) for t in read_nsys_ranks(path, progress=progress)]
    elif exports := _nsys_exports(path):
        ranks = _ranks_of_exports(exports)
    elif _is_xprof(path):
        ranks = [analyze_trace(t) for t in read_xprof_ranks(path)]
    else:
        ranks = map_ranks(path, workers=workers, cluster=cluster, progress=progress)
    analysis = combine_ranks(ranks)
    report = build_gpu_report(analysis, diagnose_gpu(analysis), str(path))
    if json_path is not None:
        write_report(report, json_path)
    return report


def _nsys_exports(path: Path) -> list[Path]:
    """A directory's Nsight exports, one per rank (`nsys profile -o rank%q{RANK}` then `nsys export`),
    in natural name order (rank2 before rank10); none when it holds Kineto traces."""
    if not path.is_dir():
        return []
    found = [p for p in path.glob("*.sqlite") if p.is_file() and is_sqlite(p)]
    if not found:
        return []
    try:
        if trace_files(path):
            return []
    except TraceError:
        pass
    return sorted(found, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])


def _ranks_of_exports(exports: list[Path]) -> list[Any]:
    """Each export's GPU processes, numbered on across the files, analysed one file at a time."""
    ranks: list[Any] = []
    for export in exports:
        for trace in read_nsys_ranks(export):
            meta = dataclasses.replace(trace.meta, rank=len(ranks))
            ranks.append(analyze_trace(dataclasses.replace(trace, meta=meta)))
    return ranks


def _is_xprof(path: Path) -> bool:
    """An XSpace file, or a directory of them with no Kineto trace (a TensorBoard profile log)."""
    if path.is_file():
        return is_xprof(path)
    if not xspace_files(path):
        return False
    try:
        return not trace_files(path)
    except TraceError:
        return True


MAX_ROOFLINE_TRACE_BYTES = 256 << 20
"""The roofline re-reads rank 0's trace whole (json): larger files are left without one."""


def trace_roofline(path: Path) -> RooflineView | None:
    """The first readable trace (of at most two: rank 0's, else the next) as ops timed by their kernels,
    against the datasheet ceilings of its GPU: what `analyze --html` draws on a roofline. None when no
    trace has kernels linked to ops, names a known GPU, or is small enough to re-read."""
    if (path.is_file() and is_sqlite(path)) or _is_xprof(path):
        return None  # an Nsight export or an XSpace has no framework ops to place on a roofline
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
            return roofline_view(window, ceilings, on_device=True)
    return None
