"""`pinchpoint export`: a run in the file formats other viewers open (`report/renderers.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.analysis.views import run_views
from pinchpoint.errors import UsageError
from pinchpoint.ingest.rundir import opwindow_documents, read_run_dir
from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir
from pinchpoint.report.document import DocumentError
from pinchpoint.report.formats import EXPORT_FORMATS
from pinchpoint.report.model import Needs, Report
from pinchpoint.report.renderers import RENDERERS
from pinchpoint.report.report_doc import ReportDoc


def export_run(run_dir: Path, fmt: str, out: Path) -> None:
    """Write `run_dir` as `fmt` (one of `EXPORT_FORMATS`) at `out`, reading its report.json (made
    first when the directory has none, or one this pinchpoint cannot read)."""
    renderer = RENDERERS.get(fmt) if fmt in EXPORT_FORMATS else None
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    run = read_run_dir(run_dir)
    if renderer.needs is Needs.STACKS and run.stacks is None:
        raise UsageError(f"{run_dir} has no Python stacks: record them with `pinchpoint run --stacks`")
    report = Report(
        doc=_written(run_dir / REPORT_NAME) or report_run_dir(run_dir),
        views=run_views(run),
        run=run,
        windows=opwindow_documents(run_dir),
    )
    renderer.write(report, out)


def _written(path: Path) -> ReportDoc | None:
    """The report.json already in the run directory; None when there is none, or one this pinchpoint
    cannot read (an older one's, cut short): then it is built again."""
    try:
        return ReportDoc.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, DocumentError):
        return None
