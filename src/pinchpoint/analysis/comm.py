"""Communication per step: exposed time in collectives, per rank and across ranks.

A rank's `comm` time in a step is what its training thread spent in collectives called from Python
and, under DDP on CPU, blocked at the gradient all-reduce inside backward (`capture/dist_hooks.py`).
It holds two things: the transfer itself, and waiting for a rank that arrived late. The same step's
collective takes every rank at least the transfer, so across ranks the minimum of a step's comm time
is the transfer and each rank's excess over it is waiting (HTA's min-across-ranks rule for the same
collective, applied per step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pinchpoint.analysis.steps import exposed_by_phase, steady_steps
from pinchpoint.trace.parallel import FsdpConfig, PipelineConfig, TensorParallelConfig
from pinchpoint.trace.run import DdpConfig, Phase, RankData, Step

COMM = Phase.COMM.value


@dataclass(frozen=True, slots=True, kw_only=True)
class CommActivity:
    """One rank's communication over its steady steps."""

    per_step_ns: Mapping[int, int]
    """Exposed comm nanoseconds per step index."""
    mean_ns: float
    backward_calls: float
    """backward() calls per step (more than one: gradient accumulation)."""
    synced_backwards: float
    """Of them, calls that waited at a gradient all-reduce (DDP without no_sync)."""
    ddp: DdpConfig | None
    fsdp: FsdpConfig | None = None
    pipeline: PipelineConfig | None = None
    """A pipelining schedule's settings: its comm is stages waiting for each other (`pipeline.bubble`)."""
    tensor_parallel: TensorParallelConfig | None = None
    """Parameters split by tensor parallelism: its comm is the layers' activations (`comm.tensor_parallel`)."""
    by_kind: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(collective, phase it ran in) -> its comm time per step (mean): the collective named as called
    (`all_gather_single`; its async wait counted with it), the phase `forward`, `backward`, `optimizer`
    or `step` (outside them). Unnamed comm (an older run directory) is `comm`."""
    bytes_per_step: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(collective, phase) -> bytes its calls named per step (mean; its waits not counted again)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossRankComm:
    matched_steps: int
    """Steps every rank measured (by index)."""
    transfer_ns: float
    """Mean over those steps of the least comm time any rank had: the transfer every rank pays."""
    wait_ns: Mapping[int, float]
    """Per rank: mean comm time beyond the transfer (waiting for another rank)."""


def comm_activity(rank: RankData) -> CommActivity | None:
    """None when the program did no communication this can see (no DDP, no collective from Python)."""
    steps = steady_steps(rank.steps)
    has_comm = any(iv.phase is Phase.COMM for s in steps for iv in s.intervals)
    if not steps or not (has_comm or rank.ddp or rank.fsdp or rank.pipeline or rank.tensor_parallel):
        return None
    per_step = {s.index: exposed_by_phase(s).get(COMM, 0) for s in steps}
    calls = synced = 0
    for s in steps:
        backwards = [iv for iv in s.intervals if iv.phase is Phase.BACKWARD]
        waits = [iv for iv in s.intervals if iv.phase is Phase.COMM]
        calls += len(backwards)
        synced += sum(
            1 for b in backwards if any(b.start_ns <= w.start_ns and w.end_ns <= b.end_ns for w in waits)
        )
    by_kind, nbytes = _by_kind(steps)
    return CommActivity(
        per_step_ns=per_step,
        mean_ns=sum(per_step.values()) / len(per_step),
        backward_calls=calls / len(steps),
        synced_backwards=synced / len(steps),
        ddp=rank.ddp[-1] if rank.ddp else None,
        fsdp=rank.fsdp,
        pipeline=rank.pipeline,
        tensor_parallel=rank.tensor_parallel,
        by_kind=by_kind,
        bytes_per_step=nbytes,
    )


ENCLOSING = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)


def _by_kind(steps: Sequence[Step]) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """Comm time per step by (collective, enclosing phase), and bytes per step by collective."""
    time: dict[tuple[str, str], float] = {}
    nbytes: dict[tuple[str, str], float] = {}
    for s in steps:
        outer = [iv for iv in s.intervals if iv.phase in ENCLOSING]
        reach = -1
        for iv in sorted(
            (iv for iv in s.intervals if iv.phase is Phase.COMM), key=lambda i: (i.start_ns, -i.end_ns)
        ):
            if iv.end_ns <= reach:
                continue  # (a wait inside a blocking collective: that call's own time)
            reach = iv.end_ns
            name = (iv.what or COMM).removesuffix(".wait")
            around = next((o for o in outer if o.start_ns <= iv.start_ns and iv.end_ns <= o.end_ns), None)
            key = (name, around.phase.value if around is not None else "step")
            time[key] = time.get(key, 0.0) + iv.dur_ns / len(steps)
            if iv.nbytes is not None and not (iv.what or "").endswith(".wait"):
                nbytes[key] = nbytes.get(key, 0.0) + iv.nbytes / len(steps)
    return time, nbytes


def cross_rank_comm(ranks: Sequence[tuple[int, CommActivity]]) -> CrossRankComm | None:
    """Transfer and waiting across ranks, over the steps all of them measured; None for one rank."""
    if len(ranks) < 2:
        return None
    common = set.intersection(*(set(c.per_step_ns) for _, c in ranks))
    if not common:
        return None
    mins = {i: min(c.per_step_ns[i] for _, c in ranks) for i in common}
    transfer = sum(mins.values()) / len(common)
    wait = {r: sum(c.per_step_ns[i] - mins[i] for i in common) / len(common) for r, c in ranks}
    return CrossRankComm(matched_steps=len(common), transfer_ns=transfer, wait_ns=wait)
