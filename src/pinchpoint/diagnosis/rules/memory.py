"""Memory that grows step over step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.memory import graph_growth
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import Rule, Subject, ms, pct, speedup_removing

MIB = 1 << 20
LEAK_MIN_SLOPE = 256 * 1024
"""At least 256 KiB more resident memory per step."""
LEAK_MIN_GROWTH = 32 * MIB
"""And at least 32 MiB grown over the measured steps (allocator caches settle below this)."""
LEAK_MIN_R2 = 0.8
"""The growth is steady: a line explains ≥ 80% of the variance of RSS per step."""


class MemoryLeak(Rule):
    """Pattern: resident memory grows linearly with the step count.
    Why it's slow: eventually OOM; before that, allocator and GC churn. The classic cause is keeping
    tensors that hold the autograd graph alive (`history.append(loss)`).
    Fix: store Python numbers (`loss.item()`) or detached tensors; clear lists that grow per step.
    Reference: PyTorch FAQ "My model reports cuda runtime error(2): out of memory" (accumulating history).
    """

    id: ClassVar[Category] = Category.MEMORY_LEAK
    title: ClassVar[str] = "Memory grows every step"
    requires: ClassVar[frozenset[str]] = frozenset({"memory"})

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
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
        graph = graph_growth(rank.probes)
        kept_graphs = graph is not None and graph.per_step >= GRAPH_GROWTH_MIN
        if graph is not None and kept_graphs:
            groups = "; ".join(
                f"{'×'.join(map(str, g.shape)) or 'scalar'} {g.dtype} ({g.grad_fn}) +{g.per_step:.1f}"
                for g in graph.groups
            )
            evidence.append(
                f"Tensors that still carry their autograd graph went {graph.before} → {graph.after} over the "
                f"{graph.steps} op-window steps (+{graph.per_step:.1f} per step, "
                f"+{graph.bytes_per_step / MIB:.2f} MiB of their storage per step, plus the graph's saved "
                f"tensors): {groups}. The loop keeps outputs or losses with their graph."
            )
        elif graph is not None:
            evidence.append(
                f"Tensors with autograd history did not accumulate across the op window ({graph.before} → "
                f"{graph.after}): the growth is elsewhere (Python objects, caches, a C extension)"
            )
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
            fix=(
                "Keep numbers, not graphs: tensors appended to a list (or summed into a running total) keep "
                "their autograd graph alive. Store loss.item(), or logits.detach() where the tensor is needed."
                if kept_graphs
                else "Find what the loop keeps per step: tensors appended to a list keep their autograd graph "
                "alive. Store loss.item() or tensor.detach().cpu(), and clear caches that grow with the step."
            ),
            snippet="history.append(loss.item())   # not history.append(loss)",
            ranks=(rank.rank,),
        )


GRAPH_GROWTH_MIN = 0.5
"""Tensors with autograd history added per step (net, across the op window) that name the culprit: a
loop that keeps one loss per step adds 1.0; noise between two snapshots is 0."""
CHURN_MIN_SHARE = 0.05
"""Page faults cost at least 5% of the step (measured faults × measured cost per fault, bounded by the
step's measured kernel time)."""
CHURN_MIN_FAULTS = 256
"""And at least 1 MiB of fresh 4 KiB pages per step: a steady heap faults almost never."""
GLIBC_FIX = "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824"


class AllocatorChurn(Rule):
    """Pattern: thousands of minor page faults every step, at a measured cost per fault.
    Why it's slow: glibc malloc serves big blocks (activations, gradients) with mmap and unmaps them
    on free, or trims its heap; every step the kernel maps and zeroes the same memory again, one 4 KiB
    page per fault, on the threads that should be computing.
    Fix: a caching allocator (jemalloc or tcmalloc via LD_PRELOAD, as PyTorch's CPU performance tuning
    guide recommends) or glibc's own thresholds raised so the heap keeps the memory.
    Reference: PyTorch "Performance Tuning Guide" (CPU: switch memory allocator); glibc mallopt(3)
    M_MMAP_THRESHOLD / M_TRIM_THRESHOLD.
    """

    id: ClassVar[Category] = Category.MEMORY_PRESSURE
    title: ClassVar[str] = "Allocator churn: memory is page-faulted in again every step"
    requires: ClassVar[frozenset[str]] = frozenset({"faults"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        pf = rank.faults
        if pf is None or pf.fault_ns is None or pf.churn_per_step < CHURN_MIN_FAULTS:
            return
        share = pf.step_share
        if share is None or share < CHURN_MIN_SHARE:
            return
        fresh = pf.churn_per_step * 4096
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=Confidence.MEDIUM,
            evidence=(
                f"{pf.median_per_step:,} minor page faults per step (median of {pf.steps} steps"
                f"{' before the op window' if pf.before_window else ''})"
                + (
                    f", {pf.growth_pages_per_step:,} of them for memory the process keeps (growth)"
                    if pf.growth_pages_per_step
                    else ""
                )
                + ": "
                f"{fresh / MIB:.0f} MiB of fresh pages mapped and zeroed every step",
                f"One fault costs {pf.fault_ns / 1000:.2f} µs on this machine (measured: map, zero, unmap a "
                f"fresh page): {'at most ' if pf.kernel_ns is not None else '≈ '}{ms(pf.model_ns or 0)} of a "
                f"{ms(pf.median_step_ns)} step" + ("" if pf.kernel_ns is not None else f" ({pct(share)})"),
                *(
                    ()
                    if pf.kernel_ns is None
                    else (
                        f"The {'main thread' if pf.main_sys_ns is not None else 'process (all threads)'} "
                        f"spent {ms(pf.kernel_ns)} of the step in the kernel (system time), which bounds what "
                        f"the faults cost the step: ≈ {ms(pf.cost_ns or 0)} ({pct(share)})",
                    )
                ),
            ),
            fix="Keep freed memory in the process instead of returning it to the OS every step: preload "
            "jemalloc or tcmalloc, or raise glibc's mmap and trim thresholds for the run.",
            snippet=f"{GLIBC_FIX} python train.py\n"
            "# or: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python train.py",
            ranks=(rank.rank,),
        )
