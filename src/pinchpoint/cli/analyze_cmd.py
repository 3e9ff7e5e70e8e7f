"""pinchpoint analyze PATH: diagnose files another profiler wrote: PyTorch profiler (Kineto) traces and
Nsight Systems SQLite exports, stack files (perf script, folded stacks, VTune CSV reports), the reader chosen
by the file's content."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROGRESS_AFTER_S = 2.0
"""Draw a progress bar only for ingests that take longer than this."""


class AnalyzeCommand:
    NAME = "analyze"
    HELP = (
        "diagnose profiler files: PyTorch profiler traces (a .json/.json.gz file or a directory of "
        "per-rank traces), an Nsight Systems SQLite export (nsys export --type sqlite), an XProf "
        "XSpace (.xplane.pb from TensorFlow or JAX, or a TensorBoard log directory of them), perf script "
        "text, folded stacks, or a VTune CSV report (vtune -report hotspots|top-down -format csv)"
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "path", help="a trace file, or a directory with one trace per rank (or of *.xplane.pb files)"
        )
        parser.add_argument("--json", help="also write report.json to this path")
        parser.add_argument("--no-color", action="store_true", help="plain text report")
        parser.add_argument("-q", "--quiet", action="store_true", help="no terminal report (use with --json)")
        parser.add_argument("--html", help="also write the report as one self-contained HTML file")
        parser.add_argument(
            "--workers",
            type=int,
            default=0,
            metavar="N",
            help="analyse the ranks of a directory on N local processes (default: one per usable core)",
        )
        parser.add_argument(
            "--cluster",
            metavar="ADDRESS",
            help="analyse the ranks on this Dask scheduler (e.g. tcp://host:8786); workers must see the files",
        )

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.errors import UsageError
        from pinchpoint.pipeline.ranks import default_workers
        from pinchpoint.pipeline.traces import report_traces
        from pinchpoint.report.model import Report
        from pinchpoint.report.terminal import render

        if args.workers < 0:
            raise UsageError("--workers must be 1 or more")

        from pinchpoint.pipeline.stack_files import report_stack_file

        stacks_doc = report_stack_file(Path(args.path), Path(args.json) if args.json else None)
        if stacks_doc is not None:  # perf script, folded stacks, VTune CSV: no timeline, no steps
            from pinchpoint.report.stacks_terminal import render_stacks

            if not args.quiet:
                render_stacks(stacks_doc, sys.stdout)
            return 0
        bar = _ProgressBar(enabled=sys.stderr.isatty() and not args.quiet)
        try:
            report = report_traces(
                Path(args.path),
                json_path=Path(args.json) if args.json else None,
                progress=bar.update,
                workers=args.workers or default_workers(),
                cluster=args.cluster,
            )
        finally:
            bar.close()
        if args.html:
            from pinchpoint.pipeline.traces import trace_roofline
            from pinchpoint.report.renderers import RENDERERS

            built = Report(doc=report, roofline=trace_roofline(Path(args.path)))
            RENDERERS["html"].write(built, Path(args.html))
        if not args.quiet:
            render(Report(doc=report), sys.stdout, color=False if args.no_color else None)
        return 0


class _ProgressBar:
    """A rich progress bar that appears only once reading has taken longer than PROGRESS_AFTER_S."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.progress: object | None = None
        self.task: object | None = None
        self._advance: Callable[[int, int], None] | None = None

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._advance is None:
            if time.monotonic() - self.t0 < PROGRESS_AFTER_S:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            progress = Progress(
                "reading trace",
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                transient=True,
                console=Console(stderr=True),  # stdout carries the report (and may be a file)
            )
            progress.start()
            task = progress.add_task("read", total=total)
            self.progress = progress

            def advance(d: int, t: int) -> None:
                progress.update(task, completed=d, total=t)

            self._advance = advance
        self._advance(done, total)

    def close(self) -> None:
        stop = getattr(self.progress, "stop", None)
        if stop is not None:
            stop()
