"""What a diagnosis produces: findings in the categories of the report contract."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union


class Category(str, Enum):
    INPUT_FETCH = "input.fetch"
    INPUT_PREPROCESS = "input.preprocess"
    INPUT_WORKER_RESTART = "input.worker_restart"
    HOST_PYTHON = "host.python"
    HOST_DISPATCH = "host.dispatch"
    HOST_SYNC = "host.sync"
    TRANSFER_H2D = "transfer.h2d"
    COMPUTE_MATH = "compute.math"
    COMPUTE_MEMORY = "compute.memory"
    COMM_EXPOSED = "comm.exposed"
    COMM_TENSOR_PARALLEL = "comm.tensor_parallel"
    PIPELINE_BUBBLE = "pipeline.bubble"
    IMBALANCE_STRAGGLER = "imbalance.straggler"
    MEMORY_LEAK = "memory.leak"
    MEMORY_PRESSURE = "memory.pressure"
    CPU_OVERSUBSCRIPTION = "cpu.oversubscription"
    CPU_UNDERUSE = "cpu.underuse"
    IO_CHECKPOINT = "io.checkpoint"
    HOST_GC = "host.gc"
    RUN_ROLLOUTS = "run.rollouts"
    RUN_EVALUATION = "run.evaluation"
    RUN_STARTUP = "run.startup"
    RUN_STALLED = "run.stalled"
    COMPILE_RECOMPILES = "compile.recompiles"
    COMPILE_GRAPH_BREAKS = "compile.graph_breaks"
    COMPILE_TIME = "compile.time"
    COMPUTE_RECOMPUTE = "compute.recompute"
    SERVE_BATCHING = "serve.batching"


class FixKind(str, Enum):
    """What a finding's fix changes, as data: a framework's knob is found from it (`diagnosis/frameworks.py`)."""

    KV_CACHE = "kv_cache"
    BATCHING = "batching"
    """A server answers the requests waiting together: one model call a batch (a queue with a max wait)."""
    """A generation loop keeps each layer's keys and values (`use_cache=True`, a cache in the model)."""
    WORKERS = "workers"
    """DataLoader workers; `fix_params` num_workers."""
    PERSISTENT_WORKERS = "persistent_workers"
    """DataLoader(persistent_workers=True): the workers live across iterators (epochs)."""
    LOAD_IN_PROCESS = "load_in_process"
    """num_workers=0 and whole-batch fetches."""
    BF16_AUTOCAST = "bf16_autocast"
    FP32 = "fp32"
    """Autocast off (bf16 emulated on this CPU)."""
    COMPILE = "compile"
    LOG_LESS = "log_less"
    """Per-step Python (metrics, logging) moved off the step."""
    NO_SYNC = "no_sync"
    """Gradient all-reduce once per accumulation; `fix_params` micro_batches, accumulating (1: the loop
    already accumulates over them and all-reduces each, so no_sync() applies without code)."""
    RESHARD = "reshard"
    """FSDP's `reshard_after_forward=False`: parameters stay gathered from forward to backward."""
    MICROBATCHES = "microbatches"
    """A pipeline schedule's `n_microbatches`; `fix_params` microbatches."""
    DATA_PARALLEL = "data_parallel"
    """Data parallelism over the ranks tensor parallelism splits the model across; `fix_params`
    tp_degree (1: none)."""
    THREADS = "threads"
    """Intra-op threads; `fix_params` threads."""
    ALLOCATOR = "allocator"
    """glibc's mmap and trim thresholds raised (`memory.GLIBC_FIX`)."""
    CHECKPOINT_LESS = "checkpoint_less"
    """torch.save called less often; `fix_params` every (calls)."""
    FUSED_OPTIMIZER = "fused_optimizer"
    """The optimizer's fused (or foreach) implementation."""
    TF32 = "tf32"
    """fp32 matmuls and convolutions on Tensor Cores in TF32 (CUDA, Ampere and newer)."""
    PIN_MEMORY = "pin_memory"
    """DataLoader(pin_memory=True): host-to-device copies from page-locked memory."""
    VECTORISE = "vectorise"
    """Rollouts from several environments at once: one batched forward serves them all; `fix_params`
    envs."""
    EVALUATE_LESS = "evaluate_less"
    """Evaluation passes run less often; `fix_params` every (passes)."""
    CACHE_STARTUP = "cache_startup"
    """What start-up builds (a tokenised corpus, an index) saved once and loaded on later runs."""
    DYNAMIC_SHAPES = "dynamic_shapes"
    """torch.compile's graphs dynamic in the dimension that varies (`dynamic=None`/`True`, mark_dynamic)."""
    GRAPH_BREAKS = "graph_breaks"
    """The lines that break torch.compile's graphs changed (a `.item()` kept on the tensor), or dynamo
    let trace them (`capture_scalar_outputs`); `fix_params` item (1: a `Tensor.item()` broke)."""
    COMPILE_CACHE = "compile_cache"
    """torch.compile's caches kept where the next run finds them (`TORCHINDUCTOR_CACHE_DIR` on storage
    that outlives the run, or the mega-cache's artifacts saved and loaded)."""
    GC_LESS = "gc_less"
    """Fewer or cheaper garbage collections: explicit `gc.collect()` calls dropped, `gc.freeze()` after
    start-up; `fix_params` line of the call when one dominates (the evidence names its file)."""


class Unit(str, Enum):
    """What a fact's value measures in, read from its name (STYLE: the unit is in the name)."""

    NS = "ns"
    """`*_ns`: nanoseconds."""
    FRACTION = "fraction"
    """`share`, `*_share`, `*_frac`: a fraction (of the step, unless the fact says otherwise)."""
    BYTES = "bytes"
    """`*_bytes`."""
    RATIO = "ratio"
    """`speedup`, `*_x`: a before/after ratio."""
    COUNT = "count"
    """Any other number (ops, steps, cores, calls, per-step counts)."""
    TEXT = "text"
    """Names, settings and labels measured from the program (a module, an env var, a shape)."""


Value = Union[float, int, str, bool, None, tuple["Value", ...], "Fact"]


def unit_of(name: str, value: Value) -> Unit:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return Unit.TEXT
    if name.endswith("_ns"):
        return Unit.NS
    if name == "share" or name.endswith(("_share", "_frac")):
        return Unit.FRACTION
    if name.endswith("_bytes"):
        return Unit.BYTES
    if name == "speedup" or name.endswith("_x"):
        return Unit.RATIO
    return Unit.COUNT


@dataclass(frozen=True, slots=True, init=False)
class Fact:
    """One thing a finding states: what it is (`key`, an entry of the phrasebook in `report/phrases/`) and
    the measured values it rests on, by name. Rules build facts; only `report/` turns them into words.

    `Fact("io.checkpoint.share", share=0.12, per_step_ns=1.2e7)`
    """

    key: str
    values: tuple[tuple[str, Value], ...]

    def __init__(self, key: str, /, **values: Value) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "values", tuple(values.items()))

    def __getitem__(self, name: str) -> Value:
        for k, v in self.values:
            if k == name:
                return v
        raise KeyError(f"{self.key} has no value {name!r}")

    def __contains__(self, name: object) -> bool:
        return any(k == name for k, _ in self.values)

    def get(self, name: str, default: Value = None) -> Value:
        return next((v for k, v in self.values if k == name), default)

    def quantities(self) -> tuple[tuple[str, Value, Unit], ...]:
        """(name, value, unit) for every value."""
        return tuple((k, v, unit_of(k, v)) for k, v in self.values)


class Basis(str, Enum):
    """How a finding's estimated speedup was obtained (what to trust it as)."""

    REMOVED = "removed"
    """The measured share disappears (Amdahl): an upper bound for fixes that remove the time."""
    MODEL = "model"
    """A cost model over measured quantities (`diagnosis/costs.py` and the rules' own arithmetic)."""
    PROBE = "probe"
    """A probe timed the fixed operation on this machine (bf16 vs fp32 matmul, a whole-batch fetch)."""
    TRIAL = "trial"
    """pinchpoint ran the fix for a few of the program's own steps and timed them."""
    NONE = "none"
    """No gain claimed (the compute-bound summary, a leak, memory near capacity)."""


class Confidence(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    id: Category
    title: Fact
    share: float
    """Fraction of step time this finding accounts for."""
    estimated_speedup: float
    """Predicted step-time ratio before/after if the fix were applied (>= 1.0)."""
    basis: Basis
    """How `estimated_speedup` was obtained."""
    confidence: Confidence
    evidence: tuple[Fact, ...]
    fix: Fact
    ranks: tuple[int, ...] = (0,)
    snippet: Fact | None = None
    """Code showing the fix, where one helps."""
    next_limit: Fact | None = None
    """What limits the step once this is fixed (`diagnosis/whatif.py`)."""
    fix_kind: FixKind | None = None
    fix_params: tuple[tuple[str, int], ...] = ()
    framework_fix: Fact | None = None
    """The fix in the words of the framework the program runs under (`diagnosis/frameworks.py`)."""
    explained_by: tuple[Category, ...] = ()
    """Categories of per-rank findings that, found on this finding's ranks alone, say why it happens
    (a straggler's cause): the engine folds the first one found into this finding."""
    unloaded: tuple[float, float] | None = None
    """Beside a load that lasted the whole run: the gain's range on this machine without that load (a
    model, `diagnosis/unloaded.py`); `estimated_speedup` is the machine's as it was."""
    as_was: tuple[float, float] | None = None
    """...and the gain as it was, over the loaded steps' spread."""
    of_run: bool = False
    """`share` and `estimated_speedup` are of the whole run's wall clock, not of a training step (time
    outside the steps: rollouts, evaluation passes; `diagnosis/rules/run.py`)."""
    of_request: bool = False
    """`share` is of a request's time on a server under load and `estimated_speedup` its throughput's
    gain under that load (`diagnosis/rules/serving.py`)."""
    run_speedup: float | None = None
    """The gain on the whole run's wall clock (`diagnosis/whole_run.py`): a step finding's gain where
    the training steps are only part of the run; None where the run's wall clock is not known."""
    share_measured: bool = True
    """False: nothing measured this finding's share (a process watched from outside shows its threads
    and memory, not what they cost): `share` is 0 and no gain is claimed."""


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
    category: Category | None = None
    """The category of the rule a NOT_JUDGED note is about."""
    fact: Fact
    """What the note states (phrased by `report/phrases/notes.py`)."""


def facts(f: Finding) -> dict[str, Fact]:
    """A finding's facts (title, evidence, fix, snippet, next limit) by key: what tests assert on."""
    parts = (f.title, *f.evidence, f.fix, f.snippet, f.next_limit, f.framework_fix)
    return {p.key: p for p in parts if isinstance(p, Fact)}
