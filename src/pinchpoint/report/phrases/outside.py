"""Words for a process watched from outside (`diagnosis/rules/outside.py`)."""

from __future__ import annotations

from collections.abc import Callable

PHASE_WHAT = {
    "loop": (
        "the loop's own code (torch ops it calls outside any module count here too: telling them apart "
        "needs the op window)"
    ),
    "checkpoint": "torch.save / torch.load",
}
FIXES = {
    "input.fetch": "DataLoader(num_workers=2, persistent_workers=True, prefetch_factor=4); or cache the data.",
    "input.preprocess": "Preprocess once and cache, or more DataLoader workers if cores are free.",
    "host.python": "Keep per-step work on tensors; log and compute metrics every N steps.",
    "io.checkpoint": "Checkpoint less often, or from a background thread.",
    "cpu.oversubscription": "torch.set_num_threads(cores per process) or OMP_NUM_THREADS; fewer processes per machine.",
    "memory.leak": "Don't keep tensors that hold a graph across steps (loss.item(), .detach()).",
}
NOT_JUDGED = {
    "steps": ("steps", "step count, step time and its trend (the agent's hooks find the steps)"),
    "op_kinds": (
        "host.dispatch, compute.math, compute.memory",
        "which kind of work forward and backward do (the op window)",
    ),
    "device": ("host.sync, transfer.h2d", "waits on the GPU and copies to it (the agent's CUDA hooks)"),
    "distributed": (
        "comm.exposed, imbalance.straggler",
        "collectives and ranks (the agent's distributed hooks)",
    ),
    "memory_pressure": ("memory.pressure", "page faults and allocator churn per step (the agent's counters)"),
    "trials": ("measured fixes", "a fix tried for a few steps inside the process (trials)"),
}
"""What a watch from outside cannot judge: (what, what judging it needs)."""
SHARE_OF = "the main thread's time over the attach"

PHRASES: dict[str, Callable[..., str]] = {
    "outside.loader_time": lambda share, samples: (
        f"The main thread spends {share:.0%} of its time in the DataLoader ({samples} samples)"
    ),
    "outside.workers": lambda workers, busiest, computing: (
        f"{workers} DataLoader worker(s): the busiest on a CPU {busiest:.0%} of the time"
        + (" (computing the batches)" if computing else " (waiting: I/O or latency)")
    ),
    "outside.in_process": lambda main_cores, loading, computing: (
        f"No workers (num_workers=0): the main thread is on a CPU {main_cores:.0%} of the time, so loading "
        f"is on a CPU about {loading:.0%} of its time"
        + (" (computing)" if computing else " (waiting: I/O or latency)")
    ),
    "outside.loading_unknown": lambda: "Whether loading computes or waits could not be read (/proc)",
    "outside.hottest": lambda label, share: f"hottest: {label} ({share:.0%})",
    "outside.phase_time": lambda share, phase: (
        f"The main thread spends {share:.0%} of its time in {PHASE_WHAT[phase]}"
    ),
    "outside.busy_threads": lambda busy, cores, process_cores, switches_per_s: (
        f"{busy} threads of the process each used at least 5% of a core over the attach, on {cores} usable "
        f"cores; the process kept {process_cores:.1f} cores busy, with {switches_per_s:.0f} involuntary "
        "context switches a second"
    ),
    "outside.needs_trial": lambda: "Its share of the step needs the thread trial, inside the process",
    "outside.rss_growth": lambda grown_bytes, growth, over_ns: (
        f"Resident memory grew {grown_bytes / 2**20:.0f} MB ({growth:.0%}) over {over_ns / 1e9:.0f} s"
    ),
    "outside.fix": lambda category: FIXES[category],
    "outside.loop_waits": lambda loop_share, main_cores: (
        f"The loop's own code holds {loop_share:.0%} of the main thread's time, but the main thread is on a "
        f"CPU only {main_cores:.0%} of the time: it waits there (sleep, I/O, a lock), which is not Python work"
    ),
    "outside.not_judged.what": lambda item: NOT_JUDGED[item][0],
    "outside.not_judged.needs": lambda item: NOT_JUDGED[item][1],
}
