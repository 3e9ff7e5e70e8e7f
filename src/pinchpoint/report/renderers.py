"""Every file format a report is written as, in one table: name -> renderer.

Add an output format: one module in `report/` with a `write(report, out)` and one line here. The
console is the same renderer on a stream (`terminal.render(report, stream)`); `text` writes its view
to a file.
"""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.report.flamegraph import flamegraph_svg, speedscope_json
from pinchpoint.report.html import render_html
from pinchpoint.report.json_report import write_report
from pinchpoint.report.model import Needs, Renderer, Report
from pinchpoint.report.perfetto import perfetto_trace
from pinchpoint.report.tensorboard import write_event_file
from pinchpoint.report.terminal import write_text


def _json(report: Report, out: Path) -> None:
    write_report(report.doc, out)


def _html(report: Report, out: Path) -> None:
    out.write_text(render_html(report.doc, report.views, roofline=report.roofline))


def _perfetto(report: Report, out: Path) -> None:
    assert report.run is not None and report.views is not None
    out.write_text(json.dumps(perfetto_trace(report.run, report.doc, report.views, report.windows)))


def _speedscope(report: Report, out: Path) -> None:
    assert report.run is not None and report.run.stacks is not None and report.views is not None
    doc = speedscope_json(report.run.stacks, name=report.title, process_names=report.views.process_names)
    out.write_text(json.dumps(doc))


def _flamegraph(report: Report, out: Path) -> None:
    assert report.run is not None and report.run.stacks is not None and report.views is not None
    title = f"{report.title} — Python stacks"
    out.write_text(flamegraph_svg(report.run.stacks, title=title, process_names=report.views.process_names))


def _tensorboard(report: Report, out: Path) -> None:
    assert report.views is not None
    write_event_file(report.views, report.doc, out)  # a log directory, not a file


RENDERERS: dict[str, Renderer] = {
    "json": Renderer(_json),
    "html": Renderer(_html),
    "text": Renderer(write_text),
    "perfetto": Renderer(_perfetto, Needs.RUN),
    "speedscope": Renderer(_speedscope, Needs.STACKS),
    "flamegraph": Renderer(_flamegraph, Needs.STACKS),
    "tensorboard": Renderer(_tensorboard, Needs.RUN),
}
"""JSON (report.json), the self-contained HTML page, the console's view as plain text, a Chrome trace for Perfetto, the Python stacks for
speedscope or as a flame-graph SVG, TensorBoard event files into a log directory."""
