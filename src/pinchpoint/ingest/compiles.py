"""compile.json (`capture/compiles.py`) into a `CompileRecord`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pinchpoint.ingest.fields import as_int, as_list, as_str
from pinchpoint.trace.compiles import Compilation, CompileCaches, CompileRecord
from pinchpoint.trace.run import Step

FILE = "compile.json"


def compile_record(o: Any) -> CompileRecord | None:
    """None when absent, or not that (a hostile or truncated file reads as no record)."""
    if not isinstance(o, dict):
        return None
    raw_clock = o.get("clock")
    clock = raw_clock if isinstance(raw_clock, dict) else {}
    wall, mono = as_int(clock.get("wall_time_ns")), as_int(clock.get("monotonic_ns"))
    if wall is None or mono is None:
        return None
    found = []
    for c in as_list(o.get("compiles")):
        if not isinstance(c, dict):
            continue
        start, dur, cid = as_int(c.get("start_us")), as_int(c.get("duration_us")), as_str(c.get("id"))
        if start is None or dur is None or cid is None or dur < 0:
            continue
        file, line = as_str(c.get("file")), as_int(c.get("line"))
        found.append(
            Compilation(
                compile_id=cid,
                frame=as_str(c.get("frame")),
                site=f"{file}:{line}" if file and line is not None else file,
                start_ns=start * 1000 - wall + mono,
                dur_ns=dur * 1000,
                recompile_reason=as_str(c.get("recompile_reason")),
                fail_reason=as_str(c.get("fail_reason")),
                graph_breaks=as_int(c.get("graph_breaks")),
                restart_reasons=tuple(r for r in as_list(c.get("restart_reasons")) if isinstance(r, str))[:8],
                backend_ns=_ns(c.get("backend_us")),
                cache_hits=_count(c.get("cache"), "fx_hit") + _count(c.get("cache"), "aot_hit"),
                cache_misses=_count(c.get("cache"), "fx_miss") + _count(c.get("cache"), "aot_miss"),
            )
        )
    if not found:
        return None
    raw = o.get("graph_breaks")
    breaks = raw if isinstance(raw, dict) else {}
    return CompileRecord(
        compilations=tuple(sorted(found, key=lambda c: c.start_ns)),
        recompile_limit=as_int(o.get("recompile_limit")),
        caches=_caches(o.get("caches")),
        graph_breaks=tuple(
            sorted(
                ((str(k), n) for k, v in breaks.items() if (n := as_int(v)) is not None and n > 0),
                key=lambda kv: -kv[1],
            )
        ),
    )


def _ns(us: Any) -> int | None:
    v = as_int(us)
    return v * 1000 if v is not None and v >= 0 else None


def _count(cache: Any, key: str) -> int:
    v = as_int(cache.get(key)) if isinstance(cache, dict) else None
    return v if v is not None and v > 0 else 0


def _caches(o: Any) -> CompileCaches | None:
    if not isinstance(o, dict):
        return None
    flags = [o.get("fx_graph"), o.get("autograd")]
    known = [f for f in flags if isinstance(f, bool)]
    on = None if not known else any(known) and o.get("force_disabled") is not True
    return CompileCaches(on=on, directory=as_str(o.get("dir")))


def mark_compiling(steps: Sequence[Step], record: CompileRecord | None) -> tuple[Step, ...]:
    """The steps, those a compilation ran inside marked `compiled` (left out of the steady steps)."""
    if record is None:
        return tuple(steps)
    spans = [(c.start_ns, c.start_ns + c.dur_ns) for c in record.compilations if c.dur_ns > 0]
    return tuple(
        replace(s, compiled=True) if any(a < s.end_ns and s.start_ns < b for a, b in spans) else s
        for s in steps
    )
