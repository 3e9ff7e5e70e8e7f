"""Memory that grows step over step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.trace.run import Environment

MIB = 1 << 20
LEAK_MIN_SLOPE = 256 * 1024
"""At least 256 KiB more resident memory per step."""
LEAK_MIN_GROWTH = 32 * MIB
"""And at least 32 MiB grown over the measured steps (allocator caches settle below this)."""
LEAK_MIN_R2 = 0.8
"""The growth is steady: a line explains ≥ 80% of the variance of RSS per step."""


class MemoryLeak:
    """Pattern: resident memory grows linearly with the step count.
    Why it's slow: eventually OOM; before that, allocator and GC churn. The classic cause is keeping
    tensors that hold the autograd graph alive (`history.append(loss)`).
    Fix: store Python numbers (`loss.item()`) or detached tensors; clear lists that grow per step.
    Reference: PyTorch FAQ "My model reports cuda runtime error(2): out of memory" (accumulating history).
    """

    id: ClassVar[Category] = Category.MEMORY_LEAK
    title: ClassVar[str] = "Memory grows every step"
    requires: ClassVar[frozenset[str]] = frozenset({"memory"})

    def check(self, env: Environment, rank: RankAnalysis) -> Iterable[Finding]:
        trend = rank.memory
        if trend is None:
            return
        if (
            trend.slope_bytes_per_step < LEAK_MIN_SLOPE
            or trend.growth_bytes < LEAK_MIN_GROWTH
            or trend.r2 < LEAK_MIN_R2
        ):
            return
        evidence = [
            f"Resident memory grows {trend.slope_bytes_per_step / MIB:.2f} MiB per step (R² = {trend.r2:.2f}), "
            f"{trend.first_rss_bytes / MIB:.0f} → {trend.last_rss_bytes / MIB:.0f} MiB over {trend.steps} steps"
        ]
        if env.memory_bytes:
            left = env.memory_bytes - trend.last_rss_bytes
            evidence.append(
                f"At this rate the machine's {env.memory_bytes / (1 << 30):.0f} GiB are used up after "
                f"about {max(0, left) / trend.slope_bytes_per_step:,.0f} more steps"
            )
        yield Finding(
            id=self.id,
            title=self.title,
            share=0.0,
            estimated_speedup=1.0,
            confidence=Confidence.HIGH if trend.r2 >= 0.95 else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix="Find what the loop keeps per step: tensors appended to a list keep their autograd graph "
            "alive. Store loss.item() or tensor.detach().cpu(), and clear caches that grow with the step.",
            snippet="history.append(loss.item())   # not history.append(loss)",
            ranks=(rank.rank,),
        )
