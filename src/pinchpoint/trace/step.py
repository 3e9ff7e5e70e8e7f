"""A run's steps and their phases: the records `capture/` writes a line each for (steps.jsonl)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Phase(str, Enum):
    """A measured phase of a step. Values are the names used in the run directory and report."""

    DATA_WAIT = "data_wait"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    CHECKPOINT_IO = "checkpoint_io"
    H2D_COPY = "h2d_copy"
    SYNC_WAIT = "sync_wait"
    COMM = "comm"
    """Collectives called from Python, and (DDP on CPU) the gradient all-reduce wait inside backward."""


# When measured phases overlap, the instant goes to the first phase in this order (exposed time, as
# XProf and the TensorBoard plugin attribute it). Blocking waits beat the work they interrupt. The
# optimizer comes last: a forward or backward inside `optimizer.step(closure)` (LBFGS, Lightning's
# automatic optimization) is the closure's, and only the rest of the step call is the update. Backward
# beats forward: module calls inside backward are activation recomputation (checkpointing).
PHASE_PRIORITY: tuple[Phase, ...] = (
    Phase.SYNC_WAIT,
    Phase.COMM,
    Phase.H2D_COPY,
    Phase.CHECKPOINT_IO,
    Phase.DATA_WAIT,
    Phase.BACKWARD,
    Phase.FORWARD,
    Phase.OPTIMIZER,
)

PHASE_DISPLAY: tuple[Phase, ...] = (
    Phase.FORWARD,
    Phase.BACKWARD,
    Phase.OPTIMIZER,
    Phase.DATA_WAIT,
    Phase.CHECKPOINT_IO,
    Phase.H2D_COPY,
    Phase.COMM,
    Phase.SYNC_WAIT,
)
"""The order phases are drawn in (charts, Perfetto tracks): the compute phases first."""

HOST_OTHER = "host_other"
"""Breakdown key for step time covered by no measured phase (Python in the loop, logging, ...)."""


class StepKind(str, Enum):
    TRAIN = "train"
    INFERENCE = "inference"
    EVAL = "eval"
    """An evaluation batch inside a training run: its own kind, never in the training steps' statistics."""
    EXPLICIT = "explicit"


class Role(str, Enum):
    MAIN = "main"
    WORKER = "worker"
    LAUNCHER = "launcher"
    """Started the ranks (`torch.multiprocessing.spawn`) and ran no steps itself."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    phase: Phase
    start_ns: int
    end_ns: int
    what: str | None = None
    """For `comm`: the collective (`all_gather_single`, `reduce_scatter_single.wait`, `ddp.all_reduce`)."""
    nbytes: int | None = None
    """...and the largest tensor it named, in bytes."""

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    index: int
    kind: StepKind
    start_ns: int
    end_ns: int
    intervals: tuple[Interval, ...] = ()
    profiled: bool = False
    trial: bool = False
    """Run by one of pinchpoint's trials (`capture/*_trial.py`): threads, glibc's thresholds, workers."""
    settling: bool = False
    """A `pinchpoint try` run's step that drained what a loader's workers prefetched before the steps
    asked for it (`capture/appliers.Applier.settling`): not steady."""
    partial: bool = False
    """The step in progress when the program ended (crash, kill, or the tail after the last step)."""
    disturbed: bool = False
    """Ran beside another process's load, left out of the statistics (set by `analysis/load.py`)."""
    compiled: bool = False
    """torch.compile compiled inside it (`compile.json`): not steady."""
    cpu_ns: int | None = None
    """On-CPU time of the main thread during the step."""
    runq_ns: int | None = None  # the main thread runnable, waiting for a CPU (contention)
    rss_bytes: int | None = None
    minor_faults: int | None = None
    """Minor page faults of the whole process during the step (fresh pages mapped and zeroed)."""
    sys_ns: int | None = None
    """System (kernel) time of the whole process during the step, all threads."""
    main_sys_ns: int | None = None
    """System time of the main thread during the step: it lengthens the step one for one."""
    gc_ns: int | None = None
    """Time inside Python's garbage collections during the step (all threads; `capture/gc_watch.py`)."""
    gc_collections: int | None = None
    gc_full: int | None = None
    """Collections of the oldest generation: each walks every tracked object."""
    gc_explicit_ns: int | None = None
    """Of `gc_ns`, the time inside `gc.collect()` calls the program made."""
    graph_calls: int | None = None
    """torch.compile's graphs entered during the step, forward and backward (`capture/graph_watch.py`)."""
    graph_ns: int | None = None
    """Time inside those graphs: the rest of a compiled step is Python, guards and eager code."""
    loader: int | None = None
    """The serial of the DataLoader iterator that gave the step its batch (`LoaderConfig.serial`)."""
    tokens: int | None = None
    """The sequence length of the token ids its model call took (a batch × tokens integer tensor)."""
    tail: tuple[int, int] | None = None
    """The first row's last two ids of that call (CPU tensors without gradients only)."""
    rows: int | None = None
    """The first dimension (batch) of the model call's first tensor argument."""
    agent_ns: int = 0
    """pinchpoint's bookkeeping just before the step (writing the last one, reading counters): cut
    from the step's start, so the step is the program's time only."""
    device_ns: int | None = None
    """On a CUDA program: the step as the GPU ran it (between the CUDA events recorded at its
    boundaries). The host's `dur_ns` is only the time to enqueue it when the GPU is the slower side."""
    cuda_allocated_bytes: int | None = None
    """The CUDA caching allocator's allocated and reserved bytes at the step's end (CUDA programs)."""
    cuda_reserved_bytes: int | None = None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    def phase_ns(self, phase: Phase) -> int:
        """The step's time in `phase`, its intervals summed."""
        return sum(max(0, iv.end_ns - iv.start_ns) for iv in self.intervals if iv.phase is phase)
