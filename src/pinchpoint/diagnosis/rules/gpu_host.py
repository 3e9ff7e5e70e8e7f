"""GPU rules about the host side of a step: input waits, launch-bound or Python-bound hosts, syncs, host→device copies."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, ms, pct, speedup_removing
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
        evidence = [
            f"The host waits for the DataLoader while the GPU is idle for {pct(share)} of the step time "
            f"({per_step(rank, share)}; all DataLoader time: {pct(rank.steps.dataloader_share)})",
            f"Framework ops (transforms) run during {pct(op_share)} of the wait; the rest is Python or I/O "
            "the trace does not show",
        ]
        if in_process:
            evidence.append(
                "The iterator is _SingleProcessDataLoaderIter: num_workers=0, so the training process "
                "loads every batch itself between steps"
            )
            fix = (
                "Load in worker processes so batches are ready when the step asks: DataLoader(num_workers=N, "
                "pin_memory=True, persistent_workers=True), N up to the free CPU cores per GPU."
            )
        else:
            fix = (
                "The workers cannot keep up: add workers if CPU cores are free, raise prefetch_factor, and "
                "make the dataset's __getitem__ cheaper (decode once, vectorise transforms)."
            )
        evidence.append(
            "From a trace alone I/O and CPU-bound loading look alike; `pinchpoint run` measures which"
        )
        yield Finding(
            id=Category.INPUT_PREPROCESS if preprocess else Category.INPUT_FETCH,
            title="The GPU waits for input: loading is CPU work in the loop"
            if preprocess
            else "The GPU waits for input data",
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=confidence_for(share),
            evidence=tuple(evidence),
            fix=fix,
            snippet="DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, persistent_workers=True)",
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
        evidence = [
            f"The GPU is idle waiting for the host's next launch for {pct(share)} of the step time "
            f"({per_step(rank, share)}), not counting input waits and syncs",
            f"Median kernel {la.kernel.median_ns / 1000:.1f} µs vs median launch call "
            f"{la.launch_call.median_ns / 1000:.1f} µs; {pct(la.tiny_kernel_time_share)} of kernel time in "
            f"kernels under 10 µs"
            + (
                f"; {la.kernels_per_step:,.0f} kernel{'' if round(la.kernels_per_step) == 1 else 's'} per step"
                if la.kernels_per_step
                else ""
            ),
        ]
        if la.kernels == 0:
            evidence = evidence[:1]
        if la.launch_bound:
            yield Finding(
                id=Category.HOST_DISPATCH,
                title="Launch-bound: tiny kernels, the host cannot launch them fast enough",
                share=share,
                estimated_speedup=_host_floor_speedup(rank, share, launches_stay=False),
                confidence=confidence_for(share),
                evidence=tuple(evidence),
                fix="Launch fewer, bigger kernels: capture the step in a CUDA graph or use "
                "torch.compile(mode='reduce-overhead'); fuse small ops; use a larger batch.",
                snippet="model = torch.compile(model, mode='reduce-overhead')",
                ranks=(rank.rank,),
            )
            return
        yield Finding(
            id=Category.HOST_PYTHON,
            title="The GPU waits for the host: CPU work in the loop between launches",
            share=share,
            estimated_speedup=_host_floor_speedup(rank, share),
            confidence=Confidence.MEDIUM if share >= HIGH_SHARE and split.over_steps else Confidence.LOW,
            evidence=tuple(evidence),
            fix="Find the host work between kernels (Python in the loop, logging, CPU ops, small copies) in "
            "the trace's host rows; move it off the step or onto the GPU, or overlap it with the next step.",
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
        sites = ", ".join(f"{s.op} ({s.count}×, {ms(s.total_ns)})" for s in sy.sites[:3])
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=confidence_for(share),
            evidence=(
                f"{sy.calls + sy.sync_copies} blocking calls ({sy.calls} syncs, {sy.sync_copies} synchronous "
                f"copies) hold the host for {ms(sy.blocked_ns)}; the GPU then idles for {pct(share)} of "
                "the step time (blocked time, capped by the GPU's idle time)",
                f"Where: {sites}" if sites else "Sites: not attributable to an op",
            ),
            fix="Remove per-step .item(), .cpu(), .tolist() and explicit synchronize() calls from the loop "
            "(accumulate on the GPU and read every N steps); copy with non_blocking=True from pinned memory.",
            snippet="running += loss.detach()          # not running += loss.item()\n"
            "if step % 100 == 0: print(running.item() / 100)",
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
        bw = f" at {h2d.bandwidth_gbps:.1f} GB/s" if h2d.bandwidth_gbps else ""
        extra = (
            (
                f"Synchronous copies also hold the host, so it cannot launch ahead: the GPU idles "
                f"{pct(blocked)} of the step time after them",
            )
            if blocked >= 0.01
            else ()
        )
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=confidence_for(share),
            evidence=(
                f"{h2d.count} host→device copies move {h2d.bytes / 1e6:,.0f} MB{bw}; "
                f"{ms(exposed_ns)} of them overlap no kernel ({pct(exposed_ns / window)} of the step time)",
                f"{h2d.pageable} of {h2d.count} copies come from pageable memory",
                *extra,
            ),
            fix=(
                "Pin the batches and copy them asynchronously, so the copy overlaps compute."
                if h2d.pageable
                else "The copies are pinned already and still not hidden: move fewer bytes (send uint8 "
                "images or token ids and convert on the GPU), prefetch the next batch on a side stream, "
                "or keep a dataset that fits on the GPU there."
            ),
            snippet=(
                "DataLoader(..., pin_memory=True)\nx = x.to('cuda', non_blocking=True)"
                if h2d.pageable
                else "x = x_uint8.to('cuda', non_blocking=True).float().div_(255)   # 4x fewer bytes"
            ),
            ranks=(rank.rank,),
        )
