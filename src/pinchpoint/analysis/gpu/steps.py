"""Steps of a Kineto trace from its `ProfilerStep#N` ranges: duration, GPU busy time and DataLoader wait.

A step is the host range `ProfilerStep#N` that `torch.profiler.profile.step()` records. Inside it, the
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
from pinchpoint.analysis.gpu._common import HOST_RANGE_KINDS, I64, busy_within, gpu_busy, name_mask
from pinchpoint.trace.kineto import EventTable, KinetoTrace

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def is_dataloader_wait(name: str) -> bool:
    """The DataLoader iterator's `__next__` range, as PyTorch names it in every schema seen so far."""
    return "DataLoader" in name and "__next__" in name


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    number: int
    """N of `ProfilerStep#N`."""
    start_ns: int
    dur_ns: int
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


def dataloader_intervals(ev: EventTable) -> iv.Intervals:
    m = name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)
    return iv.union(ev.start_ns[m], ev.end_ns[m])


def step_stats(trace: KinetoTrace) -> StepStats:
    ev = trace.events
    numbers, starts, ends = step_windows(ev)
    loader = dataloader_intervals(ev)
    n_loader = int(np.count_nonzero(name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)))
    if numbers.size == 0:
        return StepStats(
            steps=(),
            note="no ProfilerStep#N ranges in the trace (profile with torch.profiler and call prof.step())",
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
        gpu_busy_fraction=float(gpu_ns.sum()) / total,
        dataloader_share=float(loader_ns.sum()) / total,
        dataloader_exposed_share=float(exposed_ns.sum()) / total,
        median_dataloader_share=float(np.median(loader_ns / safe)),
        median_dataloader_exposed_share=float(np.median(exposed_ns / safe)),
        dataloader_ranges=n_loader,
    )
