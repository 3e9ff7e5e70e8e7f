"""The live panel of a run in progress (`run --live`, `pinchpoint watch`): a rich renderable."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pinchpoint.trace.live import WINDOW_STEPS, Leading, Snapshot

BAR = 24
TITLE = "pinchpoint live"
MEASURING = {
    "window": "pinchpoint's op window (its steps left out of the times)",
    "trial": "pinchpoint trying a fix (its steps left out of the times)",
}


def _bar(share: float) -> str:
    filled = round(max(0.0, min(share, 1.0)) * BAR)
    return "█" * filled + "░" * (BAR - filled)


def _trend(snap: Snapshot) -> str:
    if snap.last_ms is None:
        return "waiting for the first steps"
    line = f"median step {snap.last_ms:.4g} ms over the last {snap.timed} steps"
    if snap.before_ms:
        change = snap.last_ms / snap.before_ms - 1
        word = "slower" if change > 0 else "faster"
        line += (
            f" ({abs(change):.0%} {word} than the {WINDOW_STEPS} before)"
            if abs(change) >= 0.02
            else " (steady)"
        )
    return line


def _memory(snap: Snapshot) -> str | None:
    if snap.rss_bytes is None:
        return None
    line = f"memory {snap.rss_bytes / 2**30:.2f} GiB"
    if snap.rss_before_bytes:
        delta = (snap.rss_bytes - snap.rss_before_bytes) / 2**20
        line += f" ({delta:+.0f} MiB over the last minute)"
    return line


def live_panel(snap: Snapshot, lead: Leading | None) -> Panel:
    """The panel: progress and trend, the last steps' phases, the leading finding, cores and memory,
    the program's last lines."""
    head = [f"{snap.steps} steps"]
    if snap.elapsed_s is not None:
        head.append(f"{snap.elapsed_s:.0f} s")
    if snap.cores_busy is not None:
        head.append(f"{snap.cores_busy:.1f} cores busy")
    if (memory := _memory(snap)) is not None:
        head.append(memory)
    if snap.ended:
        head.append(f"ended (exit {snap.exit_code})")
    elif snap.measuring is not None:
        head.append(MEASURING[snap.measuring])
    parts: list[RenderableType] = [Text(" · ".join(head), style="bold"), Text(_trend(snap))]
    if snap.phases:
        table = Table.grid(padding=(0, 1))
        for name, share in list(snap.phases.items())[:6]:
            table.add_row(name, _bar(share), f"{share:4.0%}")
        parts.append(table)
    if lead is not None:
        of_step = f" · {lead.share:.0%} of the step" if lead.share is not None else ""
        more = f" (+{lead.others} more)" if lead.others else ""
        parts.append(Text(f"leading so far: {lead.title} [{lead.id}]{of_step}{more}", style="yellow"))
    for line in snap.output:
        parts.append(Text(f"│ {line[-200:]}", style="dim"))
    return Panel(Group(*parts), title=TITLE, subtitle=snap.command[-80:], expand=False)
