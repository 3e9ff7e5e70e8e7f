"""A report as the pipeline builds it once, and the one shape of every file renderer.

`Report.doc` is `report.json` typed (`report_doc.ReportDoc`, schema `pinchpoint.report/1`, the contract
tools and CI read, built by `build.build_report` / `gpu_report.build_gpu_report` with every fact
phrased); the rest is what charts, timelines and stack views draw, computed by analysis
(`analysis/views.py`).
A renderer writes one format from a `Report` and analyses nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pinchpoint.analysis.views import RooflineView, RunViews
from pinchpoint.report.document import JsonObject
from pinchpoint.report.report_doc import ReportDoc
from pinchpoint.trace.run import Run


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    doc: ReportDoc
    views: RunViews | None = None
    """A run's charts and timelines (None for a report of traces)."""
    roofline: RooflineView | None = None
    """A trace's ops on its GPU's roofline (`analyze --html`); a run's is in `views`."""
    run: Run | None = None
    """The recordings, for the exports that replay them as a timeline (Perfetto)."""
    windows: Mapping[int, JsonObject] = field(default_factory=dict)
    """Rank -> the op window's own trace document, embedded in the Perfetto export."""

    @property
    def title(self) -> str:
        return self.doc.title

    @classmethod
    def read(cls, document: JsonObject, **views: Any) -> Report:
        """A report of a report.json document (a file, the history); DocumentError when it is none."""
        return cls(doc=ReportDoc.from_dict(document), **views)


class Needs(str, Enum):
    """What a renderer needs beyond the document."""

    NOTHING = "nothing"
    RUN = "run"
    """A run's recordings and views (not a report of traces)."""
    STACKS = "stacks"
    """Python stacks (`pinchpoint run --stacks`)."""


@dataclass(frozen=True, slots=True)
class Renderer:
    """Writes `report` as one format at `out` (a file; for TensorBoard, a log directory)."""

    write: Callable[[Report, Path], None]
    needs: Needs = Needs.NOTHING
