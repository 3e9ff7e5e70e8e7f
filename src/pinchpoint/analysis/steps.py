"""Step statistics and the exposed-time breakdown of a rank's steps.

Measured phases may nest (a `torch.save` inside a top-level module call) or overlap; each instant of
a step goes to the highest-priority phase covering it (`PHASE_PRIORITY`, as XProf and the TensorBoard
plugin attribute exposed time), and what no phase covers is `host_other`. So the breakdown sums to 1.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pinchpoint.stats.quantiles import nearest_rank
from pinchpoint.trace.run import HOST_OTHER, PHASE_PRIORITY, Phase, RankData, Role, Run, Step, StepKind

WARMUP_STEPS = 2
"""Leading steps left out of statistics: first-call allocation, kernel selection, lazy init."""

_PRIORITY = {p: i for i, p in enumerate(PHASE_PRIORITY)}


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStats:
    kind: StepKind
    total_steps: int
    count: int
    """Steps used for statistics (after warm-up, outside the op window)."""
    median_ns: int
    p90_ns: int
    mean_ns: float
    breakdown: Mapping[str, float] = field(default_factory=dict)
    """Exposed fraction of step time per phase name plus `host_other`; sums to 1."""
    phase_ns: Mapping[str, float] = field(default_factory=dict)
    """Mean exposed nanoseconds per step per phase name plus `host_other`."""
    start_ns: int = 0
    end_ns: int = 0
    """Span of the steps used, for matching system samples."""
    main_cpu_fraction: float | None = None
    """Main thread's on-CPU time / step time."""
    main_runq_fraction: float | None = None
    """Main thread's time waiting for a CPU / step time."""
    device_timed: bool = False
    """median/p90/mean are the steps as the GPU ran them (CUDA events); `breakdown` and `phase_ns` stay
    the host's view (what the host did while enqueueing), over the host's step time."""
    host_median_ns: int = 0
    """The host's median step (equal to `median_ns` unless `device_timed`)."""
    host_mean_ns: float = 0.0
    """The host's mean step: what `breakdown` fractions are fractions of."""
    eval_steps: int = 0
    """Evaluation batches run inside a training run (their own steps, left out of the statistics)."""
    phase_median_ns: Mapping[str, float] = field(default_factory=dict)
    """Median exposed nanoseconds per step per phase: a typical step's, untouched by the odd step that
    also evaluates or saves."""
    near_window_phase_median_ns: Mapping[str, float] = field(default_factory=dict)
    """The same medians over the steady steps nearest the op window (`NEAR_WINDOW_STEPS`): what the
    window's own measurements compare with. A run whose steps drift (memory that grows, a machine whose
    load comes and goes) has a median over all steps that the window's few steps never saw. Empty when
    the run has no op window."""
    window_compute_min_ns: float = 0.0
    """The shortest forward + backward + optimizer among the op window's own steps (0 without a window).
    Those steps ran every op under the recorder, so each holds at least its large ops plus the true
    per-op overhead: a bound on the overhead measured at the window's moment (the shortest, since one
    window step may pay a first-use cost such as an import)."""
    compute_spread_ns: float = 0.0
    """Interquartile range of forward + backward + optimizer over the steady steps: how far one step's
    compute strays from another's here (load coming and going, drift). The op window measures a few
    steps at one moment; a difference between it and the typical step smaller than this is noise."""

    def share(self, phase: str) -> float:
        return float(self.breakdown.get(phase, 0.0))


def exposed_by_phase(step: Step) -> dict[str, int]:
    """Exposed nanoseconds per phase name (and host_other) within one step."""
    cuts = {step.start_ns, step.end_ns}
    clipped = []
    for iv in step.intervals:
        s, e = max(iv.start_ns, step.start_ns), min(iv.end_ns, step.end_ns)
        if e > s:
            clipped.append((s, e, iv.phase))
            cuts.update((s, e))
    points = sorted(cuts)
    out: dict[str, int] = {}
    covered = 0
    for a, b in itertools.pairwise(points):
        best: Phase | None = None
        for s, e, ph in clipped:
            if s <= a and e >= b and (best is None or _PRIORITY[ph] < _PRIORITY[best]):
                best = ph
        if best is not None:
            out[best.value] = out.get(best.value, 0) + (b - a)
            covered += b - a
    out[HOST_OTHER] = step.dur_ns - covered
    return out


def steady_steps(steps: Sequence[Step]) -> list[Step]:
    """Steps for statistics: after warm-up, outside the op window and the trials, not disturbed by
    another process's load (`analysis/load.py`), of the run's dominant kind."""
    whole = [s for s in steps if not s.partial and s.dur_ns > 0 and not s.trial and not s.disturbed]
    usable = [s for s in whole[WARMUP_STEPS:] if not s.profiled and not s.settling and not s.compiled]
    if not usable:
        usable = [s for s in whole if not s.profiled] or whole or [s for s in steps if s.dur_ns > 0]
    if not usable:
        return []
    kinds: dict[StepKind, int] = {}
    for s in usable:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    # A training run is about its training steps, however many evaluation batches it also ran.
    kind = StepKind.TRAIN if StepKind.TRAIN in kinds else max(kinds, key=lambda k: kinds[k])
    return [s for s in usable if s.kind is kind]


NEAR_WINDOW_STEPS = 8
"""Steady steps nearest the op window (by step index, either side) that window-vs-run comparisons read."""


COMPUTE_PHASES = (Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value)
"""The phases whose time is the model's own work (forward, backward, the update)."""


def _phase_medians(exposed: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """Median exposed ns per phase over steps' `exposed_by_phase` (a step without the phase counts as 0)."""
    per_step: dict[str, list[int]] = {}
    for e in exposed:
        for name, ns in e.items():
            per_step.setdefault(name, []).append(ns)
    return {
        k: float(nearest_rank(sorted(v + [0] * (len(exposed) - len(v))), 0.5)) for k, v in per_step.items()
    }


def _compute_ns(exposed: Mapping[str, int]) -> float:
    return float(sum(exposed.get(p, 0) for p in COMPUTE_PHASES))


def _compute_spread(exposed: Sequence[Mapping[str, int]]) -> float:
    """p75 - p25 of the steps' forward + backward + optimizer time (0 for fewer than 4 steps)."""
    if len(exposed) < 4:
        return 0.0
    compute = sorted(int(_compute_ns(e)) for e in exposed)
    return float(nearest_rank(compute, 0.75) - nearest_rank(compute, 0.25))


def _near_window(steps: Sequence[Step], window: Sequence[Step]) -> list[int]:
    """Positions in `steps` of the `NEAR_WINDOW_STEPS` steps nearest the window (by step index)."""
    if not window:
        return []
    lo, hi = min(s.index for s in window), max(s.index for s in window)

    def distance(i: int) -> int:
        index = steps[i].index
        return lo - index if index < lo else index - hi

    return sorted(range(len(steps)), key=distance)[:NEAR_WINDOW_STEPS]


DEVICE_TIMED_MIN = 0.8
"""Steps are timed on the GPU when at least this share of the steady steps has a device duration."""


def step_stats(rank: RankData) -> StepStats | None:
    steps = steady_steps(rank.steps)
    if not steps:
        return None
    host = sorted(s.dur_ns for s in steps)
    total = sum(host)
    device = [s.device_ns for s in steps if s.device_ns is not None]
    device_timed = len(device) >= DEVICE_TIMED_MIN * len(steps)
    durs = sorted(device) if device_timed else host
    timed_total = sum(durs)
    exposed = [exposed_by_phase(s) for s in steps]
    sums: dict[str, int] = {}
    for e in exposed:
        for name, ns in e.items():
            sums[name] = sums.get(name, 0) + ns
    window = [s for s in rank.steps if s.profiled and not s.partial]
    cpu = [s.cpu_ns for s in steps if s.cpu_ns is not None]
    runq = [s.runq_ns for s in steps if s.runq_ns is not None]
    return StepStats(
        kind=steps[0].kind,
        total_steps=sum(1 for s in rank.steps if not s.partial and s.kind is steps[0].kind),
        count=len(steps),
        median_ns=nearest_rank(durs, 0.5),
        p90_ns=nearest_rank(durs, 0.9),
        mean_ns=timed_total / len(durs),
        breakdown={k: v / total for k, v in sums.items()} if total else {},
        phase_ns={k: v / len(steps) for k, v in sums.items()},
        start_ns=min(s.start_ns for s in steps),
        end_ns=max(s.end_ns for s in steps),
        main_cpu_fraction=sum(cpu) / total if len(cpu) == len(steps) and total else None,
        main_runq_fraction=sum(runq) / total if len(runq) == len(steps) and total else None,
        device_timed=device_timed,
        host_median_ns=nearest_rank(host, 0.5),
        host_mean_ns=total / len(steps),
        phase_median_ns=_phase_medians(exposed),
        near_window_phase_median_ns=_phase_medians([exposed[i] for i in _near_window(steps, window)]),
        compute_spread_ns=_compute_spread(exposed),
        window_compute_min_ns=min((_compute_ns(exposed_by_phase(s)) for s in window), default=0.0),
        eval_steps=sum(1 for s in rank.steps if s.kind is StepKind.EVAL and not s.partial),
    )


def steady_step_ns(rank: RankData) -> tuple[int, ...]:
    """The steady steps' durations in run order, as `step_stats` times them (on the GPU when it does)."""
    steps = steady_steps(rank.steps)
    device = [s.device_ns for s in steps if s.device_ns is not None]
    if steps and len(device) >= DEVICE_TIMED_MIN * len(steps):
        return tuple(device)
    return tuple(s.dur_ns for s in steps)


HOW_TO_MARK_STEPS = (
    "mark them: `with pinchpoint.profile() as prof:` around the loop and `prof.step()` at each step's end, "
    "or the callbacks in pinchpoint.integrations (Lightning, transformers Trainer)"
)


def why_no_steps(run: Run) -> str | None:
    """None when some rank has whole steps; else what pinchpoint saw instead, and how to mark steps."""
    if any(not s.partial for r in run.ranks for s in r.steps):
        return None
    mains = [p for r in run.ranks for p in r.processes if p.role is Role.MAIN]
    if not mains:
        return (
            "no step was recorded: no process of the program imported torch where pinchpoint could attach "
            "(is it a PyTorch program? does it start its Python processes through an unknown launcher?)"
        )
    seen: dict[Phase, int] = {}
    for r in run.ranks:
        for s in r.steps:
            for iv in s.intervals:
                seen[iv.phase] = seen.get(iv.phase, 0) + 1
    calls = ", ".join(f"{n} {p.value} interval{'s' * (n != 1)}" for p, n in seen.items()) or "no model call"
    return (
        f"no step was recorded: torch was imported, and pinchpoint saw {calls} but no step end "
        "(an optimizer step, a backward followed by the next batch, or a model call under no_grad); "
        + HOW_TO_MARK_STEPS
    )
