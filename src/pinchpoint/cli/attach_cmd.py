"""pinchpoint attach PID [--duration S]: join a running Python program (one not started under pinchpoint)
for a while, say what limits its speed, and leave it running as it was (`capture/attacher.py`)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pinchpoint.errors import AttachError, PinchpointError, UsageError

DEFAULT_DURATION_S = 20.0
PROGRAM_EXITED_EXIT = 5
"""The program ended during the attach: the report covers what ran until then."""


class AttachCommand:
    NAME = "attach"
    HELP = "join a running Python program for a while, print what limits its speed, and leave it running"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "pid", type=int, help="the process to join (a PyTorch training or serving program)"
        )
        parser.add_argument(
            "--duration",
            type=float,
            default=DEFAULT_DURATION_S,
            metavar="S",
            help=f"seconds to record before detaching (default {DEFAULT_DURATION_S:g})",
        )
        parser.add_argument(
            "-o", "--out", help="run directory to write (default: pinchpoint-runs/attach-PID-TIME)"
        )
        parser.add_argument("--json", help="also write report.json to this path")
        parser.add_argument("--force", action="store_true", help="overwrite an existing run directory")
        parser.add_argument(
            "--opwindow",
            default=None,
            help="op window as START:STEPS, counted from the attach (default 10:3), or 'off'",
        )
        parser.add_argument(
            "--no-trials",
            action="store_true",
            help="never change the program's settings for a few steps to measure a fix",
        )
        parser.add_argument("--stacks", action="store_true", help="also sample its Python stacks with py-spy")
        parser.add_argument(
            "--outside",
            action="store_true",
            help="put nothing in the process: judge it from Python stacks (py-spy) and /proc only, as "
            "attach does by itself when it cannot inject the agent",
        )
        parser.add_argument("-q", "--quiet", action="store_true", help="don't print the report")
        parser.add_argument("--no-color", action="store_true", help="plain text report")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.capture.attacher import attach
        from pinchpoint.cli.run_cmd import new_run_dir, print_report
        from pinchpoint.pipeline.rundir import report_run_dir

        if args.pid <= 0:
            raise UsageError(f"not a process id: {args.pid}")
        if not args.duration > 0:
            raise UsageError(f"--duration must be positive, not {args.duration:g}")
        run_dir = new_run_dir(args.out, ["pinchpoint", f"attach-{args.pid}"], args.force)
        try:
            result = attach(
                args.pid,
                run_dir,
                duration_s=args.duration,
                opwindow=args.opwindow,
                trials=not args.no_trials,
                stacks=args.stacks,
                outside=args.outside,
                progress=lambda line: print(f"pinchpoint: {line}", file=sys.stderr),
            )
        except AttachError:
            if not any(run_dir.glob("ranks/*/steps.jsonl")):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        if result.outside is not None:
            return _outside_report(args, run_dir, result.ended)
        try:
            report = report_run_dir(run_dir, json_path=Path(args.json) if args.json else None)
        except PinchpointError as exc:
            print(f"pinchpoint: no report: {exc}; the run directory is kept at {run_dir}", file=sys.stderr)
            return exc.exit_code
        print_report(report, run_dir, quiet=args.quiet, color=False if args.no_color else None)
        if result.ended == "exited":
            print(f"pinchpoint: process {args.pid} ended during the attach", file=sys.stderr)
            return PROGRAM_EXITED_EXIT
        detached = result.detached
        if detached is None:
            print(
                f"pinchpoint: process {args.pid}'s agent did not confirm its detach; it detaches by itself "
                "within a minute",
                file=sys.stderr,
            )
            return AttachError.exit_code
        left = [*detached.get("not_restored", []), *detached.get("inert_hooks", [])]
        if left:
            print(f"pinchpoint: detached; left inert in the process: {', '.join(left)}", file=sys.stderr)
        return 130 if result.ended == "interrupted" else 0


def _outside_report(args: argparse.Namespace, run_dir: Path, ended: str) -> int:
    from pinchpoint.pipeline.outside import OUTSIDE_FILE, report_outside
    from pinchpoint.report.outside_terminal import render_outside

    doc = report_outside(run_dir, json_path=Path(args.json) if args.json else None)
    if not args.quiet:
        print(file=sys.stderr)
        render_outside(doc, sys.stderr)
    print(f"pinchpoint: run directory {run_dir}  (report: {run_dir / OUTSIDE_FILE})", file=sys.stderr)
    if ended == "exited":
        print(f"pinchpoint: process {args.pid} ended during the attach", file=sys.stderr)
        return PROGRAM_EXITED_EXIT
    return 130 if ended == "interrupted" else 0
