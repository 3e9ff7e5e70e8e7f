"""Stack samples as a flame graph (SVG) and as speedscope JSON, the two views engineers open.

The SVG is self-contained: root at the bottom, siblings in alphabetical order, width by samples,
hover for the function, file, samples and share. Colours say whose code a frame is: the program's
own (warm), torch (blue), other libraries and the standard library (yellow-green). speedscope gets one
sampled profile per process, weights in seconds when the sampling rate is known.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping
from pathlib import Path

from pinchpoint.report.document import JsonObject
from pinchpoint.trace.stacks import Frame, Stacks

WIDTH = 1200
FRAME_H = 16
PAD_TOP = 40
PAD_BOTTOM = 24
MIN_PX = 0.3
CHAR_PX = 6.6
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


class _Node:
    __slots__ = ("children", "count", "frame")

    def __init__(self, frame: Frame | None) -> None:
        self.frame = frame
        self.count = 0
        self.children: dict[Frame, _Node] = {}


def _tree(stacks: Stacks, process_names: Mapping[int, str]) -> _Node:
    root = _Node(None)
    for s in stacks.samples:
        root.count += s.count
        node = root
        path = list(s.frames)
        if s.pid is not None:
            path.insert(0, Frame(process_names.get(s.pid, f"process {s.pid}")))
        for f in path:
            child = node.children.get(f)
            if child is None:
                child = node.children[f] = _Node(f)
            child.count += s.count
            node = child
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


def _colour(frame: Frame) -> str:
    h = int(hashlib.blake2b(frame.function.encode(), digest_size=2).hexdigest(), 16)
    jitter = h % 55
    path = frame.file
    if not path:  # a process or thread label
        return "rgb(200,200,200)"
    if "torch/" in path:
        return f"rgb({80 + jitter // 2},{140 + jitter},{210})"
    if "site-packages/" in path or "dist-packages/" in path or "/lib/python" in path or path.startswith("<"):
        return f"rgb({190 + jitter // 2},{190 + jitter // 2},{70})"
    return f"rgb({225 + jitter // 3},{90 + jitter * 2},{40})"


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 does not allow (C0 controls, lone surrogates from undecodable file names)."""


def escape(text: str) -> str:
    """`text` as SVG character data: escaped, and what XML cannot hold at all replaced by U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", text))


def flamegraph_svg(stacks: Stacks, *, title: str, process_names: Mapping[int, str] | None = None) -> str:
    root = _tree(stacks, process_names or {})
    levels = _depth(root)
    height = PAD_TOP + levels * FRAME_H + PAD_BOTTOM
    unit = "samples"
    secs = f", {root.count / stacks.rate_hz:.1f} s" if stacks.rate_hz else ""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="rgb(250,250,245)"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="16">{escape(title)}</text>',
        f'<text x="10" y="{height - 8}" fill="rgb(90,90,90)">{root.count} {unit}{secs}; '
        "warm: the program's code, blue: torch, yellow: other libraries. Hover for details.</text>",
    ]
    scale = (WIDTH - 20) / max(1, root.count)

    def draw(node: _Node, x: float, level: int) -> None:
        for frame in sorted(node.children, key=lambda f: f.label):
            child = node.children[frame]
            w = child.count * scale
            if w >= MIN_PX:
                y = height - PAD_BOTTOM - (level + 1) * FRAME_H
                share = 100 * child.count / max(1, root.count)
                tip = f"{frame.label} ({child.count} {unit}, {share:.2f}%)"
                text = _fit(frame.function if w < 200 else frame.label, w)
                out.append(
                    f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" '
                    f'height="{FRAME_H - 1}" fill="{_colour(frame)}" rx="2"/>'
                    + (f'<text x="{x + 3:.1f}" y="{y + FRAME_H - 4}">{escape(text)}</text>' if text else "")
                    + "</g>"
                )
                draw(child, x, level + 1)
            x += w

    draw(root, 10.0, 0)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _fit(text: str, width_px: float) -> str:
    room = int((width_px - 6) / CHAR_PX)
    if room < 3:
        return ""
    return text if len(text) <= room else text[: room - 2] + ".."


def speedscope_json(
    stacks: Stacks, *, name: str, process_names: Mapping[int, str] | None = None
) -> JsonObject:
    names = process_names or {}
    frames: list[JsonObject] = []
    index: dict[Frame, int] = {}
    by_process: dict[int | None, tuple[list[list[int]], list[float]]] = {}
    per_sample = 1.0 / stacks.rate_hz if stacks.rate_hz else 1.0
    for s in stacks.samples:
        ids = []
        for f in s.frames:
            i = index.get(f)
            if i is None:
                i = index[f] = len(frames)
                frame: dict[str, object] = {"name": f.function}
                if f.file:
                    frame["file"] = f.file
                if (
                    f.line is not None
                ):  # (speedscope's schema: a number or absent; py-spy has frames without one)
                    frame["line"] = f.line
                frames.append(frame)
            ids.append(i)
        samples, weights = by_process.setdefault(s.pid, ([], []))
        samples.append(ids)
        weights.append(s.count * per_sample)
    profiles = []
    for pid, (samples, weights) in sorted(by_process.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)):
        label = "all samples" if pid is None else names.get(pid, f"process {pid}")
        profiles.append(
            {
                "type": "sampled",
                "name": label,
                "unit": "seconds" if stacks.rate_hz else "none",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        )
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name,
        "exporter": "pinchpoint",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


def write_stack_views(
    stacks: Stacks, out_dir: Path, *, title: str, process_names: Mapping[int, str] | None = None
) -> list[Path]:
    """`flamegraph.svg` and `stacks.speedscope.json` in `out_dir`; returns the paths written."""
    svg = out_dir / "flamegraph.svg"
    svg.write_text(flamegraph_svg(stacks, title=title, process_names=process_names))
    ss = out_dir / "stacks.speedscope.json"
    ss.write_text(json.dumps(speedscope_json(stacks, name=title, process_names=process_names)))
    return [svg, ss]
