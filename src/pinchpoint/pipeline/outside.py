"""The report of a process watched from outside (`pinchpoint attach` without its agent): the main
thread's time by phase from py-spy, the threads and cores from /proc, the findings those can support
and, as plainly, the ones they cannot (`NOT_JUDGED`). Schema `pinchpoint.outside/1`, written as the
run directory's outside.json (the run has no steps, so no report.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pinchpoint.analysis.cpu import CpuUsage, cores_busy, cpu_usage
from pinchpoint.analysis.outside import MainThread, Threads, main_thread, threads
from pinchpoint.errors import RunDirError
from pinchpoint.ingest.fields import as_dict, load_json
from pinchpoint.ingest.rundir import read_run_dir
from pinchpoint.trace.run import Run

SCHEMA = "pinchpoint.outside/1"
OUTSIDE_FILE = "outside.json"
MIN_SHARE = 0.10
"""A phase of the main thread's time worth a finding (the agent's rules start near this too)."""
CHECKPOINT_MIN_SHARE = 0.05
ON_CPU_LOADING = 0.5
"""Loading that is on a CPU more than half its time is computing (input.preprocess), else waiting."""
WORKER_BUSY_CORES = 0.5
HOT_MIN_SHARE = 0.01
LOOP_ON_CPU = 0.5
"""The loop's own code is Python work when the main thread is on a CPU at least half as long."""
LEAK_GROWTH = 0.10
LEAK_MIN_BYTES = 100 << 20
OVERSUBSCRIBED_BUSY = 0.8
"""The process keeps this share of the usable cores busy when its threads outnumber them."""
NOT_JUDGED = (
    ("steps", "step count, step time and its trend (the agent's hooks find the steps)"),
    (
        "host.dispatch, compute.math, compute.memory",
        "which kind of work forward and backward do (the op window)",
    ),
    ("host.sync, transfer.h2d", "waits on the GPU and copies to it (the agent's CUDA hooks)"),
    ("comm.exposed, imbalance.straggler", "collectives and ranks (the agent's distributed hooks)"),
    ("memory.pressure", "page faults and allocator churn per step (the agent's counters)"),
    ("measured fixes", "a fix tried for a few steps inside the process (trials)"),
)


def report_outside(run_dir: Path, json_path: Path | None = None) -> dict[str, Any]:
    """Build, write (run_dir/outside.json, and `json_path`) and return the outside report."""
    run = read_run_dir(run_dir)
    meta = load_json(run_dir / "meta.json", [])
    attach = as_dict(as_dict(meta).get("attach"))
    outside = as_dict(attach.get("outside"))
    pid = attach.get("pid")
    if not outside or not isinstance(pid, int):
        raise RunDirError(f"{run_dir} is not a run watched from outside (meta.json has no attach.outside)")
    wall = float(outside.get("wall_s") or 0.0)
    cpu = {
        str(k): float(v)
        for k, v in as_dict(outside.get("thread_cpu_s")).items()
        if isinstance(v, (int, float))
    }
    main = main_thread(run.stacks, pid, run.meta.cwd) if run.stacks is not None else None
    thr = threads(cpu, pid, wall)
    usage = cpu_usage(run, run.system[0].t_ns, run.system[-1].t_ns, pid) if len(run.system) >= 2 else None
    workers = _worker_cores(run, pid)
    notes: list[str] = []
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run": {
            "command": list(run.meta.command),
            "cwd": run.meta.cwd,
            "started_at": run.meta.started_at,
            "attach": {"pid": pid, "duration_s": attach.get("duration_s"), "ended": attach.get("ended")},
            "reason": outside.get("reason"),
        },
        "main_thread": None
        if main is None
        else {"samples": main.samples, "shares": {k: round(v, 4) for k, v in main.shares.items()}},
        "cpu": _cpu_doc(run, thr, usage, workers),
        "gpus": _gpus(run),
        "findings": _findings(run, main, thr, usage, workers, pid, notes),
        "notes": notes,
        "not_judged": [{"what": what, "needs": needs} for what, needs in NOT_JUDGED],
        "warnings": list(run.warnings)
        + ([] if main is not None else ["no Python stacks of the main thread (py-spy: see stacks.log)"]),
    }
    text = json.dumps(doc, indent=1) + "\n"
    (run_dir / OUTSIDE_FILE).write_text(text)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text)
    return doc


def _gpus(run: Run) -> list[dict[str, Any]]:
    """Each GPU's utilization over the attach (NVML, read by the system sampler), when there are any."""
    by_index: dict[int, list[float]] = {}
    for sample in run.system:
        for g in sample.gpus:
            if g.util_percent is not None:
                by_index.setdefault(g.index, []).append(g.util_percent)
    return [
        {"index": i, "util_percent_median": sorted(u)[len(u) // 2], "samples": len(u)}
        for i, u in sorted(by_index.items())
    ]


def _worker_cores(run: Run, pid: int) -> dict[int, float]:
    """The main process's children (DataLoader workers): the cores each kept busy, on average."""
    children = {p.pid for s in run.system for p in s.procs if p.ppid == pid}
    out: dict[int, float] = {}
    for (p, _), series in cores_busy(run.system).items():
        if p in children and series:
            out[p] = sum(c for _, c in series) / len(series)
    return out


def _cpu_doc(
    run: Run, thr: Threads | None, usage: CpuUsage | None, workers: dict[int, float]
) -> dict[str, Any]:
    return {
        "usable_cores": run.environment.cpu.usable_cores,
        "main_thread_cores": None if thr is None or thr.main_cores is None else round(thr.main_cores, 3),
        "busy_threads": None if thr is None else thr.busy,
        "threads": None if thr is None else thr.total,
        "process_cores": None if usage is None else round(usage.process_cores, 3),
        "foreign_cores": None if usage is None else round(usage.foreign_cores, 3),
        "worker_cores": {str(p): round(c, 3) for p, c in workers.items()},
    }


def _findings(
    run: Run,
    main: MainThread | None,
    thr: Threads | None,
    usage: CpuUsage | None,
    workers: dict[int, float],
    pid: int,
    notes: list[str],
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if main is not None:
        found += _input(main, thr, workers)
        if thr is not None and thr.main_cores is not None and _loop_waits(main, thr.main_cores):
            notes.append(
                f"The loop's own code holds {main.shares['loop']:.0%} of the main thread's time, but the main "
                f"thread is on a CPU only {thr.main_cores:.0%} of the time: it waits there (sleep, I/O, a "
                "lock), which is not Python work"
            )
        else:
            found += _phase(main, "loop", MIN_SHARE, "host.python", "Python work in the loop, outside framework ops",
                            "the loop's own code (torch ops it calls outside any module count here too: telling "
                            "them apart needs the op window)",
                            "Keep per-step work on tensors; log and compute metrics every N steps.")  # fmt: skip
        found += _phase(main, "checkpoint", CHECKPOINT_MIN_SHARE, "io.checkpoint", "Checkpoints written inside the loop",
                        "torch.save / torch.load", "Checkpoint less often, or from a background thread.")  # fmt: skip
    usable = run.environment.cpu.usable_cores
    if (
        thr is not None
        and usage is not None
        and thr.busy > usable >= 1
        and usage.process_cores >= OVERSUBSCRIBED_BUSY * usable
    ):
        found.append(_finding(
            "cpu.oversubscription", "More busy threads than cores", None,
            [f"{thr.busy} threads of the process each used at least 5% of a core over the attach, on "
             f"{usable} usable cores; the process kept {usage.process_cores:.1f} cores busy, with "
             f"{usage.invol_switches_per_s:.0f} involuntary context switches a second",
             "Its share of the step needs the thread trial, inside the process"],
            "torch.set_num_threads(cores per process) or OMP_NUM_THREADS; fewer processes per machine.",
        ))  # fmt: skip
    found += _leak(run, pid)
    return sorted(found, key=lambda f: -(f["share"] or 0.0))


def _loop_waits(main: MainThread, main_cores: float) -> bool:
    """The loop's own share is mostly off a CPU: the main thread's CPU use is under half of it."""
    return main.shares["loop"] >= MIN_SHARE and main_cores < LOOP_ON_CPU * main.shares["loop"]


def _input(main: MainThread, thr: Threads | None, workers: dict[int, float]) -> list[dict[str, Any]]:
    share = main.shares["data_wait"]
    if share < MIN_SHARE:
        return []
    evidence = [f"The main thread spends {share:.0%} of its time in the DataLoader ({main.samples} samples)"]
    if workers:
        busiest = max(workers.values())
        cpu_bound = busiest >= WORKER_BUSY_CORES
        evidence.append(
            f"{len(workers)} DataLoader worker(s): the busiest on a CPU {busiest:.0%} of the time"
            + (" (computing the batches)" if cpu_bound else " (waiting: I/O or latency)")
        )
    elif thr is not None and thr.main_cores is not None:
        # The rest of the loop is assumed on a CPU: what the main thread used beyond it was loading.
        loading_cpu = max(0.0, thr.main_cores - (1.0 - share)) / share
        cpu_bound = loading_cpu >= ON_CPU_LOADING
        evidence.append(
            f"No workers (num_workers=0): the main thread is on a CPU {thr.main_cores:.0%} of the time, so "
            f"loading is on a CPU about {min(1.0, loading_cpu):.0%} of its time"
            + (" (computing)" if cpu_bound else " (waiting: I/O or latency)")
        )
    else:
        cpu_bound = False
        evidence.append("Whether loading computes or waits could not be read (/proc)")
    evidence += _hottest(main, "data_wait")
    if cpu_bound:
        return [_finding("input.preprocess", "Steps wait for data the loader computes", share, evidence,
                         "Preprocess once and cache, or more DataLoader workers if cores are free.")]  # fmt: skip
    return [_finding("input.fetch", "Steps wait for data; the loader is waiting, not computing", share, evidence,
                     "DataLoader(num_workers=2, persistent_workers=True, prefetch_factor=4); or cache the data.")]  # fmt: skip


def _phase(
    main: MainThread, phase: str, floor: float, fid: str, title: str, what: str, fix: str
) -> list[dict[str, Any]]:
    share = main.shares[phase]
    if share < floor:
        return []
    evidence = [f"The main thread spends {share:.0%} of its time in {what}"]
    evidence += _hottest(main, phase)
    return [_finding(fid, title, share, evidence, fix)]


def _hottest(main: MainThread, phase: str) -> list[str]:
    return [f"hottest: {label} ({s:.0%})" for label, s in main.hot.get(phase, []) if s >= HOT_MIN_SHARE]


def _leak(run: Run, pid: int) -> list[dict[str, Any]]:
    rss = [p.rss_bytes for s in run.system for p in s.procs if p.pid == pid]
    if len(rss) < 4 or rss[0] <= 0:
        return []
    grown = rss[-1] - rss[0]
    if grown < LEAK_MIN_BYTES or grown / rss[0] < LEAK_GROWTH:
        return []
    minutes = (run.system[-1].t_ns - run.system[0].t_ns) / 60e9
    return [_finding("memory.leak", "Memory grows while it runs", None,
                     [f"Resident memory grew {grown / 2**20:.0f} MB ({grown / rss[0]:.0%}) over {minutes * 60:.0f} s"],
                     "Don't keep tensors that hold a graph across steps (loss.item(), .detach()).")]  # fmt: skip


def _finding(fid: str, title: str, share: float | None, evidence: list[str], fix: str) -> dict[str, Any]:
    return {
        "id": fid,
        "title": title,
        "share": None if share is None else round(share, 4),
        "share_of": "the main thread's time over the attach",
        "confidence": "low",
        "estimate": None,
        "evidence": evidence,
        "fix": fix,
    }
