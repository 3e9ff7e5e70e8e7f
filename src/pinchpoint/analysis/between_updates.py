"""What the trained model's calls between its updates are made of: evaluation passes over a DataLoader,
or rollouts (a policy-gradient loop's environment steps, one policy forward each).

The agent writes each no-grad, eval-mode call of a model that also trains as a step of its own (and
calls before the first update as inference steps): a call's step runs from the previous step's end to
the call's end, so it holds what led to the call (fetching a batch, stepping an environment) as well
as the forward. A rollout's calls take no batch from a DataLoader; an evaluation pass's do.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from dataclasses import dataclass

from pinchpoint.trace.run import Phase, RankData, Step, StepKind
from pinchpoint.trace.stacks import TimedSample

FED_MIN = 0.5
"""Calls at least half of which took their batch from a DataLoader are evaluation passes; the others
are rollouts (nothing feeds them but the program's own code: an environment)."""
TORCH_DIR = "/torch/"
MIN_SAMPLES = 10
"""The main thread's samples inside these calls needed to split their time between torch and the rest."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BetweenUpdates:
    kind: str
    """"rollouts" or "evaluation"."""
    calls: int
    passes: int
    """Runs of calls with no training step between them (a rollout, an evaluation pass)."""
    ns: int
    """Wall time of the calls' steps (what led to each call, and the call)."""
    forward_ns: int
    data_wait_ns: int
    median_call_ns: int
    batched_frac: float | None = None
    """Of the main thread's sampled wall time inside them, the share a batched call would pay once for
    many: inside torch (module calls, distributions) or on the loop's own lines (building tensors from
    lists), not in what the loop calls besides torch (an environment's step); None with too few samples."""
    samples: int = 0
    after_pass_ns: int = 0
    """The first training step after each pass, beyond the median training step, summed: work over the
    pass's transitions one by one (advantages, returns), which also shortens with fewer, wider calls."""

    @property
    def calls_per_pass(self) -> float:
        return self.calls / max(1, self.passes)


def between_updates(rank: RankData, samples: list[TimedSample] | None = None) -> BetweenUpdates | None:
    """The calls between updates on `rank` (None where it has none, or no training steps), with
    `samples` (the main thread's, in time) splitting their time between torch and the rest."""
    steps = sorted((s for s in rank.steps if s.dur_ns > 0 and not s.partial), key=lambda s: s.start_ns)
    if not any(s.kind is StepKind.TRAIN for s in steps):
        return None
    between = [outside_training(s, True) for s in steps]
    calls = [s for s, b in zip(steps, between, strict=True) if b]
    if not calls:
        return None
    passes = sum(1 for i, b in enumerate(between) if b and (i == 0 or not between[i - 1]))
    ns = sum(s.dur_ns for s in calls)
    wait = sum(s.phase_ns(Phase.DATA_WAIT) for s in calls)
    fed = sum(1 for s in calls if any(iv.phase is Phase.DATA_WAIT for iv in s.intervals))
    batched, seen = _batched_frac(calls, samples or [])
    return BetweenUpdates(
        kind="evaluation" if fed >= FED_MIN * len(calls) else "rollouts",
        calls=len(calls),
        passes=passes,
        ns=ns,
        forward_ns=sum(s.phase_ns(Phase.FORWARD) for s in calls),
        data_wait_ns=wait,
        median_call_ns=int(statistics.median(s.dur_ns for s in calls)),
        batched_frac=batched,
        samples=seen,
        after_pass_ns=_after_passes(steps),
    )


def outside_training(step: Step, trains: bool) -> bool:
    """An evaluation or rollout call: an eval step, or an inference step of a program that trains."""
    return step.kind is StepKind.EVAL or (trains and step.kind is StepKind.INFERENCE)


def _after_passes(steps: list[Step]) -> int:
    """Summed over the passes, the first training step after each beyond the median training step."""
    train = [s.dur_ns for s in steps if s.kind is StepKind.TRAIN]
    median = statistics.median(train) if train else 0
    out = 0
    for before, step in itertools.pairwise(steps):
        if outside_training(before, True) and step.kind is StepKind.TRAIN:
            out += max(0, int(step.dur_ns - median))
    return out


def _batched_frac(calls: list[Step], samples: list[TimedSample]) -> tuple[float | None, int]:
    """The share of the calls' sampled time a batched call pays once: the loop is the function that
    calls into torch most often; a sample inside torch below it, or on its own lines, is batched work,
    one in another function it calls (the environment) is not."""
    starts = [s.start_ns for s in calls]
    inside: list[TimedSample] = []
    for t in samples:
        i = bisect.bisect_right(starts, t.t_ns) - 1
        if i >= 0 and t.t_ns < calls[i].end_ns:
            inside.append(t)
    callers: dict[tuple[str, str], int] = {}
    for t in inside:
        frames = t.stack.frames
        first = next((k for k, f in enumerate(frames) if TORCH_DIR in f.file), None)
        if first:
            key = (frames[first - 1].file, frames[first - 1].function)
            callers[key] = callers.get(key, 0) + 1
    total = sum(t.wall_ns for t in inside)
    if len(inside) < MIN_SAMPLES or total <= 0 or not callers:
        return None, len(inside)
    loop = max(callers, key=lambda k: callers[k])
    batched = 0
    for t in inside:
        frames = t.stack.frames
        at = max((k for k, f in enumerate(frames) if (f.file, f.function) == loop), default=None)
        below = frames[at + 1 :] if at is not None else frames
        if at is not None and (not below or any(TORCH_DIR in f.file for f in below)):
            batched += t.wall_ns
    return batched / total, len(inside)
