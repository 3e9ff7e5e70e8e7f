"""The notes a diagnosis carries beside its findings (diagnosis/notes.py) in words."""

from __future__ import annotations

from collections.abc import Callable

MISSING_DATA = {
    "steps": "no steps were recorded (no optimizer step, model call or prof.step() was seen)",
    "ops": "needs an op window (the run had too few steps, or it was turned off)",
    "traffic": "needs an op window with tensor shapes (the run had too few steps, or it was turned off)",
    "loader": "the DataLoader's fetch activity was not recorded",
    "cpu": "needs system samples over the steps (run too short?)",
    "memory": "needs RSS at five or more steps",
    "faults": "needs page-fault counts at five or more steps",
    "main": "the training process's torch settings were not recorded",
    "comm": "no collectives were recorded",
    "serving": "the program was not loaded as a server (`pinchpoint run --load`)",
}
"""Why a rule was not judged, by the first `RankAnalysis` field it needs that is missing."""


def _not_judged(category: str, rank: int, missing: str) -> str:
    reason = MISSING_DATA.get(missing, f"missing {missing}")
    return f"{category}: not judged on rank {rank}: {reason}"


STALL_CAUSES = {
    "gc": "Python's garbage collector holds their extra time (host.gc)",
    "checkpoint": "torch.save holds their extra time (io.checkpoint)",
    "loader": "they wait for a new DataLoader iterator's first batches (an epoch's start, workers started again)",
    "data": "they wait for the DataLoader",
    "host_other": "their extra time is Python outside every framework phase (logging, metrics, evaluation by hand)",
    "mixed": "their extra time has no single cause",
}


PHRASES: dict[str, Callable[..., str]] = {
    "note.not_judged": _not_judged,
    "note.cuda_source": lambda: (
        "CUDA program: step-time findings come from the op window's device timeline "
        "(the host only enqueues work; its phase times show when it waited, not what limits the step)"
    ),
    "note.no_gpu_work": lambda ranks: (
        f"no GPU kernels, copies or memsets in the trace of rank(s) {list(ranks)}: a CPU-only "
        "profile? GPU findings need `ProfilerActivity.CUDA`"
    ),
    "note.analysis": lambda text: text,
    "note.stalls": lambda stalls, steps, every, stall_ns, median_ns, share, cause, explained, restarted=False, code=None, also=None: (
        f"{stalls} of {steps} steps stall"
        + (f", one every {every} steps" if every else "")
        + f": {stall_ns / 1e6:.1f} ms (median) against a {median_ns / 1e6:.1f} ms median step, {share:.0%} of the "
        "steps' time over the median; "
        + STALL_CAUSES.get(cause, f"most of their extra time is in {cause}")
        + (f" ({explained:.0%} of them)" if cause != "mixed" else "")
        + ("" if cause in ("gc", "checkpoint") else ": a median step does not show them")
        + (
            f"; in {also[1]} of them {STALL_CAUSES[also[0]][0].lower()}{STALL_CAUSES[also[0]][1:]}"
            if also
            else ""
        )
        + (
            f". In the stalled steps the main thread was mostly in {code[0]} ({code[1]:.0%} of their samples)"
            if code
            else ""
        )
        + (
            ". Its workers start again with each epoch's iterator (persistent_workers=False): "
            "DataLoader(..., persistent_workers=True) keeps them, and their prefetched batches, across epochs"
            if restarted
            else ""
        )
    ),
    "note.run_time": lambda judged, steps_share, wall_ns, others: (
        f"the {'model calls' if judged == 'inference' else judged} are {steps_share:.0%} of the run's "
        f"{wall_ns / 1e9:.1f} s; the step findings judge "
        "them only (rollouts, evaluation passes, start-up and a stall are judged on the whole run). The rest: "
        + ", ".join(f"{o[0]} {o[1]:.0%}" + (f" (mostly {o[2]})" if len(o) > 2 else "") for o in others)
        + (
            " (time no step covered: `--stacks` samples it)"
            if any(o[0] == "between steps" and len(o) == 2 for o in others)
            else ""
        )
    ),
    "note.span_shares": lambda: "shares are of the GPU-activity span: the trace has no ProfilerStep ranges",
    "note.shared_machine": lambda foreign_cores, usable_cores: (
        f"other processes kept {foreign_cores:.1f} of {usable_cores} cores busy during the "
        "steps: timings, shares and estimates are for the machine as it was, shared (contention "
        "findings too); on an idle machine the compute runs faster and waits weigh more"
    ),
    "note.unloaded": lambda foreign_cores, usable_cores, step_ns, main_ns, all_ns, low_ns, high_ns: (
        f"other processes kept {foreign_cores:.1f} of {usable_cores} cores busy during the steps, the "
        f"whole run: of its {step_ns / 1e6:.1f} ms step, the program's threads waited "
        f"{all_ns / 1e6:.1f} ms for a CPU (the main thread {main_ns / 1e6:.1f} ms); without the load the step would "
        f"take {low_ns / 1e6:.0f}-{high_ns / 1e6:.0f} ms (a model: the waits gone, one after another or at once), "
        "and each finding gives its gain both ways, ordered by the gain without the load"
    ),
    "note.clean_steps": lambda loaded, steps, clean, foreign_cores, slowdown: (
        f"other processes kept {foreign_cores:.1f} cores busy during {loaded} of {steps} steps (those ran "
        f"×{slowdown:.2f} as long): shares and estimates come from the {clean} steps without them, "
        "for this machine when idle"
    ),
    "note.trials_disturbed": lambda trials: (
        f"pinchpoint's {' and '.join(trials)} trial{'s' * (len(trials) > 1)} ran while other processes "
        "held cores the steps it is compared with did not: not read (those fixes are priced by their "
        "model instead)"
    ),
    "note.window_disturbed": lambda steps, slowdown=1.0: (
        f"{steps} of the op window's steps ran while other processes held cores the steps it is "
        "compared with did not: their ops were left out of the op statistics"
        if steps > 0
        else f"the op window's {-steps} steps all ran while other processes held cores the steps it is "
        f"compared with did not: its ops' times were divided by ×{slowdown:.2f}, how much slower the "
        "loaded steps ran (a model: op-based estimates are less certain)"
    ),
    "note.few_steps": lambda steps: f"only {steps} steady steps were measured: statistics are rough",
}
