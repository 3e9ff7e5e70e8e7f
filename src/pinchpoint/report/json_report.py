"""report.json (schema `pinchpoint.report/1`, see DESIGN.md): the typed report written as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.report.report_doc import ReportDoc


def write_report(report: ReportDoc, path: Path) -> None:
    """`report` at `path`, atomically (a reader never sees half a file); `history_id` stays out: the id
    is known only once the file is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    doc = report.to_dict()
    doc.pop("history_id", None)
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
