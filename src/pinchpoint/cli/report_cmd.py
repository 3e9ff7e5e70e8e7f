"""pinchpoint report RUN_DIR|ID: (re)build the report of a run directory, e.g. after a crash."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class ReportCommand:
    NAME = "report"
    HELP = "rebuild and print the report of a run directory"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_dir", help="the directory `pinchpoint run` wrote, or its history id")
        parser.add_argument("--json", help="also write report.json to this path")
        parser.add_argument("--no-color", action="store_true", help="plain text report")
        parser.add_argument(
            "--html", help="also write the HTML report to this path (one self-contained file)"
        )

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.cli.run_cmd import NO_STEPS_EXIT
        from pinchpoint.pipeline.resolve import run_dir_of
        from pinchpoint.pipeline.rundir import report_run_dir
        from pinchpoint.report.model import Report
        from pinchpoint.report.terminal import render

        run_dir = run_dir_of(args.run_dir)
        report = report_run_dir(run_dir, json_path=Path(args.json) if args.json else None)
        if args.html:
            import shutil

            from pinchpoint.pipeline.rundir import HTML_NAME

            shutil.copyfile(run_dir / HTML_NAME, args.html)
        render(Report(doc=report), sys.stdout, color=False if args.no_color else None)
        missing = report.steps.missing
        if missing:
            print(f"pinchpoint: {missing}", file=sys.stderr)
            return NO_STEPS_EXIT
        return 0
