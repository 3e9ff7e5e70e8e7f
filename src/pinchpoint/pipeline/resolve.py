"""Naming a run on the command line: a run directory, or a history id (`12` or `#12`).

Here, not in `history/`, because a run directory without a report.json gets one made (the pipeline's
work); the history package stays the database alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pinchpoint.compare.diff import RunSide
from pinchpoint.errors import RunDirError, UsageError
from pinchpoint.history import store
from pinchpoint.report.document import DocumentError
from pinchpoint.report.report_doc import ReportDoc

ID = re.compile(r"#?(\d+)")


def load_side(ref: str) -> RunSide:
    """The run `ref` names, with its report and steady step times."""
    path = Path(ref)
    if path.is_dir():
        return _from_dir(path, ref)
    m = ID.fullmatch(ref)
    if m is None:
        raise UsageError(f"{ref}: no run directory and not a history id (see `pinchpoint runs`)")
    found = store.load(int(m.group(1)))
    if found is None:
        raise UsageError(f"{ref}: no run with that id in {store.history_path()} (see `pinchpoint runs`)")
    rec, report, steps = found
    try:
        doc = ReportDoc.from_dict(report)
    except DocumentError as exc:
        raise UsageError(f"{ref}: its recorded report is not one this pinchpoint reads ({exc})") from exc
    return RunSide(label=f"#{rec.id}", report=doc, step_ns=steps)


def run_dir_of(ref: str) -> Path:
    """The run directory `ref` names: itself, or the one a history id was recorded from."""
    path = Path(ref)
    m = ID.fullmatch(ref)
    if path.exists() or m is None:
        return path
    found = store.load(int(m.group(1)))
    if found is None:
        raise UsageError(f"{ref}: no run directory and no run with that id (see `pinchpoint runs`)")
    return Path(found[0].run_dir)


def load_report(ref: str) -> ReportDoc:
    return load_side(ref).report


def report_of_dir(path: Path) -> ReportDoc:
    """The run directory's report.json, typed; made again from its recordings where there is none or
    an older pinchpoint's does not fit. RunDirError where the file is there but cannot be read."""
    # imported here: naming runs by history id (`pinchpoint diff 3 4`) needs no analysis code
    from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir

    report_file = path / REPORT_NAME
    if report_file.is_file():
        try:
            data = json.loads(report_file.read_text())
        except (OSError, ValueError) as exc:
            raise RunDirError(f"{report_file} could not be read ({exc.__class__.__name__})") from exc
        try:
            return ReportDoc.from_dict(data)
        except DocumentError:
            pass  # an older pinchpoint's: made again from the recordings
    return report_run_dir(path)


def _from_dir(path: Path, label: str) -> RunSide:
    from pinchpoint.ingest.rundir import read_run_dir
    from pinchpoint.pipeline.rundir import run_step_ns

    return RunSide(label=label, report=report_of_dir(path), step_ns=run_step_ns(read_run_dir(path)))
