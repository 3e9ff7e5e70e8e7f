"""A generation loop that recomputes its context: each model call takes the whole sequence so far (the
token ids grow by one a call) and its time grows with it. A KV cache keeps each layer's keys and
values, so a call after the first processes only the new token.

Read from the inference steps' `tokens` (the sequence length of each call's token ids) and durations:
a generation is a run of calls whose length grows by exactly one; the time of a call is fitted as
`base + per_token × tokens` over every such call (least squares), which measures the growth. With a
cache, a generation's first call (the prompt) costs what it costs now and each later call what a
one-token call costs: measured where the context probe replayed the loop's own call with its last token
alone (`capture/context_probe.py`; scaled to the run's speed by the run's own model calls of that length,
the calls alone: a step also holds the sampling, which a cache keeps), else read off the fitted line. The difference is what recomputing the context costs. The line alone
prices it low: a one-token call takes another kernel path (a small GPT's 1-token call 0.9 ms, its line's
intercept 1.4 ms here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.trace.generation import ContextCost
from pinchpoint.trace.step import Phase, Step, StepKind

MIN_RUN = 8
"""Calls in a row whose length grows by one before a run is a generation (not a coincidence)."""
NEAR = 8
"""The run's calls within this many tokens of the probe's length say how fast the run made that call."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recompute:
    generations: int
    calls: int
    """Model calls inside the generations (their first calls, the prompts, included)."""
    tokens: tuple[int, int]
    """The shortest and the longest context a call took."""
    checked: bool
    """Every call's ids were read back: each was the previous call's plus one (else lengths only: ids on
    a GPU, or gradients on)."""
    base_ns: float
    per_token_ns: float
    """The fitted growth: what each token of context adds to a call."""
    calls_ns: float
    """The generations' calls, summed as measured."""
    saved_ns: float
    """What a cache would take off them: each later call's context beyond its one new token."""
    steps_ns: float
    """All the steady inference steps, summed (what the share is of)."""
    probe: ContextCost | None = None
    """The loop's call replayed with its context and with one token (None: priced off the line)."""
    one_ns: float | None = None
    """A one-token model call in the run's terms (the probe's, scaled by the run's own calls of its length)."""

    @property
    def share(self) -> float:
        return min(1.0, self.saved_ns / self.steps_ns) if self.steps_ns > 0 else 0.0


def _follows(prev: Step, s: Step) -> bool:
    """`s`'s call took `prev`'s ids plus one: its length one more and, where both tails were read, its
    next-to-last id `prev`'s last (a length-sorted batch of other sequences grows by one too)."""
    if s.tokens is None or prev.tokens is None or s.tokens != prev.tokens + 1:
        return False
    return s.tail is None or prev.tail is None or s.tail[0] == prev.tail[1]


def _runs(steps: Sequence[Step]) -> list[list[Step]]:
    """Runs of steps each taking an earlier one's ids plus one. Where every call's ids were read, a call
    continues whichever open run ends in its ids less the last (a server's streams take turns, so one
    generation's calls need not be consecutive); else only consecutive calls of growing length count."""
    calls = [s for s in steps if s.tokens is not None]
    if calls and all(s.tail is not None for s in calls):
        return _interleaved(calls)
    runs: list[list[Step]] = []
    current: list[Step] = []
    for s in steps:
        if current and _follows(current[-1], s):
            current.append(s)
            continue
        if len(current) >= MIN_RUN:
            runs.append(current)
        current = [s] if s.tokens is not None else []
    if len(current) >= MIN_RUN:
        runs.append(current)
    return runs


def _interleaved(calls: Sequence[Step]) -> list[list[Step]]:
    """Runs keyed by their last call's (length, last id): a call of length n whose next-to-last id is i
    continues a run keyed (n - 1, i). Streams of the same prompt share keys; any of them will do (their
    calls are alike)."""
    every: list[list[Step]] = []
    ends: dict[tuple[int, int], list[list[Step]]] = {}
    for s in calls:
        n, tail = s.tokens, s.tail
        if n is None or tail is None:
            continue
        waiting = ends.get((n - 1, tail[0]))
        run = waiting.pop() if waiting else None
        if run is None:
            run = []
            every.append(run)
        run.append(s)
        ends.setdefault((n, tail[1]), []).append(run)
    return [r for r in every if len(r) >= MIN_RUN]


def _clean(s: Step) -> bool:
    """Not slowed by pinchpoint (the op window, a trial) or by another process's load."""
    return not (s.profiled or s.trial or s.disturbed)


def recompute(steps: Sequence[Step], probe: ContextCost | None = None) -> Recompute | None:
    """None without generations, or where neither the fitted line nor the probe shows a call growing
    dearer with its context."""
    inference = [s for s in steps if s.kind is StepKind.INFERENCE and not s.partial and s.dur_ns > 0]
    runs = [
        [s for s in r if _clean(s)] for r in _runs(inference)
    ]  # (found on every call, fitted on clean ones)
    calls = [s for r in runs for s in r]
    if len(calls) < MIN_RUN:
        return None
    xs = [float(s.tokens or 0) for s in calls]
    ys = [float(s.dur_ns) for s in calls]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var <= 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    base = my - slope * mx
    one = _one_token_ns(calls, probe)
    if one is not None:
        saved = sum(max(0.0, _forward_ns(s) - one) for r in runs for s in r[1:])
    elif slope > 0:
        saved = sum(slope * max(0, (s.tokens or 1) - 1) for r in runs for s in r[1:])
    else:
        return None
    if saved <= 0:
        return None
    steady = [s for s in inference if _clean(s)]
    return Recompute(
        generations=len(runs),
        calls=n,
        tokens=(int(min(xs)), int(max(xs))),
        checked=all(s.tail is not None for s in calls),
        base_ns=base,
        per_token_ns=slope,
        calls_ns=sum(ys),
        saved_ns=min(saved, sum(ys)),
        steps_ns=float(sum(s.dur_ns for s in steady)) or sum(ys),
        probe=probe if one is not None else None,
        one_ns=one,
    )


def _forward_ns(s: Step) -> int:
    """The model call itself: a step of a generation loop also holds its sampling, which a cache keeps."""
    fwd = s.phase_ns(Phase.FORWARD)
    return fwd if fwd > 0 else s.dur_ns


def _one_token_ns(calls: Sequence[Step], probe: ContextCost | None) -> float | None:
    """The probe's one-token call in the run's terms: its time × the run's own calls near the probe's
    length (within `NEAR` tokens, median) / the probe's full call. None without a probe, or one that did
    not find the single token cheaper."""
    if probe is None or probe.one_ms >= probe.full_ms:
        return None
    near = sorted(_forward_ns(s) for s in calls if abs((s.tokens or 0) - probe.tokens) <= NEAR)
    in_run = float(near[len(near) // 2]) if near else probe.full_ms * 1e6
    return probe.one_ms * in_run / probe.full_ms
