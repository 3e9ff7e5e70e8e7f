"""Each finding's gain on this machine without the other processes' load, when the load lasted the
whole run (`analysis/cpu_waits.py` bounds the unloaded step).

Beside a byte-compile loop holding 0.7 of a core, a Python-bound loop's fix measured ×1.22 and the
report said ×1.23, right for the machine as it was; idle, the same fix measures ×1.6-2.0, and the
report gave one number, for the loaded machine only. Now each estimate also comes as a range without
the load: the time the fix removes, taken from the step as measured, against the unloaded step's
bounds. Time in the main thread's own work (the loop's Python, op dispatch, the collector, a save)
had its core and keeps its length; the rest shrinks with the step (`OWN_CORE`). A thread
count lowered only to make room for the other load gains nothing without it. The findings are then
ordered by what they gain without the load, so the top finding is the idle machine's.
"""

from __future__ import annotations

from dataclasses import replace

from pinchpoint.analysis.cpu_waits import CpuWaits
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Finding
from pinchpoint.trace.run import Environment

OWN_CORE = frozenset(
    {
        Category.HOST_PYTHON,
        Category.HOST_DISPATCH,
        Category.HOST_GC,
        Category.IO_CHECKPOINT,
    }
)
"""Categories whose time is the main thread's alone (its Python, its op dispatch, the collector, a
save): with a core of its own beside the load, it keeps its length. The rest shrinks with the step:
intra-op compute, and a wait for DataLoader workers, who shared the cores with the load too
(input_fetch beside a compile loop: kept whole, ×1.62-2.26 against the idle fix's ×1.50; scaled, ×1.41)."""
IN_PROCESS_INPUT = frozenset({Category.INPUT_FETCH, Category.INPUT_PREPROCESS})
"""Also the main thread's own where the loader fetches in the training process (num_workers=0): its
per-sample work had the main thread's core (input_tiny_batches beside a spinning process: scaled with
the step, its ×1.18 fix read ×1.07 and came third behind two smaller findings)."""


def without_the_load(
    findings: tuple[Finding, ...], ranks: tuple[RankAnalysis, ...], env: Environment | None
) -> tuple[Finding, ...]:
    """The findings with `unloaded` (and `as_was`) set when rank 0's run was loaded throughout, ordered
    by the unloaded gain; unchanged otherwise."""
    rank = ranks[0] if ranks else None
    waits = rank.waits if rank is not None else None
    if rank is None:
        return findings
    if waits is None:
        return _only_the_load_oversubscribed(findings, rank, env)
    out = []
    for f in findings:
        if f.estimated_speedup <= 1.0 or f.share <= 0 or f.of_run:
            out.append(f)
            continue
        removed = waits.step_ns * (1.0 - 1.0 / f.estimated_speedup)
        if f.id is Category.CPU_OVERSUBSCRIPTION and _fits_alone(rank, env):
            unloaded = (1.0, 1.0)
        else:
            loader = rank.loader
            keeps = f.id in OWN_CORE or (
                f.id in IN_PROCESS_INPUT and loader is not None and loader.in_main_process
            )
            lo, hi = (_gain(waits, step, removed, keeps) for step in (waits.idle_low_ns, waits.idle_high_ns))
            unloaded = (min(lo, hi), max(lo, hi))
        out.append(replace(f, unloaded=unloaded, as_was=_as_was(rank, removed, f.estimated_speedup)))
    return tuple(sorted(out, key=_unloaded_order))


def _only_the_load_oversubscribed(
    findings: tuple[Finding, ...], rank: RankAnalysis, env: Environment | None
) -> tuple[Finding, ...]:
    """Loaded throughout, with waits too long to model (threads that waited the whole step: an OpenMP
    barrier held by a thread the load descheduled) and a program whose threads fit the cores alone:
    fewer threads gain only beside the load (host_dispatch beside a spinning core: one thread ×4.98 by
    its trial, nothing idle). That finding gains ×1.00 without the load and is ordered so; the others'
    gains are as measured (no model for them)."""
    loaded = rank.cpu is not None and rank.cpu.contended and not (rank.load is not None and rank.load.used)
    if not loaded or not _fits_alone(rank, env):
        return findings
    out = tuple(
        replace(f, unloaded=(1.0, 1.0), as_was=_as_was(rank, _removed(rank, f), f.estimated_speedup))
        if f.id is Category.CPU_OVERSUBSCRIPTION and f.estimated_speedup > 1.0
        else f
        for f in findings
    )
    return tuple(sorted(out, key=_unloaded_order))


def _removed(rank: RankAnalysis, f: Finding) -> float:
    step = rank.steps.mean_ns if rank.steps is not None else 0.0
    return step * (1.0 - 1.0 / f.estimated_speedup)


def _gain(waits: CpuWaits, step: int, removed: float, keeps: bool) -> float:
    left = removed if keeps else removed * step / max(1, waits.step_ns)
    return step / max(0.05 * step, step - left)


def _as_was(rank: RankAnalysis, removed: float, speedup: float) -> tuple[float, float]:
    """The gain as the machine was, over the loaded steps' spread (median to p90 step)."""
    steps = rank.steps
    if steps is None:
        return (speedup, speedup)
    gains = [w / max(0.05 * w, w - removed) for w in (steps.median_ns, steps.p90_ns) if w > 0]
    return (min(speedup, *gains), max(speedup, *gains))


def _fits_alone(rank: RankAnalysis, env: Environment | None) -> bool:
    """The program's own threads fit the machine's cores: only the other load oversubscribed them."""
    main = rank.main
    if env is None or main is None or main.threads.intra_op is None:
        return False
    demand = main.threads.intra_op * rank.local_ranks + sum((w.threads.intra_op or 1) for w in rank.workers)
    return demand <= max(1, env.cpu.usable_cores)


def _unloaded_order(f: Finding) -> tuple[int, float, float, float]:
    """Findings with a share first, by the gain without the load, then as the machine was; a stalled
    run's finding before all (`merge.sort_key`: what the run did before it stopped is secondary)."""
    if f.id is Category.RUN_STALLED:
        return (-1, 0.0, 0.0, 0.0)
    gain = (f.unloaded[0] + f.unloaded[1]) / 2 if f.unloaded is not None else f.estimated_speedup
    return (0 if f.share > 0 else 1, -round(gain, 3), -round(f.estimated_speedup, 3), -f.share)
