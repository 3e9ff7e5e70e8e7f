"""Steps of a Kineto trace from its `ProfilerStep#N` ranges: duration, GPU busy time and DataLoader wait.

A step is the host range `ProfilerStep#N` that `torch.profiler.profile.step()` records, seen from the
device when the device lags: the host only enqueues kernels, and a GPU-bound program's host runs ahead,
so its host steps are far shorter than its real ones (an fp32 MLP on an H200: 3.8 ms host steps, 30 ms of
GPU work each). `step_bounds` therefore starts each step where the GPU starts the work that step
launched (joined by correlation), and ends it where the next one starts. Inside the host step, the
DataLoader's `__next__` range (`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`, or the
multi-process iterator) is the time the training loop waited for its batch. The part of that wait during
which the GPU is idle too is *exposed*: removing it would shorten the step (the input-bound signal; the
TensorBoard plugin's "DataLoader" share of the step). Without `ProfilerStep#N` ranges there are no steps,
and the result says so rather than guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    GPU_KINDS,
    HOST_API_KINDS,
    HOST_RANGE_KINDS,
    I64,
    busy_within,
    gpu_busy,
    join_by_key,
    kind_mask,
    name_mask,
)
from pinchpoint.stats.quantiles import nearest_rank
from pinchpoint.trace.kineto import EventTable, KinetoTrace

STEP_NAME = re.compile(r"^(?:ProfilerStep#|pinchpoint/step )(\d+)$")
"""torch.profiler's step ranges, and pinchpoint's own (`pinchpoint run --annotate nvtx|itt`), which an
Nsight Systems or VTune timeline of the run carries."""


def is_dataloader_wait(name: str) -> bool:
    """The DataLoader iterator's `__next__` range, as PyTorch names it in every schema seen so far."""
    return ("DataLoader" in name and "__next__" in name) or name == "pinchpoint/data_wait"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    number: int
    """N of `ProfilerStep#N`."""
    start_ns: int
    dur_ns: int
    """The step as `step_bounds` cuts it (device-aligned), not the host range alone."""
    gpu_busy_ns: int
    """Time inside the host step window during which any kernel, copy or memset ran (any device)."""
    dataloader_ns: int
    """Time inside the step spent in DataLoader `__next__` ranges."""
    dataloader_exposed_ns: int
    """The part of `dataloader_ns` during which the GPU was idle as well."""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStats:
    steps: tuple[Step, ...]
    note: str | None = None
    """Why there are no steps (or what was odd about them), for the report; None when all is well."""
    median_step_ns: float = 0.0
    mean_step_ns: float = 0.0
    p90_step_ns: float = 0.0
    """The 90th percentile step, nearest rank (`stats.quantiles`), as for runs."""
    gpu_busy_fraction: float = 0.0
    """GPU busy time over all step time (summed over steps)."""
    dataloader_share: float = 0.0
    """DataLoader wait over all step time."""
    dataloader_exposed_share: float = 0.0
    """Exposed DataLoader wait (GPU idle too) over all step time: the input-bound measure."""
    median_dataloader_share: float = 0.0
    """Median over steps of each step's DataLoader share."""
    median_dataloader_exposed_share: float = 0.0
    dataloader_ranges: int = 0
    """DataLoader `__next__` ranges found anywhere in the trace (inside steps or not)."""

    @property
    def has_steps(self) -> bool:
        return bool(self.steps)


def step_windows(ev: EventTable) -> tuple[I64, I64, I64]:
    """(numbers, starts, ends) of the `ProfilerStep#N` ranges, one per N (the longest when repeated)."""
    number_of = {i: int(m.group(1)) for i, s in enumerate(ev.names) if (m := STEP_NAME.match(s))}
    rows = np.flatnonzero(name_mask(ev, lambda s: STEP_NAME.match(s) is not None, *HOST_RANGE_KINDS))
    numbers = np.array([number_of[int(ev.name[r])] for r in rows], dtype=np.int64)
    if rows.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    # Table order is (start, -dur): for each N keep the first row (earliest, longest).
    _, first = np.unique(numbers, return_index=True)
    rows, numbers = rows[first], numbers[first]
    order = np.argsort(ev.start_ns[rows], kind="stable")
    rows, numbers = rows[order], numbers[order]
    return numbers, ev.start_ns[rows].copy(), ev.end_ns[rows]


def step_bounds(ev: EventTable) -> tuple[I64, I64, I64]:
    """(numbers, starts, ends) of the steps as the program lives them: contiguous windows, each from the
    point its work starts on the device (the first kernel, copy or memset launched from inside its host
    step; the host step's start when it launched nothing) to the next step's; the first starts no later
    than its host step, the last ends when both its host step and its device work have ended."""
    numbers, h_start, h_end = step_windows(ev)
    if numbers.size == 0:
        return numbers, h_start, h_end
    d_start, d_end = _device_work(ev, h_start, h_end)
    bound = np.maximum.accumulate(np.where(d_start >= 0, d_start, h_start))
    starts = bound.copy()
    starts[0] = min(int(h_start[0]), int(bound[0]))
    ends = np.empty_like(starts)
    ends[:-1] = bound[1:]
    ends[-1] = max(int(h_end[-1]), int(d_end[-1]), int(starts[-1]))
    return numbers, starts, ends


def _device_work(ev: EventTable, h_start: I64, h_end: I64) -> tuple[I64, I64]:
    """Per host step: (first start, last end) of the GPU activity launched from inside it; -1 if none."""
    n = h_start.size
    first = np.full(n, -1, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    gpu = np.flatnonzero(kind_mask(ev, *GPU_KINDS) & (ev.correlation >= 0))
    calls = np.flatnonzero(kind_mask(ev, *HOST_API_KINDS) & (ev.correlation >= 0))
    hit = join_by_key(ev.correlation[gpu], ev.correlation[calls])
    gpu, issued = gpu[hit >= 0], ev.start_ns[calls[hit[hit >= 0]]]
    step = np.searchsorted(h_start, issued, side="right") - 1
    ok = (step >= 0) & (issued < h_end[np.maximum(step, 0)])
    if not ok.any():
        return first, last
    step, gpu = step[ok], gpu[ok]
    big = np.iinfo(np.int64).max
    lo = np.full(n, big, dtype=np.int64)
    np.minimum.at(lo, step, ev.start_ns[gpu])
    np.maximum.at(last, step, ev.end_ns[gpu])
    first = np.where(lo == big, -1, lo)
    return first, last


def dataloader_intervals(ev: EventTable) -> iv.Intervals:
    m = name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)
    return iv.union(ev.start_ns[m], ev.end_ns[m])


def _how_to_mark(trace: KinetoTrace) -> str:
    """How the tool that wrote `trace` marks steps."""
    if trace.meta.schema.startswith("nsys"):
        return "mark steps with NVTX ranges named ProfilerStep#N, or run under `pinchpoint run --annotate nvtx` inside nsys"
    if trace.meta.schema.startswith("xprof"):
        return (
            "wrap each step in jax.profiler.StepTraceAnnotation('train', step_num=i), or TensorFlow's "
            "tf.profiler.experimental.Trace('train', step_num=i, _r=1)"
        )
    return "profile with torch.profiler and call prof.step()"


def step_stats(trace: KinetoTrace) -> StepStats:
    ev = trace.events
    numbers, starts, ends = step_bounds(ev)
    loader = dataloader_intervals(ev)
    n_loader = int(np.count_nonzero(name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)))
    if numbers.size == 0:
        return StepStats(
            steps=(),
            note=f"no ProfilerStep#N ranges in the trace ({_how_to_mark(trace)})",
            dataloader_ranges=n_loader,
        )
    busy = gpu_busy(ev)
    gpu_ns = busy_within(busy, starts, ends)
    loader_ns = busy_within(loader, starts, ends)
    exposed = iv.subtract(loader, busy)
    exposed_ns = busy_within(exposed, starts, ends)
    durs = ends - starts
    steps = tuple(
        Step(
            number=int(numbers[i]),
            start_ns=int(starts[i]),
            dur_ns=int(durs[i]),
            gpu_busy_ns=int(gpu_ns[i]),
            dataloader_ns=int(loader_ns[i]),
            dataloader_exposed_ns=int(exposed_ns[i]),
        )
        for i in range(numbers.size)
    )
    total = max(int(durs.sum()), 1)
    safe = np.maximum(durs, 1)
    note = None
    if n_loader == 0:
        note = "no DataLoader __next__ ranges: input wait cannot be measured from this trace"
    return StepStats(
        steps=steps,
        note=note,
        median_step_ns=float(np.median(durs)),
        mean_step_ns=float(durs.mean()),
        p90_step_ns=float(nearest_rank(sorted(int(d) for d in durs), 0.9)),
        gpu_busy_fraction=float(gpu_ns.sum()) / total,
        dataloader_share=float(loader_ns.sum()) / total,
        dataloader_exposed_share=float(exposed_ns.sum()) / total,
        median_dataloader_share=float(np.median(loader_ns / safe)),
        median_dataloader_exposed_share=float(np.median(exposed_ns / safe)),
        dataloader_ranges=n_loader,
    )
