"""`pinchpoint export`: a run in the file formats other viewers open, one small writer per format."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinchpoint.analysis.views import process_names, run_views
from pinchpoint.errors import UsageError
from pinchpoint.ingest.rundir import opwindow_documents, read_run_dir
from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir
from pinchpoint.report.flamegraph import flamegraph_svg, speedscope_json
from pinchpoint.report.perfetto import perfetto_trace
from pinchpoint.report.tensorboard import write_event_file
from pinchpoint.trace.run import Run


@dataclass(frozen=True, slots=True)
class Export:
    """(the run, its directory, its report, where to write): write the run at `out`."""

    write: Callable[[Run, Path, dict[str, Any], Path], None]
    needs_stacks: bool = False
    """Made from the Python stacks, so only for a run recorded with `pinchpoint run --stacks`."""


def _title(run: Run) -> str:
    return " ".join(run.meta.command) or "program"


def _perfetto(run: Run, run_dir: Path, report: dict[str, Any], out: Path) -> None:
    out.write_text(json.dumps(perfetto_trace(run, report, run_views(run), opwindow_documents(run_dir))))


def _speedscope(run: Run, run_dir: Path, report: dict[str, Any], out: Path) -> None:
    assert run.stacks is not None
    out.write_text(
        json.dumps(speedscope_json(run.stacks, name=_title(run), process_names=process_names(run)))
    )


def _flamegraph(run: Run, run_dir: Path, report: dict[str, Any], out: Path) -> None:
    assert run.stacks is not None
    title = f"{_title(run)} — Python stacks"
    out.write_text(flamegraph_svg(run.stacks, title=title, process_names=process_names(run)))


def _tensorboard(run: Run, run_dir: Path, report: dict[str, Any], out: Path) -> None:
    write_event_file(run_views(run), report, out)  # a log directory, not a file


EXPORTS: dict[str, Export] = {
    "perfetto": Export(_perfetto),
    "speedscope": Export(_speedscope, needs_stacks=True),
    "flamegraph": Export(_flamegraph, needs_stacks=True),
    "tensorboard": Export(_tensorboard),
}
"""Format name -> its writer: a Chrome trace for Perfetto, the Python stacks for speedscope or as a
flame-graph SVG, TensorBoard event files into the log directory `out`."""
EXPORT_FORMATS = tuple(EXPORTS)


def export_run(run_dir: Path, fmt: str, out: Path) -> None:
    """Write `run_dir` as `fmt` (one of `EXPORT_FORMATS`) at `out`, reading its report.json (made
    first when the directory has none)."""
    run = read_run_dir(run_dir)
    report_file = run_dir / REPORT_NAME
    report = json.loads(report_file.read_text()) if report_file.is_file() else report_run_dir(run_dir)
    export = EXPORTS.get(fmt)
    if export is None:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    if export.needs_stacks and run.stacks is None:
        raise UsageError(f"{run_dir} has no Python stacks: record them with `pinchpoint run --stacks`")
    export.write(run, run_dir, report, out)
