"""A live look at a run in progress (`run --live`, `pinchpoint watch`): read from its run directory only,
in another process than the program's, so the program is never touched.

Cheap parts are read every refresh from the ends of the files (`tail`): the last steps of rank 0 (their
median against the steps before them: the trend; their phases), the last system sample (cores busy,
the process tree's memory). The leading finding needs the whole pipeline (read, analyse, diagnose, as
`pinchpoint report` does, but nothing written), so the caller asks for it less often (`leading`).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from pinchpoint.errors import PinchpointError
from pinchpoint.trace.live import WINDOW_STEPS, Leading, Snapshot

LIVE_FORCE_ENV = "PINCHPOINT_LIVE_FORCE"
"""Set: draw the live panel even when the output is no terminal (benchmarks measure its cost that way)."""
TAIL_BYTES = 1 << 20
"""Bytes read from the end of a `.jsonl` file each refresh: a long run's files are never read whole."""


def tail(path: Path, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The complete lines at the end of `path` (a cut first or last line dropped); [] if unreadable."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if size > max_bytes:
        lines = lines[1:]
    return lines[:-1]  # the last is "" after a final newline, or a line still being written


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in tail(path):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def snapshot(run_dir: Path, now_ns: int | None = None) -> Snapshot:
    """What the run directory says now. Raises PinchpointError when it is not a run directory."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise PinchpointError(f"{run_dir}: not a pinchpoint run directory (no readable meta.json)") from exc
    records = [s for s in _records(run_dir / "ranks" / "rank0" / "steps.jsonl") if _finished(s)]
    steps = [s for s in records if _ordinary(s)]
    durations = [(s["end_ns"] - s["start_ns"]) / 1e6 for s in steps]
    last, before = durations[-WINDOW_STEPS:], durations[-2 * WINDOW_STEPS : -WINDOW_STEPS]
    system = _records(run_dir / "system.jsonl")
    clock = meta.get("clock") or {}
    start_ns = clock.get("monotonic_ns")
    now = now_ns if now_ns is not None else (system[-1]["t_ns"] if system and "t_ns" in system[-1] else None)
    rss, rss_before = _rss(system)
    return Snapshot(
        command=" ".join(str(c) for c in meta.get("command") or []),
        ended=meta.get("ended_at") is not None,
        exit_code=meta.get("exit_code"),
        elapsed_s=(now - start_ns) / 1e9 if isinstance(now, int) and isinstance(start_ns, int) else None,
        steps=_count(records),
        last_ms=statistics.median(last) if last else None,
        timed=len(last),
        measuring=_measuring(records[-1]) if records else None,
        before_ms=statistics.median(before) if len(before) >= WINDOW_STEPS // 2 else None,
        phases=_phases(steps[-WINDOW_STEPS:]),
        cores_busy=_cores_busy(system[-1]) if system else None,
        rss_bytes=rss,
        rss_before_bytes=rss_before,
        output=tuple(tail(run_dir / "output.log", 64 << 10)[-5:]),
    )


def _count(steps: list[dict[str, Any]]) -> int:
    """Steps so far: the last one's number + 1 (the tail holds only the last of a long run's lines)."""
    if not steps:
        return 0
    number = steps[-1].get("step")
    return number + 1 if isinstance(number, int) and number >= 0 else len(steps)


def _finished(step: dict[str, Any]) -> bool:
    return isinstance(step.get("start_ns"), int) and isinstance(step.get("end_ns"), int)


def _ordinary(step: dict[str, Any]) -> bool:
    """Not the op window's, a trial's, or the one cut by the exit: the steps the times are read from.
    (Beside a busy process the trials can take every step of a short run: the count still moves.)"""
    return not (step.get("profiled") or step.get("trial") or step.get("partial"))


def _measuring(step: dict[str, Any]) -> str | None:
    return "window" if step.get("profiled") else "trial" if step.get("trial") else None


def _phases(steps: list[dict[str, Any]]) -> dict[str, float]:
    total = sum(s["end_ns"] - s["start_ns"] for s in steps)
    if total <= 0:
        return {}
    by: dict[str, int] = {}
    for s in steps:
        for iv in s.get("intervals") or []:
            if isinstance(iv, list) and len(iv) == 3 and all(isinstance(v, int) for v in iv[1:]):
                by[str(iv[0])] = by.get(str(iv[0]), 0) + max(iv[2] - iv[1], 0)
    return {k: min(v / total, 1.0) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}


def _cores_busy(sample: dict[str, Any]) -> float | None:
    per_core = sample.get("cpu_percent_per_core")
    if not isinstance(per_core, list) or not per_core:
        return None
    return sum(float(p) for p in per_core if isinstance(p, (int, float))) / 100


def _rss(system: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    def total(sample: dict[str, Any]) -> int | None:
        procs = sample.get("procs")
        if not isinstance(procs, list):
            return None
        return sum(int(p.get("rss_bytes") or 0) for p in procs if isinstance(p, dict))

    if not system:
        return None, None
    now = system[-1].get("t_ns")
    minute_ago = next(
        (
            s
            for s in system
            if isinstance(now, int) and isinstance(s.get("t_ns"), int) and now - s["t_ns"] <= 60e9
        ),
        system[0],
    )
    return total(system[-1]), total(minute_ago)


def leading(run_dir: Path) -> Leading | None:
    """The first finding of the report the run directory gives now (nothing is written); None before
    there is one, or when the partial directory cannot be read yet."""
    from pinchpoint.analysis.run_analysis import analyze_run
    from pinchpoint.diagnosis.engine import diagnose
    from pinchpoint.ingest.rundir import read_run_dir
    from pinchpoint.report.build import build_report

    try:
        report = build_report(analysis := analyze_run(read_run_dir(run_dir)), diagnose(analysis))
    except Exception:  # a directory still being written may be in any state: try again later
        return None
    if not report.findings:
        return None
    top = report.findings[0]
    return Leading(id=top.id, title=top.title, share=top.share, others=len(report.findings) - 1)
