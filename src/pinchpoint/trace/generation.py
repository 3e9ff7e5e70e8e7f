"""A generation loop's model call timed with its whole context and with one token (`capture/context_probe.py`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCost:
    """One call of a generation loop without a KV cache, replayed at the program's exit."""

    tokens: int
    """The call's length (its context, ids)."""
    full_ms: float
    """Median ms of the call as the program made it."""
    one_ms: float
    """Median ms of the same call cut to its last token: what a call costs with a cache (less the
    attention over the cached keys)."""
    pairs: int
    start_ns: int = 0
    end_ns: int = 0
    """When the probe ran (monotonic ns): pinchpoint's own time, not the program's."""
