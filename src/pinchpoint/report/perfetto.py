"""A run as a Chrome-trace JSON for Perfetto (ui.perfetto.dev) and chrome://tracing.

Per rank, the training process gets a track of steps, one track per phase (data wait, forward,
backward, ...) and one of findings (each spanning the steady steps, with its share, estimate, evidence
and fix in the arguments); each loading process a track of the batches it fetched; the system
sampler's readings become counter tracks (CPU and RSS per process, CPU per core). The op window's own
trace (the op census, or Kineto's with kernels on a CUDA program) is merged in on the same clock.
Times are microseconds on CLOCK_MONOTONIC. Only complete ("X"), counter ("C") and metadata ("M")
events are written, so there is no begin/end pairing to get wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pinchpoint.analysis.steps import steady_steps
from pinchpoint.analysis.views import RunViews
from pinchpoint.report.document import JsonObject
from pinchpoint.report.report_doc import FindingInfo, ReportDoc
from pinchpoint.trace.run import PHASE_DISPLAY, RankData, Run, Step

STEPS_TID, FINDINGS_TID, FETCH_TID = 1, 2, 3
PHASE_TIDS = {p.value: 10 + i for i, p in enumerate(PHASE_DISPLAY)}
"""One track per phase, forward first (tids 10+)."""
MIB = 1 << 20


def _us(ns: int) -> float:
    return ns / 1000.0


def _meta(pid: int, tid: int | None, name: str, sort: int | None = None) -> list[JsonObject]:
    out: list[JsonObject] = []
    if tid is None:
        out.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}})
        if sort is not None:
            out.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort}})
    else:
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
    return out


def _step_args(s: Step) -> JsonObject:
    args: JsonObject = {"kind": s.kind.value}
    if s.profiled:
        args["op_window"] = True
    if s.trial:
        args["thread_trial"] = True
    if s.partial:
        args["partial"] = True
    if s.cpu_ns is not None:
        args["main_thread_cpu_ms"] = round(s.cpu_ns / 1e6, 3)
    if s.runq_ns is not None:
        args["waiting_for_cpu_ms"] = round(s.runq_ns / 1e6, 3)
    if s.rss_bytes is not None:
        args["rss_mib"] = round(s.rss_bytes / MIB, 1)
    return args


def _rank_events(
    rank: RankData, pid: int, label: str, findings: Sequence[FindingInfo]
) -> list[JsonObject]:
    ev = _meta(pid, None, label, sort=rank.rank)
    ev += _meta(pid, STEPS_TID, "steps")
    for name, tid in PHASE_TIDS.items():
        if any(iv.phase.value == name for s in rank.steps for iv in s.intervals):
            ev += _meta(pid, tid, f"phase: {name}")
    for s in rank.steps:
        ev.append({"ph": "X", "pid": pid, "tid": STEPS_TID, "name": f"step {s.index}", "cat": "step",
                   "ts": _us(s.start_ns), "dur": _us(s.dur_ns), "args": _step_args(s)})  # fmt: skip
        for iv in s.intervals:
            ev.append({"ph": "X", "pid": pid, "tid": PHASE_TIDS[iv.phase.value], "name": iv.phase.value,
                       "cat": "phase", "ts": _us(iv.start_ns), "dur": _us(iv.dur_ns)})  # fmt: skip
    steady = steady_steps(rank.steps)
    mine = [f for f in findings if rank.rank in (f.ranks or (0,))]
    if steady and mine:
        ev += _meta(pid, FINDINGS_TID, "findings")
        start, end = steady[0].start_ns, steady[-1].end_ns
        for f in mine:
            ev.append({
                "ph": "X", "pid": pid, "tid": FINDINGS_TID, "cat": "finding",
                "name": f"{f.id} {100 * f.share:.0f}% · est. ×{f.estimated_speedup:.2f}",
                "ts": _us(start), "dur": _us(end - start),
                "args": {"title": f.title, "evidence": list(f.evidence), "fix": f.fix},
            })  # fmt: skip
    for pid_f in sorted({b.pid for b in rank.fetches}):
        if pid_f != pid:
            ev += _meta(
                pid_f, None, f"rank {rank.rank} DataLoader worker (pid {pid_f})", sort=100 + rank.rank
            )
        ev += _meta(pid_f, FETCH_TID, "batches fetched")
    for b in rank.fetches:
        args: JsonObject = {"cpu_ms": round(b.cpu_ns / 1e6, 3)}
        if b.runq_ns is not None:
            args["waiting_for_cpu_ms"] = round(b.runq_ns / 1e6, 3)
        ev.append({"ph": "X", "pid": b.pid, "tid": FETCH_TID, "name": "fetch", "cat": "loader",
                   "ts": _us(b.start_ns), "dur": _us(b.dur_ns), "args": args})  # fmt: skip
    return ev


def _counters(run: Run, views: RunViews, pid: int) -> list[JsonObject]:
    """CPU (cores busy) and RSS per process of the tree, CPU % per core, from the sampler's readings."""
    ev: list[JsonObject] = []
    for sample in run.system:
        ts = _us(sample.t_ns)
        if sample.cpu_percent_per_core:
            ev.append({"ph": "C", "pid": pid, "name": "CPU % per core", "ts": ts,
                       "args": {f"core {i}": float(c) for i, c in enumerate(sample.cpu_percent_per_core)}})  # fmt: skip
        for p in sample.procs:
            ev.append({"ph": "C", "pid": pid, "name": f"RSS MiB (pid {p.pid})", "ts": ts,
                       "args": {"rss": round(p.rss_bytes / MIB, 1)}})  # fmt: skip
    for series in views.cores:
        ev.extend(
            {"ph": "C", "pid": pid, "name": f"cores busy (pid {series.pid} {series.process})", "ts": _us(int(t)),
             "args": {"cores": round(cores, 3)}}
            for t, cores in series.points
        )  # fmt: skip
    return ev


def _merged(doc: JsonObject, wall_minus_mono_ns: int) -> Iterable[JsonObject]:
    """The op window's events on our clock: Kineto stamps are relative to `baseTimeNanoseconds` (wall
    clock); the census's are already monotonic µs."""
    base = doc.get("baseTimeNanoseconds")
    shift_us = (
        (int(base) - wall_minus_mono_ns) / 1000 if isinstance(base, int) and wall_minus_mono_ns else 0.0
    )
    for e in doc.get("traceEvents") or []:
        if not isinstance(e, dict) or e.get("ph") not in ("X", "i", "I", "M", "C", "s", "f", "t"):
            continue
        out = dict(e)
        if isinstance(out.get("ts"), (int, float)):
            out["ts"] = float(out["ts"]) + shift_us
        yield out


def perfetto_trace(
    run: Run,
    report: ReportDoc,
    views: RunViews,
    windows: Mapping[int, JsonObject] | None = None,
) -> JsonObject:
    """The Chrome-trace document for `run`: its recorded steps and samples, its report's findings, the
    cores busy from its views; `windows`: rank -> opwindow.json."""
    events: list[JsonObject] = []
    findings = report.findings
    offset = run.meta.wall_time_ns - run.meta.monotonic_ns
    for rank in run.ranks:
        main = rank.main
        pid = main.pid if main is not None else 1_000_000 + rank.rank
        label = (
            f"rank {rank.rank} training process (pid {pid})"
            if len(run.ranks) > 1
            else f"training process (pid {pid})"
        )
        events += _rank_events(rank, pid, label, findings)
        window = (windows or {}).get(rank.rank)
        if window is not None:
            events += list(_merged(window, offset))
    system_pid = 0
    events += _meta(system_pid, None, "system (pinchpoint sampler)", sort=-1)
    events += _counters(run, views, system_pid)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "pinchpoint",
            "command": " ".join(run.meta.command),
            "breakdown": dict(report.breakdown),
        },
    }
