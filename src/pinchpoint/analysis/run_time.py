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

import bisect
from dataclasses import dataclass, replace

from pinchpoint.analysis.between_updates import outside_training
from pinchpoint.analysis.stacks import StackScope, scope_of
from pinchpoint.trace.run import Phase, RankData, RunMeta, Step, StepKind
from pinchpoint.trace.stacks import OWN_FILE, Stacks, StackSample, TimedSample

SEGMENTS = (
    "start-up",
    "compiling",
    "training steps",
    "evaluation and rollouts",
    "inference",
    "marked steps",
    "pinchpoint's own work",
    "between steps",
    "stalled",
    "shutdown",
)
# (no-grad, eval-mode calls of a model that also trains: an evaluation pass, or an RL library's rollouts)
KIND_SEGMENT = {
    StepKind.TRAIN: "training steps",
    StepKind.EVAL: "evaluation and rollouts",
    StepKind.INFERENCE: "inference",
    StepKind.EXPLICIT: "marked steps",
}


PROBES = "pinchpoint's own work"
Span = tuple[int, int, str, bool]
"""(start ns, end ns, segment, is a step)."""
_IMPORTLIB = "<frozen importlib."
_DIST = "torch/distributed/"
STALL_MIN_NS = 10_000_000_000
"""A rank's time after its last whole step worth calling a stall: 10 s ..."""
STALL_STEPS = 20
"""... and at least 20 of its median steps (a final save or evaluation takes a few)."""
CODE_MIN_SAMPLES = 5
"""A segment's code is named from at least this many samples (a quarter second at 20 Hz)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentCode:
    """Where the main thread was during a segment (pinchpoint's stack samples, by wall time)."""

    scope: StackScope
    cpu_frac: float
    """Of the sampled wall time, the share the thread was on a CPU (the rest: it waited)."""
    imports_frac: float = 0.0
    """Of it, the share inside an `import` (start-up's usual weight)."""
    collective: str | None = None
    """The torch.distributed call the thread was most often inside (`all_reduce`, `barrier`, `wait`)."""
    collective_frac: float = 0.0
    """Of the sampled wall time, the share inside a torch.distributed call (a rank waiting for others)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    name: str
    ns: int
    count: int = 0
    """Steps in it (0 for start-up, shutdown and the gaps)."""
    code: SegmentCode | None = None
    """Outside the training steps, with pinchpoint's stack samples: the code the time went to."""


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

    def segment_ns(self, name: str) -> int:
        return next((s.ns for s in self.segments if s.name == name), 0)

    def share(self, name: str) -> float:
        return self.segment_ns(name) / max(1, self.wall_ns)

    @property
    def largest(self) -> Segment:
        return max(self.segments, key=lambda s: s.ns)


def run_time(
    meta: RunMeta, rank: RankData, stacks: Stacks | None = None, pid: int | None = None
) -> RunTime | None:
    """The run's segments on `rank`; None without a start clock or steps (another profiler's files,
    an attach: its start is not the program's). With pinchpoint's own stack samples (`stacks`, of
    process `pid`), each segment outside the training steps names the code its main thread was in."""
    steps = sorted((s for s in rank.steps if s.dur_ns > 0), key=lambda s: s.start_ns)
    if not meta.monotonic_ns or not steps or meta.mode == "attach":
        return None
    start, first, last = meta.monotonic_ns, steps[0].start_ns, max(s.end_ns for s in steps)
    ended = meta.ended_ns is not None and meta.ended_ns >= last
    end = meta.ended_ns if ended and meta.ended_ns is not None else last
    if first < start:
        return None  # (clocks that do not line up: another machine's run directory)
    spans = _spans(start, end, steps, stall_ns(steps))
    if stacks is not None and pid is not None and stacks.timeline:
        spans = _probes_checked(spans, main_samples(stacks, pid))
    if rank.compiles is not None:
        spans = _cut_out(
            spans, [(c.start_ns, c.start_ns + c.dur_ns) for c in rank.compiles.compilations], COMPILING
        )
    for probe in (rank.batch_costs, rank.context_cost):  # (`run --load`'s batch probe; the context probe)
        if probe is not None and probe.end_ns > probe.start_ns:  # (both at exit)
            spans = _cut_out(spans, [(probe.start_ns, probe.end_ns)], PROBES)
    named: dict[str, list[int]] = {}
    for a, b, name, is_step in spans:
        got = named.setdefault(name, [0, 0])
        got[0] += b - a
        got[1] += is_step
    code = segment_code(spans, stacks, pid, meta.cwd) if stacks is not None and pid is not None else {}
    segments = tuple(
        Segment(name=n, ns=named[n][0], count=named[n][1], code=code.get(n))
        for n in SEGMENTS
        if named.get(n, (0,))[0] > 0
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


COMPILING = "compiling"


def _cut_out(spans: list[Span], cuts: list[tuple[int, int]], segment: str) -> list[Span]:
    """Intervals cut out of the spans they ran in, as `segment`: torch.compile's compilations (dynamo's
    records: a compiled model's first step holds seconds of compilation that no step fix changes), the
    batch probe's replay at a server's exit (pinchpoint's own). A step cut in two keeps its count on its
    first piece."""
    merged: list[list[int]] = []
    for a, b in sorted(c for c in cuts if c[1] > c[0]):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    if not merged:
        return spans
    out: list[Span] = []
    for a, b, name, is_step in spans:
        at, counted = a, False
        for ca, cb in merged:
            lo, hi = max(ca, a), min(cb, b)
            if lo >= hi:
                continue
            if lo > at:
                out.append((at, lo, name, is_step and not counted))
                counted = counted or is_step
            out.append((lo, hi, segment, False))
            at = hi
        if b > at or (is_step and not counted):  # (a step that was all compilation still counts)
            out.append((at, b, name, is_step and not counted))
    return out


def stall_ns(steps: list[Step]) -> int:
    """How long a rank must go without finishing a step to have stalled: `STALL_MIN_NS`, and at least
    `STALL_STEPS` of its median whole step."""
    whole = sorted(s.dur_ns for s in steps if not s.partial and s.dur_ns > 0)
    return max(STALL_MIN_NS, STALL_STEPS * whole[len(whole) // 2]) if whole else STALL_MIN_NS


def _spans(start: int, end: int, steps: list[Step], stall_ns: int) -> list[Span]:
    """The run cut into (start, end, segment, is a step), in time order: start-up to the first step,
    each step by its kind, each gap no step covered (pinchpoint's own: its bookkeeping before each
    step, and the gap before a step it profiled or ran a trial in), and from the last step to the
    end. In a program that trains, calls of its model before the first update are rollouts or
    evaluation like those after it. An unfinished step at least `stall_ns` long is the run stalled
    (a hung collective's ranks sit in one until a timeout or a kill ends the run)."""
    first = steps[0].start_ns
    trains = any(s.kind is StepKind.TRAIN for s in steps)
    out: list[Span] = [(start, first, "start-up", False)]
    reach = first
    for s in steps:
        own = min(s.agent_ns, max(0, s.start_ns - reach))
        if own > 0:
            out.append((reach, reach + own, PROBES, False))
            reach += own
        if s.start_ns > reach:
            out.append((reach, s.start_ns, PROBES if s.profiled or s.trial else "between steps", False))
        a = max(s.start_ns, reach)
        if s.end_ns > a:
            segment = KIND_SEGMENT[StepKind.EVAL] if outside_training(s, trains) else KIND_SEGMENT.get(s.kind)
            if s.partial and s.end_ns - a >= stall_ns:
                segment = "stalled"
            out.append((a, s.end_ns, segment or "marked steps", True))
        reach = max(reach, s.end_ns)
    out.append((reach, max(reach, end), "shutdown", False))
    return out


def main_samples(stacks: Stacks, pid: int) -> list[TimedSample]:
    """The samples of process `pid`'s main thread, in time."""
    main = str(pid)
    return [t for t in stacks.timeline if t.stack.pid == pid and t.stack.thread == main]


def _probes_checked(spans: list[Span], samples: list[TimedSample]) -> list[Span]:
    """A gap before a step pinchpoint profiled or ran a trial in is its probes' time, unless the main
    thread's samples there were mostly in the program's code (a rollout that happened to precede the
    op window): then it is time between steps like any other."""
    starts = [a for a, *_ in spans]
    ours: dict[int, list[int]] = {}
    for t in samples:
        i = bisect.bisect_right(starts, t.t_ns) - 1
        if i >= 0 and t.t_ns < spans[i][1] and spans[i][2] == PROBES:
            seen = ours.setdefault(i, [0, 0])
            seen[0] += t.wall_ns
            seen[1] += t.wall_ns if t.stack.frames and t.stack.frames[-1].file == OWN_FILE else 0
    return [
        (a, b, "between steps", False)
        if (mine := ours.get(i)) and mine[1] < 0.5 * mine[0]
        else (a, b, name, step)
        for i, (a, b, name, step) in enumerate(spans)
    ]


def segment_code(spans: list[Span], stacks: Stacks, pid: int, cwd: str) -> dict[str, SegmentCode]:
    """Per segment outside the training steps: where the main thread's samples landed (by wall time:
    a wait counts where it waits) and how much of that time it was on a CPU."""
    starts = [a for a, *_ in spans]
    by_segment: dict[str, dict[StackSample, list[int]]] = {}
    for t in main_samples(stacks, pid):
        i = bisect.bisect_right(starts, t.t_ns) - 1
        if i < 0 or t.t_ns >= spans[i][1] or spans[i][2] == "training steps":
            continue
        acc = by_segment.setdefault(spans[i][2], {}).setdefault(t.stack, [0, 0])
        acc[0] += t.wall_ns
        acc[1] += t.cpu_ns
    rate = stacks.rate_hz or 1.0
    out: dict[str, SegmentCode] = {}
    for name, got in by_segment.items():
        wall = sum(w for w, _ in got.values())
        samples = [replace(s, count=round(w * rate / 1e9)) for s, (w, _) in got.items()]
        scope = scope_of(name, [s for s in samples if s.count > 0], rate, cwd)
        if scope is not None and scope.samples >= CODE_MIN_SAMPLES:
            imports = sum(
                w for s, (w, _) in got.items() if any(f.file.startswith(_IMPORTLIB) for f in s.frames)
            )
            calls: dict[str, int] = {}
            for s, (w, _) in got.items():
                call = _collective(s)
                if call is not None:
                    calls[call] = calls.get(call, 0) + w
            out[name] = SegmentCode(
                scope=scope,
                cpu_frac=sum(c for _, c in got.values()) / max(1, wall),
                imports_frac=imports / max(1, wall),
                collective=max(calls, key=lambda c: calls[c]) if calls else None,
                collective_frac=sum(calls.values()) / max(1, wall),
            )
    return out


def _collective(sample: StackSample) -> str | None:
    """The outermost torch.distributed function of a sample's stack (the call the program made), or
    None when it is not inside one."""
    return next((f.function for f in sample.frames if _DIST in f.file.replace("\\", "/")), None)
