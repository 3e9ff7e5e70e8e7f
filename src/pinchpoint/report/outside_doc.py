"""`outside.json` (schema `pinchpoint.outside/1`): a process watched from outside, typed, and the one
function that builds it from the watch and its diagnosis (every fact phrased here, as for report.json)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pinchpoint.analysis.outside import OutsideWatch
from pinchpoint.diagnosis.engine import Diagnosis
from pinchpoint.diagnosis.rules.outside import NOT_JUDGED
from pinchpoint.report.document import Document, JsonSchema, json_schema
from pinchpoint.report.phrases import say, say_all
from pinchpoint.report.phrases.outside import SHARE_OF
from pinchpoint.trace.run import Run

SCHEMA = "pinchpoint.outside/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedAttach:
    pid: int
    duration_s: float | None
    ended: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedRun:
    command: tuple[str, ...]
    cwd: str
    started_at: str
    attach: WatchedAttach
    reason: str | None
    """Why the agent could not go in (gdb missing, ptrace refused, ...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MainThreadTime:
    samples: int
    shares: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedCpu:
    usable_cores: int
    main_thread_cores: float | None
    busy_threads: int | None
    threads: int | None
    process_cores: float | None
    foreign_cores: float | None
    worker_cores: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedGpu:
    index: int
    util_percent_median: float
    samples: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedFinding:
    id: str
    title: str
    share: float | None
    """Of the main thread's time over the attach; null where nothing measured it."""
    share_of: str
    confidence: str
    estimate: float | None
    evidence: tuple[str, ...]
    fix: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NotJudged:
    what: str
    needs: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutsideDoc(Document):
    """What a watch from outside could support, and as plainly what it could not."""

    schema: str
    run: WatchedRun
    main_thread: MainThreadTime | None
    cpu: WatchedCpu
    gpus: tuple[WatchedGpu, ...]
    findings: tuple[WatchedFinding, ...]
    notes: tuple[str, ...]
    not_judged: tuple[NotJudged, ...]
    warnings: tuple[str, ...]


def outside_schema() -> JsonSchema:
    return json_schema(
        OutsideDoc, title="pinchpoint outside watch", schema_id="https://pinchpoint.dev/schema/outside-1.json"
    )


def build_outside(
    run: Run, attach: WatchedAttach, reason: str | None, watch: OutsideWatch, diagnosis: Diagnosis
) -> OutsideDoc:
    thr, usage, main = watch.threads, watch.usage, watch.main
    return OutsideDoc(
        schema=SCHEMA,
        run=WatchedRun(
            command=tuple(run.meta.command),
            cwd=run.meta.cwd,
            started_at=run.meta.started_at,
            attach=attach,
            reason=reason,
        ),
        main_thread=None
        if main is None
        else MainThreadTime(samples=main.samples, shares={k: round(v, 4) for k, v in main.shares.items()}),
        cpu=WatchedCpu(
            usable_cores=watch.usable_cores,
            main_thread_cores=None if thr is None or thr.main_cores is None else round(thr.main_cores, 3),
            busy_threads=None if thr is None else thr.busy,
            threads=None if thr is None else thr.total,
            process_cores=None if usage is None else round(usage.process_cores, 3),
            foreign_cores=None if usage is None else round(usage.foreign_cores, 3),
            worker_cores={str(p): round(c, 3) for p, c in watch.workers.items()},
        ),
        gpus=_gpus(run),
        findings=tuple(
            WatchedFinding(
                id=f.id.value,
                title=say(f.title),
                share=round(f.share, 4) if f.share_measured else None,
                share_of=SHARE_OF,
                confidence=f.confidence.value,
                estimate=None,
                evidence=tuple(say_all(f.evidence)),
                fix=say(f.fix),
            )
            for f in diagnosis.findings
        ),
        notes=tuple(say(n.fact) for n in diagnosis.notes),
        not_judged=tuple(NotJudged(what=say(what), needs=say(needs)) for what, needs in NOT_JUDGED),
        warnings=(
            *run.warnings,
            *(() if main is not None else ("no Python stacks of the main thread (py-spy: see stacks.log)",)),
        ),
    )


def _gpus(run: Run) -> tuple[WatchedGpu, ...]:
    """Each GPU's utilization over the attach (NVML, read by the system sampler), when there are any."""
    by_index: dict[int, list[float]] = {}
    for sample in run.system:
        for g in sample.gpus:
            if g.util_percent is not None:
                by_index.setdefault(g.index, []).append(g.util_percent)
    return tuple(
        WatchedGpu(index=i, util_percent_median=sorted(u)[len(u) // 2], samples=len(u))
        for i, u in sorted(by_index.items())
    )
