"""`pinchpoint analyze` on a stack file another tool wrote: `perf script` text, folded stacks
(FlameGraph's `stackcollapse-*`, py-spy's raw output) or a VTune CSV report (hotspots or top-down). No steps or GPU timeline: the report is where
the samples went, below Python (`analysis/native.py`) and by hottest leaf function."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pinchpoint.analysis.native import KERNEL_DSO, native_breakdown
from pinchpoint.ingest.perf_script import read_perf_script
from pinchpoint.ingest.sniff import stack_file_kind
from pinchpoint.ingest.stacks import read_folded
from pinchpoint.ingest.vtune import read_vtune
from pinchpoint.report.report_doc import NativeInfo, NativeKernel
from pinchpoint.report.stacks_doc import SCHEMA, LeafShare, StacksDoc
from pinchpoint.trace.stacks import Frame, Stacks, StackSample

TOP_LEAVES = 10
KERNEL_SUFFIX = "_[k]"
"""FlameGraph's mark on a kernel frame in folded stacks (`stackcollapse-perf.pl --kernel`)."""
VTUNE_KERNEL_MODULES = ("vmlinux", "[vmlinux]")
"""The modules VTune names the Linux kernel's code by."""


def _kernel_marked(stacks: Stacks) -> Stacks:
    """Folded stacks' `name_[k]` frames as kernel frames, so the causes that live in the kernel show."""

    def frame(f: Frame) -> Frame:
        if f.function.endswith(KERNEL_SUFFIX):
            return Frame(function=f.function[: -len(KERNEL_SUFFIX)], file=KERNEL_DSO)
        return f

    return _map_frames(stacks, frame)


def _vtune_kernel(stacks: Stacks) -> Stacks:
    """VTune's `vmlinux` frames as kernel frames, as perf names them, for the causes that live there."""

    def frame(f: Frame) -> Frame:
        if f.file.rsplit("/", 1)[-1] in VTUNE_KERNEL_MODULES:
            return Frame(function=f.function, file=KERNEL_DSO, line=f.line)
        return f

    return _map_frames(stacks, frame)


def _map_frames(stacks: Stacks, frame: Callable[[Frame], Frame]) -> Stacks:
    samples = tuple(
        StackSample(frames=tuple(frame(f) for f in s.frames), count=s.count, pid=s.pid, thread=s.thread)
        for s in stacks.samples
    )
    return Stacks(samples=samples, rate_hz=stacks.rate_hz, source=stacks.source)


def report_stack_file(path: Path, json_path: Path | None = None) -> StacksDoc | None:
    """The report of a stack file, or None when `path` is not one (another reader's format)."""
    kind = stack_file_kind(path)
    if kind is None:
        return None
    if kind == "perf script":
        stacks, bad = read_perf_script(path)
    elif kind == "vtune":
        stacks, bad = read_vtune(path)
        stacks = _vtune_kernel(stacks)
    else:
        stacks, bad = read_folded(path)
        stacks = _kernel_marked(stacks)
    native = native_breakdown(stacks)
    leaves: Counter[str] = Counter()
    for s in stacks.samples:
        if s.frames:
            leaf = s.frames[-1]
            leaves[f"{leaf.function} ({leaf.file.rsplit('/', 1)[-1]})" if leaf.file else leaf.function] += (
                s.count
            )
    total = sum(leaves.values())
    doc = StacksDoc(
        schema=SCHEMA,
        source=str(path),
        format=kind,
        weight=total,
        weight_unit="ns of CPU" if stacks.rate_hz == 1e9 else "samples",
        native=None
        if native is None
        else NativeInfo(
            samples_weight=native.total,
            shares={c: round(v, 4) for c, v in native.shares.items()},
            threads=native.threads,
            busy_threads=native.busy_threads,
            kernels=tuple(
                NativeKernel(kernel=k.family, isa=k.isa, share=round(k.share, 4)) for k in native.kernels
            ),
            isa_shares={k: round(v, 4) for k, v in native.isa_shares.items()},
        ),
        top=tuple(LeafShare(function=f, share=round(n / total, 4)) for f, n in leaves.most_common(TOP_LEAVES))
        if total
        else (),
        warnings=(f"{bad} line(s) could not be read and were skipped",) if bad else (),
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc.to_dict(), indent=1) + "\n")
    return doc
