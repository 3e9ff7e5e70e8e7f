"""From a run directory to a report: read, analyse, diagnose, write report.json. No torch needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pinchpoint.analysis.run_analysis import analyze_run
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.ingest.rundir import read_run_dir
from pinchpoint.report.json_report import build_report, write_report

REPORT_NAME = "report.json"


def report_run_dir(run_dir: Path, *, json_path: Path | None = None) -> dict[str, Any]:
    """Analyse `run_dir`, write its report.json (and a copy at `json_path`), return the report."""
    run = read_run_dir(run_dir)
    analysis = analyze_run(run)
    report = build_report(analysis, diagnose(analysis))
    write_report(report, run_dir / REPORT_NAME)
    if json_path is not None:
        write_report(report, json_path)
    return report
