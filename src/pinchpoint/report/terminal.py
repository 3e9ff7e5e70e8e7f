"""The terminal report: what an engineer reads in ten seconds. Renders a `Report`'s typed document; no analysis."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pinchpoint.report.model import Report
from pinchpoint.report.phrases.common import gain, load_words, run_gain_words, segment_code_lines, share_words
from pinchpoint.report.phrases.compile_trace import compiled_lines
from pinchpoint.report.phrases.gpu import collective_lines
from pinchpoint.report.phrases.serving import serving_lines
from pinchpoint.report.report_doc import OpWindowTaken, ReportDoc, RunTimeInfo, StepsInfo
from pinchpoint.trace.run import Attach

PHASE_LABELS = {
    "data_wait": "data wait",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "checkpoint_io": "checkpoint",
    "h2d_copy": "host→device",
    "sync_wait": "device sync",
    "comm": "communication",
    "host_other": "other host",
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU comm (exposed)",
    "gpu_memory": "GPU copies (exposed)",
    "gpu_idle": "GPU idle (other)",
}
PHASE_COLORS = {
    "data_wait": "red",
    "forward": "green",
    "backward": "green",
    "optimizer": "green",
    "checkpoint_io": "magenta",
    "h2d_copy": "yellow",
    "sync_wait": "yellow",
    "comm": "blue",
    "host_other": "cyan",
    "gpu_compute": "green",
    "gpu_communication": "blue",
    "gpu_memory": "yellow",
    "gpu_idle": "cyan",
}
CONFIDENCE_STYLE = {"high": "bold", "medium": "", "low": "dim"}
BAR_WIDTH = 30
DEFAULT_WIDTH = 110


def _bar(frac: float, color: str) -> Text:
    n = round(max(0.0, min(1.0, frac)) * BAR_WIDTH)
    return Text("█" * n, style=color) + Text("░" * (BAR_WIDTH - n), style="grey30")


def _analyze_header(report: ReportDoc) -> Text:
    run, steps, env = report.run, report.steps, report.environment
    t = Text()
    t.append("pinchpoint", style="bold")
    n = len(run.traces or ())
    t.append(f"  analyze {run.source or ''}  ({n} trace{'s' if n != 1 else ''})\n")
    if steps.count:
        t.append(
            f"{steps.count} profiled {steps.kind} step{'' if steps.count == 1 else 's'} "
            f"· median {steps.median_ms or 0.0:.1f} ms "
            f"· p90 {steps.p90_ms or 0.0:.1f} ms\n"
        )
    gpus = env.gpus
    parts = []
    if gpus:
        g = gpus[0]
        cap = f" (sm {g.capability})" if g.capability else ""
        parts.append(f"{g.name or 'GPU'}{cap}" + (f" ({len(gpus)} visible)" if len(gpus) > 1 else ""))
    if env.torch:
        parts.append(f"torch {env.torch.version}")
    parts.append(f"world size {run.world_size}")
    t.append(" · ".join(parts), style="dim")
    return t


def _gpu_table(report: ReportDoc) -> Table:
    table = Table(box=None, padding=(0, 2), header_style="bold")
    for col in ("rank", "span", "compute", "comm", "copies", "idle", "comm hidden", "host-wait idle"):
        table.add_column(col, justify="right")
    for g in report.gpu or ():
        if g.no_gpu_activity:
            table.add_row(str(g.rank), "no GPU work in this trace", *[""] * 6)
            continue
        causes, overlap = g.idle_causes, g.comm_overlap
        table.add_row(
            str(g.rank),
            f"{g.span_ms:.1f} ms",
            f"{100 * g.compute:.1f}%",
            f"{100 * g.communication:.1f}%",
            f"{100 * g.memory:.1f}%",
            f"{100 * g.idle:.1f}%",
            "-" if overlap is None else f"{100 * overlap:.0f}%",
            f"{100 * causes.host_wait:.1f}%" if causes else "-",
        )
    return table


def _print_run_gpu(console: Console, report: ReportDoc) -> None:
    """A CUDA run: the op window as the device ran it (the host's phases above only show when it waited)."""
    first = (report.gpu or ())[0]
    steps = first.window_steps
    head = "The op window on the GPU"
    if steps is not None and steps.count:
        head += f" ({steps.count} steps, median {steps.median_ms or 0.0:.1f} ms as the device runs them)"
    console.print(Text(head, style="bold underline"))
    console.print(_gpu_table(report))
    if first.window_breakdown and steps is not None:
        console.print(_breakdown(first.window_breakdown, steps))
    console.print()


def _attached_line(attach: Attach) -> str:
    what = f"attached to process {attach.pid} for {attach.duration_s:g} s"
    if attach.ended == "exited":
        return f"{what}; it ended during the attach: partial report\n"
    if attach.restored is None:
        return f"{what}; its agent did not confirm the detach (it detaches by itself)\n"
    kept = f", left inert: {', '.join(attach.left)}" if attach.left else ""
    return f"{what}, then detached ({attach.restored} patches put back{kept}); it runs on\n"


def _header(report: ReportDoc) -> Text:
    if report.run.mode == "analyze":
        return _analyze_header(report)
    run, steps, env = report.run, report.steps, report.environment
    t = Text()
    t.append("pinchpoint", style="bold")
    t.append(f"  {' '.join(run.command)}\n")
    status = run.exit_code
    if run.attach:
        t.append(_attached_line(run.attach), style="bold")
    elif run.signal:
        t.append(f"program killed by {run.signal} (exit {status}): partial report\n", style="bold red")
    elif status not in (0, None):
        t.append(f"program exited with {status}: partial report\n", style="bold yellow")
    elif status is None:
        t.append("program did not finish: partial report\n", style="bold yellow")
    if steps.count:
        total = steps.total if steps.total is not None else steps.count
        t.append(
            f"{total} {steps.kind} steps · median {steps.median_ms or 0.0:.1f} ms "
            f"· p90 {steps.p90_ms or 0.0:.1f} ms ({steps.count} steady steps measured)\n"
        )
        if steps.timed_on == "gpu":
            t.append(
                f"steps timed on the GPU (CUDA events); the host enqueues one in {steps.host_median_ms or 0.0:.1f} ms, "
                "and the breakdown below is the host's view\n",
                style="dim",
            )
    cpu = env.cpu
    parts = [f"{cpu.model if cpu else '?'}, {cpu.usable_cores if cpu else '?'} usable cores"]
    if cpu and cpu.matrix_units:
        parts.append("matrix units: " + ", ".join(cpu.matrix_units))
    if env.torch:
        parts.append(f"torch {env.torch.version}")
    if env.threads and env.threads.intra_op is not None:
        parts.append(f"{env.threads.intra_op} intra-op threads")
    parts.append(f"autocast {env.autocast or 'off'}")
    if env.framework:
        parts.append(f"{env.framework.name} {env.framework.version or ''}".rstrip())
    if env.dataloader:
        parts.append(f"DataLoader num_workers={env.dataloader.num_workers}")
    t.append(" · ".join(parts), style="dim")
    return t


def _breakdown(bd: Mapping[str, float], steps: StepsInfo) -> Table | Text:
    # Device-timed steps: the breakdown is the host's view, so its milliseconds are the host's.
    mean = steps.host_mean_ms or steps.mean_ms or steps.median_ms or 0.0
    if not bd:
        if steps.missing:
            return Text(f"No steps: {steps.missing.removeprefix('no step was recorded: ')}.", style="yellow")
        return Text("No steps were recorded, so there is no step breakdown.", style="yellow")
    table = Table.grid(padding=(0, 2))
    for key, frac in sorted(bd.items(), key=lambda kv: -kv[1]):
        if frac < 0.005 and key not in ("forward", "backward", "data_wait"):
            continue
        table.add_row(
            PHASE_LABELS.get(key, key),
            _bar(frac, PHASE_COLORS.get(key, "white")),
            f"{100 * frac:4.0f}%",
            Text(f"{frac * mean:.1f} ms" if mean > 0 else "", style="dim"),
        )
    return table


RUN_COLORS = {"training steps": "green", "between steps": "red", "start-up": "yellow", "shutdown": "yellow"}


def _run_time(whole: RunTimeInfo) -> Table:
    table = Table.grid(padding=(0, 2))
    for g in whole.segments:
        label = g.name + (" (unattributed)" if g.name == "between steps" else "")
        count = f", {g.steps} steps" if g.steps else ""
        table.add_row(
            label, _bar(g.share, RUN_COLORS.get(g.name, "cyan")), f"{100 * g.share:4.0f}%",
            Text(f"{g.s:.1f} s{count}", style="dim"),
        )  # fmt: skip
    return table


def _findings(report: ReportDoc) -> Group | Text:
    if not report.findings:
        return Text("No bottleneck found above the reporting thresholds.", style="green")
    blocks: list[Any] = []
    for i, f in enumerate(report.findings, 1):
        head = Text()
        head.append(f"{i}. ", style="bold")
        head.append(f"{f.title}", style="bold " + CONFIDENCE_STYLE.get(f.confidence, ""))
        head.append(f"  [{f.id}]", style="dim")
        stats = Text()
        stats.append(f"   {share_words(f)}", style="bold")
        if f.estimated_speedup > 1.005:
            stats.append(f" · {gain(f.estimated_speedup, f.estimate_basis)}", style="bold green")
            stats.append(run_gain_words(f), style="green")
        stats.append(f" · confidence {f.confidence}", style="dim")
        if len(report.ranks) > 1:
            stats.append(f" · ranks {list(f.ranks)}", style="dim")
        lines: list[Any] = [head, stats]
        if f.estimate_without_load:
            lines.append(Text(f"   {load_words(f)}", style="green"))
        for e in f.evidence:
            lines.append(Text(f"   • {e}"))
        lines.append(Text.assemble(("   Fix: ", "bold"), f.fix))
        if f.snippet:
            lines.append(Padding(Text(f.snippet, style="cyan"), (0, 0, 0, 8)))
        if f.framework_fix:
            lines.append(Text.assemble("   ", (f.framework_fix, "bold cyan")))
        if f.next_limit:
            lines.append(Text(f"   Then: {f.next_limit}", style="dim"))
        blocks.append(Group(*lines, Text("")))
    return Group(*blocks)


def render(report: Report, out: TextIO, *, color: bool | None = None, width: int | None = None) -> None:
    """The report as the console shows it (`color=None`: colour when `out` is a terminal)."""
    _render(report.doc, out, color=color, width=width)


def write_text(report: Report, out: Path) -> None:
    """The console's view as a plain-text file (`pinchpoint export --format text`)."""
    with out.open("w") as f:
        render(report, f, color=False)


def _render(report: ReportDoc, out: TextIO, *, color: bool | None, width: int | None) -> None:
    console = Console(
        file=out, force_terminal=color, no_color=color is False, width=width, highlight=False, soft_wrap=False
    )
    if width is None and not console.is_terminal:
        console.width = DEFAULT_WIDTH  # files and pipes: wide enough that evidence lines stay whole
    console.print(_header(report))
    console.print()
    if report.run.mode == "analyze":
        console.print(Text("GPU time over the trace (each instant counted once)", style="bold underline"))
        console.print(_gpu_table(report))
        console.print()
        collectives = collective_lines(report)
        for line in collectives:
            console.print(Text(line))
        if collectives:
            console.print()
        compiled = compiled_lines(report)
        if compiled:
            console.print(Text("torch.compile in the trace", style="bold underline"))
            for line in compiled:
                console.print(Text(line))
            console.print()
        title = "Where the profiled steps' time goes, seen from the GPU"
    else:
        title = "Where a step's time goes (mean over steady steps)"
        whole = report.run_time
        if whole:
            console.print(
                Text(f"Where the run's time goes ({whole.wall_s:.1f} s wall clock)", style="bold underline")
            )
            console.print(_run_time(whole))
            for line in segment_code_lines(whole):
                console.print(Text(line, style="dim"))
            console.print()
        if report.serving is not None:
            console.print(Text("Serving under load", style="bold underline"))
            for line in serving_lines(report.serving):
                console.print(Text(line))
            console.print()
    console.print(Text(title, style="bold underline"))
    console.print(_breakdown(report.breakdown, report.steps))
    console.print()
    if report.run.mode != "analyze" and report.gpu:
        _print_run_gpu(console, report)
    console.print(Text("What holds it back (biggest predicted gain first)", style="bold underline"))
    console.print(_findings(report))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    windows = [
        w for w in report.op_windows or () if isinstance(w, OpWindowTaken) and w.start_step is not None
    ]
    if windows:
        spans = ", ".join(
            f"steps {w.start_step}-{(w.start_step or 0) + (w.steps or 1) - 1}"
            + (f" at {w.at_s:g} s" if w.at_s is not None else "")
            for w in windows
            if w.rank == windows[0].rank
        )
        console.print(Text(f"op windows on demand ({spans}): the latest is the one analysed", style="dim"))
    files = report.stack_files or ()
    if files:
        console.print(
            Text(
                f"Python stacks: {' and '.join(files)} in the run directory "
                "(open the SVG in a browser, the JSON in speedscope)",
                style="bold",
            )
        )
    for warning in report.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
