"""`gc.json`: Python's collector over a rank's main process (`capture/gc_watch.py`)."""

from __future__ import annotations

from typing import Any

from pinchpoint.ingest.fields import as_int, as_list
from pinchpoint.trace.trials import GcRecord, GcSite


def gc_record(o: Any) -> GcRecord | None:
    """`gc.json` (None when absent or not an object; bad entries are skipped)."""
    if not isinstance(o, dict):
        return None
    sites = []
    for item in as_list(o.get("explicit")):
        if isinstance(item, dict) and isinstance(item.get("file"), str):
            sites.append(
                GcSite(
                    file=str(item["file"]),
                    line=as_int(item.get("line"), 0) or 0,
                    function=str(item.get("function") or "?"),
                    calls=max(0, as_int(item.get("calls"), 0) or 0),
                    ns=max(0, as_int(item.get("ns"), 0) or 0),
                )
            )
    return GcRecord(
        ns=max(0, as_int(o.get("ns"), 0) or 0),
        collections=max(0, as_int(o.get("collections"), 0) or 0),
        full=max(0, as_int(o.get("full"), 0) or 0),
        explicit_ns=max(0, as_int(o.get("explicit_ns"), 0) or 0),
        threshold=tuple(as_int(t, 0) or 0 for t in as_list(o.get("threshold"))),
        frozen=max(0, as_int(o.get("frozen"), 0) or 0),
        explicit=tuple(sites),
    )
