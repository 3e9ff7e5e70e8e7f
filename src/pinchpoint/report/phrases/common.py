"""Phrases every category uses: a rule's own name as a finding's title."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinchpoint.report.report_doc import FindingInfo, RunTimeInfo

TRIAL_NAMES = {"threads": "thread", "alloc": "allocator", "workers": "DataLoader workers"}

PHRASES: dict[str, Callable[..., str]] = {
    "rule.title": lambda name: name,
    "trial.cut": lambda trial, done, needed: (
        f"pinchpoint's {TRIAL_NAMES.get(trial, trial)} trial, which would have measured this fix, was cut "
        f"short by the program's end ({done} of its {needed} steps): this estimate comes from a model, "
        "not a measurement; a longer run measures it"
    ),
    "trial.stopped": lambda trial, done, needed, slowdown: (
        f"pinchpoint's {TRIAL_NAMES.get(trial, trial)} trial stopped after {done} of its {needed} steps: "
        f"with the fix they ran ×{slowdown:.2f} the program's own step time, past what pinchpoint allows "
        "itself inside the loop (0.25 s + 1% of it); the fix did not pay while it ran, and this estimate "
        "comes from a model"
    ),
}


def gain(speedup: float, basis: str | None) -> str:
    """A finding's estimated speedup with how it was obtained (`Finding.basis`, report.json's
    `estimate_basis`): a trial measured it, a probe timed the fixed operation, a cost model priced
    it, or the share removed bounds it."""
    if basis == "trial":
        return f"fix → ×{speedup:.2f} faster, measured by a trial run"
    if basis == "probe":
        return f"fix → est. ×{speedup:.2f} faster (timed by a probe)"
    if basis == "model":
        return f"fix → est. ×{speedup:.2f} faster (cost model)"
    if basis == "removed":
        return f"fix → up to ×{speedup:.2f} faster (the share removed)"
    return f"fix → est. ×{speedup:.2f} faster"


RUN_GAIN_SAYS = 0.05
"""A step finding's gain on the whole run is said where it falls 5% (of the gain) short of the step's."""


def share_words(f: FindingInfo) -> str:
    """`41% of the step`, or of the run for a finding outside the training steps, or of a served request."""
    if f.share_of == "request":
        return f"{100 * f.share:.0f}% of a request's time in the server"
    return f"{100 * f.share:.0f}% of the {'run' if f.share_of == 'run' else 'step'}"


def run_gain_words(f: FindingInfo) -> str:
    """` on the whole run` for a finding of the run; ` (×1.18 on the whole run)` for a step finding whose
    steps are only part of the run; else nothing."""
    if f.share_of == "run":
        return " on the whole run"
    if f.share_of == "request":
        return " in requests answered a second, under this load"
    run, step = f.estimated_run_speedup, f.estimated_speedup
    if run is None or step <= 1.0 or (run - 1) >= (1 - RUN_GAIN_SAYS) * (step - 1):
        return ""
    return f" (×{run:.2f} on the whole run: the training steps are only part of it)"


SEGMENT_CODE_MIN_SHARE = 0.05


def segment_code_lines(whole: RunTimeInfo) -> list[str]:
    """A line per segment outside the training steps of at least 5% of the run whose code was sampled:
    where its main thread was."""
    out = []
    for g in whole.segments:
        code = g.code
        if not code or g.share < SEGMENT_CODE_MIN_SHARE or g.name == "pinchpoint's own work":
            continue
        top = "; ".join(
            f"{h.function} {100 * h.share:.0f}%" + (f", inside {h.inside}" if h.inside else "")
            for h in code.top[:2]
        )
        out.append(f"  {g.name}: {top} · on a CPU {100 * code.on_cpu:.0f}% of it")
    return out


def load_words(f: FindingInfo) -> str:
    """A finding's gain as the machine was (over its steps' spread) and without the other load."""
    assert f.estimate_without_load is not None
    low, high = f.estimate_without_load.low, f.estimate_without_load.high
    idle = f"×{low:.2f}" if high - low < 0.005 else f"×{low:.2f}-{high:.2f}"
    was = f.estimate_as_was
    spread = (
        f" (×{was.low:.2f}-{was.high:.2f} over the steps' spread)"
        if was and was.high - was.low >= 0.005
        else ""
    )
    return (
        f"as the machine was: ×{f.estimated_speedup:.2f}{spread} · without the other load: {idle} "
        "(model: the time the program's threads waited for a CPU gone)"
    )
