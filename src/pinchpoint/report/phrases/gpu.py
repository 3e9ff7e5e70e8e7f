"""The device-timeline rules (diagnosis/rules/gpu_*.py) in words: input waits, host-bound and
launch-bound GPUs, syncs, host→device copies, Tensor Cores, device memory, collectives, stragglers."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import GIB, ms, pct
from pinchpoint.report.report_doc import ReportDoc


def _time(ns: float, per_step: bool) -> str:
    """A share of the window as time: per step over the steps, else over the whole GPU-activity span."""
    return f"{ms(ns)} per step" if per_step else ms(ns)


def _kernels(
    kernel_median_ns: float, launch_median_ns: float, tiny_share: float, kernels_per_step: float | None
) -> str:
    return (
        f"Median kernel {kernel_median_ns / 1000:.1f} µs vs median launch call "
        f"{launch_median_ns / 1000:.1f} µs; {pct(tiny_share)} of kernel time in "
        f"kernels under 10 µs"
        + (
            f"; {kernels_per_step:,.0f} kernel{'' if round(kernels_per_step) == 1 else 's'} per step"
            if kernels_per_step
            else ""
        )
    )


def _sync_sites(sites: tuple[tuple[str, int, float], ...]) -> str:
    where = ", ".join(f"{op} ({count}×, {ms(total_ns)})" for op, count, total_ns in sites)
    return f"Where: {where}" if where else "Sites: not attributable to an op"


def _copies(
    copies: int, moved_bytes: float, bandwidth_gbps: float | None, exposed_ns: float, exposed_share: float
) -> str:
    bw = f" at {bandwidth_gbps:.1f} GB/s" if bandwidth_gbps else ""
    return (
        f"{copies} host→device copies move {moved_bytes / 1e6:,.0f} MB{bw}; "
        f"{ms(exposed_ns)} of them overlap no kernel ({pct(exposed_share)} of the step time)"
    )


def _device(device: str | None, capability: tuple[int, int] | None) -> str:
    name = device or "GPU"
    return f"{name} (compute capability {capability[0]}.{capability[1]})" if capability else f"{name}"


def _comm_overlap(comm_ns: float, overlap_share: float | None, wait_share: float) -> str:
    overlap = f"{pct(overlap_share)}" if overlap_share is not None else "none"
    waiting = (
        f"; {pct(wait_share)} of it, waiting for the straggler, is imbalance.straggler's"
        if wait_share
        else ""
    )
    return f"Of all communication time ({ms(comm_ns)}), {overlap} overlaps compute" + waiting


PHRASES: dict[str, Callable[..., str]] = {
    "gpu.comm.by_kind": lambda rows: (
        "Exposed, by kind and the phase that launched it: "
        + "; ".join(
            f"{kind.replace('_', '-')} in {phase} {ms(exposed)} of {ms(total)} ({count} kernel{'s' * (count != 1)})"
            for kind, phase, count, exposed, total in rows
        )
    ),
    # input.fetch / input.preprocess
    "gpu.input.preprocess_title": lambda: "The GPU waits for input: loading is CPU work in the loop",
    "gpu.input.wait": lambda share, wait_ns, per_step, loader_share: (
        f"The host waits for the DataLoader while the GPU is idle for {pct(share)} of the step time "
        f"({_time(wait_ns, per_step)}; all DataLoader time: {pct(loader_share)})"
    ),
    "gpu.input.ops": lambda op_share: (
        f"Framework ops (transforms) run during {pct(op_share)} of the wait; the rest is Python or I/O "
        "the trace does not show"
    ),
    "gpu.input.single_process": lambda: (
        "The iterator is _SingleProcessDataLoaderIter: num_workers=0, so the training process "
        "loads every batch itself between steps"
    ),
    "gpu.input.trace_only": lambda: (
        "From a trace alone I/O and CPU-bound loading look alike; `pinchpoint run` measures which"
    ),
    "gpu.input.fix": lambda in_process: (
        "Load in worker processes so batches are ready when the step asks: DataLoader(num_workers=N, "
        "pin_memory=True, persistent_workers=True), N up to the free CPU cores per GPU."
        if in_process
        else "The workers cannot keep up: add workers if CPU cores are free, raise prefetch_factor, and "
        "make the dataset's __getitem__ cheaper (decode once, vectorise transforms)."
    ),
    "gpu.input.snippet": lambda: (
        "DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, persistent_workers=True)"
    ),
    # host.dispatch / host.python
    "gpu.host.idle": lambda share, idle_ns, per_step: (
        f"The GPU is idle waiting for the host's next launch for {pct(share)} of the step time "
        f"({_time(idle_ns, per_step)}), not counting input waits and syncs"
    ),
    "gpu.host.kernels": _kernels,
    "gpu.host.idle_ops": lambda ops: (
        "While the GPU sat idle, the host thread it waits on was in "
        + ", ".join(f"{name} {pct(share)}" for name, share in ops)
        + " of that time (self time)"
    ),
    "gpu.host.dispatch_title": lambda: "Launch-bound: tiny kernels, the host cannot launch them fast enough",
    "gpu.host.dispatch_fix": lambda: (
        "Launch fewer, bigger kernels: capture the step in a CUDA graph or use "
        "torch.compile(mode='reduce-overhead'); fuse small ops; use a larger batch."
    ),
    "gpu.host.dispatch_snippet": lambda: "model = torch.compile(model, mode='reduce-overhead')",
    "gpu.host.python_title": lambda: "The GPU waits for the host: CPU work in the loop between launches",
    "gpu.host.python_fix": lambda: (
        "Find the host work between kernels (Python in the loop, logging, CPU ops, small copies) in "
        "the trace's host rows; move it off the step or onto the GPU, or overlap it with the next step."
    ),
    # host.sync
    "gpu.sync.blocking": lambda syncs, sync_copies, blocked_ns, share: (
        f"{syncs + sync_copies} blocking calls ({syncs} syncs, {sync_copies} synchronous "
        f"copies) hold the host for {ms(blocked_ns)}; the GPU then idles for {pct(share)} of "
        "the step time (blocked time, capped by the GPU's idle time)"
    ),
    "gpu.sync.sites": _sync_sites,
    "gpu.sync.fix": lambda: (
        "Remove per-step .item(), .cpu(), .tolist() and explicit synchronize() calls from the loop "
        "(accumulate on the GPU and read every N steps); copy with non_blocking=True from pinned memory."
    ),
    "gpu.sync.snippet": lambda: (
        "running += loss.detach()          # not running += loss.item()\n"
        "if step % 100 == 0: print(running.item() / 100)"
    ),
    # transfer.h2d
    "gpu.h2d.copies": _copies,
    "gpu.h2d.pageable": lambda pageable, copies: f"{pageable} of {copies} copies come from pageable memory",
    "gpu.h2d.blocking": lambda blocked_share: (
        f"Synchronous copies also hold the host, so it cannot launch ahead: the GPU idles "
        f"{pct(blocked_share)} of the step time after them"
    ),
    "gpu.h2d.fix": lambda pinned: (
        "The copies are pinned already and still not hidden: move fewer bytes (send uint8 "
        "images or token ids and convert on the GPU), prefetch the next batch on a side stream, "
        "or keep a dataset that fits on the GPU there."
        if pinned
        else "Pin the batches and copy them asynchronously, so the copy overlaps compute."
    ),
    "gpu.h2d.snippet": lambda pinned: (
        "x = x_uint8.to('cuda', non_blocking=True).float().div_(255)   # 4x fewer bytes"
        if pinned
        else "DataLoader(..., pin_memory=True)\nx = x.to('cuda', non_blocking=True)"
    ),
    # compute.math
    "gpu.math.off_tensor_cores": lambda gemm_share, off_share, share: (
        f"GEMM/convolution kernels are {pct(gemm_share)} of kernel time; "
        f"{pct(off_share)} of that runs off the Tensor Cores ({pct(share)} of the step time)"
    ),
    "gpu.math.device": _device,
    "gpu.math.top_kernel": lambda kernel: f"Heaviest off-Tensor-Core kernel: {kernel[:90]}",
    "gpu.math.measured": lambda dtype, fast_flops, fp32_flops, faster_x: (
        f"Measured here (pinchpoint calibrate): {dtype} matmul {fast_flops / 1e12:.0f} TFLOP/s vs "
        f"fp32 {fp32_flops / 1e12:.1f} TFLOP/s ({faster_x:.1f}x)"
    ),
    "gpu.math.datasheet": lambda device, dtype, fast_flops, fp32_flops, faster_x: (
        f"Datasheet ({device}): {dtype} Tensor Cores {fast_flops / 1e12:.0f} TFLOP/s vs fp32 "
        f"{fp32_flops / 1e12:.1f} TFLOP/s ({faster_x:.1f}x; run `pinchpoint calibrate` on it to measure)"
    ),
    "gpu.math.assumed": lambda faster_x: (
        f"Estimate assumes Tensor Core matmuls {faster_x:.0f}x faster (device not in the "
        "datasheet table; `pinchpoint calibrate` measures it)"
    ),
    "gpu.math.fix": lambda ampere: (
        "Run the model under autocast (bf16 on Ampere and newer, fp16 with a GradScaler on Volta/Turing)"
        + ("; for fp32 matmuls that must stay fp32, allow TF32." if ampere else ".")
    ),
    "gpu.math.snippet": lambda ampere: (
        "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)\n"
        "torch.backends.cuda.matmul.allow_tf32 = True   # fp32 matmuls left outside autocast"
        if ampere
        else "scaler = torch.cuda.amp.GradScaler()\nwith torch.autocast('cuda', dtype=torch.float16):\n"
        "    loss = model(x)\nscaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
    ),
    # memory.pressure
    "gpu.memory.peak": lambda device, peak_frac, capacity_bytes: (
        f"Device {device} peaks at {pct(peak_frac)} of its {capacity_bytes / GIB:.0f} GiB"
    ),
    "gpu.memory.fix": lambda: (
        "Make room: activation checkpointing, gradient accumulation with a smaller micro-batch, "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation."
    ),
    # comm.exposed
    "gpu.comm.exposed": lambda share, exposed_ns, per_step: (
        f"Collectives run with no compute beside them for {pct(share)} of the step time "
        f"({_time(exposed_ns, per_step)})"
    ),
    "gpu.comm.overlap": _comm_overlap,
    "gpu.comm.fix": lambda: (
        "Overlap communication with compute: DDP buckets (bucket_cap_mb), gradient_as_bucket_view, "
        "FSDP backward prefetch; avoid syncs between buckets; if one rank is slower, fix that first."
    ),
    # imbalance.straggler
    "gpu.straggler.late": lambda rank, compute_ns, last_arrivals, collectives: (
        f"Rank {rank} computes {ms(compute_ns)} per step and arrives last at "
        f"{last_arrivals} of {collectives} collectives"
    ),
    "gpu.straggler.others": lambda compute_ns: f"The other ranks compute {ms(compute_ns)} per step (median)",
    "gpu.straggler.wait": lambda wait_frac: (
        f"{pct(wait_frac)} of collective time is waiting for the last rank"
    ),
    "gpu.straggler.fix": lambda: (
        "Balance the work across ranks: equal batch shapes (pad or bucket sequence lengths), "
        "balanced embedding shards, no extra work on rank 0 (logging, evaluation, checkpoints)."
    ),
}


def collective_lines(report: ReportDoc) -> list[str]:
    """Per rank: its collectives by kind and the phase that issued them, with what no compute hid."""
    lines = []
    sections = report.gpu or ()
    for g in sections:
        if not g.collectives:
            continue
        who = f"rank {g.rank} " if len(sections) > 1 else ""
        rows = "; ".join(
            f"{c.kind.replace('_', '-')} in {c.phase} ×{c.count}: {c.total_ms:.1f} ms, {c.exposed_ms:.1f} exposed"
            for c in g.collectives[:5]
        )
        more = f"; … ({len(g.collectives) - 5} more)" if len(g.collectives) > 5 else ""
        lines.append(f"{who}collectives: {rows}{more}")
    return lines
