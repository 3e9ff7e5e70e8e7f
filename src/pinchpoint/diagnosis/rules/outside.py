"""The rules for a process watched from outside (`pinchpoint attach` without its agent): what the main
thread's py-spy samples and /proc can support. Their shares are of the main thread's time over the
attach, not of a step; nothing is applied, so no gain is claimed (confidence low). What such a watch
cannot judge is `NOT_JUDGED`, said as plainly as the findings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.outside import MainThread, OutsideWatch
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject

MIN_SHARE = 0.10
"""A phase of the main thread's time worth a finding (the agent's rules start near this too)."""
CHECKPOINT_MIN_SHARE = 0.05
ON_CPU_LOADING = 0.5
"""Loading that is on a CPU more than half its time is computing (input.preprocess), else waiting."""
WORKER_BUSY_CORES = 0.5
HOT_MIN_SHARE = 0.01
LOOP_ON_CPU = 0.5
"""The loop's own code is Python work when the main thread is on a CPU at least half as long."""
LEAK_GROWTH = 0.10
LEAK_MIN_BYTES = 100 << 20
OVERSUBSCRIBED_BUSY = 0.8
"""The process keeps this share of the usable cores busy when its threads outnumber them."""
NOT_JUDGED: tuple[tuple[Fact, Fact], ...] = tuple(
    (Fact("outside.not_judged.what", item=item), Fact("outside.not_judged.needs", item=item))
    for item in ("steps", "op_kinds", "device", "distributed", "memory_pressure", "trials")
)
"""What only the agent inside the process can judge: (what, what judging it needs), as facts."""


def loop_waits(watch: OutsideWatch) -> bool:
    """The loop's own share is mostly off a CPU (the main thread's CPU use is under half of it): it
    waits there (sleep, I/O, a lock), which is not Python work."""
    main, thr = watch.main, watch.threads
    if main is None or thr is None or thr.main_cores is None:
        return False
    return main.shares["loop"] >= MIN_SHARE and thr.main_cores < LOOP_ON_CPU * main.shares["loop"]


def _hottest(main: MainThread, phase: str) -> list[Fact]:
    return [
        Fact("outside.hottest", label=label, share=s)
        for label, s in main.hot.get(phase, [])
        if s >= HOT_MIN_SHARE
    ]


def _finding(fid: Category, title: str, share: float | None, evidence: list[Fact]) -> Finding:
    return Finding(
        id=fid,
        title=Fact("rule.title", name=title),
        share=share or 0.0,
        estimated_speedup=1.0,
        basis=Basis.NONE,
        confidence=Confidence.LOW,
        evidence=tuple(evidence),
        fix=Fact("outside.fix", category=fid.value),
        share_measured=share is not None,
    )


def _phase(rule: Rule, w: OutsideWatch, phase: str, floor: float) -> Iterable[Finding]:
    """`rule`'s finding where the main thread spent at least `floor` of its time in `phase`."""
    if w.main is None or (share := w.main.shares[phase]) < floor:
        return
    evidence = [Fact("outside.phase_time", share=share, phase=phase), *_hottest(w.main, phase)]
    yield _finding(rule.id, rule.title, share, evidence)


class OutsideInput(Rule):
    """Pattern: the main thread's samples sit in the DataLoader: input.preprocess when loading computes
    (busy workers, or a main thread on a CPU beyond the rest of its loop), input.fetch when it waits."""

    id: ClassVar[Category] = Category.INPUT_FETCH
    also: ClassVar[frozenset[Category]] = frozenset({Category.INPUT_PREPROCESS})
    title: ClassVar[str] = "Steps wait for data; the loader is waiting, not computing"
    scope: ClassVar[Scope] = Scope.OUTSIDE

    def check(self, s: Subject) -> Iterable[Finding]:
        w = s.watched
        if w.main is None or (share := w.main.shares["data_wait"]) < MIN_SHARE:
            return
        evidence = [Fact("outside.loader_time", share=share, samples=w.main.samples)]
        thr = w.threads
        if w.workers:
            busiest = max(w.workers.values())
            computing = busiest >= WORKER_BUSY_CORES
            evidence.append(
                Fact("outside.workers", workers=len(w.workers), busiest=busiest, computing=computing)
            )
        elif thr is not None and thr.main_cores is not None:
            # The rest of the loop is assumed on a CPU: what the main thread used beyond it was loading.
            loading = max(0.0, thr.main_cores - (1.0 - share)) / share
            computing = loading >= ON_CPU_LOADING
            evidence.append(
                Fact(
                    "outside.in_process",
                    main_cores=thr.main_cores,
                    loading=min(1.0, loading),
                    computing=computing,
                )
            )
        else:
            computing = False
            evidence.append(Fact("outside.loading_unknown"))
        evidence += _hottest(w.main, "data_wait")
        if computing:
            yield _finding(
                Category.INPUT_PREPROCESS, "Steps wait for data the loader computes", share, evidence
            )
            return
        yield _finding(self.id, self.title, share, evidence)


class OutsideLoop(Rule):
    """Pattern: the loop's own code (and torch ops it calls outside any module) holds the main thread on
    a CPU (not waiting there: `loop_waits` says that as a note)."""

    id: ClassVar[Category] = Category.HOST_PYTHON
    title: ClassVar[str] = "Python work in the loop, outside framework ops"
    scope: ClassVar[Scope] = Scope.OUTSIDE

    def check(self, s: Subject) -> Iterable[Finding]:
        if not loop_waits(s.watched):
            yield from _phase(self, s.watched, "loop", MIN_SHARE)


class OutsideCheckpoint(Rule):
    """Pattern: torch.save / torch.load on the main thread, inside the loop."""

    id: ClassVar[Category] = Category.IO_CHECKPOINT
    title: ClassVar[str] = "Checkpoints written inside the loop"
    scope: ClassVar[Scope] = Scope.OUTSIDE

    def check(self, s: Subject) -> Iterable[Finding]:
        yield from _phase(self, s.watched, "checkpoint", CHECKPOINT_MIN_SHARE)


class OutsideThreads(Rule):
    """Pattern: more threads busy than usable cores, with the process keeping most of them busy."""

    id: ClassVar[Category] = Category.CPU_OVERSUBSCRIPTION
    title: ClassVar[str] = "More busy threads than cores"
    scope: ClassVar[Scope] = Scope.OUTSIDE

    def check(self, s: Subject) -> Iterable[Finding]:
        w = s.watched
        thr, usage, usable = w.threads, w.usage, w.usable_cores
        if thr is None or usage is None or not thr.busy > usable >= 1:
            return
        if usage.process_cores < OVERSUBSCRIBED_BUSY * usable:
            return
        evidence = [
            Fact(
                "outside.busy_threads",
                busy=thr.busy,
                cores=usable,
                process_cores=usage.process_cores,
                switches_per_s=usage.invol_switches_per_s,
            ),
            Fact("outside.needs_trial"),
        ]
        yield _finding(self.id, self.title, None, evidence)


class OutsideLeak(Rule):
    """Pattern: resident memory grew by at least 10% and 100 MB over the attach."""

    id: ClassVar[Category] = Category.MEMORY_LEAK
    title: ClassVar[str] = "Memory grows while it runs"
    scope: ClassVar[Scope] = Scope.OUTSIDE

    def check(self, s: Subject) -> Iterable[Finding]:
        rss = s.watched.rss_bytes
        if len(rss) < 4 or rss[0] <= 0:
            return
        grown = rss[-1] - rss[0]
        if grown < LEAK_MIN_BYTES or grown / rss[0] < LEAK_GROWTH:
            return
        evidence = [
            Fact("outside.rss_growth", grown_bytes=grown, growth=grown / rss[0], over_ns=s.watched.watched_ns)
        ]
        yield _finding(self.id, self.title, None, evidence)


OUTSIDE_RULES: tuple[Rule, ...] = (
    OutsideInput(),
    OutsideLoop(),
    OutsideCheckpoint(),
    OutsideThreads(),
    OutsideLeak(),
)
"""In the order their findings were listed when their shares tie."""
