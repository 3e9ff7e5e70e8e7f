"""GPU rules about the host side of a step: input waits, launch-bound or Python-bound hosts, syncs, host→device copies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, speedup_removing
from pinchpoint.diagnosis.rules.gpu_base import (
    HIGH_SHARE,
    LOADER_OPS_PREPROCESS,
    MIN_SHARE,
    confidence_for,
    per_step,
    window_ns,
)
from pinchpoint.trace.kineto import CopyKind


class GpuInputWait(Rule):
    """Pattern: the host waits in DataLoader `__next__` while the GPU has nothing to do.
    Why it's slow: the GPU idles until the next batch exists. Fetch (I/O) and preprocess (CPU) are told
    apart by what the trace shows inside the wait: framework ops (transforms) or nothing visible.
    Fix: more DataLoader workers (num_workers > 0 moves loading out of the training process),
    pin_memory, prefetch; faster decoding/transforms.
    Reference: XProf input-pipeline analyzer (input% ≥ 5% moderate, ≥ 20% high); torch-tb-profiler
    DataLoader recommendation.
    """

    id: ClassVar[Category] = Category.INPUT_FETCH
    also: ClassVar[frozenset[Category]] = frozenset({Category.INPUT_PREPROCESS})
    title: ClassVar[str] = "The GPU waits for input data"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        split = rank.split
        if split is None or not split.over_steps:
            return
        share = split.fractions["data_wait"]
        if share < MIN_SHARE:
            return
        op_share, in_process = rank.loader.op_share, rank.loader.in_process
        preprocess = op_share >= LOADER_OPS_PREPROCESS
        wait_ns, stepped = per_step(rank, share)
        evidence: list[Fact] = [
            Fact(
                "gpu.input.wait",
                share=share,
                wait_ns=wait_ns,
                per_step=stepped,
                loader_share=rank.steps.dataloader_share,
            ),
            Fact("gpu.input.ops", op_share=op_share),
        ]
        if in_process:
            evidence.append(Fact("gpu.input.single_process"))
        evidence.append(Fact("gpu.input.trace_only"))
        yield Finding(
            id=Category.INPUT_PREPROCESS if preprocess else Category.INPUT_FETCH,
            title=Fact("gpu.input.preprocess_title") if preprocess else Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=confidence_for(share),
            evidence=tuple(evidence),
            fix=Fact("gpu.input.fix", in_process=in_process),
            snippet=Fact("gpu.input.snippet"),
            ranks=(rank.rank,),
        )


class GpuHostBound(Rule):
    """Pattern: the GPU is idle, waiting for the host to enqueue work (not for input, not for syncs).
    Why it's slow: each kernel is launched from Python through the dispatcher; when kernels are short
    or the loop does other CPU work, the GPU runs dry. Launch-bound when kernels are tiny and the host
    thread issuing them is busy (host.dispatch); otherwise host.python.
    Fix: CUDA graphs / torch.compile(mode="reduce-overhead"), larger batches, less Python per step.
    Reference: XProf "kernel launch" (≥ 3% / ≥ 15%), TensorCoreIdleBoundRule (idle > 10%).
    """

    id: ClassVar[Category] = Category.HOST_DISPATCH
    also: ClassVar[frozenset[Category]] = frozenset({Category.HOST_PYTHON})
    title: ClassVar[str] = "The GPU waits for the host to launch work"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        split, idle = rank.split, rank.idle
        if split is None or idle is None or idle.wall.total_ns <= 0:
            return
        # The loader's exposed wait is blamed on the host too, but it is `data_wait`, not `gpu_idle`: leave
        # it out of the ratio, or queued gaps beside a long input wait read as host-bound.
        loader_ns = min(rank.loader.idle_wait_ns, idle.wall.host_wait_ns)
        host_frac = (idle.wall.host_wait_ns - loader_ns) / max(idle.wall.total_ns - loader_ns, 1)
        share = split.fractions["gpu_idle"] * host_frac - _sync_share(rank)
        if share < MIN_SHARE:
            return
        la = rank.launch
        idle_ns, stepped = per_step(rank, share)
        evidence: list[Fact] = [
            Fact("gpu.host.idle", share=share, idle_ns=idle_ns, per_step=stepped),
            Fact(
                "gpu.host.kernels",
                kernel_median_ns=la.kernel.median_ns,
                launch_median_ns=la.launch_call.median_ns,
                tiny_share=la.tiny_kernel_time_share,
                kernels_per_step=la.kernels_per_step,
            ),
        ]
        if la.kernels == 0:
            evidence = evidence[:1]
        if rank.idle_host_ops:
            evidence.append(
                Fact("gpu.host.idle_ops", ops=tuple((n, round(v, 4)) for n, v in rank.idle_host_ops))
            )
        if la.launch_bound:
            yield Finding(
                id=Category.HOST_DISPATCH,
                title=Fact("gpu.host.dispatch_title"),
                share=share,
                estimated_speedup=_host_floor_speedup(rank, share, launches_stay=False),
                basis=Basis.MODEL,
                confidence=confidence_for(share),
                evidence=tuple(evidence),
                fix=Fact("gpu.host.dispatch_fix"),
                snippet=Fact("gpu.host.dispatch_snippet"),
                ranks=(rank.rank,),
            )
            return
        yield Finding(
            id=Category.HOST_PYTHON,
            title=Fact("gpu.host.python_title"),
            share=share,
            estimated_speedup=_host_floor_speedup(rank, share),
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM if share >= HIGH_SHARE and split.over_steps else Confidence.LOW,
            evidence=tuple(evidence),
            fix=Fact("gpu.host.python_fix"),
            ranks=(rank.rank,),
        )


def _sync_share(rank: GpuRankAnalysis) -> float:
    """The host's blocked time costs the step only as far as the GPU then idles: capped by GPU idle."""
    s = rank.sync.blocked_step_share
    if s is None or rank.split is None:
        return 0.0
    return min(s, rank.split.fractions["gpu_idle"])


def _copy_sync_share(rank: GpuRankAnalysis) -> float:
    """The part of `_sync_share` due to synchronous host→device copies: a blocking copy keeps the host
    from running ahead, so the GPU idles while it launches the next work. Pinning and non_blocking
    copies (the transfer.h2d fix) remove it, so it is counted there and not under host.sync."""
    sy = rank.sync
    if sy.blocked_ns <= 0:
        return 0.0
    return _sync_share(rank) * min(1.0, sy.h2d_copy_blocked_ns / sy.blocked_ns)


def _host_floor_speedup(rank: GpuRankAnalysis, share: float, *, launches_stay: bool = True) -> float:
    """Amdahl on the step, but a step never gets shorter than its GPU work, nor (when the fix keeps
    them: less Python in the loop) than its launch calls. The launch-bound fix (CUDA graphs,
    torch.compile, fewer bigger ops) removes the launches, so there only the GPU work is a floor;
    batching shrinks the GPU work as well, so the estimate is conservative there."""
    split, la = rank.split, rank.launch
    if split is None or split.window_ns <= 0:
        return speedup_removing(share)
    busy = 1.0 - split.fractions["gpu_idle"] - split.fractions["data_wait"]
    launches = la.launch_calls * la.launch_call.median_ns / split.window_ns if launches_stay else 0.0
    floor = max(busy, launches, 1e-6)
    return max(1.0, min(speedup_removing(share), 1.0 / max(floor, 1.0 - share)))


class GpuSync(Rule):
    """Pattern: the host blocks on the device (`.item()`, `.cpu()`, `torch.cuda.synchronize()`).
    Why it's slow: the host stops enqueueing until the GPU drains; the GPU then idles while the host
    catches up.
    Fix: keep values on the device, log every N steps, use non_blocking copies.
    Reference: PyTorch performance tuning guide ("avoid unnecessary CPU-GPU synchronization").
    """

    id: ClassVar[Category] = Category.HOST_SYNC
    title: ClassVar[str] = "The host blocks on the GPU (synchronizations in the step)"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        sy = rank.sync
        share = _sync_share(rank) - _copy_sync_share(rank)
        if share < MIN_SHARE:
            return
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=confidence_for(share),
            evidence=(
                Fact(
                    "gpu.sync.blocking",
                    syncs=sy.calls,
                    sync_copies=sy.sync_copies,
                    blocked_ns=sy.blocked_ns,
                    share=share,
                ),
                Fact("gpu.sync.sites", sites=tuple((s.op, s.count, s.total_ns) for s in sy.sites[:3])),
            ),
            fix=Fact("gpu.sync.fix"),
            snippet=Fact("gpu.sync.snippet"),
            ranks=(rank.rank,),
        )


class GpuHostToDevice(Rule):
    """Pattern: host→device copies that no kernel overlaps, often from pageable memory.
    Why it's slow: pageable copies go through a staging buffer at a fraction of the link's speed and
    block the host; an unoverlapped copy leaves the GPU idle.
    Fix: DataLoader(pin_memory=True) and .to(device, non_blocking=True).
    Reference: XProf DataTransferBoundRule; NVIDIA "How to optimize data transfers".
    """

    id: ClassVar[Category] = Category.TRANSFER_H2D
    title: ClassVar[str] = "Host→device copies are exposed"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        h2d = next((d for d in rank.memcpy.by_direction if d.direction is CopyKind.H2D), None)
        window = window_ns(rank)
        if h2d is None or window <= 0:
            return
        exposed_ns = rank.h2d_exposed_ns
        blocked = _copy_sync_share(rank)
        share = exposed_ns / window + blocked
        if share < MIN_SHARE:
            return
        extra = (Fact("gpu.h2d.blocking", blocked_share=blocked),) if blocked >= 0.01 else ()
        pinned = not h2d.pageable
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=confidence_for(share),
            evidence=(
                Fact(
                    "gpu.h2d.copies",
                    copies=h2d.count,
                    moved_bytes=h2d.bytes,
                    bandwidth_gbps=h2d.bandwidth_gbps,
                    exposed_ns=exposed_ns,
                    exposed_share=exposed_ns / window,
                ),
                Fact("gpu.h2d.pageable", pageable=h2d.pageable, copies=h2d.count),
                *extra,
            ),
            fix=Fact("gpu.h2d.fix", pinned=pinned),
            snippet=Fact("gpu.h2d.snippet", pinned=pinned),
            fix_kind=None if pinned else FixKind.PIN_MEMORY,
            ranks=(rank.rank,),
        )
