"""Phrases every category uses: a rule's own name as a finding's title."""

from __future__ import annotations

from collections.abc import Callable

PHRASES: dict[str, Callable[..., str]] = {
    "rule.title": lambda name: name,
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
