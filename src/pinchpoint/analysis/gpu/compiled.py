"""torch.compile as a profiler trace records it: compiled regions, compilations, recompiles, graph breaks,
frames back to eager, and CUDA/HIP graph launches with the kernels they replay.

What the trace holds (torch 2.x, read on real traces from CPU, CUDA and ROCm builds):
- `Torch-Compiled Region: X/Y`: a call of frame X's compiled code, compilation Y of that frame; Y > 0 is
  a recompile (X/1 is the first). A graph break resumes in a new frame whose region runs *inside* the
  breaking frame's region: a region nested in another frame's region is a graph break.
- `dynamo_data: compile_id=X/Y` (an annotation) inside `_compile.compile_inner (dynamo_timed)`: a
  compilation made while the profiler recorded; inductor's `compile_fx_inner (dynamo_timed)` also runs
  lazily inside the first backward. A recompile whose compiled code never runs, after which the frame
  runs no compiled region again, is dynamo giving up on the frame (its recompile limit, 8 by default):
  the frame runs eagerly from then on.
- `CompiledFunction` / `CompiledFunctionBackward` and `## Call CompiledFxGraph <hash> ##`: the graphs
  themselves running (AOTAutograd's forward and backward, inductor's module).
- `TorchDynamo Cache Lookup`: the guards checked at each call of a compiled frame.
- A graph launch (`cudaGraphLaunch`, `hipGraphLaunch`) shares its `correlation` with every kernel it
  replays.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    HOST_API_KINDS,
    HOST_RANGE_KINDS,
    I64,
    join_by_key,
    kind_mask,
    name_mask,
)
from pinchpoint.analysis.gpu.launch import GRAPH_LAUNCHES
from pinchpoint.analysis.gpu.steps import step_windows
from pinchpoint.trace.kineto import EventTable, Kind, KinetoTrace

REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
COMPILE_ID = re.compile(r"^dynamo_data: compile_id=(\d+)/(\d+)")
DYNAMO_COMPILE = ("_compile.compile_inner (dynamo_timed)", "_compile.compile_inner")
COMPILING = (*DYNAMO_COMPILE, "compile_fx_inner (dynamo_timed)", "compile_fx_inner")
"""Ranges that are compiling: dynamo's (which holds the backend's) and inductor's lazy backward compile."""
GRAPH_RUNS = ("CompiledFunction", "CompiledFunctionBackward")
CALL_GRAPH = "## Call CompiledFxGraph"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"
RECOMPILE_LIMIT = 8
"""`torch._dynamo.config.recompile_limit`'s default: the compilations a frame gets before it runs eagerly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionUse:
    frame: int
    compile: int
    calls: int
    host_ns: int
    """Wall time of its calls on the host (a region holds the regions of its graph breaks)."""

    @property
    def key(self) -> str:
        return f"{self.frame}/{self.compile}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Compilation:
    """A compilation made while the profiler recorded."""

    frame: int
    compile: int
    start_ns: int
    ns: int
    step: int | None
    """The step it ran in (`ProfilerStep#N`'s N), when steps are marked."""
    ran: bool
    """A region of this compilation ran after it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphSteps:
    """The steps that compiled nothing (steady steps): how their time splits around the graphs."""

    steps: int
    step_ns: float
    """Median steady step."""
    calls: float
    """Graph calls per step: compiled regions and compiled backwards (median)."""
    breaks: float
    """Regions nested in another frame's region per step (graph breaks resumed; median)."""
    inside_ns: float
    """Host time per step inside the graphs (median)."""

    @property
    def around_ns(self) -> float:
        return max(0.0, self.step_ns - self.inside_ns)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledTrace:
    regions: tuple[RegionUse, ...] = ()
    compilations: tuple[Compilation, ...] = ()
    compiling_ns: int = 0
    """All compiling in the trace (dynamo's and inductor's ranges, each instant once)."""
    recompile_ns: int = 0
    """The part of `compiling_ns` in recompilations (ids X/Y with Y > 0), each instant once."""
    window_ns: int = 0
    """The steps' span, else the host ranges' span: what shares are of."""
    steps_compiling: tuple[int, ...] = ()
    """Steps that compiled something."""
    fell_back: tuple[Compilation, ...] = ()
    """Per frame, the recompile after which it ran no compiled code again (it runs eagerly)."""
    breaks: int = 0
    """Regions nested in another frame's region (graph breaks resumed)."""
    resumed: tuple[int, ...] = ()
    """Frames whose regions ran inside another frame's: where dynamo resumed after a graph break."""
    backward: bool = False
    """Compiled backward graphs ran (training)."""
    cache_lookups: int = 0
    cache_lookup_ns: int = 0
    steady: GraphSteps | None = None
    graph_launches: int = 0
    graph_kernels: int = 0
    """Kernels replayed by graph launches (counted as kernels, one by one)."""
    graph_kernel_ns: int = 0

    @property
    def present(self) -> bool:
        return bool(self.regions or self.compilations or self.graph_launches)

    @property
    def recompiles(self) -> tuple[Compilation, ...]:
        return tuple(c for c in self.compilations if c.compile > 0)


def _rows(ev: EventTable, predicate: Callable[[str], bool]) -> I64:
    return np.flatnonzero(name_mask(ev, predicate, *HOST_RANGE_KINDS))


@dataclass(frozen=True, slots=True)
class _Regions:
    """The `Torch-Compiled Region: X/Y` rows with X and Y read once (one parse per distinct name)."""

    rows: I64
    frame: I64
    compile: I64


def _regions_of(ev: EventTable) -> _Regions:
    keys = {i: (int(m.group(1)), int(m.group(2))) for i, s in enumerate(ev.names) if (m := REGION.match(s))}
    rows = np.flatnonzero(
        np.isin(ev.name, np.fromiter(keys, dtype=np.int64)) & kind_mask(ev, *HOST_RANGE_KINDS)
    )
    pairs = [keys[int(ev.name[r])] for r in rows]
    return _Regions(
        rows=rows,
        frame=np.array([f for f, _ in pairs], dtype=np.int64),
        compile=np.array([c for _, c in pairs], dtype=np.int64),
    )


def compiled_trace(trace: KinetoTrace) -> CompiledTrace:
    ev = trace.events
    regions = _regions_of(ev)
    compile_rows = _rows(ev, lambda s: s in COMPILING)
    launches, kernels, kernel_ns = _graph_launches(ev)
    if regions.rows.size == 0 and compile_rows.size == 0 and launches == 0:
        return CompiledTrace()
    numbers, s_start, s_end = step_windows(ev)
    host = kind_mask(ev, *HOST_RANGE_KINDS)
    if numbers.size:
        window = int((s_end - s_start).sum())
    elif host.any():
        window = int(ev.end_ns[host].max() - ev.start_ns[host].min())
    else:
        window = 0
    compiling = iv.union(ev.start_ns[compile_rows], ev.end_ns[compile_rows])
    compilations = _compilations(ev, regions, numbers, s_start, s_end)
    rec = [c for c in compilations if c.compile > 0]
    recompiling = iv.union(
        np.array([c.start_ns for c in rec], dtype=np.int64),
        np.array([c.start_ns + c.ns for c in rec], dtype=np.int64),
    )
    lookups = _rows(ev, lambda s: s == CACHE_LOOKUP)
    steps_compiling = tuple(
        int(n)
        for n, a, b in zip(numbers, s_start, s_end, strict=True)
        if iv.total(iv.clip(compiling, int(a), int(b)))
    )
    nested = _nested(ev, regions)
    backward = np.flatnonzero(name_mask(ev, lambda s: s == "CompiledFunctionBackward", Kind.CPU_OP))
    return CompiledTrace(
        regions=_region_uses(ev, regions),
        compilations=compilations,
        compiling_ns=iv.total(compiling),
        recompile_ns=iv.total(recompiling),
        window_ns=window,
        steps_compiling=steps_compiling,
        fell_back=_fell_back(ev, regions, compilations),
        breaks=int(nested.sum()),
        resumed=tuple(sorted(set(regions.frame[nested].tolist()))),
        backward=bool(backward.size),
        cache_lookups=int(lookups.size),
        cache_lookup_ns=int(ev.dur_ns[lookups].sum()),
        steady=_steady(ev, regions.rows, nested, backward, compiling, (numbers, s_start, s_end)),
        graph_launches=launches,
        graph_kernels=kernels,
        graph_kernel_ns=kernel_ns,
    )


def _region_uses(ev: EventTable, regions: _Regions) -> tuple[RegionUse, ...]:
    calls: dict[tuple[int, int], list[int]] = {}
    for f, c, d in zip(
        regions.frame.tolist(), regions.compile.tolist(), ev.dur_ns[regions.rows].tolist(), strict=True
    ):
        calls.setdefault((f, c), []).append(d)
    return tuple(
        RegionUse(frame=f, compile=c, calls=len(d), host_ns=sum(d)) for (f, c), d in sorted(calls.items())
    )


def _step_of(t: int, numbers: I64, starts: I64, ends: I64) -> int | None:
    i = int(np.searchsorted(starts, t, side="right")) - 1
    return int(numbers[i]) if i >= 0 and t < ends[i] else None


def _compilations(
    ev: EventTable, regions: _Regions, numbers: I64, starts: I64, ends: I64
) -> tuple[Compilation, ...]:
    """Each `dynamo_data: compile_id=X/Y` annotation joined to the dynamo compile range holding it."""
    ids = _rows(ev, lambda s: COMPILE_ID.match(s) is not None)
    outer = _rows(ev, lambda s: s in DYNAMO_COMPILE)
    ran_after: dict[tuple[int, int], int] = {}  # the last call of each compilation's region
    for f, c, t in zip(
        regions.frame.tolist(), regions.compile.tolist(), ev.start_ns[regions.rows].tolist(), strict=True
    ):
        ran_after[(f, c)] = max(ran_after.get((f, c), -1), t)
    out = []
    for a in ids:
        t, tid = int(ev.start_ns[a]), int(ev.tid[a])
        # the annotation opens just before dynamo's compile range (inside the `dynamo` range holding both)
        after = outer[(ev.tid[outer] == tid) & (ev.end_ns[outer] > t)]
        first = after[np.argmin(ev.start_ns[after])] if after.size else -1
        start, ns = (int(ev.start_ns[first]), int(ev.dur_ns[first])) if first >= 0 else (t, 0)
        m = COMPILE_ID.match(ev.names[int(ev.name[a])])
        assert m is not None
        f, c = int(m.group(1)), int(m.group(2))
        out.append(
            Compilation(
                frame=f,
                compile=c,
                start_ns=start,
                ns=ns,
                step=_step_of(start, numbers, starts, ends),
                ran=ran_after.get((f, c), -1) > start,
            )
        )
    return tuple(sorted(out, key=lambda c: c.start_ns))


def _fell_back(
    ev: EventTable, regions: _Regions, compilations: tuple[Compilation, ...]
) -> tuple[Compilation, ...]:
    """Per frame that had run compiled code, the recompile that never ran, after which the frame ran no
    compiled region again."""
    last_run: dict[int, int] = {}
    for f, t in zip(regions.frame.tolist(), ev.start_ns[regions.rows].tolist(), strict=True):
        last_run[f] = max(last_run.get(f, -1), t)
    out: dict[int, Compilation] = {}
    for c in compilations:
        if c.compile > 0 and not c.ran and c.frame in last_run and last_run[c.frame] < c.start_ns:
            out.setdefault(c.frame, c)
    return tuple(out.values())


def _nested(ev: EventTable, regions: _Regions) -> np.ndarray:
    """For each region row, whether it runs inside a region of another frame on its thread."""
    rows = regions.rows
    out = np.zeros(rows.size, dtype=bool)
    order = np.lexsort((-ev.dur_ns[rows], ev.start_ns[rows], ev.tid[rows]))
    open_: list[tuple[int, int, int]] = []  # (tid, end, frame) of the regions enclosing the current one
    for i in order:
        r = int(rows[i])
        tid, start, frame = int(ev.tid[r]), int(ev.start_ns[r]), int(regions.frame[i])
        while open_ and (open_[-1][0] != tid or open_[-1][1] <= start):
            open_.pop()
        out[i] = any(f != frame for _, _, f in open_)
        open_.append((tid, int(ev.end_ns[r]), frame))
    return out


def _graph_runs(ev: EventTable) -> iv.Intervals:
    rows = np.flatnonzero(name_mask(ev, lambda s: s in GRAPH_RUNS or s.startswith(CALL_GRAPH), Kind.CPU_OP))
    return iv.union(ev.start_ns[rows], ev.end_ns[rows])


def _steady(
    ev: EventTable,
    regions: I64,
    nested: np.ndarray,
    backward: I64,
    compiling: iv.Intervals,
    steps: tuple[I64, I64, I64],
) -> GraphSteps | None:
    """The steps that compiled nothing and entered a graph: their median time, graph calls, breaks and time
    inside the graphs."""
    numbers, starts, ends = steps
    if numbers.size == 0:
        return None
    runs = _graph_runs(ev)
    region_at, backward_at = ev.start_ns[regions], ev.start_ns[backward]
    rows: list[tuple[float, float, float, float]] = []
    for a, b in zip(starts, ends, strict=True):
        lo, hi = int(a), int(b)
        if iv.total(iv.clip(compiling, lo, hi)):
            continue
        inside = (region_at >= lo) & (region_at < hi)
        calls = int(inside.sum()) + int(((backward_at >= lo) & (backward_at < hi)).sum())
        if calls == 0:
            continue
        rows.append((hi - lo, calls, float((inside & nested).sum()), iv.total(iv.clip(runs, lo, hi))))
    if not rows:
        return None
    m = np.median(np.array(rows, dtype=np.float64), axis=0)
    return GraphSteps(
        steps=len(rows), step_ns=float(m[0]), calls=float(m[1]), breaks=float(m[2]), inside_ns=float(m[3])
    )


def _graph_launches(ev: EventTable) -> tuple[int, int, int]:
    """(graph launch calls, kernels they replayed, those kernels' GPU time)."""
    launches = np.flatnonzero(name_mask(ev, lambda s: s.startswith(GRAPH_LAUNCHES), *HOST_API_KINDS))
    if launches.size == 0:
        return 0, 0, 0
    kernels = np.flatnonzero(kind_mask(ev, Kind.KERNEL))
    hit = join_by_key(ev.correlation[kernels], ev.correlation[launches]) >= 0
    return int(launches.size), int(hit.sum()), int(ev.dur_ns[kernels[hit]].sum())
