"""The comparison of two runs (`pinchpoint diff --json`, `check --json`; schema `pinchpoint.diff/1`),
typed, and the one function that builds it from `compare.diff.RunDiff`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pinchpoint.compare.diff import FindingChange, RunDiff, verdict
from pinchpoint.report.document import Document, JsonSchema, json_schema

SCHEMA = "pinchpoint.diff/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class BeforeAfter:
    before: float
    after: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseMs:
    before_ms: float
    after_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffDoc(Document):
    """Is B faster than A beyond the noise, and did the bottleneck move?"""

    schema: str
    before: str
    after: str
    speedup: float
    """A's step over B's (above 1: B is faster)."""
    interval: tuple[float, ...]
    """Its 99% interval (low, high)."""
    significant: bool
    median_ms: BeforeAfter
    statistic: str
    run_ms_per_step: BeforeAfter | None
    before_top: str | None
    after_top: str | None
    shifted: bool
    environment_differences: tuple[str, ...]
    setting_changes: tuple[str, ...]
    phases: Mapping[str, PhaseMs]
    findings: tuple[FindingChange, ...]
    verdict: tuple[str, ...]


def diff_schema() -> JsonSchema:
    return json_schema(
        DiffDoc, title="pinchpoint diff", schema_id="https://pinchpoint.dev/schema/diff-1.json"
    )


def build_diff(d: RunDiff) -> DiffDoc:
    t = d.test
    return DiffDoc(
        schema=SCHEMA,
        before=d.before,
        after=d.after,
        speedup=round(t.ratio, 4),
        interval=(round(t.low, 4), round(t.high, 4)),
        significant=t.significant,
        median_ms=BeforeAfter(before=round(d.before_median_ms, 3), after=round(d.after_median_ms, 3)),
        statistic=t.statistic,
        run_ms_per_step=None
        if d.run_ms is None
        else BeforeAfter(before=round(d.run_ms[0], 3), after=round(d.run_ms[1], 3)),
        before_top=d.before_top,
        after_top=d.after_top,
        shifted=d.shifted,
        environment_differences=tuple(d.environment_differences),
        setting_changes=tuple(d.setting_changes),
        phases={
            p.phase: PhaseMs(before_ms=round(p.before_ms, 3), after_ms=round(p.after_ms, 3)) for p in d.phases
        },
        findings=tuple(d.findings),
        verdict=tuple(verdict(d)),
    )
