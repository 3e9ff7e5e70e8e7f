"""Small SVG chart primitives for the HTML report: axes, a legend, lines, shaded bands, log scales.

Every label that can come from a program or trace goes through `esc`; numbers are formatted here.
Charts scale to the page (`viewBox`, width 100%), so a laptop screen shows them whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

LINE_COLORS = ("#3465a4", "#cc0000", "#4e9a06", "#75507b", "#c4a000", "#06989a", "#ce5c00", "#555753")
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 8, 20


def esc(v: Any) -> str:
    return escape(str(v), quote=True)


def open_svg(width: int, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'style="max-width:{width}px" role="img">'
    )


def legend(names: Sequence[str], colors: Mapping[str, str]) -> str:
    items = "".join(f'<span><i class="sw" style="background:{colors[n]}"></i>{esc(n)}</span>' for n in names)
    return f'<div class="legend">{items}</div>'


@dataclass(frozen=True, slots=True)
class Band:
    """A shaded stretch of the x axis (e.g. the program waiting for data)."""

    x0: float
    x1: float
    color: str
    label: str


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    x_labels: tuple[str, str],
    unit: str,
    *,
    bands: Sequence[Band] = (),
    width: int = 1000,
    height: int = 200,
) -> str:
    """Lines over a shared x axis, with optional translucent bands behind them."""
    x0 = min(x for v in series.values() for x, _ in v)
    x1 = max(x for v in series.values() for x, _ in v)
    top = max(1e-9, max(y for v in series.values() for _, y in v)) * 1.05
    plot_w, plot_h = width - LEFT - RIGHT, height - BOTTOM - TOP
    colors = {name: LINE_COLORS[i % len(LINE_COLORS)] for i, name in enumerate(series)}
    span = max(x1 - x0, 1e-9)
    parts = [open_svg(width, height)]
    band_colors: dict[str, str] = {}
    for b in _merge_bands(bands, span / plot_w):
        a, z = max(b.x0, x0), min(b.x1, x1)
        if z <= a:
            continue
        band_colors[b.label] = b.color
        parts.append(
            f'<rect x="{LEFT + plot_w * (a - x0) / span:.1f}" y="{TOP}" '
            f'width="{max(plot_w * (z - a) / span, 0.8):.1f}" height="{plot_h}" fill="{b.color}" '
            f'fill-opacity="0.18"><title>{esc(b.label)}</title></rect>'
        )
    for frac in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - frac)
        parts.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.1f}{esc(unit)}</text>'
        )
    for name, pts in series.items():
        coords = " ".join(
            f"{LEFT + plot_w * (x - x0) / span:.1f},{TOP + plot_h * (1 - v / top):.1f}" for x, v in pts
        )
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{colors[name]}" stroke-width="1.5">'
            f"<title>{esc(name)}</title></polyline>"
        )
    parts.append(f'<text x="{LEFT}" y="{height - 4}">{esc(x_labels[0])}</text>')
    parts.append(f'<text x="{width - RIGHT}" y="{height - 4}" text-anchor="end">{esc(x_labels[1])}</text>')
    parts.append("</svg>")
    shaded = [f"{n} (shaded)" for n in band_colors]
    return legend(
        [*series, *shaded], {**colors, **{f"{n} (shaded)": c for n, c in band_colors.items()}}
    ) + "".join(parts)


def _merge_bands(bands: Sequence[Band], gap: float) -> list[Band]:
    """Bands of one label closer than `gap` (a pixel's worth of x) drawn as one."""
    out: list[Band] = []
    for b in sorted(bands, key=lambda b: (b.label, b.x0)):
        last = out[-1] if out else None
        if last is not None and last.label == b.label and b.x0 - last.x1 <= gap:
            out[-1] = Band(last.x0, max(last.x1, b.x1), last.color, last.label)
        else:
            out.append(b)
    return out


@dataclass(frozen=True, slots=True)
class LogAxis:
    """A base-10 log scale from `lo` to `hi` (whole decades) onto pixels `p0`..`p1`."""

    lo: float
    hi: float
    p0: float
    p1: float

    @classmethod
    def around(cls, values: Sequence[float], p0: float, p1: float) -> LogAxis:
        vals = [v for v in values if v > 0] or [1.0]
        lo = 10 ** math.floor(math.log10(min(vals)))
        hi = 10 ** math.ceil(math.log10(max(vals)))
        if hi <= lo:
            hi = lo * 10
        return cls(lo, hi, p0, p1)

    def __call__(self, v: float) -> float:
        v = min(max(v, self.lo), self.hi)
        f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return self.p0 + f * (self.p1 - self.p0)

    def decades(self) -> list[float]:
        out, v = [], self.lo
        while v <= self.hi * 1.0001:
            out.append(v)
            v *= 10
        return out


def si(v: float, unit: str = "") -> str:
    """1.2e12 -> '1.2 T' + unit."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}".rstrip()
