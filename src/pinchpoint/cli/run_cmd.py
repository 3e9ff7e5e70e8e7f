"""pinchpoint run [OPTIONS] SCRIPT [ARGS...] | -m MODULE [ARGS...] | -- COMMAND...

Runs the program unmodified, captures its steps, and prints the diagnosis when it ends. The
program's own stdin, stdout, stderr and exit code are unchanged; the report goes to stderr after it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pinchpoint.errors import PinchpointError, UsageError

if TYPE_CHECKING:
    from pinchpoint.report.report_doc import ReportDoc
    from pinchpoint.serve.driver import LoadDriver

VALUE_OPTIONS = {
    "-o",
    "--out",
    "--json",
    "--opwindow",
    "--interval",
    "--stacks-rate",
    "--annotate",
    "--load",
    "--load-rate",
    "--load-duration",
    "--load-body",
    "--load-wait",
}
FLAG_OPTIONS = {
    "--force",
    "--quiet",
    "-q",
    "--no-color",
    "--kineto",
    "--stacks",
    "--native",
    "--live",
    "--no-trials",
    "-h",
    "--help",
}


START_TIMEOUT_S = 120.0
"""`--load-wait`'s default: a server's imports and model build before it answers."""
NO_STEPS_EXIT = 3
"""The program succeeded but pinchpoint found no step in it: the report holds nothing to act on."""


class RunCommand:
    NAME = "run"
    HELP = "run a program under pinchpoint and print what limits its speed"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = "pinchpoint run [OPTIONS] SCRIPT [ARGS...] | -m MODULE [ARGS...] | -- COMMAND..."
        parser.add_argument("-o", "--out", help="run directory to write (default: pinchpoint-runs/NAME-TIME)")
        parser.add_argument("--json", help="also write report.json to this path")
        parser.add_argument("--force", action="store_true", help="overwrite an existing run directory")
        parser.add_argument(
            "--opwindow",
            default=None,
            help="op window as START:STEPS (default 10:3) or 'off'; it records ops, shapes and dtypes",
        )
        parser.add_argument(
            "--kineto",
            action="store_true",
            help="record a CPU program's op window with torch.profiler rather than the op census "
            "(Kineto's op timings, but the rest of the run is ~3%% slower; CUDA programs always use it)",
        )
        parser.add_argument(
            "--stacks",
            action="store_true",
            help="sample Python stacks of the program and its DataLoader workers with py-spy; writes "
            "flamegraph.svg and stacks.speedscope.json and names the hottest functions (~2%% slower at 20 Hz)",
        )
        parser.add_argument(
            "--native",
            action="store_true",
            help="sample native stacks with perf (kernel, OpenMP, BLAS/oneDNN kernels): the report says "
            "where CPU time went below Python (page faults, barrier spin, which kernel and instruction set); "
            "with --stacks, the flame graph also shows the native frames under each Python line (py-spy "
            "--native, which pauses the program at each sample: 5 Hz unless --stacks-rate is given)",
        )
        parser.add_argument(
            "--stacks-rate",
            type=int,
            default=None,
            metavar="HZ",
            help="stack samples per second (default 20)",
        )
        parser.add_argument(
            "--annotate",
            choices=("nvtx", "itt"),
            default=None,
            help="also emit each step and phase as an NVTX range (Nsight Systems; needs a CUDA build of torch) "
            "or an ITT task (VTune), so a timeline those tools record shows pinchpoint's phases",
        )
        parser.add_argument(
            "--no-trials",
            action="store_true",
            help="never change the program's settings for a few steps to measure a fix (thread count, "
            "allocator thresholds, DataLoader workers); those findings fall back to models",
        )
        parser.add_argument(
            "--interval", type=float, default=None, help="system sampling interval, seconds (default 0.5)"
        )
        parser.add_argument(
            "--live",
            action="store_true",
            help="a live panel while the program runs (steps, trend, phases, the leading finding, cores, "
            "memory, the program's last lines; its output goes to output.log in the run directory); "
            "nothing on a non-terminal",
        )
        add_load_arguments(parser)
        parser.add_argument("-q", "--quiet", action="store_true", help="don't print the report")
        parser.add_argument("--no-color", action="store_true", help="plain text report")

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.capture.launcher import launch

        command: list[str] = args.target
        driver = load_driver(args)
        run_dir = new_run_dir(args.out, command, args.force)
        if driver is not None:
            driver.run_dir = run_dir
        watcher = _start_watcher(run_dir) if args.live else None
        result = launch(
            command,
            run_dir,
            opwindow=args.opwindow,
            sample_interval_s=args.interval,
            kineto=args.kineto,
            stacks=args.stacks or args.stacks_rate is not None,
            stacks_rate_hz=args.stacks_rate,
            annotate=args.annotate,
            extra_env=_extra_env(args, driver is not None),
            native=args.native,
            output=run_dir / LIVE_OUTPUT if watcher is not None else None,
            meanwhile=_load_report_code,
            alongside=driver.start if driver is not None else None,
        )  # interval None: the sampler's default
        _stop_watcher(watcher)
        if driver is not None:
            write_load(driver, run_dir)
        if not result.started:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise UsageError(f"could not start the program: {result.error}")
        from pinchpoint.pipeline.rundir import report_run_dir

        try:
            report = report_run_dir(run_dir, json_path=Path(args.json) if args.json else None)
        except PinchpointError as exc:
            print(f"pinchpoint: no report: {exc}; the run directory is kept at {run_dir}", file=sys.stderr)
            return result.exit_code or exc.exit_code
        print_report(report, run_dir, quiet=args.quiet, color=False if args.no_color else None)
        code = driver.exit_code(result.exit_code) if driver is not None else result.exit_code
        if driver is not None and driver.error is not None:
            print(f"pinchpoint: --load: {driver.error}", file=sys.stderr)
            return code
        missing = report.steps.missing
        if driver is not None and report.serving is not None and report.serving.model_calls is not None:
            missing = None  # (a thread pool's model calls are no steps: the serving section holds them)
        if missing and code == 0:
            print(f"pinchpoint: {missing}", file=sys.stderr)
            return NO_STEPS_EXIT
        return code


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """`--load URL` and its plan: the program is a server."""
    parser.add_argument(
        "--load",
        metavar="URL",
        default=None,
        help="the program is a server: once http://127.0.0.1:PORT/PATH answers, send it an open-loop load "
        "(loopback only), then stop the program as Ctrl-C would; the report adds latency and throughput",
    )
    parser.add_argument(
        "--load-rate", type=float, default=10.0, help="--load's arrivals a second (default 10)"
    )
    parser.add_argument(
        "--load-duration", type=float, default=10.0, help="--load's seconds of arrivals (default 10)"
    )
    parser.add_argument("--load-body", metavar="FILE", default=None, help="--load POSTs this file (JSON)")
    parser.add_argument(
        "--load-wait",
        type=float,
        default=START_TIMEOUT_S,
        metavar="S",
        help=f"seconds the server may take to answer on its port (default {START_TIMEOUT_S:g}); then it is stopped",
    )


def _extra_env(args: argparse.Namespace, served: bool) -> dict[str, str]:
    """`--no-trials`; and under `--load`, `served_env()`."""
    from pinchpoint.capture.trials import TRIALS_ENV

    if served:
        return served_env()
    return {TRIALS_ENV: "off"} if args.no_trials else {}


def served_env() -> dict[str, str]:
    """A server's run under a load: trials off (a trial changes the server's threads or allocator in the
    middle of its load: the latencies would describe neither setting), its model calls off the main
    thread timed and the batch probe on (`SERVED_ENV`)."""
    from pinchpoint.capture.served_calls import SERVED_ENV
    from pinchpoint.capture.trials import TRIALS_ENV

    return {TRIALS_ENV: "off", SERVED_ENV: "1"}


def load_driver(args: argparse.Namespace) -> LoadDriver | None:
    """`--load`'s driver (its run directory set once known); a bad URL or body is a usage error now,
    before the program starts."""
    if args.load is None:
        return None
    from pinchpoint.serve.driver import LoadDriver
    from pinchpoint.serve.load import MAX_DURATION_S, Plan, read_body, target

    body = read_body(args.load_body, "--load-body")
    plan = Plan(rate=args.load_rate, duration_s=args.load_duration)
    plan.arrivals()  # (checks the rate and the duration)
    if not 0 < args.load_wait <= MAX_DURATION_S:
        raise UsageError(f"--load-wait must be in (0, {MAX_DURATION_S:g}] seconds")
    return LoadDriver(
        url=args.load,
        where=target(args.load, body),
        plan=plan,
        run_dir=Path("."),
        start_timeout_s=args.load_wait,
    )


def write_load(driver: LoadDriver, run_dir: Path) -> None:
    """load.json (`pinchpoint schema load`) once the load thread is done: what was sent and measured."""
    from pinchpoint.analysis.serving import summarize
    from pinchpoint.capture.writer import write_json_atomic
    from pinchpoint.report.load_doc import LOAD_FILE, load_doc

    driver.join()
    if run_dir.is_dir():
        doc = load_doc(driver.url, driver.plan, summarize(driver.requests), error=driver.error)
        write_json_atomic(run_dir / LOAD_FILE, doc.to_dict())


def _load_report_code() -> None:
    """The report's modules, imported while the program starts (0.3-0.4 s of imports that, before the
    launch, delayed every program by as much; its own start-up is single-threaded)."""
    import pinchpoint.pipeline.rundir  # noqa: F401


def print_report(report: ReportDoc, run_dir: Path, *, quiet: bool, color: bool | None) -> None:
    """The report on stderr (unless `quiet`), then where the run directory and its history entry are."""
    from pinchpoint.report.model import Report
    from pinchpoint.report.terminal import render

    if not quiet:
        print(file=sys.stderr)
        render(Report(doc=report), sys.stderr, color=color)
    html = run_dir / "report.html"
    charts = f", charts: {html}" if html.exists() else ""
    print(
        f"pinchpoint: run directory {run_dir}  (report: {run_dir / 'report.json'}{charts})", file=sys.stderr
    )
    if report.history_id is not None:
        print(
            f"pinchpoint: recorded as #{report.history_id} (`pinchpoint runs`; compare with "
            f"`pinchpoint diff #{report.history_id} NEXT`)",
            file=sys.stderr,
        )


LIVE_OUTPUT = "output.log"
"""Where `run --live` sends the program's output (the panel shows its last lines)."""
WATCHER_WAIT_S = 15.0


def _start_watcher(run_dir: Path) -> subprocess.Popen[bytes] | None:
    """`pinchpoint watch RUN_DIR --no-report` beside the program, at the lowest CPU priority (SCHED_IDLE:
    at nice 19 it still cost healthy.py's 21 ms steps x1.08-1.10, its start-up and refreshes preempting an
    intra-op thread), drawing on our terminal; None (the run goes on without it) when the output is no
    terminal."""
    from pinchpoint.capture.sampler import lowest_priority
    from pinchpoint.pipeline.live import LIVE_FORCE_ENV

    if not (sys.stderr.isatty() or os.environ.get(LIVE_FORCE_ENV)):
        return None
    cmd = [sys.executable, "-m", "pinchpoint", "watch", str(run_dir), "--no-report"]
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr, preexec_fn=lowest_priority)
    except OSError:
        return None


def _stop_watcher(watcher: subprocess.Popen[bytes] | None) -> None:
    """The watcher ends by itself once the run is marked ended; waited for, then stopped if it lingers."""
    if watcher is None:
        return
    try:
        watcher.wait(timeout=WATCHER_WAIT_S)
    except subprocess.TimeoutExpired:
        watcher.terminate()
        watcher.wait()


def new_run_dir(out: str | None, command: list[str], force: bool) -> Path:
    if out:
        path = Path(out)
        if path.exists() and any(path.iterdir()) if path.is_dir() else path.exists():
            if not force:
                raise UsageError(f"{path} already exists; pass --force to overwrite it or choose another -o")
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        return path
    name = "run"
    for part in command[1:] if len(command) > 1 else command:
        if not part.startswith("-"):
            name = Path(part).stem or name
            break
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path("pinchpoint-runs") / f"{name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = Path("pinchpoint-runs") / f"{name}-{stamp}-{n}"
    return path


def split_run_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split `run`'s own options from the program's command line."""
    ours: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return ours, _python_if_script(list(args[i + 1 :]))
        if a in ("-m", "--module"):
            if i + 1 >= len(args):
                raise UsageError("-m needs a module name, e.g. pinchpoint run -m pkg.train")
            return ours, [sys.executable, "-m", *args[i + 1 :]]
        if a in VALUE_OPTIONS:
            ours.extend(args[i : i + 2])
            i += 2
            continue
        if a in FLAG_OPTIONS or (a.startswith("--") and a.split("=", 1)[0] in VALUE_OPTIONS):
            ours.append(a)
            i += 1
            continue
        if a.startswith("-"):
            ours.append(a)  # unknown: let argparse report it
            i += 1
            continue
        script = a
        if not Path(script).is_file():
            raise UsageError(
                f"no such script: {script} (to run a command, put it after --: pinchpoint run -- {script} ...)"
            )
        return ours, [sys.executable, script, *args[i + 1 :]]
    return ours, []


def _python_if_script(command: list[str]) -> list[str]:
    if command and command[0].endswith(".py") and not os.access(command[0], os.X_OK):
        return [sys.executable, *command]
    return command


def parse_run_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    ours, target = split_run_args(list(argv[1:]))
    ns = parser.parse_args(["run", *ours])
    if not target and not getattr(ns, "help", False):
        raise UsageError("nothing to run: pinchpoint run train.py [ARGS...] or pinchpoint run -- COMMAND ...")
    if target and shutil.which(target[0]) is None and not Path(target[0]).exists():
        raise UsageError(f"command not found: {target[0]}")
    ns.target = target
    return ns
