"""Every finding's gain on the whole run, so that time outside the training steps (rollouts, evaluation
passes) and time inside them are ranked on one scale.

A step finding's gain is of the step; the run is the steps plus the rest. A fix worth ×g on steps that
hold a share f of the run gains 1 / ((1 - f) + f / g) on it (×1.6 on steps that are 40% of the run is
×1.18). The scale changes no order among step findings (it is monotonic in g for one f); a finding
of the run (`Finding.of_run`) takes its place among them by its own gain on the run.
"""

from __future__ import annotations

from dataclasses import replace

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.run_time import PROBES, RunTime
from pinchpoint.diagnosis.finding import Category, Finding

ONCE = ("start-up", "shutdown", PROBES)
"""Left out of the run a gain is read on: start-up and shutdown come once whatever the run's length
(a short example's 2 s of imports are nothing in a day's training), pinchpoint's own work not at all
without it."""


def program_ns(whole: RunTime) -> int:
    """The run's loop: its wall clock less start-up, shutdown and pinchpoint's own work."""
    return max(1, sum(g.ns for g in whole.segments if g.name not in ONCE))


JUDGED = ("training steps", "marked steps", "inference")
"""The segment of the steps the step findings judge: the training steps where the run trains, else the
steps `prof.step()` marked, else the model's calls of an inference run."""


def judged_segment(whole: RunTime | None) -> str:
    """The name of the segment whose steps the step findings judge (`JUDGED`, the first the run has)."""
    names = {g.name for g in whole.segments} if whole is not None else set()
    return next((name for name in JUDGED if name in names), JUDGED[0])


def steps_share(whole: RunTime) -> float:
    """The judged steps' share of the run's loop."""
    judged = judged_segment(whole)
    steps = next((g.ns for g in whole.segments if g.name == judged), 0)
    return min(1.0, steps / program_ns(whole))


def on_the_run(step_gain: float, share: float) -> float:
    """A step fix's gain `step_gain` on a run whose steps hold `share` of it."""
    return 1.0 / max(1e-9, (1.0 - share) + share / max(1e-9, step_gain))


ONCE_A_RUN = frozenset({Category.RUN_STARTUP, Category.COMPILE_TIME})
"""Findings of time paid once a run whatever its length (start-up's building, a cold compile): priced
on the wall clock."""


def with_run_gains(findings: tuple[Finding, ...], runs: tuple[RankAnalysis, ...]) -> tuple[Finding, ...]:
    """Each step finding's gain on the whole run (where the run's wall clock is known), and the run's
    own findings placed among them by that gain; the step findings keep their order."""
    whole = runs[0].run_time if runs else None
    if whole is None:
        return findings
    share = steps_share(whole)
    steps = [
        f if f.of_run else replace(f, run_speedup=on_the_run(f.estimated_speedup, share)) for f in findings
    ]
    # (a stalled run's finding leads where the engine put it: it is not priced)
    ours = sorted(
        (f for f in steps if f.of_run and f.id is not Category.RUN_STALLED),
        key=lambda f: -f.estimated_speedup,
    )
    out = [f for f in steps if not f.of_run or f.id is Category.RUN_STALLED]
    loop = program_ns(whole) / max(1, whole.wall_ns)
    for f in ours:
        once = f.id in ONCE_A_RUN
        at = next(
            (
                i
                for i, g in enumerate(out)
                if g.id is not Category.RUN_STALLED
                and (g.share <= 0 or _wall_gain(g, share, loop if once else 1.0) < f.estimated_speedup)
            ),
            None,
        )
        out.insert(len(out) if at is None else at, f)
    return tuple(out)


def _wall_gain(f: Finding, share: float, loop: float) -> float:
    """The gain `f` is ordered by, on a run whose loop is `loop` of its wall clock (1.0: on the loop
    itself). Once-a-run findings are priced on the wall clock, as once-per-run time must be: the loop's
    findings are read on that scale when it is placed among them."""
    if f.id in ONCE_A_RUN:
        return f.estimated_speedup
    return on_the_run(_ordering_gain(f, share), loop)


def _ordering_gain(f: Finding, share: float) -> float:
    """The run gain a step finding is ordered by: without the other load where the report orders so."""
    if f.of_run:
        return f.estimated_speedup
    step = sum(f.unloaded) / 2 if f.unloaded is not None else f.estimated_speedup
    return on_the_run(step, share)
