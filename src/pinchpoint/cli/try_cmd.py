"""pinchpoint try [--fix ID|all|top] [--steps N] [--json OUT] [-o DIR] -- COMMAND... | RUN|ID

Runs the program as a baseline (or reuses a recorded run of it), then again with each fix applied by
pinchpoint, without changing the program's code, and prints what each measured against what it
predicted, and what leads after it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pinchpoint.cli.run_cmd import add_load_arguments, load_driver, served_env, write_load
from pinchpoint.errors import PinchpointError, UsageError

if TYPE_CHECKING:
    from pinchpoint.pipeline.fixes import AgentAsk
    from pinchpoint.report.report_doc import ReportDoc
    from pinchpoint.report.try_doc import CwdWrites, TryDoc
    from pinchpoint.serve.driver import LoadDriver

VALUE_OPTIONS = {
    "--fix",
    "--steps",
    "--json",
    "-o",
    "--out",
    "--load",
    "--load-rate",
    "--load-duration",
    "--load-body",
    "--load-wait",
}
FLAG_OPTIONS = {"--force", "--no-color", "-h", "--help"}
FAILED_EXIT = 1
"""The baseline failed, or no fix could be measured."""


class TryCommand:
    NAME = "try"
    HELP = "apply a finding's fix without editing code, run the program again, and report the measured gain"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = "pinchpoint try [--fix ID|all|top] [--steps N] [--json OUT] -- COMMAND... | RUN|ID"
        parser.add_argument(
            "--fix",
            default="top",
            help="which fix: 'top' (the first pinchpoint can apply, default), 'all' (each, then those "
            "that paid together), or a finding id (input.fetch)",
        )
        parser.add_argument(
            "--steps", type=int, default=None, help="steady steps each run measures (default 30)"
        )
        parser.add_argument("--json", help="also write the table (schema pinchpoint.try/1) to this path")
        parser.add_argument(
            "-o", "--out", help="directory for the runs (default pinchpoint-runs/try-NAME-TIME)"
        )
        parser.add_argument("--force", action="store_true", help="overwrite an existing -o directory")
        parser.add_argument("--no-color", action="store_true", help="plain text")
        add_load_arguments(parser)

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.pipeline import try_fix, try_whole

        steps = args.steps if args.steps is not None else try_fix.DEFAULT_STEPS
        if steps < 3:
            raise UsageError("--steps must be at least 3 (the comparison needs a few steps each side)")
        command, baseline_ref = args.target, args.baseline_ref
        load = load_driver(args)
        if load is not None and baseline_ref is not None:
            raise UsageError(
                "--load runs the baseline under the load itself: give the command, not a recorded run"
            )
        out = _out_dir(args.out, command, args.force)
        baseline_dir = _recorded(baseline_ref) if baseline_ref is not None else out / "baseline"
        runner = _Runs(command, out, baseline_dir, load)
        report, failed = _baseline(runner, baseline_dir, baseline_ref, load, steps)
        if report is None:
            return failed
        chosen = try_fix.select(try_fix.plans(report), args.fix)
        if not chosen:
            ids = ", ".join(f.id for f in report.findings) or "none"
            print(
                f"pinchpoint try: no finding to try for --fix {args.fix} (findings: {ids})", file=sys.stderr
            )
            return FAILED_EXIT
        tried = []
        again = try_fix.SecondBaseline(
            out / "baseline-again",
            steps,
            runner,
            lambda line: print(f"pinchpoint try: {line}", file=sys.stderr),
        )
        whole = try_whole.FullBaselines(
            out,
            runner,
            lambda line: print(f"pinchpoint try: {line}", file=sys.stderr),
            measure=try_whole.request_s if load is not None else try_whole.program_s,
            first=report if load is not None else None,
        )
        for plan in chosen:
            if plan.cannot is None:
                print(f"pinchpoint try: {plan.id}: {plan.fix} ...", file=sys.stderr)
            if load is not None:  # (a server: every fix measured on whole runs under the same load)
                plan = replace(plan, whole_run=True)
            tried.append(
                try_whole.run_plan(plan, out / try_fix.slug(plan), baseline_dir, steps, runner, again, whole)
            )
        together = try_fix.combined(tried) if args.fix == "all" and load is None else None
        if together is not None:
            print(f"pinchpoint try: together: {together.fix} ...", file=sys.stderr)
            tried.append(try_fix.run_plan(together, out / "together", baseline_dir, steps, runner, again))
        baseline_steps = len(_steady(baseline_dir))
        doc = try_fix.try_doc(
            command,
            baseline_dir,
            steps,
            tried,
            baseline_steps,
            _history_id(report, baseline_ref),
            runner.cwd_writes(),
            load=_served(load) if load is not None else None,
        )
        _write_json(out / "try.json", doc)
        if args.json:
            _write_json(Path(args.json), doc)
        from pinchpoint.report.try_terminal import render_try

        render_try(doc, report, sys.stdout)
        print(f"pinchpoint try: runs in {out} (table: {out / 'try.json'})", file=sys.stderr)
        measured = [t for t in tried if t.speedup is not None]
        return 0 if measured or all(t.plan.cannot is not None for t in tried) else FAILED_EXIT


def _baseline(
    runner: _Runs, baseline_dir: Path, baseline_ref: str | None, load: LoadDriver | None, steps: int
) -> tuple[ReportDoc | None, int]:
    """The baseline's report: a recorded run's, or one run now (under the load, or for `steps` steady
    steps); (None, exit code) when that run failed."""
    from pinchpoint.pipeline import try_fix

    if baseline_ref is not None:
        from pinchpoint.pipeline.resolve import report_of_dir

        return report_of_dir(baseline_dir), 0
    if load is not None:
        print(f"pinchpoint try: baseline (serving {_served(load)}) ...", file=sys.stderr)
        code, got, why = runner(baseline_dir, {}, {})
    else:
        print(f"pinchpoint try: baseline ({steps} steady steps) ...", file=sys.stderr)
        code, got, why = runner(baseline_dir, *try_fix.trial_spec(None, steps))
    if got is None or code != 0:
        print(
            f"pinchpoint try: the baseline run failed ({why or f'exit code {code}'}); "
            f"nothing to compare (run directory {baseline_dir})",
            file=sys.stderr,
        )
        return None, code or FAILED_EXIT
    return got, 0


def _served(load: LoadDriver) -> str:
    return f"{load.plan.rate:g} requests a second for {load.plan.duration_s:g} s"


def _history_id(report: ReportDoc, ref: str | None) -> int | None:
    if report.history_id is not None:
        return report.history_id
    return int(ref.lstrip("#")) if ref is not None and ID.fullmatch(ref) else None


def _steady(run_dir: Path) -> Sequence[int]:
    from pinchpoint.pipeline.resolve import load_side

    try:
        return load_side(str(run_dir)).step_ns
    except PinchpointError:
        return ()


def _write_json(path: Path, doc: TryDoc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc.to_dict(), indent=1) + "\n")


CWD_WRITES_SHOWN = 20


class _Runs:
    """Runs the command for `try`, and keeps what each run wrote under the working directory. Once the
    baseline (run here, in the working directory, as the user's program runs) has written files there,
    every later run gets a scratch copy of the directory as its own (`pipeline/scratch.py`)."""

    def __init__(
        self, command: list[str], out: Path, baseline_dir: Path, load: LoadDriver | None = None
    ) -> None:
        from pinchpoint.pipeline.written import snapshot

        self.command, self.out, self.baseline_dir, self.load = command, out, baseline_dir, load
        self.cwd = Path.cwd()
        self.wrote: dict[str, list[str] | None] = {}
        self.scratch: dict[str, str] = {}
        self._last = snapshot(self.cwd, skip=(out,))  # the working directory after the previous run

    def __call__(
        self, run_dir: Path, env: Mapping[str, str], agent: AgentAsk
    ) -> tuple[int, ReportDoc | None, str | None]:
        from pinchpoint.capture.appliers import TRY_ENV
        from pinchpoint.capture.launcher import launch
        from pinchpoint.pipeline.rundir import report_run_dir
        from pinchpoint.pipeline.written import snapshot, written

        workdir = self._workdir(run_dir)
        env = {**env, TRY_ENV: json.dumps(dict(agent))}
        driver = self.load.fresh(run_dir) if self.load is not None else None
        if driver is not None:
            env = {**env, **served_env()}
        alongside = driver.start if driver is not None else None
        result = launch(self.command, run_dir, extra_env=env, mode="try", cwd=workdir, alongside=alongside)
        if driver is not None:
            write_load(driver, run_dir)
            result = replace(result, exit_code=driver.exit_code(result.exit_code))
            if driver.error is not None:
                return result.exit_code, None, f"--load: {driver.error}"
        after = snapshot(self.cwd, skip=(self.out,))
        self.wrote[str(run_dir)] = written(self._last, after)
        self._last = after
        if not result.started:
            return 127, None, f"could not start the program: {result.error}"
        try:
            return result.exit_code, report_run_dir(run_dir), None
        except PinchpointError as exc:
            return result.exit_code, None, str(exc)

    def _workdir(self, run_dir: Path) -> Path | None:
        from pinchpoint.pipeline.scratch import farm

        base = self.wrote.get(str(self.baseline_dir))
        if run_dir == self.baseline_dir or not base:
            return None
        try:
            path = farm(self.cwd, self.out / "scratch" / run_dir.name, base, skip=(self.out,))
        except OSError:
            return None
        self.scratch[str(run_dir)] = str(path)
        return path

    def cwd_writes(self) -> CwdWrites:
        """What the runs wrote under the working directory: the baseline's own outputs (as the program
        writes them), and anything the scratch runs still wrote there."""
        from pinchpoint.report.try_doc import CwdWrites

        if any(files is None for files in self.wrote.values()):
            return CwdWrites(checked=False, files=(), count=0, scratch=False, leaked_count=0)
        base = self.wrote.get(str(self.baseline_dir))
        files = sorted({f for d, got in self.wrote.items() if d not in self.scratch for f in got or ()})
        leaked = sorted({f for d, got in self.wrote.items() if d in self.scratch for f in got or ()})
        return CwdWrites(
            checked=True,
            files=tuple(files[:CWD_WRITES_SHOWN]),
            count=len(files),
            scratch=bool(self.scratch),
            scratch_dir=str(self.out / "scratch") if self.scratch else None,
            reused=base is None,
            leaked=tuple(leaked[:CWD_WRITES_SHOWN]),
            leaked_count=len(leaked),
        )


def _recorded(ref: str) -> Path:
    from pinchpoint.pipeline.resolve import run_dir_of

    path = run_dir_of(ref)
    if not (path / "report.json").is_file() or not (path / "meta.json").is_file():
        raise UsageError(f"{ref}: not a run directory with a report (run `pinchpoint run` first)")
    return path


def _out_dir(out: str | None, command: list[str], force: bool) -> Path:
    if out:
        path = Path(out)
        if path.exists() and any(path.iterdir()):
            if not force:
                raise UsageError(f"{path} already exists; pass --force to overwrite it or choose another -o")
            shutil.rmtree(path)
        return path
    name = next((Path(p).stem for p in command[1:] if not p.startswith("-")), "run") if command else "run"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("pinchpoint-runs") / f"try-{name}-{stamp}"


ID = re.compile(r"#?\d+")


def parse_try_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """`try`'s own options, then the command after `--` (or a script), or a recorded run."""
    from pinchpoint.cli.run_cmd import split_run_args

    rest = list(argv[1:])
    ours: list[str] = []
    i = 0
    while i < len(rest) and rest[i] != "--" and rest[i].startswith("-"):
        take = 2 if rest[i] in VALUE_OPTIONS else 1
        ours.extend(rest[i : i + take])
        i += take
    tail = rest[i:]
    baseline_ref: str | None = None
    target: list[str] = []
    if tail[:1] and tail[0] != "--" and (ID.fullmatch(tail[0]) or (Path(tail[0]) / "meta.json").is_file()):
        baseline_ref = tail[0]
    elif tail:
        _, target = split_run_args(tail)
    ns = parser.parse_args(["try", *ours])
    if baseline_ref is not None:
        meta = json.loads((_recorded(baseline_ref) / "meta.json").read_text())
        target = [str(c) for c in meta.get("command") or []]
        if not target:
            raise UsageError(f"{baseline_ref}: its meta.json has no command to run again")
    if not target and not getattr(ns, "help", False):
        raise UsageError("nothing to try: pinchpoint try -- COMMAND ... (or pinchpoint try RUN_DIR|ID)")
    if target and shutil.which(target[0]) is None and not Path(target[0]).exists():
        raise UsageError(f"command not found: {target[0]}")
    ns.target, ns.baseline_ref = target, baseline_ref
    return ns
