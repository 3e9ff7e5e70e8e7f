"""pinchpoint diff A B / pinchpoint check RUN --baseline REF: compare two runs (directories or history ids)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


class DiffCommand:
    NAME = "diff"
    HELP = "compare two runs (run directories or history ids): is B faster, and did the bottleneck move?"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("before", help="run directory or history id (`pinchpoint runs`) of the first run")
        parser.add_argument("after", help="... of the second run")
        parser.add_argument(
            "--json", help="also write the comparison (schema pinchpoint.diff/1) to this path"
        )
        parser.add_argument("--no-color", action="store_true", help="plain text")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.compare.diff import diff_runs
        from pinchpoint.pipeline.resolve import load_side
        from pinchpoint.report.diff_doc import build_diff
        from pinchpoint.report.diff_terminal import render_diff

        d = build_diff(diff_runs(load_side(args.before), load_side(args.after)))
        if args.json:
            Path(args.json).write_text(json.dumps(d.to_dict(), indent=1) + "\n")
        render_diff(d, sys.stdout, color=False if args.no_color else None)
        return 0


PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%?\s*")


def parse_percent(text: str) -> float:
    """`5%` or `5` -> 0.05."""
    from pinchpoint.errors import UsageError

    m = PERCENT.fullmatch(text)
    if m is None:
        raise UsageError(f"--max-regression {text!r}: give a percentage such as 5%")
    return float(m.group(1)) / 100


class CheckCommand:
    NAME = "check"
    HELP = "CI gate: fail (exit 1) when RUN is significantly slower than the baseline by more than allowed"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory or history id to judge")
        parser.add_argument(
            "--baseline",
            required=True,
            action="append",
            help="run directory or history id to compare with; give it more than once (runs of the same "
            "program) and their spread tells the gate how much this program's runs differ by themselves",
        )
        parser.add_argument(
            "--max-regression", default="5%", help="allowed slowdown of the median step (5%%)"
        )
        parser.add_argument(
            "--json", help="also write the comparison (schema pinchpoint.diff/1) to this path"
        )

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.compare.diff import gate
        from pinchpoint.pipeline.resolve import load_side
        from pinchpoint.report.diff_doc import build_diff

        allowed = parse_percent(args.max_regression)
        result = gate([load_side(b) for b in args.baseline], load_side(args.run), allowed)
        if args.json:
            Path(args.json).write_text(json.dumps(build_diff(result.diff).to_dict(), indent=1) + "\n")
        print(f"pinchpoint check: {'FAIL' if result.failed else 'PASS'}: {result.reason}", file=sys.stderr)
        for line in result.lines:
            print(f"  {line}", file=sys.stderr)
        return 1 if result.failed else 0


class RunsCommand:
    NAME = "runs"
    HELP = "list the runs recorded in the history (newest first)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-n", "--limit", type=int, default=20, help="how many (20)")
        parser.add_argument("--no-color", action="store_true", help="plain text")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.history import store
        from pinchpoint.report.diff_terminal import render_runs

        render_runs(store.list_runs(max(1, args.limit)), sys.stdout, color=False if args.no_color else None)
        return 0


class ShowCommand:
    NAME = "show"
    HELP = "print the report of a recorded run (history id) or a run directory, as it was recorded"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="history id (`pinchpoint runs`) or run directory")
        parser.add_argument("--json", help="also write its report.json to this path")
        parser.add_argument("--no-color", action="store_true", help="plain text")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.pipeline.resolve import load_report
        from pinchpoint.report.model import Report
        from pinchpoint.report.terminal import render

        report = load_report(args.run)
        if args.json:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
        render(Report(doc=report), sys.stdout, color=False if args.no_color else None)
        return 0
