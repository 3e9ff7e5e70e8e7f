"""What a live view of a run in progress shows (`pipeline/live.py` reads it, `report/live_terminal.py`
draws it)."""

from __future__ import annotations

from dataclasses import dataclass, field

WINDOW_STEPS = 50
"""Steps in the "last steps" figures; the trend compares them with as many steps before."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Leading:
    id: str
    title: str
    share: float | None
    others: int
    """Further findings beside it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    command: str
    ended: bool
    exit_code: int | None
    elapsed_s: float | None
    steps: int
    """Steps seen so far (rank 0), the last one's number + 1: the op window's and trials' included."""
    last_ms: float | None
    """Median step time over the last `WINDOW_STEPS` ordinary steps (no window's, no trial's)."""
    timed: int = 0
    """Ordinary steps behind `last_ms` (at most `WINDOW_STEPS`)."""
    measuring: str | None = None
    """"window" or "trial" when the latest step was pinchpoint's own (left out of the times)."""
    before_ms: float | None
    """Median over the steps before those: `last_ms / before_ms` is the trend."""
    phases: dict[str, float] = field(default_factory=dict)
    """Share of the last steps' time in each measured phase."""
    cores_busy: float | None = None
    """Cores busy machine-wide in the last system sample."""
    rss_bytes: int | None = None
    """The program's process tree's resident memory in the last sample."""
    rss_before_bytes: int | None = None
    """...and about a minute before it (its trend)."""
    output: tuple[str, ...] = ()
    """The program's last lines of output (`run --live` sends them to output.log)."""
