"""memory.leak, memory.pressure (allocator churn) and io.checkpoint in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import GIB, MIB, ms, pct


def _graphs_kept(
    before: int,
    after: int,
    steps: int,
    per_step: float,
    storage_bytes: float,
    groups: tuple[tuple[tuple[int, ...], str, str, float], ...],
) -> str:
    listed = "; ".join(
        f"{'×'.join(map(str, shape)) or 'scalar'} {dtype} ({grad_fn}) +{n:.1f}"
        for shape, dtype, grad_fn, n in groups
    )
    return (
        f"Tensors that still carry their autograd graph went {before} → {after} over the "
        f"{steps} op-window steps (+{per_step:.1f} per step, "
        f"+{storage_bytes / MIB:.2f} MiB of their storage per step, plus the graph's saved "
        f"tensors): {listed}. The loop keeps outputs or losses with their graph."
    )


def _faults(faults: int, steps: int, before_window: bool, growth_pages: int, fresh_bytes: float) -> str:
    return (
        f"{faults:,} minor page faults per step (median of {steps} steps"
        f"{' before the op window' if before_window else ''})"
        + (f", {growth_pages:,} of them for memory the process keeps (growth)" if growth_pages else "")
        + f": {fresh_bytes / MIB:.0f} MiB of fresh pages mapped and zeroed every step"
    )


PHRASES: dict[str, Callable[..., str]] = {
    "memory.leak.growth": lambda slope_bytes, r2, first_bytes, last_bytes, steps: (
        f"Resident memory grows {slope_bytes / MIB:.2f} MiB per step (R² = {r2:.2f}), "
        f"{first_bytes / MIB:.0f} → {last_bytes / MIB:.0f} MiB over {steps} steps"
    ),
    "memory.leak.graphs_kept": _graphs_kept,
    "memory.leak.graphs_flat": lambda before, after: (
        f"Tensors with autograd history did not accumulate across the op window ({before} → "
        f"{after}): the growth is elsewhere (Python objects, caches, a C extension)"
    ),
    "memory.leak.runway": lambda machine_bytes, steps_left: (
        f"At this rate the machine's {machine_bytes / GIB:.0f} GiB are used up after "
        f"about {steps_left:,.0f} more steps"
    ),
    "memory.leak.fix": lambda kept_graphs: (
        "Keep numbers, not graphs: tensors appended to a list (or summed into a running total) keep "
        "their autograd graph alive. Store loss.item(), or logits.detach() where the tensor is needed."
        if kept_graphs
        else "Find what the loop keeps per step: tensors appended to a list keep their autograd graph "
        "alive. Store loss.item() or tensor.detach().cpu(), and clear caches that grow with the step."
    ),
    "memory.leak.snippet": lambda: "history.append(loss.item())   # not history.append(loss)",
    "memory.churn.faults": _faults,
    "memory.churn.fault_cost": lambda fault_ns, bounded, model_ns, step_ns, share: (
        f"One fault costs {fault_ns / 1000:.2f} µs on this machine (measured: map, zero, unmap a "
        f"fresh page): {'at most ' if bounded else '≈ '}{ms(model_ns)} of a "
        f"{ms(step_ns)} step" + ("" if bounded else f" ({pct(share)})")
    ),
    "memory.churn.trial": lambda steps, mmap_bytes, trim_bytes, trial_ns, steady_ns, faults_before, trial_faults, speedup, p: (
        f"Measured: {steps} steps run by pinchpoint with glibc's mmap threshold at {mmap_bytes >> 20} MiB "
        f"and trim threshold at {trim_bytes >> 20} MiB (mallopt, set back after) took {ms(trial_ns)} "
        f"(median, {trial_faults:,} faults a step) against {ms(steady_ns)} "
        f"(the steps between its blocks and around it; {faults_before:,} faults a step before it): ×{speedup:.2f} "
        f"(rank test p = {p:.3f})"
    ),
    "memory.churn.trial_bounded": lambda saved_ns, kernel_ns, speedup: (
        f"Of the {ms(saved_ns)} a trial step saved, {ms(max(0, kernel_ns))} was kernel time (the faults "
        f"it removed); the rest is the steps' drift, not the fix: priced at the kernel time, ×{speedup:.2f}"
    ),
    "memory.churn.undecided": lambda: (
        "The trial could not tell: the steps drifted as much as the thresholds moved them "
        "(the estimate below is the fault model's, at low confidence)"
    ),
    "memory.churn.restored": lambda faults_before, faults_after: (
        f"After the trial the steps faulted {faults_after:,} times (median) against {faults_before:,} before: "
        "glibc stops adjusting its thresholds once they are set, so the ones set back are fixed "
        "approximations, and the steps after the trial ran with a little less churn than the program's own"
    ),
    "memory.churn.kernel_time": lambda main_thread, kernel_ns, cost_ns, share: (
        f"The {'main thread' if main_thread else 'process (all threads)'} "
        f"spent {ms(kernel_ns)} of the step in the kernel (system time), which bounds what "
        f"the faults cost the step: ≈ {ms(cost_ns)} ({pct(share)})"
    ),
    "memory.churn.fix": lambda: (
        "Keep freed memory in the process instead of returning it to the OS every step: preload "
        "jemalloc or tcmalloc, or raise glibc's mmap and trim thresholds for the run."
    ),
    "memory.churn.snippet": lambda env: (
        f"{env} python train.py\n# or: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python train.py"
    ),
    "io.checkpoint.save": lambda share, per_step_ns: (
        f"torch.save takes {pct(share)} of the step ({ms(per_step_ns)} per step on average)"
    ),
    "io.checkpoint.after": lambda saves, every, save_ns, after_ns, typical_ns, steps, share, p: (
        f"The {steps} steps after each of the {saves} saves (one every {every} steps, {ms(save_ns)} inside "
        f"torch.save) and the saving step outside it ran {ms(after_ns)} longer in all than a step far "
        f"from a save ({ms(typical_ns)}): the kernel writing the checkpoint back while they run, "
        f"{pct(share)} of the run more (rank test p = {p:.3f})"
        if after_ns > 0
        else f"The {steps} steps after each of the {saves} saves (one every {every} steps) ran as fast as the "
        f"steps far from a save ({ms(typical_ns)}; rank test p = {p:.2f}): the save costs its own time only"
    ),
    "io.checkpoint.fix": lambda: (
        "Checkpoint less often (every N steps or minutes) and off the critical path: snapshot the "
        "state dict, then write it from a background thread."
    ),
    "io.checkpoint.snippet": lambda: (
        "if step % 500 == 0:\n"
        "    state = {k: v.detach().clone() for k, v in model.state_dict().items()}\n"
        "    threading.Thread(target=torch.save, args=(state, path)).start()"
    ),
}
