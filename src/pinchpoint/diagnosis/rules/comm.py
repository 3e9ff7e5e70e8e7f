"""`comm.exposed` for a captured run: time the ranks spend in communication that compute did not hide.

Pattern: the training threads sit in collectives (under DDP on CPU: blocked at the gradient all-reduce
at the end of backward) for a share of every step that all ranks pay. The part of a step's comm time
that every rank has is the transfer; what one rank has beyond that is waiting for a slower rank, which
`imbalance.straggler` reports (`analysis/comm.py`).
Why it's slow: gradients cross the link while nothing computes. With gradient accumulation under DDP,
every micro-batch's backward all-reduces the whole model though only the last one's result is used.
Fix: accumulation → `no_sync()` on all micro-batches but the last (one all-reduce per step). Otherwise,
on CPU, all-reduce less often (accumulate, larger batches): a compression hook's casts run on the same
cores (fp16_compress_hook made examples/comm_exposed.py ×0.90 *slower* here); on GPUs fewer bytes (a
bf16 compression hook), `static_graph=True`, buckets sized so the first ones start early.
Reference: XProf CollectiveBoundRule (≥ 30% collective-bound), device-collectives ≥ 3% / ≥ 15%
(rules-catalog §5); DDP's notes on `no_sync` for gradient accumulation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from pinchpoint.analysis.comm import CommActivity, CrossRankComm, cross_rank_comm
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject
from pinchpoint.diagnosis.rules.tensor_parallel import outweighs_gradients
from pinchpoint.trace.run import DdpConfig

COMM_SHARE_MIN = 0.05
"""Exposed transfer worth a finding: 5% of the step (between XProf's 3% note and 15% warning)."""
ACCUMULATION_MIN = 1.5
"""backward() calls per optimizer step from which the program accumulates gradients."""
COMPRESSION_SAVES = 0.5
"""A bf16/fp16 compression hook halves the bytes of an fp32 all-reduce (bandwidth-bound transfer)."""
GATHERS = frozenset({"all_gather_single", "all_gather_into_tensor", "all_gather", "_allgather_base"})
"""Collectives that gather parameters (FSDP2 calls `all_gather_single` in torch 2.13)."""
KINDS_SHOWN = 4
"""Collectives (by phase) named in the evidence, largest first."""
BACKWARD_PER_FORWARD = 2.0
"""A backward does about twice its forward's work (a matmul's gradients for its input and its weight)."""


class CommExposed(Rule):
    """Pattern: every rank sits in collectives for a share of each step that compute does not hide.
    Why it's slow: gradients cross the link while nothing computes (see the module's docstring).
    Fix: `no_sync()` under accumulation; otherwise all-reduce less often, or send fewer bytes.
    Reference: XProf CollectiveBoundRule; DDP's notes on `no_sync` (rules-catalog §5).
    """

    id: ClassVar[Category] = Category.COMM_EXPOSED
    title: ClassVar[str] = "Communication is not hidden behind compute"
    scope: ClassVar[Scope] = Scope.RANKS
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "comm"})

    def check(self, s: Subject) -> Iterable[Finding]:
        found = comm_exposed(s.job.runs)
        if found is not None:
            yield found


@dataclass(frozen=True, slots=True)
class _Remedy:
    title: Fact
    fix: Fact
    snippet: Fact
    confidence: Confidence
    speedup: float
    evidence: tuple[Fact, ...]
    kind: FixKind | None = None


def comm_exposed(ranks: Sequence[RankAnalysis]) -> Finding | None:
    rs = [r for r in ranks if r.comm is not None and r.steps is not None and r.steps.mean_ns > 0]
    if not rs or any(r.comm is not None and r.comm.pipeline is not None for r in rs):
        return None  # (a pipeline's comm is its stages waiting for each other: `pipeline.bubble`)
    if any(outweighs_gradients(r) for r in rs):
        return None  # (tensor parallelism moving activations: `comm.tensor_parallel` prices them)
    acts = [(r.rank, r.comm) for r in rs if r.comm is not None]
    cross = cross_rank_comm(acts)
    lead = rs[0]
    assert lead.comm is not None and lead.steps is not None
    transfer = cross.transfer_ns if cross is not None else lead.comm.mean_ns
    step = max(r.steps.mean_ns for r in rs if r.steps is not None)
    share = transfer / step
    if share < COMM_SHARE_MIN:
        return None
    comm, ddp = lead.comm, lead.comm.ddp
    evidence = _setup_lines(lead, cross, transfer, share)
    # On CPU the all-reduce's copies and sums run on the cores backward computes on: what it costs
    # beyond the wait shows as a backward slower than twice the forward.
    on_cpu = ddp is not None and ddp.devices == ("cpu",)
    contention = 0.0
    if on_cpu:
        slowed = [_backward_excess(r) for r in rs]
        contention = sum(slowed) / len(slowed)
        if contention > COMM_SHARE_MIN * step:
            fwd, bwd = (_mean_phase(rs, p) for p in ("forward", "backward"))
            evidence.append(
                Fact(
                    "comm.exposed.contention",
                    backward_ns=bwd,
                    forward_ns=fwd,
                    expected_x=BACKWARD_PER_FORWARD,
                    contention_ns=contention,
                )
            )
    cost = transfer + contention
    accumulating = ddp is not None and comm.backward_calls >= ACCUMULATION_MIN
    # More than one blocked all-reduce a step: not all under no_sync (one that overlapped its backward
    # entirely is not seen, so "every backward waited" would miss accumulations that all-reduce each).
    no_sync = accumulating and comm.synced_backwards >= ACCUMULATION_MIN
    regather = transfer / max(1.0, comm.mean_ns) * _gathers(comm, "backward")
    if no_sync:
        remedy = _no_sync(comm, cost, step)
    elif ddp is None and regather >= COMM_SHARE_MIN * step and (comm.fsdp is None or comm.fsdp.resharding):
        remedy = _reshard(comm, regather, step)
    elif on_cpu:
        remedy = _less_often(cost, step)
    else:
        remedy = _fewer_bytes(cost, step)
    return Finding(
        id=Category.COMM_EXPOSED,
        title=remedy.title,
        share=min(1.0, cost / step),
        estimated_speedup=max(1.0, remedy.speedup),
        basis=Basis.MODEL,
        confidence=remedy.confidence,
        evidence=(*evidence, *remedy.evidence),
        fix=remedy.fix,
        snippet=remedy.snippet,
        ranks=tuple(r.rank for r in rs),
        fix_kind=remedy.kind or (FixKind.NO_SYNC if accumulating or on_cpu else None),
        fix_params=(
            ("micro_batches", round(comm.backward_calls) if accumulating else 2),
            ("accumulating", int(no_sync)),
        ),
    )


def _setup_lines(
    lead: RankAnalysis, cross: CrossRankComm | None, transfer: float, share: float
) -> list[Fact]:
    """The transfer, how the model is split (DDP, FSDP), and the collectives by kind."""
    assert lead.comm is not None
    comm, ddp = lead.comm, lead.comm.ddp
    evidence: list[Fact] = [_transfer_line(lead, cross, transfer, share)]
    if ddp is not None:
        evidence.append(_ddp_line(ddp))
    if comm.fsdp is not None:
        f = comm.fsdp
        evidence.append(
            Fact(
                "comm.exposed.fsdp",
                modules=f.modules,
                resharding=f.resharding,
                mesh=f.mesh,
                param_dtype=f.param_dtype or "",
                param_bytes=f.param_bytes,
            )
        )
    kinds = _kinds_line(comm)
    if kinds is not None:
        evidence.append(kinds)
    return evidence


def _transfer_line(lead: RankAnalysis, cross: CrossRankComm | None, transfer: float, share: float) -> Fact:
    if cross is None:
        return Fact("comm.exposed.rank_transfer", rank=lead.rank, transfer_ns=transfer, share=share)
    return Fact(
        "comm.exposed.transfer",
        transfer_ns=transfer,
        share=share,
        steps=cross.matched_steps,
        wait_ns=tuple(sorted(cross.wait_ns.items())),
    )


def _ddp_line(ddp: DdpConfig) -> Fact:
    return Fact(
        "comm.exposed.ddp",
        backend=ddp.backend,
        world_size=ddp.world_size,
        grad_bytes=ddp.grad_bytes,
        params=ddp.params,
        bucket_bytes=ddp.bucket_cap_bytes,
        hook=ddp.comm_hook,
        static_graph=ddp.static_graph,
    )


TITLE = CommExposed.title


def _no_sync(comm: CommActivity, cost: float, step: float) -> _Remedy:
    """Gradient accumulation that all-reduces every micro-batch: all but the last under no_sync()."""
    k = comm.backward_calls
    saved = cost * (comm.synced_backwards - 1) / comm.synced_backwards
    after = max(1.0, step - saved)
    return _Remedy(
        title=Fact("comm.exposed.no_sync_title", name=TITLE),
        fix=Fact("comm.exposed.no_sync_fix", micro_batches=k),
        snippet=Fact("comm.exposed.no_sync_snippet"),
        confidence=Confidence.HIGH,
        speedup=step / after,
        evidence=(
            Fact("comm.exposed.synced_backwards", backwards=k, synced=comm.synced_backwards),
            Fact("comm.exposed.no_sync_after", after_ns=after, step_ns=step),
        ),
    )


def _gathers(comm: CommActivity, phase: str) -> float:
    """Time a step spends in parameter all-gathers within `phase`."""
    return sum(ns for (name, ph), ns in comm.by_kind.items() if name in GATHERS and ph == phase)


def _kinds_line(comm: CommActivity) -> Fact | None:
    """The largest collectives by the phase they ran in, where the run named them."""
    named = sorted(((k, v) for k, v in comm.by_kind.items() if k[0] != "comm"), key=lambda kv: -kv[1])
    if not named:
        return None
    return Fact(
        "comm.exposed.kinds",
        kinds=tuple(
            (name, phase, ns, comm.bytes_per_step.get((name, phase), 0.0))
            for (name, phase), ns in named[:KINDS_SHOWN]
        ),
    )


def _reshard(comm: CommActivity, regather: float, step: float) -> _Remedy:
    """FSDP gathers each sharded module's parameters again in backward (`reshard_after_forward=True`,
    its default): kept gathered from forward to backward, those all-gathers go (ZeRO-2's memory)."""
    after = max(1.0, step - regather)
    return _Remedy(
        title=Fact("comm.exposed.reshard_title", name=TITLE),
        fix=Fact("comm.exposed.reshard_fix"),
        snippet=Fact("comm.exposed.reshard_snippet"),
        confidence=Confidence.MEDIUM,
        speedup=step / after,
        evidence=(
            Fact(
                "comm.exposed.regather",
                backward_ns=regather,
                forward_ns=_gathers(comm, "forward"),
                after_ns=after,
                step_ns=step,
            ),
        ),
        kind=FixKind.RESHARD,
    )


def _less_often(cost: float, step: float) -> _Remedy:
    """On CPU the all-reduce's sums and copies run on the cores that compute: fewer bytes through a
    compression hook cost casts on the same cores. All-reducing half as often halves its cost per sample."""
    speedup = 2 * step / max(1.0, 2 * step - cost)
    return _Remedy(
        title=Fact("rule.title", name=TITLE),
        fix=Fact("comm.exposed.less_often_fix"),
        snippet=Fact("comm.exposed.no_sync_snippet"),
        confidence=Confidence.MEDIUM,
        speedup=speedup,
        evidence=(Fact("comm.exposed.less_often", per_batch_ns=cost / 2, cost_ns=cost, speedup=speedup),),
    )


def _fewer_bytes(cost: float, step: float) -> _Remedy:
    after = max(1.0, step - cost * COMPRESSION_SAVES)
    return _Remedy(
        title=Fact("rule.title", name=TITLE),
        fix=Fact("comm.exposed.fewer_bytes_fix"),
        snippet=Fact("comm.exposed.compression_snippet"),
        confidence=Confidence.MEDIUM,
        speedup=step / after,
        evidence=(Fact("comm.exposed.fewer_bytes", after_ns=after, step_ns=step),),
    )


def _mean_phase(ranks: Sequence[RankAnalysis], phase: str) -> float:
    vals = [r.steps.phase_ns.get(phase, 0.0) for r in ranks if r.steps is not None]
    return sum(vals) / len(vals) if vals else 0.0


def _backward_excess(rank: RankAnalysis) -> float:
    """Backward compute beyond `BACKWARD_PER_FORWARD` × forward (0 without both phases)."""
    if rank.steps is None:
        return 0.0
    fwd, bwd = rank.steps.phase_ns.get("forward", 0.0), rank.steps.phase_ns.get("backward", 0.0)
    return max(0.0, bwd - BACKWARD_PER_FORWARD * fwd) if fwd > 0 else 0.0
