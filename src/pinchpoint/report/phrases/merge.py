"""What the engine adds when it combines findings (diagnosis/merge.py) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct

NET_OF_COMPUTE = {
    "host.dispatch": "per-op overhead",
    "compute.memory": "memory-bound elementwise work",
}


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))


def _compute_net(parts: tuple[tuple[str, float], ...], share: float) -> str:
    notes = [f"{pct(s)} {NET_OF_COMPUTE[cid]} ({cid})" for cid, s in parts]
    return f"Of those phases, {' and '.join(notes)}: the math itself is {pct(share)} of the step"


PHRASES: dict[str, Callable[..., str]] = {
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
