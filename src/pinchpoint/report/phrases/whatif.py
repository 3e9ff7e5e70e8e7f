"""What limits the step once a finding is fixed (diagnosis/whatif.py) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct
from pinchpoint.trace.run import HOST_OTHER, Phase

PHASE_LABELS = {
    Phase.DATA_WAIT.value: "waiting for data",
    HOST_OTHER: "host work outside the framework",
    Phase.FORWARD.value: "forward",
    Phase.BACKWARD.value: "backward",
    Phase.OPTIMIZER.value: "the optimizer step",
    Phase.CHECKPOINT_IO.value: "checkpoint writes",
    Phase.COMM.value: "communication",
    Phase.SYNC_WAIT.value: "device syncs",
    Phase.H2D_COPY.value: "host→device copies",
}
"""How a step phase (`trace.run.Phase`, `HOST_OTHER`) reads in a sentence; other phases read as named."""


PHRASES: dict[str, Callable[..., str]] = {
    "whatif.next_finding": lambda category, share, step_ns: (
        f"after this, {category} at {pct(share)} of a {ms(step_ns)} step is the limit"
    ),
    "whatif.next_phase": lambda phase, share, step_ns: (
        f"after this, {PHASE_LABELS.get(phase, phase)} at {pct(share)} of a {ms(step_ns)} step is the limit"
    ),
}
