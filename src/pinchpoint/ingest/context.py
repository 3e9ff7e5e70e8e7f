"""ranks/rankR/context_probe.json (`capture/context_probe.py`), read tolerantly into `ContextCost`."""

from __future__ import annotations

from pathlib import Path

from pinchpoint.ingest.fields import as_float, as_int, load_json
from pinchpoint.trace.generation import ContextCost

FILE = "context_probe.json"


def context_cost(rank_dir: Path, warnings: list[str]) -> ContextCost | None:
    """None when absent, damaged, or not a timing (no positive medians, no context)."""
    if not (rank_dir / FILE).is_file():
        return None
    doc = load_json(rank_dir / FILE, warnings)
    if not isinstance(doc, dict):
        return None
    tokens, pairs = as_int(doc.get("tokens")), as_int(doc.get("pairs"), 1)
    full, one = as_float(doc.get("full_ms")), as_float(doc.get("one_ms"))
    if tokens is None or tokens < 2 or full is None or one is None or not (full > 0 and one > 0):
        return None
    start, end = as_int(doc.get("start_ns"), 0) or 0, as_int(doc.get("end_ns"), 0) or 0
    return ContextCost(
        tokens=tokens,
        full_ms=full,
        one_ms=one,
        pairs=max(1, pairs or 1),
        start_ns=start,
        end_ns=max(start, end),
    )
