"""pinchpoint watch RUN_DIR: a live panel of a run in progress, wherever it was started; its report when
it ends. `run --live` starts one of these beside the program (`--no-report`: run prints the report)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from pinchpoint.errors import UsageError

LEAD_EVERY_S = 10.0
"""How often the leading finding is recomputed (the whole pipeline over the partial run directory)."""
APPEAR_S = 30.0
"""How long to wait for a run directory that is still being created (`run --live` starts us first)."""
REPORT_WAIT_S = 120.0
"""How long to wait for the run's own report.json after the program ended before building one."""


class WatchCommand:
    NAME = "watch"
    HELP = "a live view of a run in progress (started elsewhere); prints its report when the run ends"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run_dir", help="the directory a `pinchpoint run` is writing")
        parser.add_argument(
            "--interval", type=float, default=2.0, help="seconds between refreshes (default 2)"
        )
        parser.add_argument("--no-report", action="store_true", help="end with the panel, without the report")
        parser.add_argument("--no-color", action="store_true", help="plain text report")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.pipeline.live import LIVE_FORCE_ENV  # (here: every command parses this module)

        run_dir = Path(args.run_dir)
        _wait_for(run_dir)
        tty = sys.stdout.isatty() or bool(os.environ.get(LIVE_FORCE_ENV))
        _follow(run_dir, max(args.interval, 0.2), tty)
        if args.no_report:
            return 0
        return _print_report(run_dir, args.no_color)


def _wait_for(run_dir: Path) -> None:
    deadline = time.monotonic() + APPEAR_S
    while not (run_dir / "meta.json").is_file():
        if time.monotonic() > deadline or (run_dir.exists() and not run_dir.is_dir()):
            raise UsageError(f"{run_dir}: not a pinchpoint run directory (no meta.json)")
        time.sleep(0.2)


def _follow(run_dir: Path, interval: float, tty: bool) -> None:
    """Refresh the panel until the run ends (or its processes are gone); on no terminal, just wait."""
    from rich.console import Console
    from rich.live import Live

    from pinchpoint.pipeline.live import leading, snapshot
    from pinchpoint.report.live_terminal import live_panel

    console = Console(file=sys.stdout, force_terminal=tty or None)
    lead, lead_at = None, 0.0
    snap = snapshot(run_dir)
    with (
        Live(live_panel(snap, lead), console=console, auto_refresh=False, transient=False)
        if tty
        else _Quiet() as live
    ):
        while True:
            if time.monotonic() - lead_at >= LEAD_EVERY_S:
                lead, lead_at = leading(run_dir), time.monotonic()
            if live is not None:
                live.update(live_panel(snap, lead), refresh=True)
            if snap.ended or not _alive(run_dir):
                break
            time.sleep(interval)
            snap = snapshot(run_dir)
        if live is not None and snap.ended:
            live.update(live_panel(snap, leading(run_dir) or lead), refresh=True)


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _alive(run_dir: Path) -> bool:
    """False when the run's launcher is gone from this machine without marking the run ended (killed)."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
        host = json.loads((run_dir / "environment.json").read_text()).get("hostname")
    except (OSError, ValueError):
        return True
    pid = meta.get("launcher_pid")
    if not isinstance(pid, int) or (host and host != socket.gethostname()):
        return True  # another node's run (a shared filesystem): only meta.json can say it ended
    from pinchpoint.capture.outside import alive

    return alive(pid)


def _print_report(run_dir: Path, no_color: bool) -> int:
    """The run's own report once its launcher wrote it (printed as `pinchpoint report` prints it; read,
    not rebuilt, so two processes never write the run directory at once), else built here when the
    launcher is gone."""
    from pinchpoint.cli.run_cmd import NO_STEPS_EXIT
    from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir
    from pinchpoint.report.document import DocumentError
    from pinchpoint.report.model import Report
    from pinchpoint.report.report_doc import ReportDoc
    from pinchpoint.report.terminal import render

    report_file = run_dir / REPORT_NAME
    deadline = time.monotonic() + REPORT_WAIT_S
    while not report_file.is_file() and _alive(run_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    report = None
    if report_file.is_file():
        try:
            report = ReportDoc.from_dict(json.loads(report_file.read_text()))
        except (OSError, ValueError, DocumentError):
            report = None  # cut or being replaced: build it
    if report is None:
        report = report_run_dir(run_dir)
    render(Report(doc=report), sys.stdout, color=False if no_color else None)
    missing = report.steps.missing
    if missing:
        print(f"pinchpoint: {missing}", file=sys.stderr)
        return NO_STEPS_EXIT
    return 0
