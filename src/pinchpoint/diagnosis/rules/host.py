"""Host-bound steps: Python work in the loop, and per-op framework overhead."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import ms, pct, speedup_removing
from pinchpoint.trace.run import HOST_OTHER, Environment, Phase

HOST_SHARE_MIN = 0.05
"""Untraced host time above 5% of the step. TF/XProf grade "all others" ≥ 3% moderate, ≥ 15% high
(rules-catalog §1b); we start at 5% because zero_grad and loop bookkeeping always cost a little."""
HOST_SHARE_HIGH = 0.15
DISPATCH_SHARE_MIN = 0.10
"""Framework overhead (ops × measured cost of one tiny op) above 10% of the step."""
TINY_OP_NS = 50_000
"""Median op under 50 µs: ops are small enough that per-op overhead matters (cf. TF's kernel-launch
rule, rules-catalog §1b, and HTA's kernels shorter than their launch)."""
COMPUTE_PHASES = (Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value)


class HostPython:
    """Pattern: step time that no framework phase covers (outside forward, backward, optimizer, data).
    Why it's slow: Python runs one thing at a time; metrics via .tolist() loops, per-sample bookkeeping
    and logging every step hold the next step back.
    Fix: compute metrics on tensors, accumulate and log every N steps, move bookkeeping out of the loop.
    Reference: rules-catalog §1b (TF "all others" ≥ 3%/15%), §14 rule 2.
    """

    id: ClassVar[Category] = Category.HOST_PYTHON
    title: ClassVar[str] = "Python work in the training loop, outside framework ops"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, env: Environment, rank: RankAnalysis) -> Iterable[Finding]:
        steps = rank.steps
        if steps is None:
            return
        other_share = steps.share(HOST_OTHER)
        evidence = [
            f"{pct(other_share)} of the step ({ms(steps.phase_ns.get(HOST_OTHER, 0.0))}) is outside data "
            "loading, forward, backward and the optimizer step"
        ]
        loose_share = 0.0
        if rank.ops is not None and rank.ops.window_step_ns > 0:
            loose_share = min(other_share, rank.ops.loose_op_ns_per_step / rank.ops.window_step_ns)
            if loose_share >= 0.01:
                evidence.append(
                    f"Of that, framework ops called outside a module (functional losses, tensor metrics) "
                    f"take {pct(loose_share)} of the step"
                )
        share = other_share - loose_share
        if share < HOST_SHARE_MIN:
            return
        if steps.main_cpu_fraction is not None:
            evidence.append(
                f"The main thread is on a CPU {pct(steps.main_cpu_fraction)} of the step: this is Python "
                "computing, not waiting"
                if steps.main_cpu_fraction >= 0.5
                else f"The main thread is on a CPU only {pct(steps.main_cpu_fraction)} of the step"
            )
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=Confidence.HIGH if share >= HOST_SHARE_HIGH else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=(
                "Keep per-step work on tensors: compute metrics with torch ops instead of .tolist() and "
                "Python loops, accumulate them on-device and log every N steps."
            ),
            snippet=(
                "correct += (logits.argmax(1) == y).sum()   # tensor, no .tolist()\n"
                "if step % 50 == 0: log(correct.item() / seen)"
            ),
            ranks=(rank.rank,),
        )


class HostDispatch:
    """Pattern: many tiny framework ops per step; each pays Python, dispatcher and autograd overhead.
    Why it's slow: the arithmetic per op is smaller than the fixed cost of issuing it.
    Fix: batch the work into fewer, larger ops (bmm/einsum instead of loops), torch.compile, bigger batches.
    Reference: rules-catalog §1b (TF kernel-launch bound ≥ 3%/15%), §5b (TorchTidy), HTA launch stats.
    """

    id: ClassVar[Category] = Category.HOST_DISPATCH
    title: ClassVar[str] = "Per-op framework overhead: many tiny ops per step"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "ops"})

    def check(self, env: Environment, rank: RankAnalysis) -> Iterable[Finding]:
        steps, ops = rank.steps, rank.ops
        if steps is None or ops is None:
            return
        per_step = ops.dispatch_ns_per_step
        if per_step is None or ops.median_top_level_op_ns > TINY_OP_NS:
            return
        compute_share = sum(steps.share(p) for p in COMPUTE_PHASES) + steps.share(HOST_OTHER)
        share = min(compute_share, per_step / steps.mean_ns)
        if share < DISPATCH_SHARE_MIN:
            return
        top = ", ".join(f"{name} ×{calls}" for name, _, calls in ops.top_ops[:3])
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=Confidence.MEDIUM,
            evidence=(
                f"{ops.top_level_ops_per_step:.0f} framework ops per step, median {ops.median_top_level_op_ns / 1e3:.1f} µs each",
                f"One tiny op costs {ops.dispatch_ns_per_op / 1e3 if ops.dispatch_ns_per_op else 0:.1f} µs "
                f"to issue on this machine (measured), so overhead is ≈ {ms(per_step)} of a {ms(steps.mean_ns)} step",
                f"Most frequent: {top}",
            ),
            fix=(
                "Issue fewer, larger ops: replace Python loops over heads/chunks/timesteps with one batched op "
                "(torch.bmm, einsum, vectorised indexing), or compile the model (torch.compile) to fuse them."
            ),
            snippet="out = torch.einsum('bhi,hij->bhj', x, W)   # instead of: for h in range(H): x[:, h] @ W[h]",
            ranks=(rank.rank,),
        )
