"""What a diagnosis produces: findings in the categories of the report contract."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Category(str, Enum):
    INPUT_FETCH = "input.fetch"
    INPUT_PREPROCESS = "input.preprocess"
    HOST_PYTHON = "host.python"
    HOST_DISPATCH = "host.dispatch"
    HOST_SYNC = "host.sync"
    TRANSFER_H2D = "transfer.h2d"
    COMPUTE_MATH = "compute.math"
    COMPUTE_MEMORY = "compute.memory"
    COMM_EXPOSED = "comm.exposed"
    IMBALANCE_STRAGGLER = "imbalance.straggler"
    MEMORY_LEAK = "memory.leak"
    MEMORY_PRESSURE = "memory.pressure"
    CPU_OVERSUBSCRIPTION = "cpu.oversubscription"
    CPU_UNDERUSE = "cpu.underuse"
    IO_CHECKPOINT = "io.checkpoint"


class FixKind(str, Enum):
    """What a finding's fix changes, as data: a framework's knob is found from it (`diagnosis/frameworks.py`)."""

    WORKERS = "workers"
    """DataLoader workers; `fix_params` num_workers."""
    LOAD_IN_PROCESS = "load_in_process"
    """num_workers=0 and whole-batch fetches."""
    BF16_AUTOCAST = "bf16_autocast"
    FP32 = "fp32"
    """Autocast off (bf16 emulated on this CPU)."""
    COMPILE = "compile"
    LOG_LESS = "log_less"
    """Per-step Python (metrics, logging) moved off the step."""
    NO_SYNC = "no_sync"
    """Gradient all-reduce once per accumulation; `fix_params` micro_batches."""


class Confidence(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    id: Category
    title: str
    share: float
    """Fraction of step time this finding accounts for."""
    estimated_speedup: float
    """Predicted step-time ratio before/after if the fix were applied (>= 1.0)."""
    confidence: Confidence
    evidence: tuple[str, ...]
    fix: str
    ranks: tuple[int, ...] = (0,)
    snippet: str | None = None
    """Code showing the fix, where one helps."""
    next_limit: str | None = None
    """What limits the step once this is fixed (`diagnosis/whatif.py`)."""
    fix_kind: FixKind | None = None
    fix_params: tuple[tuple[str, int], ...] = ()
    framework_fix: str | None = None
    """The fix in the words of the framework the program runs under (`diagnosis/frameworks.py`)."""
    explained_by: tuple[Category, ...] = ()
    """Categories of per-rank findings that, found on this finding's ranks alone, say why it happens
    (a straggler's cause): the engine folds the first one found into this finding."""


class NoteKind(str, Enum):
    """What a diagnosis note is about (notes qualify findings; they are never findings)."""

    NOT_JUDGED = "not_judged"
    """A rule could not judge: the data it needs was not recorded (`Note.category` is the rule's)."""
    TRACE = "trace"
    """What a device timeline lacks (no GPU work, no memory events, ranks not matched)."""
    TRACE_STEPS = "trace_steps"
    """A trace without `ProfilerStep` ranges (moot for an op window, which `pinchpoint run` delimits)."""
    SOURCE = "source"
    """Where the step-time findings come from (the device timeline on a CUDA program)."""
    CONTEXT = "context"
    """The run's circumstances that qualify every finding (a shared machine, too few steps)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    kind: NoteKind
    text: str
    category: Category | None = None
    """The category of the rule a NOT_JUDGED note is about."""
