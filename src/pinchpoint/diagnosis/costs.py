"""Cost models: what a fix would make a step cost, as pure functions of measured quantities.

Rules measure, call a cost model to price a fix, and state the result as a finding; each model has a
table test (tests/test_costs.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SATURATED_CORES = 0.75
"""The rest of the step keeps at least this share of the cores busy: a CPU-bound worker must take a core
from the intra-op pool rather than share an idle one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderLoad:
    """A step that waits for CPU-bound loading in the training process or its workers (ns per step)."""

    step_ns: float
    wait_ns: float
    """The step's DataLoader wait."""
    prep_cpu_ns: float
    """CPU the loading (fetch, transforms, collate) needs."""
    send_ns: float
    """A worker's cost of passing the step's batches through shared memory (0 without the probe)."""
    receive_ns: float
    """The training process's cost of receiving them."""
    other_cpu_ns: float
    """CPU everything else in the step uses (its intra-op threads)."""
    cores: int
    workers: int
    """num_workers today."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerPlan:
    step_ns: float
    """Predicted step time with `workers` loading."""
    workers: int
    threads: int | None
    """Intra-op threads to set so each worker has a core (when the compute already fills the cores)."""


def more_workers(load: LoaderLoad) -> WorkerPlan:
    """The step with more DataLoader workers. Workers overlap loading with compute, but on CPU they share
    the cores: the step is bound by the training process's own path (compute and receiving batches),
    by the loading spread over the workers, and by all the CPU work spread over the cores. When the
    rest of the step already keeps the cores busy (intra-op threads), a busy worker needs a core of its
    own, or the intra-op pool runs oversubscribed and its threads stall at every barrier
    (input_preprocess.py on 2 cores: ×0.88 with one worker): the worker's core comes out of the pool."""
    cores, current = load.cores, load.workers
    compute_ns = max(1.0, load.step_ns - load.wait_ns)
    loading = load.prep_cpu_ns + load.send_ns
    main_path = compute_ns + load.receive_ns
    if load.other_cpu_ns / compute_ns >= SATURATED_CORES * cores:
        options = [
            (max(main_path, loading / w, (load.other_cpu_ns + load.receive_ns) / (cores - w)), w)
            for w in range(current + 1, cores)
        ]
        step, workers = min(options) if options else (float(load.step_ns), current + 1)
        return WorkerPlan(step_ns=step, workers=workers, threads=cores - workers)
    workers = max(current + 1, min(cores, math.ceil(loading / compute_ns)))
    step = max(main_path, loading / workers, (load.other_cpu_ns + loading + load.receive_ns) / cores)
    return WorkerPlan(step_ns=step, workers=workers, threads=None)


def batched_requests(overhead: float, vector: float, batch: int) -> float:
    """Requests per second, as a ratio, when `batch` requests share one call instead of one each.

    `overhead` (per-op cost) and `vector` (matrix-vector products, which read the weights once per call
    however many rows it has) are shares of a batch-1 request's time, paid once per batch; the rest of a
    call is counted as if it grew with the batch (an under-estimate)."""
    shared = overhead + vector
    return 1.0 / ((1.0 - shared) + shared / batch)


def graph_break_saving(around_ns: float, calls: float, whole: int) -> float:
    """What a compiled step saves when its graph calls go from `calls` to `whole` (one forward, and one
    backward when it trains, per compiled frame): the time around the graphs (guards, wrappers, the eager
    code at the breaks) shrinks with the calls. Fusion across the breaks is not priced (a lower bound)."""
    return around_ns * (1 - whole / calls) if calls > whole else 0.0
