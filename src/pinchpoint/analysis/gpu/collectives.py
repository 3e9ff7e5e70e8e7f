"""Collectives by kind and by the phase that issued them, with the time no compute hid.

Each communication kernel (`kernels.is_communication_kernel`) is named by kind from its function name
(all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, send/recv) and placed in a phase by the
host call that launched it (joined by `correlation`): inside autograd's engine (`autograd::engine::
evaluate_function: …`, where DDP's reducer and FSDP's reduce-scatters run) is backward, inside
`Optimizer.step` the optimizer, elsewhere in a profiled step forward (DDP's buffer broadcast, FSDP's
all-gathers before a layer), outside every step "outside steps". Its exposed time is the part of it no
compute kernel overlapped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    HOST_API_KINDS,
    HOST_RANGE_KINDS,
    I64,
    busy_within,
    join_by_key,
    kind_mask,
)
from pinchpoint.analysis.gpu.kernels import GpuWork, classify, kernel_function_name
from pinchpoint.analysis.gpu.steps import step_windows
from pinchpoint.trace.kineto import EventTable, KinetoTrace

KINDS = (
    ("all_reduce", re.compile(r"all_?reduce|cross_device_reduce", re.I)),  # (vLLM's custom all-reduce)
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
    ("all_gather", re.compile(r"all_?gather", re.I)),
    ("all_to_all", re.compile(r"all_?to_?all", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("send_recv", re.compile(r"send|recv", re.I)),
)
BACKWARD = ("autograd::engine::evaluate_function",)
OPTIMIZER = ("Optimizer.step", "Optimizer.zero_grad")


def kind_of(name: str) -> str:
    fn = kernel_function_name(name)
    return next((kind for kind, pattern in KINDS if pattern.search(fn)), "other")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveUse:
    kind: str
    phase: str
    """forward, backward, optimizer, or outside steps (`unknown` where no launch call was found)."""
    count: int
    ns: int
    exposed_ns: int
    """The part of `ns` no compute kernel overlapped."""


def _covered(ev: EventTable, prefixes: tuple[str, ...], tids: I64, points: I64) -> np.ndarray:
    """For each point, whether a host range on its thread whose name starts with one of `prefixes` holds it."""
    rows = np.flatnonzero(kind_mask(ev, *HOST_RANGE_KINDS) & ev.mask_names(lambda s: s.startswith(prefixes)))
    out = np.zeros(points.shape, dtype=bool)
    for tid in np.unique(tids).tolist():
        mine = rows[ev.tid[rows] == tid]
        if mine.size:
            at = tids == tid
            out[at] = iv.covered_by(points[at], iv.union(ev.start_ns[mine], ev.end_ns[mine]))
    return out


def collective_use(trace: KinetoTrace) -> tuple[CollectiveUse, ...]:
    """Per (kind, phase): the collectives, their GPU time and the part exposed; biggest first."""
    ev = trace.events
    work = classify(ev)
    comm = np.flatnonzero(work == GpuWork.COMMUNICATION)
    if comm.size == 0:
        return ()
    compute = np.flatnonzero(work == GpuWork.COMPUTE)
    hidden = busy_within(
        iv.union(ev.start_ns[compute], ev.end_ns[compute]), ev.start_ns[comm], ev.end_ns[comm]
    )
    launches = np.flatnonzero(kind_mask(ev, *HOST_API_KINDS))
    hit = join_by_key(ev.correlation[comm], ev.correlation[launches])
    found = hit >= 0
    at = np.zeros(comm.shape, dtype=np.int64)
    tids = np.full(comm.shape, -1, dtype=np.int64)
    at[found] = ev.start_ns[launches[hit[found]]]  # (no launch call at all: an XProf TPU plane)
    tids[found] = ev.tid[launches[hit[found]]]
    backward = _covered(ev, BACKWARD, tids, at)
    optimizer = _covered(ev, OPTIMIZER, tids, at)
    _, s_start, s_end = step_windows(ev)
    in_step = iv.covered_by(at, iv.union(s_start, s_end)) if s_start.size else np.zeros(at.shape, dtype=bool)
    phase = np.where(
        ~found,
        "unknown",
        np.where(
            backward,
            "backward",
            np.where(optimizer, "optimizer", np.where(in_step, "forward", "outside steps")),
        ),
    )
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(comm.tolist()):
        acc = groups.setdefault((kind_of(ev.names[int(ev.name[row])]), str(phase[i])), [0, 0, 0])
        dur = int(ev.dur_ns[row])
        acc[0] += 1
        acc[1] += dur
        acc[2] += max(0, dur - int(hidden[i]))
    return tuple(
        sorted(
            (
                CollectiveUse(kind=k, phase=p, count=a[0], ns=a[1], exposed_ns=a[2])
                for (k, p), a in groups.items()
            ),
            key=lambda c: -c.ns,
        )
    )
