"""The report as one self-contained HTML file: findings first, then charts drawn as inline SVG.

No JavaScript and nothing fetched: the file opens offline, prints, and can be mailed. Every string
that comes from the program or a trace (command, op, function and file names, evidence) goes through
`html.escape`, so a name like `<script>` is shown, never run. Hovering a bar shows its numbers
(SVG `<title>`). Charts: each step's time by phase (stacked bars, op-window steps marked), and the
cores each process kept busy over the run, from the system sampler; on GPU reports, each rank's
GPU time split and heaviest kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pinchpoint.analysis.cpu import cores_busy
from pinchpoint.analysis.steps import WARMUP_STEPS, exposed_by_phase
from pinchpoint.trace.run import HOST_OTHER, PHASE_PRIORITY, Run

PHASE_ORDER = [p.value for p in reversed(PHASE_PRIORITY)] + [HOST_OTHER]
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
LINE_COLORS = ("#3465a4", "#cc0000", "#4e9a06", "#75507b", "#c4a000", "#06989a", "#ce5c00", "#555753")
MAX_BARS = 400
"""Longer runs are shown as this many evenly spaced steps."""
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#555}.finding{border:1px solid #ddd;border-left:6px solid #cc0000;border-radius:4px;
padding:10px 14px;margin:10px 0}.finding.medium{border-left-color:#ce5c00}.finding.low{border-left-color:#888}
.stats{font-weight:600}.gain{color:#4e9a06}.id{color:#777;font-family:monospace}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;border-radius:4px}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:10px;height:10px;
margin-right:4px}.note{color:#555}.warn{color:#a40000}svg text{font:11px system-ui,sans-serif;fill:#444}
"""


def _e(v: Any) -> str:
    return escape(str(v), quote=True)


def _finding(f: Mapping[str, Any], multi_rank: bool) -> str:
    gain = float(f.get("estimated_speedup") or 1.0)
    stats = f"{100 * float(f.get('share') or 0):.0f}% of the step"
    if gain > 1.005:
        stats += f' · <span class="gain">fix → est. ×{gain:.2f} faster</span>'
    stats += f" · confidence {_e(f.get('confidence'))}"
    if multi_rank:
        stats += f" · ranks {_e(f.get('ranks'))}"
    out = [
        f'<div class="finding {_e(f.get("confidence"))}">',
        f'<div><b>{_e(f.get("title"))}</b> <span class="id">[{_e(f.get("id"))}]</span></div>',
        f'<div class="stats">{stats}</div><ul>',
        *(f"<li>{_e(e)}</li>" for e in f.get("evidence") or []),
        f"</ul><div><b>Fix:</b> {_e(f.get('fix'))}</div>",
    ]
    if f.get("snippet"):
        out.append(f"<pre>{_e(f['snippet'])}</pre>")
    if f.get("next_limit"):
        out.append(f'<div class="note">Then: {_e(f["next_limit"])}</div>')
    out.append("</div>")
    return "\n".join(out)


def _legend(names: Sequence[str], colors: Mapping[str, str]) -> str:
    items = "".join(f'<span><i class="sw" style="background:{colors[n]}"></i>{_e(n)}</span>' for n in names)
    return f'<div class="legend">{items}</div>'


def steps_chart(run: Run, width: int = 1000, height: int = 260) -> str:
    """Rank 0's steps as stacked bars of exposed time per phase (ms); op-window steps are outlined."""
    rank = run.ranks[0] if run.ranks else None
    steps = [s for s in (rank.steps if rank else ()) if not s.partial and s.dur_ns > 0]
    if not steps:
        return '<p class="note">No steps were recorded.</p>'
    if len(steps) > MAX_BARS:
        stride = len(steps) / MAX_BARS
        steps = [steps[int(i * stride)] for i in range(MAX_BARS)]
    # Scale to the steady steps: the first (warm-up) steps can be many times longer; taller bars are
    # cut at the top (their tooltip has the real value).
    steady = [s.dur_ns for s in steps[WARMUP_STEPS:] if not s.profiled] or [s.dur_ns for s in steps]
    top = max(steady) * 1.1 / 1e6
    left, bottom = 64, 20
    plot_w, plot_h = width - left - 8, height - bottom - 8
    bar_w = plot_w / len(steps)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for frac in (0.0, 0.5, 1.0):
        y = 8 + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.1f} ms</text>')
    used: set[str] = set()
    for i, s in enumerate(steps):
        x = left + i * bar_w
        y = 8 + plot_h
        phases = exposed_by_phase(s)
        tip = f"step {s.index}: {s.dur_ns / 1e6:.2f} ms" + (" (op window)" if s.profiled else "")
        for name in PHASE_ORDER:
            ns = phases.get(name, 0)
            if ns <= 0:
                continue
            used.add(name)
            h = min(plot_h * (ns / 1e6) / top, y - 8)
            if h <= 0:
                break
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(bar_w - 0.5, 0.5):.2f}" height="{h:.2f}" '
                f'fill="{COLORS.get(name, "#888")}"><title>{_e(tip)} · {_e(name)} {ns / 1e6:.2f} ms</title></rect>'
            )
        if s.profiled:
            parts.append(
                f'<rect x="{x:.2f}" y="8" width="{max(bar_w - 0.5, 0.5):.2f}" height="{plot_h}" fill="none" '
                f'stroke="#888" stroke-dasharray="2,2"><title>{_e(tip)}</title></rect>'
            )
    parts.append(f'<text x="{left}" y="{height - 4}">step {steps[0].index}</text>')
    parts.append(f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">step {steps[-1].index}</text>')
    parts.append("</svg>")
    return _legend([n for n in PHASE_ORDER if n in used], COLORS) + "".join(parts)


def _line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]], x_labels: tuple[str, str], unit: str,
    width: int = 1000, height: int = 200,
) -> str:  # fmt: skip
    x0 = min(x for v in series.values() for x, _ in v)
    x1 = max(x for v in series.values() for x, _ in v)
    top = max(1e-9, max(y for v in series.values() for _, y in v)) * 1.05
    left, bottom = 64, 20
    plot_w, plot_h = width - left - 8, height - bottom - 8
    colors = {name: LINE_COLORS[i % len(LINE_COLORS)] for i, name in enumerate(series)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">']
    for frac in (0.0, 0.5, 1.0):
        y = 8 + plot_h * (1 - frac)
        parts.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.1f}{unit}</text>')
    span = max(x1 - x0, 1e-9)
    for name, pts in series.items():
        coords = " ".join(
            f"{left + plot_w * (x - x0) / span:.1f},{8 + plot_h * (1 - v / top):.1f}" for x, v in pts
        )
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{colors[name]}" stroke-width="1.5">'
            f"<title>{_e(name)}</title></polyline>"
        )
    parts.append(f'<text x="{left}" y="{height - 4}">{_e(x_labels[0])}</text>')
    parts.append(f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">{_e(x_labels[1])}</text>')
    parts.append("</svg>")
    return _legend(list(series), colors) + "".join(parts)


def cpu_chart(run: Run) -> str:
    """Cores each process kept busy between the sampler's readings."""
    series = {
        f"pid {pid} {name}": [(t / 1e9, cores) for t, cores in points]
        for (pid, name), points in cores_busy(run.system).items()
        if len(points) >= 2
    }
    if not series:
        return '<p class="note">Too few system samples for a timeline.</p>'
    t0 = min(t for v in series.values() for t, _ in v)
    t1 = max(t for v in series.values() for t, _ in v)
    return _line_chart(series, ("0 s", f"{t1 - t0:.1f} s"), "")


def memory_chart(run: Run) -> str:
    """Each rank's memory at the end of every step: RSS, and CUDA allocated/reserved when recorded."""
    series: dict[str, list[tuple[float, float]]] = {}
    for rank in run.ranks:
        tag = f"rank {rank.rank} " if len(run.ranks) > 1 else ""
        for s in rank.steps:
            for label, value in (("RSS", s.rss_bytes), ("CUDA allocated", s.cuda_allocated_bytes),
                                 ("CUDA reserved", s.cuda_reserved_bytes)):  # fmt: skip
                if value is not None:
                    series.setdefault(f"{tag}{label} (MiB)", []).append((s.index, value / 2**20))
    series = {k: v for k, v in series.items() if len(v) >= 2}
    if not series:
        return '<p class="note">No per-step memory was recorded.</p>'
    steps = [x for v in series.values() for x, _ in v]
    return _line_chart(series, (f"step {min(steps):.0f}", f"step {max(steps):.0f}"), "")


def _gpu(report: Mapping[str, Any]) -> str:
    """Per rank: the GPU's time split (each instant once) and its heaviest kernels."""
    out = []
    for g in report.get("gpu") or []:
        split = " · ".join(
            f"{k} {100 * float(g.get(k) or 0):.1f}%" for k in ("compute", "communication", "memory", "idle")
        )
        out.append(f"<p><b>rank {_e(g.get('rank'))}</b>: {_e(split)} of {_e(g.get('span_ms'))} ms</p>")
        rows = "".join(
            f"<tr><td>{_e(k.get('name'))}</td><td>{_e(k.get('class'))}</td><td>{_e(k.get('count'))}</td>"
            f"<td>{_e(k.get('total_ms'))}</td><td>{100 * float(k.get('share_of_busy') or 0):.1f}%</td></tr>"
            for k in g.get("top_kernels") or []
        )
        if rows:
            out.append(
                "<table><tr><th>kernel</th><th>class</th><th>count</th><th>ms</th><th>of busy</th></tr>"
                f"{rows}</table>"
            )
    return "\n".join(out)


def _environment(report: Mapping[str, Any]) -> str:
    env = report.get("environment") or {}
    cpu, torch, threads = env.get("cpu") or {}, env.get("torch") or {}, env.get("threads") or {}
    rows = [
        ("CPU", f"{cpu.get('model')} · {cpu.get('usable_cores')} usable cores"),
        ("matrix units", ", ".join(cpu.get("matrix_units") or []) or "none"),
        ("GPUs", ", ".join(str(g.get("name")) for g in env.get("gpus") or []) or "none"),
        ("torch", f"{torch.get('version')}"),
        ("threads", f"intra-op {threads.get('intra_op')}, inter-op {threads.get('inter_op')}"),
        ("autocast", env.get("autocast") or "off"),
        ("DataLoader", env.get("dataloader") or "none seen"),
        ("Python", env.get("python")),
    ]
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def render_html(report: Mapping[str, Any], run: Run | None = None) -> str:
    """The HTML document for `report` (and, when given, charts from the run it was built from)."""
    command = " ".join((report.get("run") or {}).get("command") or [])
    steps = report.get("steps") or {}
    findings = report.get("findings") or []
    multi = len(report.get("ranks") or []) > 1
    sub = f"{_e(steps.get('count'))} steady steps · median {_e(steps.get('median_ms'))} ms"
    body = [
        f"<h1>pinchpoint: {_e(command)}</h1>",
        f'<div class="sub">{sub}</div>',
        "<h2>What holds it back (biggest predicted gain first)</h2>",
        *(_finding(f, multi) for f in findings),
    ]
    if not findings:
        body.append("<p>No bottleneck found above the reporting thresholds.</p>")
    if run is not None:
        body += ["<h2>Each step's time, by phase</h2>", steps_chart(run)]
        body += ["<h2>Cores busy per process</h2>", cpu_chart(run)]
        body += ["<h2>Memory at the end of each step</h2>", memory_chart(run)]
    gpu = _gpu(report)
    if gpu:
        body += ["<h2>GPU time and the heaviest kernels</h2>", gpu]
    body += ["<h2>Environment</h2>", _environment(report)]
    body += [f'<p class="note">note: {_e(n)}</p>' for n in report.get("notes") or []]
    body += [f'<p class="warn">warning: {_e(w)}</p>' for w in report.get("warnings") or []]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pinchpoint: {_e(command)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
