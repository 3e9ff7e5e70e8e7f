"""`pinchpoint export`: a run in the file formats other viewers open (`report/renderers.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.analysis.views import run_views
from pinchpoint.errors import UsageError
from pinchpoint.ingest.rundir import opwindow_documents, read_run_dir
from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir
from pinchpoint.report.formats import EXPORT_FORMATS
from pinchpoint.report.model import Needs, Report
from pinchpoint.report.renderers import RENDERERS


def export_run(run_dir: Path, fmt: str, out: Path) -> None:
    """Write `run_dir` as `fmt` (one of `EXPORT_FORMATS`) at `out`, reading its report.json (made
    first when the directory has none)."""
    renderer = RENDERERS.get(fmt) if fmt in EXPORT_FORMATS else None
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    run = read_run_dir(run_dir)
    if renderer.needs is Needs.STACKS and run.stacks is None:
        raise UsageError(f"{run_dir} has no Python stacks: record them with `pinchpoint run --stacks`")
    report_file = run_dir / REPORT_NAME
    document = json.loads(report_file.read_text()) if report_file.is_file() else report_run_dir(run_dir)
    report = Report(document=document, views=run_views(run), run=run, windows=opwindow_documents(run_dir))
    renderer.write(report, out)
