"""The load `run --load` sent: load.json (the plan, why none was sent) and requests.jsonl (each request's
times), read tolerantly into `ServedLoad`."""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.ingest.fields import as_float, as_int, as_str, jsonl, load_json
from pinchpoint.trace.serving import BatchCosts, ModelCall, Request, ServedLoad

LOAD_FILE = "load.json"
REQUESTS_FILE = "requests.jsonl"
BATCH_PROBE_FILE = "batch_probe.json"
"""A rank's: `capture/batch_probe.py` writes it."""
CALLS_FILE = "calls.jsonl"
"""A rank's: `capture/served_calls.py` writes it."""


def served_load(run_dir: Path, warnings: list[str]) -> ServedLoad | None:
    """None for a run without `--load`."""
    if not (run_dir / LOAD_FILE).is_file() and not (run_dir / REQUESTS_FILE).is_file():
        return None
    doc = load_json(run_dir / LOAD_FILE, warnings)
    doc = doc if isinstance(doc, dict) else {}
    requests = tuple(r for o in jsonl(run_dir / REQUESTS_FILE, warnings) if (r := _request(o)) is not None)
    return ServedLoad(
        url=as_str(doc.get("url")) or "",
        rate=as_float(doc.get("rate"), 0.0) or 0.0,
        duration_s=as_float(doc.get("duration_s"), 0.0) or 0.0,
        requests=tuple(sorted(requests, key=lambda r: r.due_ns)),
        error=as_str(doc.get("error")),
    )


def _request(o: dict[str, object]) -> Request | None:
    due = as_int(o.get("due_ns"))
    if due is None:
        return None
    first, end, body = as_int(o.get("first_ns")), as_int(o.get("end_ns")), as_int(o.get("body_ns"))
    return Request(
        due_ns=due,
        first_ns=first if first is not None and first >= due else None,
        end_ns=end if end is not None and end >= due else None,
        status=as_int(o.get("status")),
        error=as_str(o.get("error")),
        dropped=o.get("dropped") is True,
        body_ns=body if body is not None and body >= due else None,
        chunks=max(0, as_int(o.get("chunks"), 0) or 0),
        events=max(0, as_int(o.get("events"), 0) or 0),
    )


def batch_costs(rank_dir: Path, warnings: list[str]) -> BatchCosts | None:
    """ranks/rankR/batch_probe.json: {"rows", "batches": [[batch, ms], ...]}; None when absent or empty."""
    if not (rank_dir / BATCH_PROBE_FILE).is_file():
        return None
    doc = load_json(rank_dir / BATCH_PROBE_FILE, warnings)
    if not isinstance(doc, dict):
        return None
    rows = as_int(doc.get("rows"))
    pairs = doc.get("batches")
    ms: dict[int, float] = {}
    for pair in pairs if isinstance(pairs, list) else []:
        if isinstance(pair, list) and len(pair) == 2:
            b, t = as_int(pair[0]), as_float(pair[1])
            if b is not None and b >= 1 and t is not None and t > 0:
                ms[b] = t
    if rows is None or rows < 1 or not ms:
        return None
    start, end = as_int(doc.get("start_ns"), 0) or 0, as_int(doc.get("end_ns"), 0) or 0
    return BatchCosts(rows=rows, ms=tuple(sorted(ms.items())), start_ns=start, end_ns=max(start, end))


def other_calls(rank_dir: Path, warnings: list[str]) -> tuple[ModelCall, ...]:
    """ranks/rankR/calls.jsonl: one `[start_ns, end_ns, rows, thread]` list a line."""
    path = rank_dir / CALLS_FILE
    if not path.is_file():
        return ()
    out: list[ModelCall] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        warnings.append(f"{CALLS_FILE} could not be read ({exc.strerror})")
        return ()
    for line in lines:
        try:
            v = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(v, list) and len(v) == 4:
            start, end, rows, thread = (as_int(x) for x in v)
            if start is not None and end is not None and end >= start and thread is not None:
                out.append(
                    ModelCall(
                        start_ns=start, end_ns=end, rows=rows if rows and rows > 0 else None, thread=thread
                    )
                )
    return tuple(sorted(out, key=lambda c: c.start_ns))
