"""The op windows `pinchpoint capture` asked for (`capture/on_demand.py`): each rank's answers,
ranks/rankR/capture-N.json, as the report's `op_windows` list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pinchpoint.ingest.fields import as_dict, as_int, as_str, load_json
from pinchpoint.ingest.rundir import rank_dirs


def op_windows(run_dir: Path) -> list[dict[str, Any]]:
    """One entry per rank and request, oldest first: `start_step`, `steps`, `at_s` (seconds after the
    run started), `kept` (the file the earlier window was renamed to), or `refused` and why."""
    meta = as_dict(load_json(run_dir / "meta.json", []))
    started_ns = as_int(as_dict(meta.get("clock")).get("monotonic_ns"), 0) or 0
    out: list[dict[str, Any]] = []
    for rank, d in rank_dirs(run_dir):
        for path in d.glob("capture-*.json"):
            doc = as_dict(load_json(path, []))
            request = as_int(doc.get("id"))
            if request is None:
                continue
            entry: dict[str, Any] = {"rank": rank, "request": request}
            refused = as_str(doc.get("refused"))
            if refused is not None:
                out.append(entry | {"refused": refused})
                continue
            t_ns = as_int(doc.get("t_ns"))
            out.append(
                entry
                | {
                    "start_step": as_int(doc.get("start_step")),
                    "steps": as_int(doc.get("steps")),
                    "at_s": round((t_ns - started_ns) / 1e9, 1) if t_ns and started_ns else None,
                    "kept": as_str(doc.get("kept")),
                }
            )
    return sorted(out, key=lambda e: (e["request"], e["rank"]))
