"""The report as one self-contained HTML file: findings first, then charts drawn as inline SVG.

No JavaScript and nothing fetched: the file opens offline, prints, and can be mailed. Every string
that comes from the program or a trace (command, op, function and file names, evidence) goes through
`html.escape`, so a name like `<script>` is shown, never run. Hovering a bar shows its numbers
(SVG `<title>`). Charts: each step's time by phase (stacked bars, op-window steps marked), and the
cores each process kept busy over the run, from the system sampler; on GPU reports, each rank's
GPU time split and heaviest kernels.
"""

from __future__ import annotations

from html import escape
from typing import Any

from pinchpoint.analysis.views import RooflineView, RunViews
from pinchpoint.report import charts
from pinchpoint.report.flamegraph import flamegraph_svg
from pinchpoint.report.phrases.common import gain as gain_words
from pinchpoint.report.phrases.common import load_words, run_gain_words, segment_code_lines, share_words
from pinchpoint.report.phrases.compile_trace import compiled_lines
from pinchpoint.report.phrases.gpu import collective_lines
from pinchpoint.report.phrases.serving import serving_lines
from pinchpoint.report.report_doc import FindingInfo, LoaderSettings, ReportDoc

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
.chart{margin:6px 0 4px}.flame svg{width:100%;height:auto}
"""


def _e(v: Any) -> str:
    return escape(str(v), quote=True)


def _finding(f: FindingInfo, multi_rank: bool) -> str:
    stats = _e(share_words(f))
    if f.estimated_speedup > 1.005:
        stats += f' · <span class="gain">{_e(gain_words(f.estimated_speedup, f.estimate_basis) + run_gain_words(f))}</span>'
    stats += f" · confidence {_e(f.confidence)}"
    if multi_rank:
        stats += f" · ranks {_e(list(f.ranks))}"
    out = [
        f'<div class="finding {_e(f.confidence)}">',
        f'<div><b>{_e(f.title)}</b> <span class="id">[{_e(f.id)}]</span></div>',
        f'<div class="stats">{stats}</div>',
        f'<div class="stats gain">{_e(load_words(f))}</div>' if f.estimate_without_load else "",
        "<ul>",
        *(f"<li>{_e(e)}</li>" for e in f.evidence),
        f"</ul><div><b>Fix:</b> {_e(f.fix)}</div>",
    ]
    if f.snippet:
        out.append(f"<pre>{_e(f.snippet)}</pre>")
    if f.framework_fix:
        out.append(f'<div class="fix"><b>{_e(f.framework_fix)}</b></div>')
    if f.next_limit:
        out.append(f'<div class="note">Then: {_e(f.next_limit)}</div>')
    out.append("</div>")
    return "\n".join(out)


KERNEL_NAME_CHARS = 110
"""Kernel names longer than this (templated C++ runs to 500+) are cut in the table; hover for all of it."""


def _short(name: str) -> str:
    return name if len(name) <= KERNEL_NAME_CHARS else name[: KERNEL_NAME_CHARS - 1] + "…"


def _gpu(report: ReportDoc) -> str:
    """Per rank: the GPU's time split (each instant once) and its heaviest kernels."""
    out = []
    for g in report.gpu or ():
        split = " · ".join(
            f"{k} {100 * float(getattr(g, k)):.1f}%" for k in ("compute", "communication", "memory", "idle")
        )
        out.append(f"<p><b>rank {_e(g.rank)}</b>: {_e(split)} of {_e(g.span_ms)} ms</p>")
        rows = "".join(
            f'<tr><td title="{_e(k.name)}">{_e(_short(k.name))}</td><td>{_e(k.work)}</td>'
            f"<td>{_e(k.count)}</td>"
            f"<td>{_e(k.total_ms)}</td><td>{100 * k.share_of_busy:.1f}%</td></tr>"
            for k in g.top_kernels or ()
        )
        if rows:
            out.append(
                "<table><tr><th>kernel</th><th>class</th><th>count</th><th>ms</th><th>of busy</th></tr>"
                f"{rows}</table>"
            )
    out.extend(f"<p>{_e(line)}</p>" for line in collective_lines(report))
    out.extend(f"<p>torch.compile: {_e(line)}</p>" for line in compiled_lines(report))
    return "\n".join(out)


def _loader_words(loader: LoaderSettings | None) -> str:
    if loader is None:
        return "none seen"
    where = f" (built at {loader.site})" if loader.site else ""
    return f"num_workers={loader.num_workers}, batch_size={loader.batch_size}, pin_memory={loader.pin_memory}{where}"


def _environment(report: ReportDoc) -> str:
    env = report.environment
    cpu, torch, threads = env.cpu, env.torch, env.threads
    rows = [
        ("CPU", f"{cpu.model if cpu else None} · {cpu.usable_cores if cpu else None} usable cores"),
        ("matrix units", ", ".join(cpu.matrix_units if cpu else ()) or "none"),
        ("GPUs", ", ".join(g.name for g in env.gpus) or "none"),
        ("torch", f"{torch.version if torch else None}"),
        (
            "threads",
            f"intra-op {threads.intra_op if threads else None}, inter-op {threads.inter_op if threads else None}",
        ),
        ("autocast", env.autocast or "off"),
        ("DataLoader", _loader_words(env.dataloader)),
        ("Python", env.python),
    ]
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _section(key: str, title: str, *content: str) -> str:
    """A chart under its heading; `data-chart` names it for readers and tests."""
    return f'<section class="chart" data-chart="{key}"><h2>{title}</h2>{"".join(content)}</section>'


def _roofline_section(view: RooflineView) -> str:
    svg = charts.roofline_svg(view)
    if not svg:
        return ""
    if view.on_device:
        note = (
            '<p class="note">Each circle is one kind of op (name, shape, dtype), placed by the GPU kernels '
            "it launched and sized by their time; the lines are the GPU's matmul peaks and memory "
            f"bandwidth (dashed), {_e(view.ceilings.source)}. Hover for the numbers.</p>"
        )
    else:
        note = (
            '<p class="note">Each circle is one kind of op (name, shape, dtype), sized by its time in the '
            "op window; the lines are the matmul peaks and the copy bandwidth (dashed; a large copy, from "
            "DRAM) measured on this machine at the window. Ops above the dashed line ran on tensors that "
            "fit in cache. Hover for the numbers.</p>"
        )
    return _section("roofline", "Roofline: each kind of op against the hardware's ceilings", note, svg)


def _charts(report: ReportDoc, views: RunViews, title: str) -> list[str]:
    rank0 = " (rank 0)" if views.multi_rank else ""
    out = []
    whole = charts.run_time_chart(report)
    if whole and report.run_time is not None:
        wall = report.run_time.wall_s
        lines = "".join(f"<li>{escape(line.strip())}</li>" for line in segment_code_lines(report.run_time))
        code = f'<ul class="segment-code">{lines}</ul>' if lines else ""
        out.append(_section("run-time", f"Where the run's {wall:.1f} s went{rank0}", whole, code))
    if report.serving is not None:
        items = "".join(f"<li>{escape(line)}</li>" for line in serving_lines(report.serving))
        out.append(_section("serving", "Serving under load", f"<ul>{items}</ul>"))
    out.append(_section("steps", f"Each step's time, by phase{rank0}", charts.steps_chart(views)))
    ranks = charts.ranks_chart(views)
    if ranks:
        out.append(_section("ranks", "Each rank's step, by phase (mean of the steady steps)", ranks))
    out.append(_section("cores", "Cores busy per process (waits shaded)", charts.cpu_chart(views)))
    gpu_util = charts.gpu_chart(views)
    if gpu_util:
        out.append(_section("gpu-util", "GPU utilization (NVML; waits shaded)", gpu_util))
    out.append(_section("memory", "Memory at the end of each step", charts.memory_chart(views)))
    gpu = _gpu(report)
    if gpu:
        out.append(_section("gpu", "GPU time and the heaviest kernels", charts.gpu_ranks_chart(report), gpu))
    if views.roofline is not None:
        roofline = _roofline_section(views.roofline)
        if roofline:
            out.append(roofline)
    if views.stacks is not None:
        heading = "Where Python spends its time (sampled stacks)"
        if views.stacks.in_loop is not None:
            # Imports and building the model and data fill a short run's samples: draw the loop's own
            # (and the DataLoader workers'); flamegraph.svg beside the report keeps the whole program.
            heading = (
                f"Where Python spends its time in the loop ({views.stacks.in_loop}; DataLoader workers "
                "included; flamegraph.svg has the whole program)"
            )
        svg = flamegraph_svg(
            views.stacks.stacks, title=f"{title} — Python stacks", process_names=views.process_names
        )
        out.append(_section("flame", heading, f'<div class="flame">{svg}</div>'))
    return out


def render_html(
    report: ReportDoc, views: RunViews | None = None, *, roofline: RooflineView | None = None
) -> str:
    """The HTML document for `report` (and, when given, the charts of the run it was built from; for a
    trace, its ops on the GPU's roofline)."""
    command = " ".join(report.run.command)
    steps = report.steps
    findings = report.findings
    multi = len(report.ranks) > 1
    sub = f"{_e(steps.count)} steady steps · median {_e(steps.median_ms)} ms"
    body = [
        f"<h1>pinchpoint: {_e(command)}</h1>",
        f'<div class="sub">{sub}</div>',
        "<h2>What holds it back (biggest predicted gain first)</h2>",
        *(_finding(f, multi) for f in findings),
    ]
    if not findings:
        body.append("<p>No bottleneck found above the reporting thresholds.</p>")
    if views is not None:
        body += _charts(report, views, command or "program")
    else:
        gpu = _gpu(report)
        if gpu:
            body.append(
                _section("gpu", "GPU time and the heaviest kernels", charts.gpu_ranks_chart(report), gpu)
            )
        if roofline is not None:
            section = _roofline_section(roofline)
            if section:
                body.append(section)
    body += ["<h2>Environment</h2>", _environment(report)]
    body += [f'<p class="note">note: {_e(n)}</p>' for n in report.notes]
    body += [f'<p class="warn">warning: {_e(w)}</p>' for w in report.warnings]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pinchpoint: {_e(command)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
