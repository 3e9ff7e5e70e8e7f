"""Phrases every category uses: a rule's own name as a finding's title."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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


SEGMENT_CODE_MIN_SHARE = 0.05


def segment_code_lines(whole: dict[str, Any]) -> list[str]:
    """A line per segment outside the training steps of at least 5% of the run whose code was sampled:
    where its main thread was."""
    out = []
    for g in whole["segments"]:
        code = g.get("code")
        if not code or g["share"] < SEGMENT_CODE_MIN_SHARE or g["name"] == "pinchpoint's probes":
            continue
        top = "; ".join(
            f"{h['function']} {100 * h['share']:.0f}%"
            + (f", inside {h['inside']}" if h.get("inside") else "")
            for h in code["top"][:2]
        )
        out.append(f"  {g['name']}: {top} · on a CPU {100 * code['on_cpu']:.0f}% of it")
    return out


def load_words(f: Mapping[str, Any]) -> str:
    """A finding's gain as the machine was (over its steps' spread) and without the other load."""
    low, high = f["estimate_without_load"]["low"], f["estimate_without_load"]["high"]
    idle = f"×{low:.2f}" if high - low < 0.005 else f"×{low:.2f}-{high:.2f}"
    was = f.get("estimate_as_was") or {}
    spread = (
        f" (×{was['low']:.2f}-{was['high']:.2f} over the steps' spread)"
        if was and was["high"] - was["low"] >= 0.005
        else ""
    )
    return (
        f"as the machine was: ×{f['estimated_speedup']:.2f}{spread} · without the other load: {idle} "
        "(model: the time the program's threads waited for a CPU gone)"
    )
