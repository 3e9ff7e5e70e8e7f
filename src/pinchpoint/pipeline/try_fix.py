"""`pinchpoint try`: run the program as a baseline, then again with each fix applied by pinchpoint (no
code changed), each for the same number of steady steps, and compare them as `pinchpoint diff` does.

A fix is applied from its finding's `fix_kind` and `fix_params` (report.json), by the launcher's
environment (glibc's thresholds, OMP_NUM_THREADS) and the agent (`capture/appliers.py`: the thread
count held, DataLoader arguments given to every loader). A finding whose fix needs the program's code
is listed with its snippet, never faked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pinchpoint.errors import PinchpointError
from pinchpoint.pipeline.fixes import AgentAsk, ways_of
from pinchpoint.report.report_doc import FindingInfo, ReportDoc
from pinchpoint.report.try_doc import SCHEMA, CwdWrites, TriedFix, TryDoc

if TYPE_CHECKING:
    from pinchpoint.compare.diff import RunSide

DEFAULT_STEPS = 30
"""Steady steps each run measures: the ratio test's interval is within a few percent at 30 on this
machine's ±10% step noise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """One fix to try: what it changes, and how pinchpoint applies it."""

    id: str
    """The finding it serves."""
    fix: str
    """What is changed, short: `threads=1`, `num_workers=2`, `glibc thresholds`."""
    applied_how: str
    env: Mapping[str, str] = field(default_factory=dict)
    agent: AgentAsk = field(default_factory=dict)
    """What `$PINCHPOINT_TRY` asks the agent (besides the step budget)."""
    predicted: float | None = None
    stacked: bool = False
    """Several fixes together: `predicted` is `stacked_gain` of their measured gains."""
    stacked_how: str | None = None
    """Several fixes together: how `predicted` combined their gains (`stacked_gain`), in words."""
    floor: float | None = None
    """Several fixes together: the most one of them gained alone. Reading below it is in doubt: fixes
    that each paid rarely lose when stacked."""
    cannot: str | None = None
    """Why pinchpoint cannot apply it (the snippet shows the change): then nothing is run."""
    snippet: str | None = None
    whole_run: bool = False
    """The fix changes the whole run (compilations), not its steady steps: both sides run to the program's
    end and their program times are compared (`try_whole.py`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tried:
    plan: Plan
    run_dir: Path | None = None
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    significant: bool = False
    next_limit: str | None = None
    steps: int = 0
    error: str | None = None
    """One line: why this trial gave no measurement (the program failed under the fix, ...)."""
    pairs: int = 1
    """Baseline/trial pairs pooled: 2 when the first pair left doubt and both ran again (A B B A)."""
    history_id: int | None = None
    """The trial run's row in the history database (`pinchpoint diff`/`check` take it)."""
    wall_s: float = 0.0
    """How long the trial run took (the program's start-up included)."""
    not_again: str | None = None
    """Why a pair in doubt did not run again (it was tight, only far from the prediction, and long)."""
    doubt: str | None = None
    """Why the first pair was in doubt (`doubt()`), when it was."""
    whole_run: bool = False
    """Measured on the whole runs' program times, not on steady steps."""


def _plans(finding: FindingInfo) -> list[Plan]:
    """Each way pinchpoint knows to apply the finding's fix (`pipeline/fixes.py`), or one plan saying
    why it cannot; none where there is nothing to change (compute-bound: "time goes where it should")."""
    fid, snippet = finding.id, finding.snippet
    base = Plan(id=fid, fix="", applied_how="", predicted=finding.estimated_speedup, snippet=snippet)
    kind = finding.fix_kind
    ways, cannot = ways_of(kind or None, finding.fix_params or {})
    if ways:
        return [
            replace(base, fix=w.fix, applied_how=w.how, env=w.env, agent=w.agent, cannot=w.cannot,
                    snippet=None if w.cannot else snippet, whole_run=w.whole_run)
            for w in ways
        ]  # fmt: skip
    if finding.estimated_speedup <= 1.0 and not snippet:
        return []
    return [replace(base, fix=str(kind or fid), applied_how="-", cannot=cannot)]


def plans(report: ReportDoc) -> list[Plan]:
    """A plan per finding of the baseline (biggest predicted gain first), appliable or not."""
    return [p for f in report.findings for p in _plans(f)]


def select(all_plans: Sequence[Plan], which: str) -> list[Plan]:
    """`top`: the first fix pinchpoint can apply; `all`: each; `ID:FIX`: that finding's fix whose name
    starts with FIX (`memory.pressure:tcmalloc`); else the finding id (or its prefix), every fix of it."""
    if which == "all":
        return list(all_plans)
    if which == "top":
        first = next((p for p in all_plans if p.cannot is None), None)
        return [first] if first is not None else [p for p in all_plans[:1]]
    if ":" in which:  # one of a finding's fixes: `memory.pressure:tcmalloc`
        fid, fix = which.split(":", 1)
        return [p for p in all_plans if p.id == fid and p.fix.startswith(fix)]
    return [p for p in all_plans if p.id == which or p.id.startswith(which + ".")]


def combined(tried: Sequence[Tried]) -> Plan | None:
    """The fixes that paid, significantly, applied together (None when fewer than two paid)."""
    best: dict[str, Tried] = {}  # one fix a finding: the one that measured most (one malloc at a time)
    for t in tried:
        # (a whole-run fix was timed on other runs than the steady-step fixes: not stacked with them)
        paid_off = t.significant and (t.speedup or 0) > 1.0 and t.plan.cannot is None and not t.plan.whole_run
        if paid_off and (t.plan.id not in best or (t.speedup or 0) > (best[t.plan.id].speedup or 0)):
            best[t.plan.id] = t
    paid = [t.plan for t in best.values()]
    if len(paid) < 2:
        return None
    predicted, how = stacked_gain([(t.plan.id, t.speedup or 1.0) for t in best.values()])
    env: dict[str, str] = {}
    agent: dict[str, object] = {}
    for p in paid:
        env.update(p.env)
        agent.update(p.agent)
    return Plan(
        id="+".join(p.id for p in paid),
        fix=" + ".join(p.fix for p in paid),
        applied_how="; ".join(p.applied_how for p in paid),
        env=env,
        agent=agent,
        predicted=predicted,
        stacked=True,
        stacked_how=how,
        floor=max(t.speedup or 1.0 for t in best.values()),
    )


def part_of_step(finding_id: str) -> str:
    """The part of the step a finding's fix takes time from: its wait for data, its checkpoint writes,
    its exposed communication, or the compute (threads, allocator, precision, compile all speed up the
    same work)."""
    head = finding_id.split(".", 1)[0]
    return head if head in ("input", "io", "comm") else "compute"


MAX_STACKED = 20.0
"""Saved fractions that add up to more than 1 - 1/this leave too little step to trust the sum."""


def stacked_gain(gains: Sequence[tuple[str, float]]) -> tuple[float, str]:
    """What fixes that each gained `gains` (finding id, ×) alone should gain together, and how that was
    reckoned. Fixes of one part of the step speed up the same work: their gains multiply. Fixes of
    different parts each take their own time out of the same baseline step: the fractions they saved
    add (stacked_fixes.py on the avx512_bf16 EPYC: input ×1.64 and checkpoint ×1.34 alone, ×2.78
    together; multiplied ×2.20, added ×2.81)."""
    parts: dict[str, float] = {}
    for finding_id, gain in gains:
        part = part_of_step(finding_id)
        parts[part] = parts.get(part, 1.0) * max(gain, 1.0)
    product = 1.0
    for gain in parts.values():
        product *= gain
    if len(parts) == 1:
        return product, "their gains multiplied: they speed up the same work"
    left = 1.0 - sum(1.0 - 1.0 / gain for gain in parts.values())
    if left <= 1.0 / MAX_STACKED:  # they cannot all have taken different time: the measurements overlap
        return product, "their gains multiplied (the time they saved alone adds up to nearly the whole step)"
    how = "the time each saved alone, added: they take away different parts of the step"
    if len(parts) < len(gains):
        how += " (gains within one part multiplied)"
    return 1.0 / left, how


Runner = Callable[[Path, Mapping[str, str], AgentAsk], tuple[int, ReportDoc | None, str | None]]
"""(run directory, environment, what the agent applies) -> (exit code, report or None, why there is
no report). The entry point hands the agent its part (`capture/appliers.py` reads it)."""


def trial_spec(plan: Plan | None, steps: int) -> tuple[dict[str, str], dict[str, object]]:
    """The environment and the agent's part of one run: `plan` applied (None: the baseline), stopped
    after `steps` steady steps."""
    env = dict(plan.env) if plan is not None else {}
    return env, {**(dict(plan.agent) if plan is not None else {}), "stop_after": steps}


DOUBT_WIDTH = 1.25
"""A 99% interval wider than this (high / low) leaves the ratio to whichever run met the machine's slow
stretch: the pair runs again."""
DOUBT_AGREE = 1.25
"""A measurement this far (either way) from the baseline's own estimate runs again: one pair on a shared
machine can land on its slow stretch (the measurements behind the number: docs/decisions.md)."""


AGAIN_BUDGET_S = 300.0
"""A pair whose only doubt is its distance from the prediction runs again only when it took less than
this: `compute_math.py`'s 9 s steps made a tight ×47 pair (predicted ×18) re-run for 18 minutes."""


def doubt(t: Tried) -> str | None:
    """Why the first pair cannot be trusted alone ("noise", "wide", "below" the best of the fixes it
    stacks, "far" from the prediction), or None."""
    if t.speedup is None or t.interval is None:
        return None
    low, high = t.interval
    if not t.significant:
        return "noise"
    if low <= 0 or high / low > DOUBT_WIDTH:
        return "wide"
    if t.plan.floor is not None and t.speedup < t.plan.floor:
        return "below"
    p = t.plan.predicted
    return "far" if p is not None and p > 0 and not p / DOUBT_AGREE <= t.speedup <= p * DOUBT_AGREE else None


def doubtful(t: Tried) -> bool:
    return doubt(t) is not None


class SecondBaseline:
    """The baseline run once more, when a trial is in doubt (run at most once, shared by the plans)."""

    def __init__(
        self, run_dir: Path, steps: int, runner: Runner, say: Callable[[str], None] | None = None
    ) -> None:
        self.run_dir, self.steps, self.runner = run_dir, steps, runner
        self.say = say or (lambda _line: None)
        self._ran, self._ok = False, False

    def get(self) -> Path | None:
        if not self._ran:
            self._ran = True
            code, report, _ = self.runner(self.run_dir, *trial_spec(None, self.steps))
            self._ok = report is not None and code == 0
        return self.run_dir if self._ok else None


def _pooled(first: Path, second: Path) -> RunSide:
    from pinchpoint.compare.diff import RunSide
    from pinchpoint.pipeline.resolve import load_side

    a, b = load_side(str(first)), load_side(str(second))
    return RunSide(label=a.label, report=a.report, step_ns=a.step_ns + b.step_ns)


def run_plan(
    plan: Plan,
    run_dir: Path,
    baseline_dir: Path,
    steps: int,
    runner: Runner,
    again: SecondBaseline | None = None,
) -> Tried:
    """Run the program with `plan` applied and compare it with the baseline; when that pair is in
    doubt and `again` is given, run the trial and then the baseline once more and pool the pairs. (A
    whole-run plan goes through `try_whole.run_plan`.)"""
    if plan.cannot is not None:
        return Tried(plan=plan)
    first = _trial(plan, run_dir, baseline_dir, steps, runner)
    why = doubt(first)
    if again is None or why is None or first.run_dir is None:
        return first
    if why == "far" and 2 * first.wall_s > AGAIN_BUDGET_S:
        return replace(
            first,
            doubt=why,
            not_again=f"far from the prediction, but its interval is tight and the pair took "
            f"~{2 * first.wall_s:.0f} s, so it did not run again",
        )
    second_dir = run_dir.with_name(run_dir.name + "-again")
    low, high = first.interval or (0.0, 0.0)
    again.say(
        f"{plan.id}: {_x(first.speedup)} [{low:.2f}-{high:.2f}] "
        f"(predicted {_x(plan.predicted)}) is in doubt: the trial and the baseline run once more"
    )
    code, report, _ = runner(second_dir, *trial_spec(plan, steps))
    base2 = again.get() if report is not None and code == 0 else None
    if base2 is None:
        return first
    try:
        pooled = _compared(plan, run_dir, _pooled(baseline_dir, base2), _pooled(run_dir, second_dir), 2)
        return replace(pooled, history_id=first.history_id, doubt=why)
    except (PinchpointError, ValueError):
        return first


def _trial(plan: Plan, run_dir: Path, baseline_dir: Path, steps: int, runner: Runner) -> Tried:
    from pinchpoint.pipeline.resolve import load_side

    start = time.monotonic()
    code, report, why = runner(run_dir, *trial_spec(plan, steps))
    wall_s = time.monotonic() - start
    if report is None:
        return Tried(plan=plan, run_dir=run_dir, error=why or f"the program exited with code {code}")
    if code != 0:
        return Tried(plan=plan, run_dir=run_dir, error=f"the program exited with code {code} under this fix")
    if (draining := _still_draining(run_dir)) is not None:
        return Tried(plan=plan, run_dir=run_dir, error=draining)
    try:
        tried = _compared(plan, run_dir, load_side(str(baseline_dir)), load_side(str(run_dir)), 1)
        return replace(tried, history_id=report.history_id, wall_s=wall_s)
    except (PinchpointError, ValueError) as exc:
        return Tried(plan=plan, run_dir=run_dir, error=f"no comparison: {exc}")


def _still_draining(run_dir: Path) -> str | None:
    """Why a run that never reached its steady state cannot be compared: every step it measured drained
    what its loader's workers prefetched before the steps asked (`Step.settling`)."""
    from pinchpoint.ingest.rundir import read_run_dir

    try:
        steps = read_run_dir(run_dir).ranks[0].steps
    except (PinchpointError, IndexError):
        return None
    drained = [s.index for s in steps if s.settling]
    if not drained or any(
        s.index > max(drained) and s.kind.value == "train" and not s.partial and not s.trial for s in steps
    ):
        return None
    return (
        f"the run ended while its steps still drained the {len(drained)} batches its loader's workers had "
        "prefetched: it never reached its steady state (run it for more steps: --steps)"
    )


def _compared(plan: Plan, run_dir: Path, before: RunSide, after: RunSide, pairs: int) -> Tried:
    from pinchpoint.compare.diff import diff_runs

    d = diff_runs(before, after)
    return Tried(
        plan=plan,
        run_dir=run_dir,
        speedup=d.speedup,
        interval=(d.test.low, d.test.high),
        significant=d.test.significant,
        next_limit=lead(after.report),
        steps=d.test.n_after,
        pairs=pairs,
    )


def _x(v: float | None) -> str:
    return f"×{v:.2f}" if v is not None else "none"


def lead(report: ReportDoc) -> str | None:
    if not report.findings:
        return None
    f = report.findings[0]
    return f"{f.id} ({f.share:.0%})"


def slug(plan: Plan) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", plan.fix)[:60] or "fix"


def try_doc(
    command: Sequence[str],
    baseline_dir: Path,
    steps: int,
    tried: Sequence[Tried],
    baseline_steps: int,
    baseline_id: int | None = None,
    cwd_writes: CwdWrites | None = None,
    load: str | None = None,
) -> TryDoc:
    def row(t: Tried) -> TriedFix:
        applied = t.plan.cannot is None
        return TriedFix(
            id=t.plan.id,
            fix=t.plan.fix,
            applied_how=t.plan.applied_how if applied else None,
            applied=applied and t.error is None,
            cannot=t.plan.cannot,
            snippet=t.plan.snippet if not applied else None,
            speedup=round(t.speedup, 4) if t.speedup is not None else None,
            interval=tuple(round(v, 4) for v in t.interval) if t.interval is not None else None,
            significant=t.significant,
            predicted=round(t.plan.predicted, 3) if t.plan.predicted is not None else None,
            stacked=t.plan.stacked,
            stacked_how=t.plan.stacked_how,
            next_limit=t.next_limit,
            steps=t.steps,
            pairs=t.pairs,
            history_id=t.history_id,
            not_again=t.not_again,
            doubt=t.doubt,
            whole_run=True if t.whole_run else None,
            run_dir=str(t.run_dir) if t.run_dir is not None else None,
            error=t.error,
        )

    return TryDoc(
        schema=SCHEMA,
        command=tuple(command),
        baseline=str(baseline_dir),
        steps=steps,
        baseline_steps=baseline_steps,
        baseline_history_id=baseline_id,
        tried=tuple(row(t) for t in tried),
        cwd_writes=cwd_writes,
        load=load,
    )
