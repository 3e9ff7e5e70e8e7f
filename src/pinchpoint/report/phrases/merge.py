"""What the engine adds when it combines findings (diagnosis/merge.py) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct
from pinchpoint.report.phrases.whatif import PHASE_LABELS

NET_OF_COMPUTE = {
    "host.dispatch": "per-op overhead",
    "compute.memory": "memory-bound elementwise work",
}


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))


def _compute_net(parts: tuple[tuple[str, float], ...], share: float) -> str:
    notes = [f"{pct(s)} {NET_OF_COMPUTE[cid]} ({cid})" for cid, s in parts]
    return f"Of those phases, {' and '.join(notes)}: the math itself is {pct(share)} of the step"


def _bounded(claimed: float, share: float, phases: tuple[str, ...]) -> str:
    where = ", ".join(PHASE_LABELS.get(p, p) for p in phases)
    return (
        f"Measured at {pct(claimed)} of a step, more than {where} take of the steady steps together: "
        f"counted as {pct(share)} (the estimate with it)"
    )


PHRASES: dict[str, Callable[..., str]] = {
    "merge.share_bounded": _bounded,
    "merge.contended": lambda foreign_cores, cores: (
        f"Measured while other processes kept {foreign_cores:.1f} of {cores} cores busy: part of this "
        "time may be theirs (confidence lowered)"
    ),
    "merge.compute_net": _compute_net,
    "merge.why_late": lambda ranks, category, title: (
        f"Why rank {_ranks(ranks)} is late ({category}): {title}"
    ),
    "merge.on_ranks": lambda ranks, fix: f"On rank {_ranks(ranks)}: {fix}",
    "merge.outside_window": lambda step_ns, gpu_ns, idle_share: (
        f"Outside the op window (which slows the host) a step takes {ms(step_ns)} and its GPU work "
        f"{ms(gpu_ns)}: the GPU waits {pct(idle_share)} of the step"
    ),
}
