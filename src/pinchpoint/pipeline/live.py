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
from collections.abc import Iterator
from pathlib import Path

from pinchpoint.errors import PinchpointError
from pinchpoint.ingest.rundir import system_sample
from pinchpoint.ingest.steps_jsonl import step_record
from pinchpoint.trace.live import WINDOW_STEPS, Leading, Snapshot
from pinchpoint.trace.run import Step, SystemSample

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


def _objects(path: Path) -> Iterator[dict[str, object]]:
    """The JSON objects of the complete lines at the end of a `.jsonl` file."""
    for line in tail(path):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _steps(path: Path) -> list[Step]:
    return [s for o in _objects(path) if (s := step_record(o)) is not None]


def snapshot(run_dir: Path, now_ns: int | None = None) -> Snapshot:
    """What the run directory says now. Raises PinchpointError when it is not a run directory."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise PinchpointError(f"{run_dir}: not a pinchpoint run directory (no readable meta.json)") from exc
    records = _steps(run_dir / "ranks" / "rank0" / "steps.jsonl")
    steps = [s for s in records if _ordinary(s)]
    durations = [s.dur_ns / 1e6 for s in steps]
    last, before = durations[-WINDOW_STEPS:], durations[-2 * WINDOW_STEPS : -WINDOW_STEPS]
    system = [system_sample(o) for o in _objects(run_dir / "system.jsonl")]
    clock = meta.get("clock") or {}
    start_ns = clock.get("monotonic_ns")
    now = now_ns if now_ns is not None else ((system[-1].t_ns or None) if system else None)
    rss, rss_before = _rss(system)
    return Snapshot(
        command=" ".join(str(c) for c in meta.get("command") or []),
        ended=meta.get("ended_at") is not None,
        exit_code=meta.get("exit_code"),
        elapsed_s=(now - start_ns) / 1e9 if isinstance(now, int) and isinstance(start_ns, int) else None,
        steps=records[-1].index + 1 if records else 0,
        last_ms=statistics.median(last) if last else None,
        timed=len(last),
        measuring=_measuring(records[-1]) if records else None,
        before_ms=statistics.median(before) if len(before) >= WINDOW_STEPS // 2 else None,
        phases=_phases(steps[-WINDOW_STEPS:]),
        cores_busy=sum(system[-1].cpu_percent_per_core) / 100
        if system and system[-1].cpu_percent_per_core
        else None,
        rss_bytes=rss,
        rss_before_bytes=rss_before,
        output=tuple(tail(run_dir / "output.log", 64 << 10)[-5:]),
    )


def _ordinary(step: Step) -> bool:
    """Not the op window's, a trial's, or the one cut by the exit: the steps the times are read from.
    (Beside a busy process the trials can take every step of a short run: the count still moves.)"""
    return not (step.profiled or step.trial or step.partial)


def _measuring(step: Step) -> str | None:
    return "window" if step.profiled else "trial" if step.trial else None


def _phases(steps: list[Step]) -> dict[str, float]:
    total = sum(s.end_ns - s.start_ns for s in steps)
    if total <= 0:
        return {}
    by: dict[str, int] = {}
    for s in steps:
        for iv in s.intervals:
            by[iv.phase.value] = by.get(iv.phase.value, 0) + iv.end_ns - iv.start_ns
    return {k: min(v / total, 1.0) for k, v in sorted(by.items(), key=lambda kv: -kv[1])}


def _rss(system: list[SystemSample]) -> tuple[int | None, int | None]:
    def total(sample: SystemSample) -> int | None:
        return sum(p.rss_bytes for p in sample.procs) if sample.procs else None

    if not system:
        return None, None
    now = system[-1].t_ns
    minute_ago = next((s for s in system if now - s.t_ns <= 60e9), system[0])
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
