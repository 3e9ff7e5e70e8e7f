"""Rules over a profiler trace's GPU analyses (`pinchpoint analyze`), in the categories of DESIGN.md.

Shares are fractions of the steps' wall time (the ProfilerStep ranges; the GPU-activity span when a
trace has no steps), measured so that the shares of different findings do not count the same instant
twice: input wait and other GPU idle come from `StepTimeSplit`, which labels each instant once.
Thresholds follow the TF/XProf input-pipeline analyzer's two levels (5% moderate, 20% high) unless
noted; see `../shared/research/rules-catalog.md`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import HOST_RANGE_KINDS, gpu_busy, name_mask
from pinchpoint.analysis.gpu.kernels import kernel_function_name
from pinchpoint.analysis.gpu.steps import dataloader_intervals, is_dataloader_wait
from pinchpoint.analysis.gpu.tensor_cores import TensorCoreStatus
from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis, GpuRunAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import ms, pct, speedup_removing
from pinchpoint.trace.kineto import CopyKind, Kind

MIN_SHARE = 0.05
"""A cause below 5% of the step is not reported (XProf's "moderately bound" level)."""
HIGH_SHARE = 0.20
"""At 20% and above a cause is "highly" bound: confidence high."""
LOADER_OPS_PREPROCESS = 0.25
"""Framework ops cover at least this much of the DataLoader wait: the loader computes (transforms)."""
MATRIX_UNIT_GAIN = 2.0
"""Conservative speed-up of GEMM/convolution kernels moved from fp32 SIMT to Tensor Cores (TF32 or
bf16/fp16 AMP): NVIDIA lists 2-8x for these paths on V100/A100; we take the low end."""
MEMORY_PRESSURE_PEAK = 0.90
"""Peak reserved memory at 90% of the device's capacity leaves no room for a larger batch."""


class GpuRule(Protocol):
    id: ClassVar[Category]
    title: ClassVar[str]

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]: ...


def _window_ns(rank: GpuRankAnalysis) -> int:
    return rank.split.window_ns if rank.split is not None else 0


def _per_step(rank: GpuRankAnalysis, share: float) -> str:
    n = len(rank.steps.steps)
    if n and rank.split is not None:
        return f"{ms(share * rank.split.window_ns / n)} per step"
    return ms(share * _window_ns(rank))


def _confidence(share: float) -> Confidence:
    return Confidence.HIGH if share >= HIGH_SHARE else Confidence.MEDIUM


class GpuInputWait:
    """Pattern: the host waits in DataLoader `__next__` while the GPU has nothing to do.
    Why it's slow: the GPU idles until the next batch exists. Fetch (I/O) and preprocess (CPU) are told
    apart by what the trace shows inside the wait: framework ops (transforms) or nothing visible.
    Fix: more DataLoader workers (num_workers > 0 moves loading out of the training process),
    pin_memory, prefetch; faster decoding/transforms.
    Reference: XProf input-pipeline analyzer (input% ≥ 5% moderate, ≥ 20% high); torch-tb-profiler
    DataLoader recommendation.
    """

    id: ClassVar[Category] = Category.INPUT_FETCH
    title: ClassVar[str] = "The GPU waits for input data"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        split = rank.split
        if split is None or not split.over_steps:
            return
        share = split.fractions["data_wait"]
        if share < MIN_SHARE:
            return
        ev = rank.trace.events
        loader = dataloader_intervals(ev)
        ops = ev.kind == Kind.CPU_OP
        not_loader = ~name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)
        op_cover = iv.intersect(loader, iv.union(ev.start_ns[ops & not_loader], ev.end_ns[ops & not_loader]))
        loader_ns = max(iv.total(loader), 1)
        op_share = iv.total(op_cover) / loader_ns
        names = {
            ev.names[i] for i in set(ev.name[name_mask(ev, is_dataloader_wait, *HOST_RANGE_KINDS)].tolist())
        }
        in_process = any("SingleProcess" in n for n in names)
        preprocess = op_share >= LOADER_OPS_PREPROCESS
        evidence = [
            f"The host waits for the DataLoader while the GPU is idle for {pct(share)} of the step time "
            f"({_per_step(rank, share)}; all DataLoader time: {pct(rank.steps.dataloader_share)})",
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
            confidence=_confidence(share),
            evidence=tuple(evidence),
            fix=fix,
            snippet="DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, persistent_workers=True)",
            ranks=(rank.rank,),
        )


class GpuHostBound:
    """Pattern: the GPU is idle, waiting for the host to enqueue work (not for input, not for syncs).
    Why it's slow: each kernel is launched from Python through the dispatcher; when kernels are short
    or the loop does other CPU work, the GPU runs dry. Launch-bound when kernels are tiny and the host
    thread issuing them is busy (host.dispatch); otherwise host.python.
    Fix: CUDA graphs / torch.compile(mode="reduce-overhead"), larger batches, less Python per step.
    Reference: XProf "kernel launch" (≥ 3% / ≥ 15%), TensorCoreIdleBoundRule (idle > 10%).
    """

    id: ClassVar[Category] = Category.HOST_DISPATCH
    title: ClassVar[str] = "The GPU waits for the host to launch work"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        split, idle = rank.split, rank.idle
        if split is None or idle is None or idle.wall.total_ns <= 0:
            return
        # The loader's exposed wait is blamed on the host too, but it is `data_wait`, not `gpu_idle`: leave
        # it out of the ratio, or queued gaps beside a long input wait read as host-bound.
        ev = rank.trace.events
        loader = iv.clip(iv.subtract(dataloader_intervals(ev), gpu_busy(ev)), idle.start_ns, idle.end_ns)
        loader_ns = min(iv.total(loader), idle.wall.host_wait_ns)
        host_frac = (idle.wall.host_wait_ns - loader_ns) / max(idle.wall.total_ns - loader_ns, 1)
        share = split.fractions["gpu_idle"] * host_frac - _sync_share(rank)
        if share < MIN_SHARE:
            return
        la = rank.launch
        evidence = [
            f"The GPU is idle waiting for the host's next launch for {pct(share)} of the step time "
            f"({_per_step(rank, share)}), not counting input waits and syncs",
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
                estimated_speedup=_host_floor_speedup(rank, share),
                confidence=_confidence(share),
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


def _host_floor_speedup(rank: GpuRankAnalysis, share: float) -> float:
    """Amdahl on the step, but a step never gets shorter than its GPU work or its launches."""
    split, la = rank.split, rank.launch
    if split is None or split.window_ns <= 0:
        return speedup_removing(share)
    busy = 1.0 - split.fractions["gpu_idle"] - split.fractions["data_wait"]
    launches = la.launch_calls * la.launch_call.median_ns / split.window_ns
    floor = max(busy, launches, 1e-6)
    return max(1.0, min(speedup_removing(share), 1.0 / max(floor, 1.0 - share)))


class GpuSync:
    """Pattern: the host blocks on the device (`.item()`, `.cpu()`, `torch.cuda.synchronize()`).
    Why it's slow: the host stops enqueueing until the GPU drains; the GPU then idles while the host
    catches up.
    Fix: keep values on the device, log every N steps, use non_blocking copies.
    Reference: PyTorch performance tuning guide ("avoid unnecessary CPU-GPU synchronization").
    """

    id: ClassVar[Category] = Category.HOST_SYNC
    title: ClassVar[str] = "The host blocks on the GPU (synchronizations in the step)"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        sy = rank.sync
        share = _sync_share(rank)
        if share < MIN_SHARE:
            return
        sites = ", ".join(f"{s.op} ({s.count}×, {ms(s.total_ns)})" for s in sy.sites[:3])
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=_confidence(share),
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


class GpuHostToDevice:
    """Pattern: host→device copies that no kernel overlaps, often from pageable memory.
    Why it's slow: pageable copies go through a staging buffer at a fraction of the link's speed and
    block the host; an unoverlapped copy leaves the GPU idle.
    Fix: DataLoader(pin_memory=True) and .to(device, non_blocking=True).
    Reference: XProf DataTransferBoundRule; NVIDIA "How to optimize data transfers".
    """

    id: ClassVar[Category] = Category.TRANSFER_H2D
    title: ClassVar[str] = "Host→device copies are exposed"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        h2d = next((d for d in rank.memcpy.by_direction if d.direction is CopyKind.H2D), None)
        window = _window_ns(rank)
        if h2d is None or window <= 0:
            return
        exposed_ns = _h2d_exposed_ns(rank)
        share = exposed_ns / window
        if share < MIN_SHARE:
            return
        bw = f" at {h2d.bandwidth_gbps:.1f} GB/s" if h2d.bandwidth_gbps else ""
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=_confidence(share),
            evidence=(
                f"{h2d.count} host→device copies move {h2d.bytes / 1e6:,.0f} MB{bw}; "
                f"{ms(exposed_ns)} of them overlap no kernel ({pct(share)} of the step time)",
                f"{h2d.pageable} of {h2d.count} copies come from pageable memory",
            ),
            fix="Pin the batches and copy them asynchronously, so the copy overlaps compute.",
            snippet="DataLoader(..., pin_memory=True)\nx = x.to('cuda', non_blocking=True)",
            ranks=(rank.rank,),
        )


def _h2d_exposed_ns(rank: GpuRankAnalysis) -> int:
    """Wall time inside the split's window in which an H2D copy runs and no kernel on its device does.
    A union, unlike `DirectionStats.exposed_ns` (whole trace, summed per copy): copies before or after
    the steps do not count, and two copies at once count once, so the share stays within `gpu_memory`."""
    ev, steps, bd = rank.trace.events, rank.steps.steps, rank.breakdown
    if steps:
        lo, hi = min(s.start_ns for s in steps), max(s.end_ns for s in steps)
    elif bd is not None:
        lo, hi = bd.start_ns, bd.end_ns
    else:
        return 0
    copies = (ev.kind == Kind.MEMCPY) & (ev.copy_kind == CopyKind.H2D)
    total = 0
    for dev in set(ev.device[copies].tolist()):
        c, k = copies & (ev.device == dev), (ev.kind == Kind.KERNEL) & (ev.device == dev)
        exposed = iv.subtract((ev.start_ns[c], ev.end_ns[c]), (ev.start_ns[k], ev.end_ns[k]))
        total += iv.total(iv.clip(exposed, lo, hi))
    return total


class GpuTensorCores:
    """Pattern: GEMM/convolution kernels run on fp32 SIMT units of a GPU that has Tensor Cores.
    Why it's slow: Tensor Cores do the same math several times faster in TF32/bf16/fp16.
    Fix: autocast (bf16/fp16) or TF32 for fp32 matmuls on Ampere and newer.
    Reference: TensorBoard plugin "Tensor Cores eligible" recommendation; NVIDIA mixed-precision guide.
    """

    id: ClassVar[Category] = Category.COMPUTE_MATH
    title: ClassVar[str] = "Matrix math does not use the GPU's Tensor Cores"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        tc, split = rank.tensor_cores, rank.split
        if split is None or tc.status not in (TensorCoreStatus.UNUSED, TensorCoreStatus.PARTIAL):
            return
        if tc.kernel_ns <= 0:
            return
        off_ns = tc.gemm_conv_ns - tc.matrix_unit_ns
        share = split.fractions["gpu_compute"] * off_ns / tc.kernel_ns
        if share < MIN_SHARE:
            return
        gain = share * (1 - 1 / MATRIX_UNIT_GAIN)
        cc = tc.compute_capability
        ampere = cc is not None and cc >= (8, 0)
        top = tc.top_off_matrix[0][0] if tc.top_off_matrix else ""
        evidence = [
            f"GEMM/convolution kernels are {pct(tc.gemm_conv_share)} of kernel time; "
            f"{pct(1 - tc.matrix_unit_share)} of that runs off the Tensor Cores ({pct(share)} of the step time)",
            f"{tc.device or 'GPU'} (compute capability {cc[0]}.{cc[1]})" if cc else f"{tc.device or 'GPU'}",
        ]
        if top:
            evidence.append(f"Heaviest off-Tensor-Core kernel: {kernel_function_name(top)[:90]}")
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(gain),
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix="Run the model under autocast (bf16 on Ampere and newer, fp16 with a GradScaler on Volta/Turing)"
            + ("; for fp32 matmuls that must stay fp32, allow TF32." if ampere else "."),
            snippet=(
                "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)\n"
                "torch.backends.cuda.matmul.allow_tf32 = True   # fp32 matmuls left outside autocast"
                if ampere
                else "scaler = torch.cuda.amp.GradScaler()\nwith torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = model(x)\nscaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
            ),
            ranks=(rank.rank,),
        )


class GpuCommExposed:
    """Pattern: collective kernels run while no compute kernel does.
    Why it's slow: the GPU waits on the network instead of overlapping communication with backward.
    Fix: let DDP/FSDP overlap (bucket sizes, no sync points between buckets), fewer/larger collectives,
    check stragglers first (their wait shows up as communication on the other ranks).
    Reference: XProf CollectiveBoundRule (≥ 30%), device-collectives bound (≥ 3% / ≥ 15%).
    """

    id: ClassVar[Category] = Category.COMM_EXPOSED
    title: ClassVar[str] = "Communication is not hidden behind compute"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        split, bd = rank.split, rank.breakdown
        if split is None or bd is None:
            return
        wait = _straggler_wait(rank, run)
        share = split.fractions["gpu_communication"] * (1 - wait)
        if share < MIN_SHARE:
            return
        overlap = f"{pct(bd.comm_overlap)}" if bd.comm_overlap is not None else "none"
        waiting = f"; {pct(wait)} of it, waiting for the straggler, is imbalance.straggler's" if wait else ""
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(share),
            confidence=_confidence(share),
            evidence=(
                f"Collectives run with no compute beside them for {pct(share)} of the step time "
                f"({_per_step(rank, share)})",
                f"Of all communication time ({ms(bd.communication_total_ns)}), {overlap} overlaps compute"
                + waiting,
            ),
            fix="Overlap communication with compute: DDP buckets (bucket_cap_mb), gradient_as_bucket_view, "
            "FSDP backward prefetch; avoid syncs between buckets; if one rank is slower, fix that first.",
            ranks=(rank.rank,),
        )


def _straggler_wait(rank: GpuRankAnalysis, run: GpuRunAnalysis) -> float:
    """Fraction of this rank's collective time spent waiting for a straggler: `imbalance.straggler`
    reports it, so `comm.exposed` leaves it out (else the wait counts twice, and ×10 on a wait-bound rank)."""
    cmp = run.comparison
    if cmp is None or not cmp.stragglers or cmp.matched == 0:
        return 0.0
    me = next((r for r in cmp.ranks if r.rank == rank.rank), None)
    return me.wait_ns / me.collective_ns if me is not None and me.collective_ns > 0 else 0.0


class GpuStraggler:
    """Pattern: one rank computes longer per step and the others wait in collectives for it.
    Reference: XProf BarrierCoresRule / straggler detection; HTA's min-across-ranks collective trick.
    """

    id: ClassVar[Category] = Category.IMBALANCE_STRAGGLER
    title: ClassVar[str] = "A straggler rank makes the others wait"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        cmp = run.comparison
        # Without a matched collective nobody is seen waiting: a slower rank alone costs the others nothing.
        if cmp is None or not cmp.stragglers or cmp.matched == 0 or rank.rank != run.ranks[0].rank:
            return
        share = cmp.wait_share
        slow = [r for r in cmp.ranks if r.straggler]
        fast = [r for r in cmp.ranks if not r.straggler and r.compute_per_step_ns]
        med = sorted(r.compute_per_step_ns or 0 for r in fast)
        evidence = [
            f"Rank {r.rank} computes {ms(r.compute_per_step_ns or 0)} per step and arrives last at "
            f"{r.last_arrivals} of {cmp.matched} collectives"
            for r in slow
        ]
        if med:
            evidence.append(f"The other ranks compute {ms(med[len(med) // 2])} per step (median)")
        evidence.append(f"{pct(share)} of collective time is waiting for the last rank")
        if cmp.note:
            evidence.append(cmp.note)
        step_share = share * split_comm(run)
        if step_share < MIN_SHARE:
            return
        yield Finding(
            id=self.id,
            title=self.title,
            share=step_share,
            estimated_speedup=speedup_removing(step_share),
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix="Balance the work across ranks: equal batch shapes (pad or bucket sequence lengths), "
            "balanced embedding shards, no extra work on rank 0 (logging, evaluation, checkpoints).",
            ranks=tuple(r.rank for r in slow),
        )


def split_comm(run: GpuRunAnalysis) -> float:
    """Mean share of step time in exposed communication across ranks (where the waiting shows)."""
    fr = [r.split.fractions["gpu_communication"] for r in run.ranks if r.split is not None]
    return sum(fr) / len(fr) if fr else 0.0


class GpuMemoryPressure:
    """Pattern: peak reserved device memory near the device's capacity.
    Why it matters: no headroom for a larger batch; allocator retries and fragmentation; OOM risk.
    Fix: activation checkpointing, smaller batch with gradient accumulation, expandable segments.
    """

    id: ClassVar[Category] = Category.MEMORY_PRESSURE
    title: ClassVar[str] = "GPU memory is nearly full"

    def check(self, rank: GpuRankAnalysis, run: GpuRunAnalysis) -> Iterable[Finding]:
        for dev in rank.memory.devices:
            if dev.peak_fraction is None or dev.peak_fraction < MEMORY_PRESSURE_PEAK:
                continue
            yield Finding(
                id=self.id,
                title=self.title,
                share=0.0,
                estimated_speedup=1.0,
                confidence=Confidence.MEDIUM,
                evidence=(
                    f"Device {dev.device} peaks at {pct(dev.peak_fraction)} of its "
                    f"{(dev.capacity_bytes or 0) / 2**30:.0f} GiB",
                ),
                fix="Make room: activation checkpointing, gradient accumulation with a smaller micro-batch, "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
                ranks=(rank.rank,),
            )
            return


GPU_RULES: tuple[GpuRule, ...] = (
    GpuInputWait(),
    GpuHostBound(),
    GpuSync(),
    GpuHostToDevice(),
    GpuTensorCores(),
    GpuCommExposed(),
    GpuStraggler(),
    GpuMemoryPressure(),
)
