"""pinchpoint export RUN --format FMT -o PATH: a run in the file formats other viewers open."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class ExportCommand:
    NAME = "export"
    HELP = "write a run for Perfetto/chrome://tracing, TensorBoard, speedscope, or as a flame-graph SVG"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from pinchpoint.report.formats import EXPORT_FORMATS

        parser.add_argument("run", help="run directory or history id")
        parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="what to write")
        parser.add_argument("-o", "--out", required=True, help="file to write (tensorboard: a log directory)")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.pipeline.export import export_run
        from pinchpoint.pipeline.resolve import run_dir_of

        export_run(run_dir_of(args.run), args.format, Path(args.out))
        print(f"pinchpoint: wrote {args.out} ({args.format})", file=sys.stderr)
        return 0
