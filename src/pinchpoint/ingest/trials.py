"""The agent's trial files: thread_trial.json, alloc_trial.json, worker_trial.json (docs/run-directory.md)."""

from __future__ import annotations

from typing import Any

from pinchpoint.ingest.fields import as_int, as_list
from pinchpoint.trace.trials import AllocTrial, ThreadTrial, TrialCut, WorkerTrial

TRIAL_FILE = "thread_trial.json"
ALLOC_TRIAL_FILE = "alloc_trial.json"


def alloc_trial(o: Any) -> AllocTrial | None:
    """alloc_trial.json: {"mmap_threshold", "trim_threshold", "steps", "faults_before", "restored"}."""
    if not isinstance(o, dict):
        return None
    steps = tuple(i for i in (as_int(x) for x in as_list(o.get("steps"))) if i is not None)
    mmap, trim = as_int(o.get("mmap_threshold")), as_int(o.get("trim_threshold"))
    if not steps or mmap is None or trim is None:
        return None
    restored = o.get("restored")
    how = restored.get("from") if isinstance(restored, dict) else None
    reference = tuple(i for i in (as_int(x) for x in as_list(o.get("reference_steps"))) if i is not None)
    return AllocTrial(
        steps=steps,
        reference_steps=reference,
        mmap_threshold=mmap,
        trim_threshold=trim,
        faults_before=max(0, as_int(o.get("faults_before")) or 0),
        restored_from=how if isinstance(how, str) else "",
    )


def thread_trial(o: Any) -> ThreadTrial | None:
    """thread_trial.json: {"threads", "fit", "steps", "foreign_cores"}; None when absent or not that."""
    if not isinstance(o, dict):
        return None
    threads, fit = as_int(o.get("threads")), as_int(o.get("fit"))
    steps = tuple(i for i in (as_int(x) for x in as_list(o.get("steps"))) if i is not None)
    if not threads or not fit or threads <= fit or not steps:
        return None
    foreign = o.get("foreign_cores")
    foreign_cores = float(foreign) if isinstance(foreign, (int, float)) and 0 <= foreign < 1e4 else 0.0
    return ThreadTrial(threads=threads, fit=fit, steps=steps, foreign_cores=foreign_cores)


WORKER_TRIAL_FILE = "worker_trial.json"


def worker_trial(o: Any) -> WorkerTrial | None:
    """worker_trial.json: {"workers", "steps", "batches", "complete"}; None when absent or not that."""
    if not isinstance(o, dict):
        return None
    workers = as_int(o.get("workers"))
    steps = tuple(i for i in (as_int(x) for x in as_list(o.get("steps"))) if i is not None)
    if not workers or workers < 1 or not steps:
        return None
    return WorkerTrial(workers=workers, steps=steps, complete=o.get("complete") is not False)


CUT_FILE = "trial_cut.json"
TRIALS = ("threads", "alloc", "workers")


def trial_cut(o: Any) -> TrialCut | None:
    """trial_cut.json: {"trial", "first_step", "steps_done", "steps_needed", "reason", "slowdown"}; None
    when absent or not that."""
    if not isinstance(o, dict) or o.get("trial") not in TRIALS:
        return None
    done, needed = as_int(o.get("steps_done")), as_int(o.get("steps_needed"))
    if done is None or needed is None or done < 0 or needed <= 0:
        return None
    budget = o.get("reason") == "budget"
    raw = o.get("slowdown")
    slowdown = float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    return TrialCut(
        trial=str(o["trial"]), steps_done=min(done, needed), steps_needed=needed,
        reason="budget" if budget else "end",
        slowdown=slowdown if budget and slowdown is not None and 1 < slowdown < 1e6 else None,
    )  # fmt: skip
