"""One line of steps.jsonl (`capture/step_state.py`) as a `Step`."""

from __future__ import annotations

from typing import Any

from pinchpoint.ingest.fields import as_int, as_list
from pinchpoint.trace.step import Interval, Phase, Step, StepKind


def step_record(o: dict[str, Any]) -> Step | None:
    """One line of steps.jsonl as a Step (None: not a whole step record)."""
    start, end = as_int(o.get("start_ns")), as_int(o.get("end_ns"))
    if start is None or end is None or end < start:
        return None
    intervals = []
    for item in as_list(o.get("intervals")):
        if not (isinstance(item, list) and len(item) in (3, 5)):
            continue
        try:
            phase = Phase(item[0])
        except (ValueError, TypeError):
            continue
        s, e = as_int(item[1]), as_int(item[2])
        what = item[3] if len(item) == 5 and isinstance(item[3], str) else None
        if s is not None and e is not None and e >= s:
            nbytes = as_int(item[4]) if what is not None else None
            intervals.append(Interval(phase=phase, start_ns=s, end_ns=e, what=what, nbytes=nbytes))
    try:
        kind = StepKind(o.get("kind"))
    except (ValueError, TypeError):
        kind = StepKind.EXPLICIT
    # pinchpoint's own bookkeeping at the step's start (writing the last step, reading counters) is not
    # the program's: the step starts after it (and its CPU, spent on the main thread, comes off too).
    first = min((iv.start_ns for iv in intervals), default=end)
    agent = min(max(0, as_int(o.get("agent_ns"), 0) or 0), max(0, first - start))
    cpu = as_int(o.get("cpu_ns"))
    return Step(
        index=as_int(o.get("step"), 0) or 0,
        kind=kind,
        start_ns=start + agent,
        end_ns=end,
        intervals=tuple(intervals),
        profiled=bool(o.get("profiled")),
        trial=bool(o.get("trial")),
        settling=bool(o.get("settling")),
        partial=bool(o.get("partial")),
        cpu_ns=max(0, cpu - agent) if cpu is not None else None,
        runq_ns=as_int(o.get("runq_ns")),
        rss_bytes=as_int(o.get("rss_bytes")),
        minor_faults=as_int(o.get("minor_faults")),
        sys_ns=as_int(o.get("sys_ns")),
        main_sys_ns=as_int(o.get("main_sys_ns")),
        gc_ns=as_int(o.get("gc_ns")),
        gc_collections=as_int(o.get("gc_collections")),
        gc_full=as_int(o.get("gc_full")),
        gc_explicit_ns=as_int(o.get("gc_explicit_ns")),
        graph_calls=as_int(o.get("graph_calls")),
        graph_ns=as_int(o.get("graph_ns")),
        loader=as_int(o.get("loader")),
        tokens=as_int(o.get("tokens")),
        tail=_tail(o.get("tail")),
        rows=rows if (rows := as_int(o.get("rows"))) is not None and rows >= 0 else None,
        agent_ns=agent,
    )


def _tail(o: Any) -> tuple[int, int] | None:
    """A step's `tail` (two token ids), or None where it is missing or not two integers."""
    if isinstance(o, list) and len(o) == 2:
        a, b = as_int(o[0]), as_int(o[1])
        if a is not None and b is not None:
            return a, b
    return None
