"""What pinchpoint's trials ran (`capture/*_trial.py`) and Python's collector over a process
(`capture/gc_watch.py`), as recorded in a rank's directory."""

from __future__ import annotations

from dataclasses import dataclass

GLIBC_MMAP_THRESHOLD = 32 << 20
"""The mmap threshold the allocator trial and memory.pressure's fix set: the largest mallopt accepts
on 64-bit glibc (HEAP_MAX_SIZE / 2)."""
GLIBC_TRIM_THRESHOLD = 1 << 30
GLIBC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(GLIBC_MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(GLIBC_TRIM_THRESHOLD),
}
"""The same, as the environment a run is started with (memory.pressure's fix)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadTrial:
    """Steps pinchpoint ran with one intra-op thread per core left free instead of the program's `threads`."""

    threads: int
    fit: int
    steps: tuple[int, ...]
    """Indices of the measured trial steps."""
    foreign_cores: float = 0.0
    """Cores' worth of CPU other processes used before the trial (the fit leaves them out)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocTrial:
    """Steps pinchpoint ran with glibc's mmap and trim thresholds raised (`capture/alloc_trial.py`)."""

    steps: tuple[int, ...]
    """Indices of the measured trial steps."""
    mmap_threshold: int
    trim_threshold: int
    reference_steps: tuple[int, ...] = ()
    """Steps between the trial's blocks at the program's own thresholds (the reference with the steady
    steps around the trial)."""
    faults_before: int = 0
    """Median minor faults per step of the steps before the trial, at the program's settings."""
    restored_from: str = ""
    """How the thresholds set back afterwards were found: "environment" or "probed"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerTrial:
    """Steps whose batches pinchpoint loaded with `workers` DataLoader workers (`capture/worker_trial.py`)."""

    workers: int
    steps: tuple[int, ...]
    """Indices of the measured trial steps."""
    complete: bool = True
    """The program's sampler had all the batches the trial asked for (else the epoch ended in it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialCut:
    """A trial cut short, by the program's end or by pinchpoint's budget once its steps lost: nothing it
    measured is used; its finding comes from a model."""

    trial: str
    """"threads", "alloc" or "workers"."""
    steps_done: int
    steps_needed: int
    reason: str = "end"
    """"end" (the program ended) or "budget" (its steps ran `slowdown` times the program's own)."""
    slowdown: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GcSite:
    """A line that called `gc.collect()`, and what its calls took."""

    file: str
    line: int
    function: str
    calls: int
    ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GcRecord:
    """Python's collector over the whole process (`gc.json`, `capture/gc_watch.py`)."""

    ns: int
    collections: int
    full: int
    explicit_ns: int
    threshold: tuple[int, ...] = ()
    frozen: int = 0
    """Objects moved to the permanent generation (`gc.freeze()`) when the file was written."""
    explicit: tuple[GcSite, ...] = ()
