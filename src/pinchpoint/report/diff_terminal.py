"""The terminal view of a run comparison (`pinchpoint diff`, `pinchpoint check`) and of the history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pinchpoint.report.diff_doc import DiffDoc
from pinchpoint.report.terminal import DEFAULT_WIDTH, PHASE_LABELS


def _console(out: TextIO, color: bool | None) -> Console:
    console = Console(file=out, force_terminal=color, no_color=color is False, highlight=False)
    if not console.is_terminal:
        console.width = DEFAULT_WIDTH
    return console


def render_diff(diff: DiffDoc, out: TextIO, *, color: bool | None = None) -> None:
    """A comparison (`report/diff_doc.build_diff`) on the console."""
    console = _console(out, color)
    console.print(Text(f"pinchpoint diff  {diff.before} → {diff.after}", style="bold"))
    console.print()
    for i, line in enumerate(diff.verdict):
        console.print(Text(line, style="bold" if i == 0 else ""))
    console.print()
    phases = Table(box=None, pad_edge=False, title=None, show_header=True, header_style="bold")
    for col in ("phase", "before ms", "after ms", "change"):
        phases.add_column(col, justify="left" if col == "phase" else "right")
    for name, p in diff.phases.items():
        b, a = p.before_ms, p.after_ms
        phases.add_row(PHASE_LABELS.get(name, name), f"{b:.2f}", f"{a:.2f}", f"{a - b:+.2f}")
    console.print(Text("Per step, by phase (mean)", style="bold underline"))
    console.print(phases)
    console.print()
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col in ("finding", "before", "after"):
        table.add_column(col, justify="left" if col == "finding" else "right")
    for f in diff.findings:
        table.add_row(
            f.id,
            _finding_cell(f.before_share, f.before_speedup),
            _finding_cell(f.after_share, f.after_speedup),
        )
    console.print(Text("Findings (share of the step · estimated gain of the fix)", style="bold underline"))
    console.print(table if diff.findings else Text("none in either run"))
    if diff.setting_changes:
        console.print()
        console.print(Text("Settings that changed: " + "; ".join(diff.setting_changes), style="dim"))


def _finding_cell(share: float | None, speedup: float | None) -> str:
    if share is None:
        return "—"
    return f"{share:.0%} · ×{speedup:.2f}" if speedup is not None else f"{share:.0%}"


def render_runs(rows: Sequence[Any], out: TextIO, *, color: bool | None = None) -> None:
    """`rows` are `history.store.RunRecord`s, newest first."""
    console = _console(out, color)
    if not rows:
        console.print("No runs recorded yet: `pinchpoint run` adds each run here.")
        return
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for col in ("id", "recorded", "median ms", "top finding", "command", "run directory"):
        table.add_column(col, justify="right" if col in ("id", "median ms") else "left", overflow="fold")
    for r in rows:
        median = f"{r.median_ms:.2f}" if r.median_ms is not None else "—"
        table.add_row(
            f"#{r.id}",
            r.recorded_at[:19].replace("T", " "),
            median,
            r.top or "—",
            " ".join(r.command),
            r.run_dir,
        )
    console.print(table)
