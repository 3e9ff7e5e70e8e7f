"""`try.json` (schema `pinchpoint.try/1`): each fix `pinchpoint try` applied or could not, measured
against the baseline, typed (`pinchpoint schema try`)."""

from __future__ import annotations

from dataclasses import dataclass

from pinchpoint.report.document import Document, JsonSchema, json_schema, optional

SCHEMA = "pinchpoint.try/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class TriedFix:
    """One fix: how it was applied (or why it could not be), what it measured, what leads after it."""

    id: str
    """The finding it serves (`a+b` for fixes stacked together)."""
    fix: str
    applied_how: str | None
    applied: bool
    cannot: str | None
    snippet: str | None
    speedup: float | None
    interval: tuple[float, ...] | None
    """The speedup's 99% interval (low, high)."""
    significant: bool
    predicted: float | None
    stacked: bool
    stacked_how: str | None
    next_limit: str | None
    steps: int
    pairs: int
    history_id: int | None
    not_again: str | None
    doubt: str | None
    run_dir: str | None
    error: str | None
    whole_run: bool | None = optional(doc="measured on whole runs' program times, not on steady steps")


@dataclass(frozen=True, slots=True, kw_only=True)
class CwdWrites:
    """What the runs wrote under the working directory (the baseline's outputs, scratch copies' leaks)."""

    checked: bool
    files: tuple[str, ...]
    count: int
    scratch: bool
    scratch_dir: str | None = optional()
    reused: bool | None = optional()
    leaked: tuple[str, ...] | None = optional()
    leaked_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TryDoc(Document):
    """`pinchpoint try`'s table."""

    schema: str
    command: tuple[str, ...]
    baseline: str
    steps: int
    baseline_steps: int
    baseline_history_id: int | None
    tried: tuple[TriedFix, ...]
    cwd_writes: CwdWrites | None = optional()
    load: str | None = optional(
        doc="`try --load`: the load every run served (each measured on its throughput)"
    )


def try_schema() -> JsonSchema:
    return json_schema(TryDoc, title="pinchpoint try", schema_id="https://pinchpoint.dev/schema/try-1.json")
