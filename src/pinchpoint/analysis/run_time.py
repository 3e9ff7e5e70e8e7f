"""Where the whole run's wall clock went, not only its training steps: start-up, the steps of each
kind, what ran between steps, and shutdown.

Training steps were 40-90% of seven real programs' runs: a PPO library's rollouts (2,048 environment
steps between updates) were 60% of its run, a graph example's evaluation passes half of its. The
segments are read on the first rank, on the monotonic clock the launcher and the agent share: from the
launcher's start to the first step (start-up: interpreter, imports, data and model built), each step
by its kind, the gaps between steps that no step covered, and from the last step to the program's end
(shutdown). They partition the run, so what they cannot name is the gaps: `between steps`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.trace.run import Phase, RankData, RunMeta, StepKind

SEGMENTS = (
    "start-up",
    "training steps",
    "evaluation and rollouts",
    "inference",
    "marked steps",
    "pinchpoint's probes",
    "between steps",
    "shutdown",
)
# (no-grad, eval-mode calls of a model that also trains: an evaluation pass, or an RL library's rollouts)
KIND_SEGMENT = {
    StepKind.TRAIN: "training steps",
    StepKind.EVAL: "evaluation and rollouts",
    StepKind.INFERENCE: "inference",
    StepKind.EXPLICIT: "marked steps",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    name: str
    ns: int
    count: int = 0
    """Steps in it (0 for start-up, shutdown and the gaps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTime:
    wall_ns: int
    segments: tuple[Segment, ...]
    """In `SEGMENTS` order, the empty ones left out."""
    checkpoint_ns: int = 0
    """Of the steps, time inside `torch.save`."""
    pinchpoint_ns: int = 0
    """Of the training steps, those pinchpoint ran its op window and trials in."""
    ended: bool = True
    """The program's end was recorded (else the run is read to its last step)."""

    def share(self, name: str) -> float:
        return next((s.ns for s in self.segments if s.name == name), 0) / max(1, self.wall_ns)

    @property
    def largest(self) -> Segment:
        return max(self.segments, key=lambda s: s.ns)


def run_time(meta: RunMeta, rank: RankData) -> RunTime | None:
    """The run's segments on `rank`; None without a start clock or steps (another profiler's files,
    an attach: its start is not the program's)."""
    steps = sorted((s for s in rank.steps if s.dur_ns > 0), key=lambda s: s.start_ns)
    if not meta.monotonic_ns or not steps or meta.mode == "attach":
        return None
    start, first, last = meta.monotonic_ns, steps[0].start_ns, max(s.end_ns for s in steps)
    ended = meta.ended_ns is not None and meta.ended_ns >= last
    end = meta.ended_ns if ended and meta.ended_ns is not None else last
    if first < start:
        return None  # (clocks that do not line up: another machine's run directory)
    by_kind: dict[str, list[int]] = {}
    gaps, probes, reach = 0, 0, first
    for s in steps:
        by_kind.setdefault(KIND_SEGMENT.get(s.kind, "marked steps"), []).append(s.dur_ns)
        gap = max(0, s.start_ns - reach)
        if s.profiled or s.trial:
            probes += gap  # (the op window opened or closed, its probes ran, a trial changed a setting)
        else:
            gaps += gap
        reach = max(reach, s.end_ns)
    named = {
        "start-up": (first - start, 0),
        **{name: (sum(d), len(d)) for name, d in by_kind.items()},
        "pinchpoint's probes": (probes, 0),
        "between steps": (gaps, 0),
        "shutdown": (end - last, 0),
    }
    segments = tuple(
        Segment(name=n, ns=named[n][0], count=named[n][1]) for n in SEGMENTS if named.get(n, (0,))[0] > 0
    )
    save = sum(
        min(iv.end_ns, s.end_ns) - max(iv.start_ns, s.start_ns)
        for s in steps
        for iv in s.intervals
        if iv.phase is Phase.CHECKPOINT_IO and iv.end_ns > iv.start_ns
    )
    ours = sum(s.dur_ns for s in steps if s.kind is StepKind.TRAIN and (s.profiled or s.trial))
    return RunTime(
        wall_ns=end - start, segments=segments, checkpoint_ns=max(0, save), pinchpoint_ns=ours, ended=ended
    )
