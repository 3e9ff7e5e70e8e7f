"""cpu.oversubscription (more busy threads than cores) and cpu.underuse (idle cores) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import pct

PHRASES: dict[str, Callable[..., str]] = {
    "cpu.oversubscription.threads": lambda threads, cores, workers: (
        f"The training process runs {threads} intra-op threads on {cores} usable core(s)"
        + (f", beside {workers} worker process(es)" if workers else "")
    ),
    "cpu.oversubscription.foreign": lambda foreign_cores, cores: (
        f"Other processes kept {foreign_cores:.1f} of the {cores} core(s) busy before the trial: "
        "the program's threads compete with them"
    ),
    "cpu.oversubscription.runq": lambda share: f"Its main thread waited for a CPU {pct(share)} of the step",
    "cpu.oversubscription.switches": lambda switches_per_s, threads: (
        f"{switches_per_s:.0f} involuntary context switches per second across the program's {threads} threads"
    ),
    "cpu.oversubscription.env": lambda variables: (
        "Thread variables set: " + ", ".join(f"{k}={v}" for k, v in variables)
    ),
    "cpu.oversubscription.trial": lambda steps, fit, trial_ns, steady_ns, threads, speedup, p=0.0: (
        f"Measured: {steps} steps run by pinchpoint with torch.set_num_threads({fit}) took "
        f"{trial_ns / 1e6:.1f} ms a step (mean) against {steady_ns / 1e6:.1f} ms "
        f"with {threads} threads around them: ×{speedup:.2f}"
        + (f", within the steps' spread (permutation test p = {p:.2f})" if p > 0.05 else "")
    ),
    "cpu.oversubscription.trial_contended": lambda fit, threads, trial_runq, steady_runq, speedup: (
        f"pinchpoint's thread trial was not read (×{speedup:.2f}): at {fit} thread(s) the main thread still "
        f"waited for a CPU {pct(trial_runq)} of its steps ({pct(steady_runq)} at {threads}), so something "
        "the samples do not show held the cores; priced by the wait instead"
    ),
    "cpu.oversubscription.fix": lambda threads: (
        f"Use at most one busy thread per core: torch.set_num_threads({threads}) "
        f"(or OMP_NUM_THREADS={threads}); keep DataLoader workers at 1 thread each."
    ),
    "cpu.oversubscription.fix_shared": lambda threads, foreign_cores: (
        f"Another process keeps {foreign_cores:.1f} core(s) busy: while it does, run with the cores left, "
        f"torch.set_num_threads({threads}) (or OMP_NUM_THREADS={threads}), or stop or pin it away from "
        "this program's cores."
    ),
    "cpu.oversubscription.snippet": lambda threads: f"torch.set_num_threads({threads})",
    "cpu.underuse.threads": lambda share, threads, cores: (
        f"Compute is {pct(share)} of the step but runs on {threads} intra-op thread(s); "
        f"{cores} core(s) are usable"
    ),
    "cpu.underuse.idle": lambda idle_cores, process_cores: (
        f"Machine-wide, {idle_cores:.1f} core(s) sat idle during the steps "
        f"(the program used {process_cores:.1f})"
    ),
    "cpu.underuse.fix": lambda threads: (
        f"Let intra-op parallelism use the idle cores: torch.set_num_threads({threads}) "
        "(remove the lower setting or OMP_NUM_THREADS)."
    ),
    "cpu.underuse.snippet": lambda: "torch.set_num_threads(len(os.sched_getaffinity(0)))",
}
