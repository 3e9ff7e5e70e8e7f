"""What the data-loading processes did: on CPU, waiting for a CPU, or asleep (I/O, latency).

Each fetched batch carries the fetching thread's wall, on-CPU and run-queue time. Over the steady
steps, `sleep_fraction` near 1 means loading is I/O- or latency-bound (`input.fetch`); on-CPU plus
run-queue near 1 means it is CPU-bound (`input.preprocess`), even when contention stretches it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pinchpoint.analysis.steps import steady_steps
from pinchpoint.analysis.trial_steps import measured, reference
from pinchpoint.stats.ranks import TRIAL_P_MAX, faster_p
from pinchpoint.trace.run import Fetch, LoaderConfig, RankData, Step


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderActivity:
    config: LoaderConfig | None
    batches: int
    wall_ns: int
    cpu_ns: int
    runq_ns: int
    in_main_process: bool
    """True when batches were fetched by the training process itself (num_workers=0)."""
    processes: int
    """How many processes fetched batches."""
    steps: int = 0
    """The steps of the steady steps' kind over the time the batches were counted in, every one of
    them (the op window's, the trials', those beside another process's load): what the batches fed."""

    @property
    def sleep_ns(self) -> int:
        return max(0, self.wall_ns - self.cpu_ns - self.runq_ns)

    @property
    def cpu_fraction(self) -> float:
        return self.cpu_ns / self.wall_ns if self.wall_ns else 0.0

    @property
    def runq_fraction(self) -> float:
        return self.runq_ns / self.wall_ns if self.wall_ns else 0.0

    @property
    def sleep_fraction(self) -> float:
        return self.sleep_ns / self.wall_ns if self.wall_ns else 0.0

    @property
    def per_batch_ns(self) -> float:
        return self.wall_ns / self.batches if self.batches else 0.0

    @property
    def cpu_per_batch_ns(self) -> float:
        return (self.cpu_ns + self.runq_ns) / self.batches if self.batches else 0.0


def loader_activity(rank: RankData, start_ns: int, end_ns: int) -> LoaderActivity | None:
    """Fetch activity between `start_ns` and `end_ns` (the steady steps); None if nothing was fetched."""
    main = rank.main
    main_pid = main.pid if main is not None else None
    steady = steady_steps(rank.steps)
    config = feeding_loader(rank, steady)
    fetches = [f for f in rank.fetches if f.start_ns >= start_ns and f.end_ns <= end_ns]
    if config is not None and config.serial is not None and len(rank.loaders) > 1:
        # Other loaders (evaluation's) fetch too: only the batches of the one that feeds the steps
        feeds = _feeds(config, main_pid, steady)
        fetches = [f for f in fetches if feeds(f)]
    if not fetches:
        fetches = list(rank.fetches)
        start_ns, end_ns = 0, 2**63
    if not fetches:
        return None
    pids = {f.pid for f in fetches}
    kind = steady[0].kind if steady else None
    spanned = sum(
        1
        for s in rank.steps
        if not s.partial and s.kind is kind and s.start_ns >= start_ns and s.end_ns <= end_ns
    )
    return LoaderActivity(
        config=config,
        batches=len(fetches),
        wall_ns=sum(f.dur_ns for f in fetches),
        cpu_ns=sum(f.cpu_ns for f in fetches),
        runq_ns=sum(f.runq_ns or 0 for f in fetches),
        in_main_process=main_pid in pids if main_pid is not None else len(pids) == 1,
        processes=len(pids),
        steps=spanned,
    )


def feeding_loader(rank: RankData, steady: Sequence[Step] | None = None) -> LoaderConfig | None:
    """The loader whose iterators gave the steady steps (`steady`, else the rank's) most of their
    batches (a training loader, not the evaluation loader a program builds at step 500); the last one
    built where steps do not say."""
    if not rank.loaders:
        return None
    steps = steady_steps(rank.steps) if steady is None else steady
    fed = Counter(s.loader for s in steps if s.loader is not None)
    if fed:
        serial = fed.most_common(1)[0][0]
        found = next((c for c in rank.loaders if c.serial == serial), None)
        if found is not None:
            return found
    return rank.loaders[-1]


def _feeds(config: LoaderConfig, main_pid: int | None, steady: Sequence[Step]) -> Callable[[Fetch], bool]:
    """Whether a batch is `config`'s: fetched by its workers, or in the training process within a
    steady step that it fed."""
    if config.num_workers > 0:
        return lambda f: f.pid in config.worker_pids if config.worker_pids else f.pid != main_pid
    spans = sorted((s.start_ns, s.end_ns) for s in steady if s.loader == config.serial)
    starts = [a for a, _ in spans]

    def inside(f: Fetch) -> bool:
        i = bisect.bisect_right(starts, f.start_ns) - 1
        return f.pid == main_pid and i >= 0 and f.start_ns <= spans[i][1]

    return inside


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerTrialResult:
    """Steps whose batches pinchpoint loaded with `workers` DataLoader workers, against the steady step."""

    workers: int
    steps: int
    trial_median_ns: int
    steady_median_ns: int
    p_faster: float
    """One-sided rank test: the chance of trial steps this short if the workers changed nothing."""
    complete: bool

    @property
    def speedup(self) -> float:
        return self.steady_median_ns / max(1, self.trial_median_ns)

    @property
    def pays(self) -> bool:
        """Faster beyond the steps' own spread and by at least `WORKERS_MIN_GAIN`."""
        return self.complete and self.p_faster <= TRIAL_P_MAX and self.speedup >= 1 + WORKERS_MIN_GAIN


WORKERS_MIN_GAIN = 0.05


def worker_trial(rank: RankData, steady_median_ns: int | None) -> WorkerTrialResult | None:
    """The workers trial's measured steps (whole ones) against the steady median; None without one."""
    trial = rank.worker_trial
    if trial is None or not steady_median_ns:
        return None
    durs = sorted(s.dur_ns for s in measured(rank.steps, trial.steps))
    if not durs:
        return None
    ref_ns, ref = reference(steady_steps(rank.steps), trial.steps, steady_median_ns)
    return WorkerTrialResult(
        workers=trial.workers,
        steps=len(durs),
        trial_median_ns=durs[len(durs) // 2],
        steady_median_ns=ref_ns,
        p_faster=faster_p(durs, ref),
        complete=trial.complete,
    )
