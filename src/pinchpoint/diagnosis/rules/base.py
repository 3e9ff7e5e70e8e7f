"""The shape of a rule, what it reads, and the small helpers rules share.

Every rule — over one rank's recordings, over every rank's, or over one rank's device timeline — is a
`Rule`: class data saying what it judges and needs, and one `check(subject)`. The engine builds the
subjects from a `Job` and calls every rule of the registry (`diagnosis/registry.py`) the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.analysis.outside import OutsideWatch
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.stacks import StackScope
from pinchpoint.diagnosis.finding import Category, Fact, Finding
from pinchpoint.trace.run import Environment


class Scope(str, Enum):
    """What one call of a rule's `check` reads."""

    RANK = "rank"
    """One rank's recordings (`pinchpoint run`): `Subject.recorded`."""
    RANKS = "ranks"
    """Every rank's recordings at once (cross-rank rules): `Subject.job.runs`; called once a job."""
    DEVICE = "device"
    """One rank's device timeline (a profiler trace, or a CUDA program's op window): `Subject.timeline`,
    with every rank's in `Subject.devices` (cross-rank comparisons)."""
    OUTSIDE = "outside"
    """A process watched from outside (`pinchpoint attach` without its agent): `Subject.watched`; its
    shares are of the main thread's time over the attach, not of a step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """Everything the rules read about one program: the run's own recordings per rank (`pinchpoint run`)
    and the device timelines per rank (profiler traces, or a CUDA program's op windows), either or both."""

    env: Environment | None = None
    runs: tuple[RankAnalysis, ...] = ()
    devices: GpuRunAnalysis | None = None
    outside: OutsideWatch | None = None
    """A process watched from outside: only the OUTSIDE rules judge it (`engine.diagnose_outside`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What one `check` call reads: one rank's analyses (the parts its scope needs), and the job."""

    rank: int
    job: Job
    run: RankAnalysis | None = None
    device: GpuRankAnalysis | None = None

    @property
    def recorded(self) -> RankAnalysis:
        """This rank's recordings (scopes RANK and RANKS, where the engine guarantees them)."""
        if self.run is None:
            raise LookupError(f"rank {self.rank} has no recordings to judge")
        return self.run

    @property
    def timeline(self) -> GpuRankAnalysis:
        """This rank's device timeline (scope DEVICE, where the engine guarantees it)."""
        if self.device is None:
            raise LookupError(f"rank {self.rank} has no device timeline to judge")
        return self.device

    @property
    def watched(self) -> OutsideWatch:
        """The process watched from outside (scope OUTSIDE, where the engine guarantees it)."""
        if self.job.outside is None:
            raise LookupError("the job watched no process from outside")
        return self.job.outside

    @property
    def environment(self) -> Environment:
        if self.job.env is None:
            raise LookupError("the job has no recorded environment")
        return self.job.env

    @property
    def devices(self) -> GpuRunAnalysis:
        if self.job.devices is None:
            raise LookupError("the job has no device timelines")
        return self.job.devices


class Rule:
    """A rule reads a `Subject` and yields findings.

    Class data: `id` (the category it judges, and names it in notes), `also` (other categories it may
    yield instead), `scope`, and `requires`: for RANK and RANKS the `RankAnalysis` fields it needs (when
    one is missing the engine skips the rule and says which data was missing instead of guessing); a
    DEVICE rule needs the device timeline only. `quiet_without` names a step phase: a rank that spends
    (almost) no time in it has nothing for this rule to judge, and gets no "not judged" note.
    """

    id: ClassVar[Category]
    title: ClassVar[str]
    scope: ClassVar[Scope] = Scope.RANK
    requires: ClassVar[frozenset[str]] = frozenset()
    also: ClassVar[frozenset[Category]] = frozenset()
    quiet_without: ClassVar[str | None] = None

    @property
    def yields(self) -> frozenset[Category]:
        """Every category this rule's findings may carry."""
        return self.also | {self.id}

    def check(self, s: Subject) -> Iterable[Finding]:
        raise NotImplementedError


def speedup_removing(share: float) -> float:
    """Step-time ratio if a fraction `share` of the step disappeared (Amdahl)."""
    return 1.0 / max(1e-6, 1.0 - min(share, 0.95))


def stack_evidence(scope: StackScope | None, where: Fact) -> Fact | None:
    """The hottest Python functions of a stack scope (`stacks.top`: each as its label, its share of the
    scope's samples and the library function it was mostly inside), or None without stacks. `where`
    says where the samples were taken (a fact, or a caller's finished phrase)."""
    if scope is None or not scope.top:
        return None
    return Fact(
        "stacks.top",
        where=where,
        sampled_ns=scope.seconds * 1e9 if scope.seconds is not None else None,
        samples=scope.samples,
        hot=tuple((h.label, h.share, h.calls_into) for h in scope.top),
    )


def cut_trial(rank: RankAnalysis, trial: str) -> tuple[Fact, ...]:
    """Where the program's end, or pinchpoint's budget, cut `trial` short ("threads", "alloc",
    "workers"): a fact saying the finding's estimate comes from a model, not from that trial."""
    cut = rank.trial_cut
    if cut is None or cut.trial != trial:
        return ()
    if cut.reason == "budget":
        return (Fact("trial.stopped", trial=trial, done=cut.steps_done, needed=cut.steps_needed,
                     slowdown=cut.slowdown or 0.0),)  # fmt: skip
    return (Fact("trial.cut", trial=trial, done=cut.steps_done, needed=cut.steps_needed),)


def short_site(site: str | None) -> str | None:
    """file:line with the file's last two path parts."""
    if not site:
        return None
    path, _, line = site.rpartition(":")
    return f"{'/'.join(path.split('/')[-2:])}:{line}" if path else site
