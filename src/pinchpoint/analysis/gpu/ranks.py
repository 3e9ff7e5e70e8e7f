"""Across ranks: who waits in collectives, and for whom (stragglers).

Collective kernels are matched across ranks by name and order: the k-th `ncclDevKernel_AllReduce...` of
rank 0 is the same collective as the k-th one of rank 1 (ranks run the same program). A collective kernel
starts when its rank arrives and ends when the data has moved, which needs every rank; so for one
collective, the shortest kernel across ranks is the transfer itself and belongs to the rank that arrived
last; every other rank's excess over that minimum is time spent waiting for it. Clocks of different
hosts need not agree: only durations are compared, never timestamps.

A straggler is a rank whose own work (compute-kernel time per step, or step time) exceeds the median of
the other ranks by more than STRAGGLER_EXCESS and that arrives last at most collectives, so the others
wait for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import I64, busy_within, kind_mask
from pinchpoint.analysis.gpu.kernels import is_communication_kernel
from pinchpoint.analysis.gpu.steps import step_bounds
from pinchpoint.trace.kineto import Kind, KinetoTrace

STRAGGLER_EXCESS = 0.10
"""A rank whose compute or step time is > 10% above the median of the other ranks (XProf and HTA use
robust spread statistics over many hosts; with 2–8 ranks a plain ratio is what can be judged)."""
LAST_ARRIVAL_SHARE = 0.5
"""…and that arrives last at ≥ half of the matched collectives (the others waited for it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSummary:
    rank: int
    steps: int
    median_step_ns: float | None
    compute_ns: int
    """Union of compute (non-communication) kernel time, inside steps when there are steps."""
    compute_per_step_ns: float | None
    collectives: int
    """This rank's collective kernels that were matched on every rank."""
    collective_ns: int
    """Their summed duration."""
    wait_ns: int
    """Summed excess of this rank's collective kernels over the shortest one of the same collective."""
    mean_wait_ns: float
    last_arrivals: int
    """Collectives at which this rank's kernel was the shortest (it arrived last)."""
    straggler: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RankComparison:
    ranks: tuple[RankSummary, ...]
    """Sorted by rank."""
    matched: int
    """Collectives matched on every rank."""
    unmatched: int
    """Collective kernels (all ranks together) left out: names or counts that differ between ranks."""
    wait_share: float
    """Waiting over all matched collective time (all ranks): high means imbalance, low means bandwidth."""
    stragglers: tuple[int, ...]
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankCollectives:
    """What the cross-rank comparison needs from one rank's trace (small: one number per collective
    kernel), so that ranks can be read and analysed apart (on a process pool or a cluster) and compared
    afterwards."""

    rank: int
    durations: Mapping[str, tuple[int, ...]]
    """Collective kernel name -> the durations of its kernels, in start order."""
    steps: int
    median_step_ns: float | None
    compute_ns: int
    """Union of compute (non-communication) kernel time, inside steps when there are steps."""


def rank_collectives(trace: KinetoTrace) -> RankCollectives:
    ev = trace.events
    rows = np.flatnonzero(kind_mask(ev, Kind.KERNEL) & ev.mask_names(is_communication_kernel))
    by_name: dict[str, tuple[int, ...]] = {}
    for nid in np.unique(ev.name[rows]).tolist():
        by_name[ev.names[nid]] = tuple(ev.dur_ns[rows[ev.name[rows] == nid]].tolist())  # rows: start order
    numbers, s_starts, s_ends = step_bounds(ev)
    n_steps = int(numbers.size)
    return RankCollectives(
        rank=trace.meta.rank,
        durations=by_name,
        steps=n_steps,
        median_step_ns=float(np.median(s_ends - s_starts)) if n_steps else None,
        compute_ns=_compute_ns(trace, s_starts, s_ends),
    )


def compare_ranks(traces: Sequence[KinetoTrace]) -> RankComparison:
    return compare_collectives([rank_collectives(t) for t in traces])


def compare_collectives(profiles: Sequence[RankCollectives]) -> RankComparison:
    profiles = sorted(profiles, key=lambda p: p.rank)
    ranks = [p.rank for p in profiles]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"two traces claim the same rank: {ranks}; pass one trace per rank")
    durs, unmatched = _match_collectives(profiles)  # (n_ranks, matched)
    matched = durs.shape[1]
    fastest = durs.min(axis=0) if matched else np.zeros(0, dtype=np.int64)
    waits = durs - fastest
    last = np.zeros(durs.shape, dtype=bool)
    if matched:
        last[np.argmin(durs, axis=0), np.arange(matched)] = True

    summaries = []
    for i, p in enumerate(profiles):
        summaries.append(
            RankSummary(
                rank=p.rank,
                steps=p.steps,
                median_step_ns=p.median_step_ns,
                compute_ns=p.compute_ns,
                compute_per_step_ns=p.compute_ns / p.steps if p.steps else None,
                collectives=matched,
                collective_ns=int(durs[i].sum()),
                wait_ns=int(waits[i].sum()),
                mean_wait_ns=float(waits[i].mean()) if matched else 0.0,
                last_arrivals=int(last[i].sum()),
                straggler=False,
            )
        )
    flagged = _stragglers(summaries, matched)
    summaries = [replace(s, straggler=s.rank in flagged) for s in summaries]
    total = int(durs.sum())
    note = None
    if len(profiles) < 2:
        note = "one rank: nothing to compare"
    elif matched == 0:
        note = "no collective kernel matched on every rank: waits cannot be measured"
    return RankComparison(
        ranks=tuple(summaries),
        matched=matched,
        unmatched=unmatched,
        wait_share=float(waits.sum()) / total if total else 0.0,
        stragglers=tuple(sorted(flagged)),
        note=note,
    )


def _match_collectives(profiles: Sequence[RankCollectives]) -> tuple[I64, int]:
    """Durations (ranks × matched collectives), and the number of collective kernels left unmatched."""
    per_rank = [p.durations for p in profiles]
    all_kernels = sum(len(d) for by_name in per_rank for d in by_name.values())
    if len(profiles) < 2:
        return np.zeros((len(profiles), 0), dtype=np.int64), all_kernels
    common = sorted(set.intersection(*(set(r) for r in per_rank)))
    columns = []
    for name in common:
        n = min(len(r[name]) for r in per_rank)
        columns.append(np.array([r[name][:n] for r in per_rank], dtype=np.int64).reshape(len(per_rank), n))
    durs = np.concatenate(columns, axis=1) if columns else np.zeros((len(profiles), 0), dtype=np.int64)
    return durs.astype(np.int64), all_kernels - int(durs.size)


def _compute_ns(t: KinetoTrace, s_starts: I64, s_ends: I64) -> int:
    ev = t.events
    m = kind_mask(ev, Kind.KERNEL) & ~ev.mask_names(is_communication_kernel)
    busy = iv.union(ev.start_ns[m], ev.end_ns[m])
    if s_starts.size == 0:
        return iv.total(busy)
    windows = iv.union(s_starts, s_ends)
    return int(busy_within(busy, *windows).sum())


def _stragglers(ranks: list[RankSummary], matched: int) -> set[int]:
    if len(ranks) < 2:
        return set()
    out = set()
    for r in ranks:
        others = [o for o in ranks if o.rank != r.rank]
        slow = _above(_work(r), [_work(o) for o in others])
        slow |= _above(r.median_step_ns, [o.median_step_ns for o in others])
        waited_for = matched == 0 or r.last_arrivals >= LAST_ARRIVAL_SHARE * matched
        if slow and waited_for:
            out.add(r.rank)
    return out


def _work(r: RankSummary) -> float:
    return r.compute_per_step_ns if r.compute_per_step_ns is not None else float(r.compute_ns)


def _above(mine: float | None, theirs: list[float | None]) -> bool:
    ref = [x for x in theirs if x is not None]
    return mine is not None and bool(ref) and mine > (1 + STRAGGLER_EXCESS) * float(np.median(ref))
