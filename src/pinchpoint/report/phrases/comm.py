"""comm.exposed and imbalance.straggler of a captured run (diagnosis/rules/comm.py, rules/ranks.py) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import MIB, ms, pct
from pinchpoint.trace.run import HOST_OTHER, Phase

NO_SYNC_SNIPPET = """\
for i, (x, y) in enumerate(micro_batches):
    last = i == len(micro_batches) - 1
    with contextlib.nullcontext() if last else model.no_sync():
        loss_fn(model(x), y).div(len(micro_batches)).backward()
optimizer.step()"""

COMPRESSION_SNIPPET = """\
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
model.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)"""

CULPRITS = {
    Phase.DATA_WAIT.value: "its DataLoader",
    HOST_OTHER: "work in the loop outside the framework",
    Phase.CHECKPOINT_IO.value: "checkpoint writes",
    Phase.FORWARD.value: "its forward pass",
    Phase.OPTIMIZER.value: "its optimizer step",
}
"""What a straggler's extra time is spent on, by the phase it shows in (any other phase: its name)."""


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))


def _transfer(transfer_ns: float, share: float, steps: int, wait_ns: tuple[tuple[int, float], ...]) -> str:
    waits = ", ".join(f"rank {r} {ms(w)}" for r, w in wait_ns)
    return (
        f"Every rank spends at least {ms(transfer_ns)} per step ({pct(share)}) in communication that compute "
        f"does not hide (the least of the ranks, step by step, over {steps} steps); "
        f"waiting beyond that for another rank: {waits}"
    )


RESHARD_SNIPPET = """\
for block in model.blocks:            # each sharded module, then the root
    fully_shard(block, mesh=mesh, reshard_after_forward=False)
fully_shard(model, mesh=mesh, reshard_after_forward=False)
# or, once sharded: model.set_reshard_after_forward(False)"""


def _kinds(kinds: tuple[tuple[str, str, float, float], ...]) -> str:
    parts = [
        f"{name} in {phase if phase != 'step' else 'the step outside them'} {ms(ns)}"
        + (f" ({nbytes / MIB:.0f} MiB)" if nbytes >= MIB else f" ({nbytes / 1024:.0f} KiB)" if nbytes else "")
        for name, phase, ns, nbytes in kinds
    ]
    return "By collective, per step (the bytes each names, per step): " + "; ".join(parts)


def _ddp(
    backend: str,
    world_size: int,
    grad_bytes: int,
    params: int,
    bucket_bytes: int | None,
    hook: str | None,
    static_graph: bool,
) -> str:
    bucket = f"{bucket_bytes / MIB:.0f} MiB buckets" if bucket_bytes else "default buckets"
    return (
        f"DDP over {backend} on {world_size} ranks all-reduces {grad_bytes / MIB:.1f} MiB of "
        f"gradients ({params} tensors) per synchronised backward, in {bucket}; "
        f"comm hook: {hook or 'none'}, static_graph={static_graph}"
    )


PHRASES: dict[str, Callable[..., str]] = {
    "pipeline.bubble.schedule": lambda schedule, stages, microbatches, bound_share: (
        f"{schedule} over {stages} stages with {microbatches} microbatch{'' if microbatches == 1 else 'es'} a "
        "step: each stage idles "
        f"{stages - 1} of {microbatches + stages - 1} microbatch slots, {pct(bound_share)} of the step by the "
        "schedule's own count"
    ),
    "pipeline.bubble.rank": lambda rank, share: (
        f"Rank {rank} waited at the schedule's receives and sends {pct(share)} of its step (measured)"
    ),
    "pipeline.bubble.more": lambda microbatches, bound_share: (
        f"With {microbatches} microbatches of the same batch the schedule idles {pct(bound_share)}: the waits "
        "shrink with the microbatch (priced so; each microbatch's fixed cost, a smaller matmul and one more "
        "send, is not)"
    ),
    "pipeline.bubble.fix": lambda microbatches, schedule: (
        f"Split each batch into more microbatches (n_microbatches={microbatches}, keeping each one a few rows "
        "or more); an interleaved schedule (ScheduleInterleaved1F1B, several virtual stages per rank) cuts the "
        f"bubble further{', and 1F1B holds fewer microbatches of activations than GPipe' if schedule == 'ScheduleGPipe' else ''}."
    ),
    "pipeline.bubble.snippet": lambda microbatches: (
        f"schedule = ScheduleGPipe(stage, n_microbatches={microbatches}, loss_fn=loss_fn)\n"
        f"# or: Schedule1F1B(stage, n_microbatches={microbatches}, loss_fn=loss_fn)"
    ),
    "comm.tensor_parallel.plan": lambda degree, sharded, placements, param_bytes: (
        f"Tensor parallelism over {degree} ranks: {sharded} parameters placed "
        + ", ".join(f"{name} ×{n}" for name, n in placements)
        + f"; the whole model is {param_bytes / MIB:.1f} MiB of parameters (it fits one rank)"
    ),
    "comm.tensor_parallel.kind": lambda name, phase, ns, nbytes, share: (
        f"{name} in {phase}: {ms(ns)} per step ({pct(share)}), {nbytes / MIB:.1f} MiB per step"
        if nbytes
        else f"Waiting in {phase} for the functional collectives' results ({name}): {ms(ns)} per step "
        f"({pct(share)})"
    ),
    "comm.tensor_parallel.rank": lambda rank, ns, share, nbytes: (
        f"Rank {rank} spends {ms(ns)} per step ({pct(share)}) in tensor parallelism's collectives, moving "
        f"{nbytes / MIB:.1f} MiB of activations and their gradients (measured)"
    ),
    "comm.tensor_parallel.dp": lambda nbytes, ns, ratio: (
        f"Data parallelism over the same ranks would all-reduce the gradients once a step: {nbytes / MIB:.1f} "
        f"MiB, 1/{ratio:.1f} of that traffic, about {ms(ns)} at the rate these collectives ran (priced "
        "exposed; DDP overlaps part of it with backward)"
    ),
    "comm.tensor_parallel.replicated": lambda ns, spared_ns, degree: (
        f"The matmuls' work per rank is the same either way; the rest of forward and backward, {ms(ns)} per "
        "step (elementwise work on each block's output, which every rank repeats, and DTensor's own "
        f"dispatch), runs on 1/{degree} of the batch per rank under data parallelism: ~{ms(spared_ns)} less "
        "(priced)"
    ),
    "comm.tensor_parallel.fix": lambda degree, param_bytes: (
        f"Use data parallelism over these {degree} ranks instead of tensor parallelism: DDP (each rank holds "
        f"the {param_bytes / MIB:.0f} MiB model, its gradients and optimizer state), or FSDP2 (fully_shard) "
        "where that does not fit; keep tensor parallelism for models whose layers do not fit one device, "
        "within a node, with data parallelism across (a 2-D mesh)."
    ),
    "comm.tensor_parallel.snippet": lambda: (
        "# instead of parallelize_module(block, tp_mesh, {...}) for each block:\n"
        "model = DistributedDataParallel(model)  # each rank: its share of the batch\n"
        "# or: fully_shard(block, mesh=dp_mesh) per block, then fully_shard(model, mesh=dp_mesh)"
    ),
    # comm.exposed
    "comm.exposed.rank_transfer": lambda rank, transfer_ns, share: (
        f"Rank {rank} spends {ms(transfer_ns)} per step ({pct(share)}) in communication"
    ),
    "comm.exposed.transfer": _transfer,
    "comm.exposed.ddp": _ddp,
    "comm.exposed.kinds": _kinds,
    "comm.exposed.fsdp": lambda modules, resharding, mesh, param_dtype, param_bytes: (
        f"FSDP2 over a mesh of {' × '.join(map(str, mesh)) or '?'} ranks shards {modules} module(s), "
        f"{resharding} of them freeing their gathered parameters after forward (reshard_after_forward=True); "
        f"parameters gathered in {param_dtype or 'their own dtype'}, {param_bytes / MIB:.0f} MiB at full size"
    ),
    "comm.exposed.reshard_title": lambda name: f"{name}: FSDP gathers the parameters again in backward",
    "comm.exposed.regather": lambda backward_ns, forward_ns, after_ns, step_ns: (
        f"Parameter all-gathers take {ms(backward_ns)} of each step inside backward (not hidden), as many "
        f"as in forward ({ms(forward_ns)}): with reshard_after_forward=True (FSDP's default) each sharded "
        f"module frees its gathered parameters after forward and gathers them again for backward. Without "
        f"those: ≈ {ms(after_ns)} a step instead of {ms(step_ns)} (the copy into the parameters goes too, "
        "not counted)"
    ),
    "comm.exposed.reshard_fix": lambda: (
        "Keep the parameters gathered from forward to backward: fully_shard(..., "
        "reshard_after_forward=False) on the sharded modules (or set_reshard_after_forward(False)). Each rank "
        "then holds its modules' whole parameters through backward (ZeRO-2's memory, not ZeRO-3's): apply "
        "it to the root only, or to some blocks, if memory is short"
    ),
    "comm.exposed.reshard_snippet": lambda: RESHARD_SNIPPET,
    "comm.exposed.contention": lambda backward_ns, forward_ns, expected_x, contention_ns: (
        f"Backward computes for {ms(backward_ns)} a step against {ms(forward_ns)} of forward "
        f"({backward_ns / forward_ns:.1f}×; a backward does about {expected_x:.0f}× its forward's work): "
        f"the all-reduce's copies and sums share these cores and slow it by ≈ {ms(contention_ns)}"
    ),
    "comm.exposed.no_sync_title": lambda name: f"{name}: every micro-batch all-reduces the gradients",
    "comm.exposed.no_sync_fix": lambda micro_batches: (
        f"Accumulate without synchronising: run the first {micro_batches - 1:.0f} micro-batches of each step "
        "under `model.no_sync()` so DDP all-reduces once, in the last backward (same gradients, same update)."
    ),
    "comm.exposed.no_sync_snippet": lambda: NO_SYNC_SNIPPET,
    "comm.exposed.synced_backwards": lambda backwards, synced: (
        f"Each optimizer step runs {backwards:.0f} backward() calls (gradient accumulation) and "
        f"{synced:.0f} of them wait at the all-reduce: only the last one's is needed"
    ),
    "comm.exposed.no_sync_after": lambda after_ns, step_ns: (
        f"Without it: ≈ {ms(after_ns)} a step instead of {ms(step_ns)}"
    ),
    "comm.exposed.less_often_fix": lambda: (
        "All-reduce less often: accumulate gradients over 2 or more batches, the first ones under "
        "`model.no_sync()` (or take a larger batch per step). On CPU a compression hook "
        "(fp16_compress_hook) trades bytes for casts on the same cores and rarely pays; `static_graph=True` "
        "and a smaller `bucket_cap_mb` let the first buckets start earlier in backward."
    ),
    "comm.exposed.less_often": lambda per_batch_ns, cost_ns, speedup: (
        f"All-reducing every 2 batches instead of every one (accumulating under no_sync) would cost "
        f"{ms(per_batch_ns)} per batch instead of {ms(cost_ns)}: ×{speedup:.2f} samples per second"
    ),
    "comm.exposed.fewer_bytes_fix": lambda: (
        "Send fewer bytes or fewer times: a bf16 compression hook, a larger batch per step (or gradient "
        "accumulation under `no_sync()`), `static_graph=True`; check `bucket_cap_mb` lets the first "
        "buckets start while backward still runs."
    ),
    "comm.exposed.compression_snippet": lambda: COMPRESSION_SNIPPET,
    "comm.exposed.fewer_bytes": lambda after_ns, step_ns: (
        f"Halving the bytes (bf16 gradients on the wire) would save about half of it if the transfer is "
        f"bandwidth-bound: ≈ {ms(after_ns)} a step instead of {ms(step_ns)}"
    ),
    # imbalance.straggler
    "imbalance.straggler.title": lambda ranks, phase: (
        f"Straggler: rank {_ranks(ranks)} holds the other ranks back ({CULPRITS.get(phase, phase)})"
    ),
    "imbalance.straggler.own_time": lambda slow_rank, fast_rank, slow_ns, fast_ns, gap_ns: (
        f"Rank {slow_rank} spends {ms(slow_ns)} per step outside backward, rank {fast_rank} {ms(fast_ns)}: "
        f"rank {slow_rank} is {ms(gap_ns)} behind every step"
    ),
    "imbalance.straggler.wait": lambda slow_rank, fast_rank, slow_backward_ns, fast_backward_ns, wait_ns, share: (
        f"Rank {fast_rank}'s backward takes {ms(fast_backward_ns)} against rank {slow_rank}'s "
        f"{ms(slow_backward_ns)}: it waits {ms(wait_ns)} ({pct(share)} of the step) at the gradient all-reduce "
        "for the late rank"
    ),
    "imbalance.straggler.culprit": lambda rank, phase, extra_ns: (
        f"Rank {rank}'s extra time is {phase} (+{ms(extra_ns)} per step): {CULPRITS.get(phase, phase)}"
    ),
    "imbalance.straggler.balanced": lambda balanced_ns, step_ns: (
        f"Balanced, every rank would take ≈ {ms(balanced_ns)} a step (the fastest rank's own time plus a "
        f"backward without waiting) instead of {ms(step_ns)}"
    ),
    "imbalance.straggler.fix": lambda ranks, phase: (
        f"Make rank {_ranks(ranks)} as fast as the others: remove what its {phase} costs that the other "
        "ranks don't pay (every rank waits for the slowest at each all-reduce)."
    ),
}
