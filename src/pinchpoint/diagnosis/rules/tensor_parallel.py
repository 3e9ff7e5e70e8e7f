"""`comm.tensor_parallel`: tensor parallelism whose per-layer all-reduces move more than data
parallelism's gradient all-reduce would.

A column-wise then row-wise split all-reduces each block's output in forward and its input's gradient
in backward: activation-sized traffic (tokens x hidden per block, twice a step), on every rank. Data
parallelism over the same ranks all-reduces the gradients once a step: parameter-sized traffic. Where
the model fits one rank and the activations outweigh the parameters, the split costs more than it
saves. Priced from this run's own collectives: the time their bytes took, scaled to the gradients'
bytes (the same collective over the same links), taken as fully exposed (DDP overlaps part of it with
backward). The matmuls' work per rank is the same either way (half the matmul on the whole batch, or
the whole matmul on half the batch); the rest of forward and backward (elementwise work on each block's
output, which every rank repeats, and DTensor's own dispatch) runs on the whole batch under tensor
parallelism and on each rank's share under data parallelism: priced as shrinking by the degree (the
elementwise work on sharded activations does not shrink, DTensor's dispatch goes entirely).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject
from pinchpoint.trace.parallel import TensorParallelConfig
from pinchpoint.trace.run import Phase

FUNCTIONAL = "functional."
"""The collectives DTensor calls (`capture/dist_hooks._wrap_functional` names them so)."""
SHARE_MIN = 0.10
"""Tensor parallelism's collectives holding at least 10% of the step ..."""
TRAFFIC_X_MIN = 2.0
"""... moving at least twice the bytes the gradients' all-reduce would."""
GAIN_MIN = 1.05


class TensorParallelComm(Rule):
    """Pattern: parameters split by tensor parallelism (DTensor `Shard` placements) on a model that fits
    one rank, its all-reduces carrying activations larger than the model's gradients.
    Why it's slow: every block all-reduces tokens x hidden values in forward and again in backward, on
    the critical path; data parallelism moves the gradients once a step, overlapped with backward.
    Fix: data parallelism (DDP, or FSDP2 where the model's state does not fit one rank) over these
    ranks; keep tensor parallelism for the dimension where weights do not fit (2-D: TP within a node,
    data parallel across), and a smaller TP degree where it is needed at all.
    Reference: Megatron-LM (Shoeybi et al. 2019), TP's two all-reduces per transformer layer;
    torchtitan's 2-D parallelism (TP intra-node, FSDP across); PyTorch's tensor-parallel tutorial.
    """

    id: ClassVar[Category] = Category.COMM_TENSOR_PARALLEL
    title: ClassVar[str] = "Tensor parallelism moves more than data parallelism would"
    scope: ClassVar[Scope] = Scope.RANKS
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "comm"})

    def check(self, s: Subject) -> Iterable[Finding]:
        split = [(r, c) for r in s.job.runs if (c := _config(r)) is not None and r.steps is not None]
        if not split:
            return
        cfg = split[0][1]
        traffic = {r.rank: _traffic(r) for r, _ in split}
        worst = max(split, key=lambda rc: traffic[rc[0].rank][0] / _step_ns(rc[0]))[0]
        tp_ns, tp_bytes = traffic[worst.rank]
        step = _step_ns(worst)
        dp_bytes = cfg.param_bytes
        if tp_ns < SHARE_MIN * step or not outweighs_gradients(worst):
            return
        dp_ns = tp_ns * dp_bytes / tp_bytes
        other = _outside_matmuls_ns(worst)
        spared = other * (1 - 1 / cfg.degree)
        speedup = step / max(1.0, step - tp_ns + dp_ns - spared)
        if speedup < GAIN_MIN:
            return
        kinds = worst.comm.by_kind if worst.comm is not None else {}
        sizes = worst.comm.bytes_per_step if worst.comm is not None else {}
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=tp_ns / step,
            estimated_speedup=speedup,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact(
                    "comm.tensor_parallel.plan",
                    degree=cfg.degree,
                    sharded=cfg.sharded_params,
                    placements=cfg.placements,
                    param_bytes=cfg.param_bytes,
                ),
                *(
                    Fact(
                        "comm.tensor_parallel.kind",
                        name=name,
                        phase=phase,
                        ns=ns,
                        nbytes=sizes.get((name, phase), 0.0),
                        share=ns / step,
                    )
                    for (name, phase), ns in sorted(kinds.items(), key=lambda kv: -kv[1])
                    if name.startswith(FUNCTIONAL) and ns > 0
                ),
                Fact(
                    "comm.tensor_parallel.rank",
                    rank=worst.rank,
                    ns=tp_ns,
                    share=tp_ns / step,
                    nbytes=tp_bytes,
                ),
                Fact("comm.tensor_parallel.dp", nbytes=dp_bytes, ns=dp_ns, ratio=tp_bytes / dp_bytes),
                Fact("comm.tensor_parallel.replicated", ns=other, spared_ns=spared, degree=cfg.degree),
            ),
            fix=Fact("comm.tensor_parallel.fix", degree=cfg.degree, param_bytes=cfg.param_bytes),
            snippet=Fact("comm.tensor_parallel.snippet"),
            ranks=tuple(sorted(traffic)),
            fix_kind=FixKind.DATA_PARALLEL,
            fix_params=(("tp_degree", 1),),
        )


def outweighs_gradients(r: RankAnalysis) -> bool:
    """Tensor parallelism's collectives on this rank move `TRAFFIC_X_MIN` times the model's gradients:
    its comm is this rule's, not comm.exposed's."""
    cfg = _config(r)
    return cfg is not None and cfg.param_bytes > 0 and _traffic(r)[1] >= TRAFFIC_X_MIN * cfg.param_bytes


def _config(r: RankAnalysis) -> TensorParallelConfig | None:
    return r.comm.tensor_parallel if r.comm is not None else None


def _step_ns(r: RankAnalysis) -> float:
    return max(1.0, r.steps.mean_ns) if r.steps is not None else 1.0


COMPUTE = (Phase.FORWARD.value, Phase.BACKWARD.value)


def _outside_matmuls_ns(r: RankAnalysis) -> float:
    """Forward and backward's time per step outside the matmuls (the op window's matmul share of its
    steps, applied to the steady steps); 0 without an op window."""
    assert r.steps is not None
    compute = sum(r.steps.phase_ns.get(p, 0.0) for p in COMPUTE)
    ops = r.ops
    if ops is None or ops.window_step_ns <= 0:
        return 0.0
    matmul = sum(ops.matmul_ns_per_step.values()) * r.steps.mean_ns / ops.window_step_ns
    return max(0.0, compute - matmul)


def _traffic(r: RankAnalysis) -> tuple[float, float]:
    """The rank's time per step in tensor parallelism's collectives (their waits with them), no more
    than its exposed comm, and their bytes per step."""
    assert r.comm is not None
    ns = sum(v for (name, _), v in r.comm.by_kind.items() if name.startswith(FUNCTIONAL))
    nbytes = sum(v for (name, _), v in r.comm.bytes_per_step.items() if name.startswith(FUNCTIONAL))
    return min(ns, r.comm.mean_ns), nbytes
