"""What the data-loading processes did: on CPU, waiting for a CPU, or asleep (I/O, latency).

Each fetched batch carries the fetching thread's wall, on-CPU and run-queue time. Over the steady
steps, `sleep_fraction` near 1 means loading is I/O- or latency-bound (`input.fetch`); on-CPU plus
run-queue near 1 means it is CPU-bound (`input.preprocess`), even when contention stretches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.trace.run import LoaderConfig, RankData


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
    fetches = [f for f in rank.fetches if f.start_ns >= start_ns and f.end_ns <= end_ns]
    if not fetches:
        fetches = list(rank.fetches)
    if not fetches:
        return None
    main = rank.main
    main_pid = main.pid if main is not None else None
    pids = {f.pid for f in fetches}
    config = rank.loaders[-1] if rank.loaders else None
    return LoaderActivity(
        config=config,
        batches=len(fetches),
        wall_ns=sum(f.dur_ns for f in fetches),
        cpu_ns=sum(f.cpu_ns for f in fetches),
        runq_ns=sum(f.runq_ns or 0 for f in fetches),
        in_main_process=main_pid in pids if main_pid is not None else len(pids) == 1,
        processes=len(pids),
    )
