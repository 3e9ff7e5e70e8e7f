"""`pinchpoint` command line: one module per subcommand, registered here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Protocol

import pinchpoint
from pinchpoint.cli import (
    analyze_cmd,
    attach_cmd,
    calibrate_cmd,
    capture_cmd,
    diff_cmd,
    export_cmd,
    load_cmd,
    mcp_cmd,
    report_cmd,
    run_cmd,
    schema_cmd,
    try_cmd,
    watch_cmd,
)
from pinchpoint.errors import PinchpointError


class Command(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def execute(self, args: argparse.Namespace) -> int: ...


COMMANDS: tuple[Command, ...] = (
    run_cmd.RunCommand(),
    try_cmd.TryCommand(),
    analyze_cmd.AnalyzeCommand(),
    report_cmd.ReportCommand(),
    calibrate_cmd.CalibrateCommand(),
    diff_cmd.DiffCommand(),
    diff_cmd.CheckCommand(),
    diff_cmd.RunsCommand(),
    diff_cmd.ShowCommand(),
    export_cmd.ExportCommand(),
    watch_cmd.WatchCommand(),
    attach_cmd.AttachCommand(),
    capture_cmd.CaptureCommand(),
    load_cmd.LoadCommand(),
    schema_cmd.SchemaCommand(),
    mcp_cmd.McpCommand(),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pinchpoint",
        description="Find what limits a PyTorch program's speed, with evidence and the fix.",
    )
    parser.add_argument("--version", action="version", version=f"pinchpoint {pinchpoint.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises, never calls sys.exit)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _dispatch(args)
    except PinchpointError as exc:
        print(f"pinchpoint: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("pinchpoint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `pinchpoint schema report | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # the last line of defence: one line, never a traceback
        if os.environ.get("PINCHPOINT_DEBUG"):
            raise
        print(
            f"pinchpoint: internal error: {exc.__class__.__name__}: {exc} (please report this)",
            file=sys.stderr,
        )
        return 70


def _dispatch(args: list[str]) -> int:
    parser = build_parser()
    try:
        if args[:1] == ["run"]:
            ns = run_cmd.parse_run_args(parser, args)
        elif args[:1] == ["try"]:
            ns = try_cmd.parse_try_args(parser, args)
        else:
            ns = parser.parse_args(args)
    except SystemExit as exc:  # argparse: --help, --version or a usage error (already printed)
        return int(exc.code) if isinstance(exc.code, int) else 2
    cmd = getattr(ns, "_command", None)
    if cmd is None:
        parser.print_help(sys.stderr)
        return 2
    return int(cmd.execute(ns))


def entry() -> None:
    sys.exit(main())
