"""The HTML report's charts, drawn from a run's views (`analysis/views.py`): steps by phase, cores busy
and GPU use over time (with the waits shaded), memory per step, each rank side by side, and the roofline
of the op window. Drawing only: what to draw is computed by analysis."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pinchpoint.analysis.roofline import DTYPE_LABELS
from pinchpoint.analysis.views import RooflineView, RunViews, Series
from pinchpoint.report.report_doc import ReportDoc
from pinchpoint.report.svg import (
    BOTTOM,
    LEFT,
    RIGHT,
    TOP,
    Band,
    LogAxis,
    esc,
    legend,
    line_chart,
    open_svg,
    si,
)
from pinchpoint.trace.run import HOST_OTHER, PHASE_DISPLAY

PHASE_ORDER = [p.value for p in PHASE_DISPLAY] + [HOST_OTHER]
COLORS = {
    "forward": "#4e9a06",
    "backward": "#73d216",
    "optimizer": "#8ae234",
    "data_wait": "#cc0000",
    "checkpoint_io": "#75507b",
    "h2d_copy": "#c4a000",
    "sync_wait": "#edd400",
    "comm": "#3465a4",
    HOST_OTHER: "#06989a",
}
MAX_BARS = 400
"""Longer runs are shown as this many evenly spaced steps."""
DTYPE_COLORS = {"fp32": "#cc0000", "tf32": "#ce5c00", "bf16": "#4e9a06", "fp16": "#3465a4", "fp64": "#75507b"}
NOTE = '<p class="note">{}</p>'


def steps_chart(views: RunViews, width: int = 1000, height: int = 260) -> str:
    """Rank 0's steps as stacked bars of exposed time per phase (ms); op-window steps are outlined."""
    steps = [s for s in views.steps if s.dur_ns > 0]
    if not steps:
        return NOTE.format("No steps were recorded.")
    if len(steps) > MAX_BARS:
        stride = len(steps) / MAX_BARS
        steps = [steps[int(i * stride)] for i in range(MAX_BARS)]
    # Scale to the typical steady step (its 90th percentile, with room): warm-up steps and rare outliers
    # can be fifty times longer and would flatten the rest; taller bars are cut at the top, marked with
    # a dark cap, and their tooltip has the real value.
    top = max(views.scale_ns, 1.0) * 1.5 / 1e6  # (0 when most steps took 0 ns)
    plot_w, plot_h = width - LEFT - RIGHT, height - BOTTOM - TOP
    bar_w = plot_w / len(steps)
    parts = [open_svg(width, height)]
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - frac)
        parts.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.1f} ms</text>')
    used: set[str] = set()
    for i, s in enumerate(steps):
        x = LEFT + i * bar_w
        y = TOP + plot_h
        phases = dict(s.phases_ns)
        tip = f"step {s.index}: {s.dur_ns / 1e6:.2f} ms" + (
            " (op window)"
            if s.profiled
            else " (trial: pinchpoint ran it with a fix applied)"
            if s.trial
            else ""
        )
        for name in PHASE_ORDER:
            ns = phases.get(name, 0)
            if ns <= 0:
                continue
            used.add(name)
            h = min(plot_h * (ns / 1e6) / top, y - TOP)
            if h <= 0:
                break
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(bar_w - 0.5, 0.5):.2f}" height="{h:.2f}" '
                f'fill="{COLORS.get(name, "#888")}"><title>{esc(tip)} · {esc(name)} {ns / 1e6:.2f} ms</title></rect>'
            )
        if s.dur_ns / 1e6 > top:
            parts.append(
                f'<rect x="{x:.2f}" y="{TOP}" width="{max(bar_w - 0.5, 0.5):.2f}" height="3" fill="#222">'
                f"<title>{esc(tip)} (cut: taller than the chart)</title></rect>"
            )
        if s.profiled or s.trial:
            stroke = "#888" if s.profiled else "#ce5c00"
            parts.append(
                f'<rect x="{x:.2f}" y="{TOP}" width="{max(bar_w - 0.5, 0.5):.2f}" height="{plot_h}" fill="none" '
                f'stroke="{stroke}" stroke-dasharray="2,2"><title>{esc(tip)}</title></rect>'
            )
    parts.append(f'<text x="{LEFT}" y="{height - 4}">step {steps[0].index}</text>')
    parts.append(
        f'<text x="{width - RIGHT}" y="{height - 4}" text-anchor="end">step {steps[-1].index}</text>'
    )
    parts.append("</svg>")
    return legend([n for n in PHASE_ORDER if n in used], COLORS) + "".join(parts)


def _wait_bands(views: RunViews, t0_ns: float) -> list[Band]:
    """Every rank's waits (data, checkpoint, sync, communication) in seconds from `t0_ns`; ranks that
    wait at once shade darker."""
    return [
        Band((w.start_ns - t0_ns) / 1e9, (w.end_ns - t0_ns) / 1e9, COLORS[w.phase], w.phase)
        for w in views.waits
    ]


def cpu_chart(views: RunViews) -> str:
    """Cores each process kept busy between the sampler's readings, the program's waits shaded."""
    raw = [s for s in views.cores if len(s.points) >= 2]
    if not raw:
        return NOTE.format("Too few system samples for a timeline.")
    return _timeline(views, raw, "")


def gpu_chart(views: RunViews) -> str:
    """Each GPU's utilization (NVML) over the run, the program's waits shaded; '' without samples."""
    series = [s for s in views.gpu_util if len(s.points) >= 2]
    return _timeline(views, series, "%") if series else ""


def _timeline(views: RunViews, series: Sequence[Series], unit: str) -> str:
    """Series over the run's monotonic clock, drawn in seconds from the first reading, waits shaded."""
    t0 = min(t for v in series for t, _ in v.points)
    t1 = max(t for v in series for t, _ in v.points)
    scaled = {v.label: [((t - t0) / 1e9, y) for t, y in v.points] for v in series}
    return line_chart(scaled, ("0 s", f"{(t1 - t0) / 1e9:.1f} s"), unit, bands=_wait_bands(views, t0))


def memory_chart(views: RunViews) -> str:
    """Each rank's memory at the end of every step: RSS, and CUDA allocated/reserved when recorded."""
    series = {v.label: list(v.points) for v in views.memory if len(v.points) >= 2}
    if not series:
        return NOTE.format("No per-step memory was recorded.")
    steps = [x for v in series.values() for x, _ in v]
    return line_chart(series, (f"step {min(steps):.0f}", f"step {max(steps):.0f}"), "")


def stacked_rows(
    rows: Sequence[tuple[str, Mapping[str, float]]], colors: Mapping[str, str], unit: str, width: int = 1000
) -> str:
    """One horizontal stacked bar per row (e.g. per rank), parts in `colors`' order."""
    if not rows:
        return ""
    row_h, gap = 22, 6
    height = TOP + len(rows) * (row_h + gap) + BOTTOM
    total = max(sum(parts.values()) for _, parts in rows) or 1.0
    plot_w = width - LEFT - RIGHT - 80
    out = [open_svg(width, height)]
    used: set[str] = set()
    for i, (label, parts) in enumerate(rows):
        y = TOP + i * (row_h + gap)
        x = float(LEFT)
        out.append(f'<text x="{LEFT - 4}" y="{y + row_h * 0.7:.1f}" text-anchor="end">{esc(label)}</text>')
        for name in colors:
            v = parts.get(name, 0.0)
            if v <= 0:
                continue
            used.add(name)
            w = plot_w * v / total
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{row_h}" fill="{colors[name]}">'
                f"<title>{esc(label)} · {esc(name)} {v:.2f}{esc(unit)}</title></rect>"
            )
            x += w
        out.append(
            f'<text x="{x + 4:.1f}" y="{y + row_h * 0.7:.1f}">{sum(parts.values()):.2f}{esc(unit)}</text>'
        )
    out.append("</svg>")
    return legend([n for n in colors if n in used], colors) + "".join(out)


def ranks_chart(views: RunViews) -> str:
    """Each rank's mean steady step, split by phase (exposed ms): who waits, who holds the others up."""
    rows = [(f"rank {r.rank}", dict(r.phase_ms)) for r in views.ranks]
    return stacked_rows(rows, {n: COLORS.get(n, "#888") for n in PHASE_ORDER}, " ms")


GPU_SPLIT_COLORS = {"compute": "#4e9a06", "communication": "#3465a4", "memory": "#c4a000", "idle": "#bbbbbb"}


def gpu_ranks_chart(report: ReportDoc) -> str:
    """Each rank's GPU time split (compute, communication, memory copies, idle) in ms of its span."""
    rows = [
        (f"rank {g.rank}", {k: g.span_ms * float(getattr(g, k)) for k in GPU_SPLIT_COLORS})
        for g in report.gpu or ()
    ]
    return stacked_rows(rows, GPU_SPLIT_COLORS, " ms")


def roofline_svg(view: RooflineView, width: int = 1000, height: int = 380) -> str:
    """An op window's kinds of op on the roofline of its ceilings: each at its FLOPs per byte and
    achieved FLOP/s, under the matmul peaks and memory bandwidth."""
    points, ceilings = view.points, view.ceilings
    bw = ceilings.memory_bytes_per_s
    peaks = {DTYPE_LABELS.get(k, k): v for k, v in ceilings.matmul_flops.items()}
    ridges = [p / bw for p in peaks.values()] if bw else []
    plot_l, plot_r, plot_t, plot_b = LEFT + 10, width - RIGHT - 150, TOP + 4, height - BOTTOM - 14
    xs = LogAxis.around([p.intensity for p in points] + ridges, plot_l, plot_r)
    ys = LogAxis.around([p.achieved_flops for p in points] + list(peaks.values()), plot_b, plot_t)
    out = [open_svg(width, height)]
    for d in xs.decades():
        x = xs(d)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{plot_t}" y2="{plot_b}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{plot_b + 14}" text-anchor="middle">{d:g}</text>')
    for d in ys.decades():
        y = ys(d)
        out.append(f'<line x1="{plot_l}" x2="{plot_r}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{plot_l - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(si(d))}</text>')
    out.append(
        f'<text x="{(plot_l + plot_r) / 2:.0f}" y="{height - 2}" text-anchor="middle">'
        "arithmetic intensity (FLOPs per byte moved)</text>"
    )
    out.append(f'<text x="{plot_l}" y="{plot_t - 2 + 10}" dx="4">FLOP/s (log)</text>')
    # Roofs: copy bandwidth up to each dtype's ridge, then that dtype's measured matmul peak.
    label_y = float("-inf")  # labels go down the right margin; close peaks (bf16 ~ fp16) must not overlap
    for label, peak in sorted(peaks.items(), key=lambda kv: -kv[1]):
        color = DTYPE_COLORS.get(label, "#555")
        label_y = max(ys(peak) + 4, label_y + 13)
        ridge = peak / bw if bw else xs.lo
        x_r = min(max(ridge, xs.lo), xs.hi)
        tip = f"{label} matmul peak {si(peak, 'FLOP/s')} ({ceilings.source})"
        out.append(
            f'<line x1="{xs(x_r):.1f}" x2="{plot_r}" y1="{ys(peak):.1f}" y2="{ys(peak):.1f}" stroke="{color}" '
            f'stroke-width="2"><title>{esc(tip)}</title></line>'
        )
        out.append(f'<text x="{plot_r + 4}" y="{label_y:.1f}">{esc(label)} peak {esc(si(peak))}</text>')
    if bw:
        top_ridge = max(ridges)
        x_a, x_b = xs.lo, min(top_ridge, xs.hi)
        tip = f"memory bandwidth {si(bw, 'B/s')} ({ceilings.source})"
        out.append(
            f'<line x1="{xs(x_a):.1f}" y1="{ys(bw * x_a):.1f}" x2="{xs(x_b):.1f}" y2="{ys(bw * x_b):.1f}" '
            f'stroke="#555" stroke-width="2" stroke-dasharray="5,3"><title>{esc(tip)}</title></line>'
        )
    total = sum(p.ns_per_step for p in points) or 1.0
    for p in sorted(points, key=lambda p: -p.ns_per_step):
        label = DTYPE_LABELS.get(p.dtype, p.dtype)
        attainable = ceilings.attainable(p.intensity, p.dtype, p.achieved_flops)
        of = (
            f" = {100 * p.achieved_flops / attainable:.0f}% of attainable {si(attainable, 'FLOP/s')}"
            if attainable
            else ""
        )
        shape = "×".join(str(d) for d in p.shape)
        tip = (
            f"{p.name} [{shape}] {label}: {p.ns_per_step / 1e6:.2f} ms a step ({p.calls_per_step:.0f} calls), "
            f"{si(p.achieved_flops, 'FLOP/s')}{of}; {p.intensity:.3g} FLOPs per byte"
        )
        r = 3 + 12 * math.sqrt(p.ns_per_step / total)
        out.append(
            f'<circle cx="{xs(p.intensity):.1f}" cy="{ys(p.achieved_flops):.1f}" r="{r:.1f}" '
            f'fill="{DTYPE_COLORS.get(label, "#888")}" fill-opacity="0.55" stroke="#333" stroke-width="0.5">'
            f"<title>{esc(tip)}</title></circle>"
        )
    out.append("</svg>")
    dtypes = sorted({DTYPE_LABELS.get(p.dtype, p.dtype) for p in points} | set(peaks))
    key = legend(dtypes, {d: DTYPE_COLORS.get(d, "#888") for d in dtypes})
    return key + "".join(out)


RUN_COLORS = {
    "start-up": "#c4a000", "compiling": "#f57900", "training steps": "#4e9a06", "evaluation and rollouts": "#3465a4", "inference": "#75507b",
    "marked steps": "#4e9a06", "pinchpoint's own work": "#bbbbbb", "between steps": "#cc0000", "shutdown": "#8f5902",
}  # fmt: skip


def run_time_chart(report: ReportDoc) -> str:
    """The whole run's wall clock as one bar, by segment (report.json's `run_time`), in seconds."""
    whole = report.run_time
    if not whole:
        return ""
    parts = {g.name: g.s for g in whole.segments}
    return stacked_rows([("the run", parts)], {n: RUN_COLORS.get(n, "#888") for n in parts}, " s")
