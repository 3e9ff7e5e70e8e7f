"""`pinchpoint try` for a fix that changes the whole run rather than its steady steps (torch.compile's
recompiles: what the fix removes is compilation, which the steady steps leave out). Baseline and trial
each run to the program's end, twice, in A B B A order, and their loops (the wall clock less start-up,
shutdown and pinchpoint's own work: what the finding's gain is read on) are compared: the ratio of the
sums, the interval from the pairs' extremes. A server under `try --load` is measured the same way, each run
under the same load, on the seconds a request its throughput gives (`request_s`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pinchpoint.diagnosis.whole_run import ONCE
from pinchpoint.pipeline.try_fix import Plan, Runner, SecondBaseline, Tried, lead
from pinchpoint.pipeline.try_fix import run_plan as run_steady
from pinchpoint.report.report_doc import ReportDoc

PAIRS = 2


def program_s(report: ReportDoc | None) -> float | None:
    """The run's loop in seconds (`whole_run.program_ns`'s segments); None without a whole-run account."""
    whole = report.run_time if report is not None else None
    if whole is None or not whole.segments:
        return None
    return sum(g.s for g in whole.segments if g.name not in ONCE)


def request_s(report: ReportDoc | None) -> float | None:
    """A served run's seconds per answered request (1 / throughput) under its load; None without one."""
    s = report.serving if report is not None else None
    if s is None or s.error is not None or s.ok <= 0 or s.throughput_rps <= 0:
        return None
    return 1.0 / s.throughput_rps


class FullBaselines:
    """The baseline run to its end (no step budget), at most `PAIRS` times, shared by the plans; timed by
    `measure` (the loop's seconds; a server's seconds a request). `first`: a baseline already run so."""

    def __init__(
        self,
        out: Path,
        runner: Runner,
        say: Callable[[str], None] | None = None,
        measure: Callable[[ReportDoc | None], float | None] = program_s,
        first: ReportDoc | None = None,
    ) -> None:
        self.out, self.runner, self.measure = out, runner, measure
        self.say = say or (lambda _line: None)
        self.times: list[float | None] = [measure(first)] if first is not None else []

    def get(self, i: int) -> float | None:
        while len(self.times) <= i:
            n = len(self.times)
            self.say(f"the baseline to its end ({n + 1} of {PAIRS}) ...")
            code, report, _ = self.runner(self.out / f"baseline-whole-{n + 1}", {}, {})
            self.times.append(self.measure(report) if code == 0 else None)
        return self.times[i]


def run_plan(
    plan: Plan,
    run_dir: Path,
    baseline_dir: Path,
    steps: int,
    runner: Runner,
    again: SecondBaseline | None,
    whole: FullBaselines,
) -> Tried:
    """A plan measured on whole runs where it changes the whole run, else on steady steps."""
    if plan.whole_run and plan.cannot is None:
        return whole_run_trial(plan, run_dir, runner, whole)
    return run_steady(plan, run_dir, baseline_dir, steps, runner, again)


def whole_run_trial(plan: Plan, run_dir: Path, runner: Runner, baselines: FullBaselines) -> Tried:
    """A B B A: baseline, trial, trial, baseline, each to the program's end."""
    start = time.monotonic()
    before: list[float] = []
    after: list[float] = []
    last: ReportDoc | None = None
    for i, order in enumerate(("BT", "TB")):
        for side in order:
            if side == "B":
                got = baselines.get(i)
                if got is None:
                    return Tried(plan=plan, run_dir=run_dir, error="the baseline run to its end failed")
                before.append(got)
                continue
            where = run_dir if i == 0 else run_dir.with_name(run_dir.name + "-again")
            code, report, why = runner(where, dict(plan.env), dict(plan.agent))
            took = baselines.measure(report)
            if report is None or code != 0 or took is None or took <= 0:
                return Tried(
                    plan=plan,
                    run_dir=run_dir,
                    error=why or f"the program exited with code {code} under this fix",
                )
            after.append(took)
            last = report
    speedup = sum(before) / sum(after)
    low, high = min(before) / max(after), max(before) / min(after)
    return Tried(
        plan=plan,
        run_dir=run_dir,
        speedup=speedup,
        interval=(low, high),
        significant=low > 1.0 or high < 1.0,
        next_limit=lead(last) if last is not None else None,
        steps=0,
        pairs=PAIRS,
        wall_s=time.monotonic() - start,
        whole_run=True,
    )
