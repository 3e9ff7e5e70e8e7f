"""What torch.compile cost the run: its compilations grouped by dynamo's compile id (a forward graph and
the backward graph compiled for it share one), the recompiles among them with the guard that failed,
and the dimension that varied."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.analysis.steps import exposed_by_phase
from pinchpoint.stats.quantiles import nearest_rank
from pinchpoint.trace.compiles import Compilation, CompileRecord
from pinchpoint.trace.run import Phase, Step

SIZE_GUARD = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\d+), actual (\d+)")
VALUE_GUARD = re.compile(r"___stack\d+ == ")
"""A guard on a value the code read at a graph break (a `.item()`, a Python number): the frame dynamo
resumes in is specialised on it, and each new value compiles it again (with `dynamic=False`; otherwise
dynamo makes the value dynamic after its first recompile)."""
GUARD_SITE = re.compile(r"# (\S+:\d+) in ")
"""The file:line a guard came from, at the end of its first line."""
LIMIT = "recompile limit"
"""In dynamo's failure text where a frame hit `torch._dynamo.config.recompile_limit`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Varying:
    """A tensor dimension whose size changed from call to call (each change a recompile)."""

    tensor: str
    dim: int
    sizes: tuple[int, ...]
    """The sizes the guards saw, in order of first sight."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValueGuard:
    """A frame resumed after a graph break that recompiled for each new value read at the break."""

    frame: str
    """The resumed frame, `name (file:line)`."""
    site: str | None
    """file:line of the code that read the value."""
    recompiles: int
    compile_ns: int
    """All of the resumed frame's compilations, its first included, forward and backward: a graph that
    does not break has none of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphBreak:
    """Where dynamo broke a compiled frame: the code after it runs as a separate graph (a `resume`
    frame), with Python between the two."""

    function: str
    site: str
    """file:line where the graph broke (the line dynamo resumes at)."""
    reason: str | None
    """Dynamo's first line for it ("Unsupported Tensor.item() call with capture_scalar_outputs=False")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphTime:
    """The steady steps' compiled graphs (medians): how many a step entered and the time around them."""

    calls: int
    """Graph calls a step, forward and backward (`capture/graph_watch.py`)."""
    inside_ns: float
    """Time inside the graphs a step."""
    around_ns: float
    """The rest of the step outside its optimizer and input phases: Python, dynamo's guards, autograd's
    and AOTAutograd's wrappers, eager code between graphs."""
    step_ns: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileStats:
    compile_ns: int
    """Every compilation, forward and backward."""
    compiles: int
    """Compile ids (a frame's forward with its backward counts once)."""
    recompiles: int
    recompile_ns: int
    """The compilations past each frame's first: what static shapes that vary cost."""
    mean_recompile_ns: float
    """A recompile's mean time (forward and backward): what one more compilation, of a dynamic graph,
    costs (the first compilation also pays the compiler's one-time set-up: 13.5 s against ~2.5 s for
    each recompile's forward, examples/compile_recompiles.py)."""
    frame: str | None
    """The frame that recompiled most, as `name (file:line)`."""
    reasons: tuple[str, ...]
    """The recompiles' guard failures, first ones first (deduplicated)."""
    varying: tuple[Varying, ...] = ()
    limit_hit: bool = False
    """A frame hit the recompile limit: from then on it runs eagerly on shapes it has not seen."""
    recompile_limit: int | None = None
    breaks: tuple[GraphBreak, ...] = ()
    """The program's graph breaks, one per line dynamo resumed at (pinchpoint's own frames left out)."""
    frames: int = 0
    """Frames compiled (each break adds a resume frame): the graphs a call runs through, at least."""
    whole_frames: int = 0
    """Frames that compiled without a break (not a resume frame, no restart)."""
    graphs: GraphTime | None = None
    cold: ColdCompiles | None = None
    value_guard: ValueGuard | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ColdCompiles:
    """Compilations whose backend ran in full although the compiler's caches were on: nothing was found
    in them (a first run, or a cache directory that does not outlive the run)."""

    backend_ns: int
    """The backend's time in them (AOTAutograd, inductor's code generation and C++ compiles), lazily
    compiled backward graphs included: what a cache hit replaces with a load."""
    misses: int
    hits: int
    directory: str | None


def cold_compiles(record: CompileRecord) -> ColdCompiles | None:
    """None where the caches were off or unknown (turned off on purpose: benchmarking a cold compile,
    debugging the compiler), or nothing missed them."""
    caches = record.caches
    if caches is None or caches.on is not True:
        return None
    missed = [c for c in record.compilations if c.cache_misses > 0 and c.fail_reason is None]
    if not missed:
        return None
    # a forward compilation's backend time; a backward graph (no frame) compiled lazily is all backend
    backend = sum((c.backend_ns if c.frame is not None else c.dur_ns) or 0 for c in missed)
    return ColdCompiles(
        backend_ns=backend,
        misses=sum(c.cache_misses for c in record.compilations),
        hits=sum(c.cache_hits for c in record.compilations),
        directory=caches.directory,
    )


def compile_stats(record: CompileRecord | None, steady: Sequence[Step] = ()) -> CompileStats | None:
    """None without a compilation."""
    if record is None or not record.compilations:
        return None
    by_id: dict[str, list[Compilation]] = defaultdict(list)
    for c in record.compilations:
        by_id[c.compile_id].append(c)
    ran = {k: v for k, v in by_id.items() if any(c.fail_reason is None for c in v)}
    again = {k: v for k, v in ran.items() if _nth(k) > 0 and not any(_another_module(c) for c in v)}
    forwards = [c for v in again.values() for c in v if c.frame is not None]
    reasons = list(dict.fromkeys(c.recompile_reason for c in forwards if c.recompile_reason))
    counts: dict[str, int] = defaultdict(int)
    for c in forwards:
        counts[_label(c)] += 1
    return CompileStats(
        compile_ns=sum(c.dur_ns for c in record.compilations),
        compiles=len(ran),
        recompiles=len(again),
        recompile_ns=sum(c.dur_ns for v in again.values() for c in v),
        mean_recompile_ns=sum(c.dur_ns for v in again.values() for c in v) / max(1, len(again)),
        frame=max(counts, key=lambda k: counts[k]) if counts else None,
        reasons=tuple(reasons[:5]),
        varying=_varying(reasons),
        limit_hit=any(c.fail_reason and LIMIT in c.fail_reason.lower() for c in record.compilations),
        recompile_limit=record.recompile_limit,
        breaks=_breaks(record.compilations),
        frames=len({_frame_of(c.compile_id) for c in record.compilations if c.frame is not None}),
        whole_frames=len(_whole_frames(record.compilations)),
        graphs=graph_time(steady),
        cold=cold_compiles(record),
        value_guard=value_guard(record.compilations),
    )


def value_guard(compilations: Sequence[Compilation]) -> ValueGuard | None:
    """The resumed frame that recompiled most on values read at its break (two or more), or None."""
    named: dict[str, Compilation] = {}  # each resumed frame, by its first compilation with a name
    for c in compilations:
        if _resumed(c):
            named.setdefault(_frame_of(c.compile_id), c)
    guarded: dict[str, list[Compilation]] = defaultdict(list)
    for c in compilations:
        frame = _frame_of(c.compile_id)
        if frame in named and c.fail_reason is None and VALUE_GUARD.search(_first_line(c.recompile_reason)):
            guarded[frame].append(c)
    ids = {f: {c.compile_id for c in v} for f, v in guarded.items()}
    top = max(ids, key=lambda f: len(ids[f]), default=None)
    if top is None or len(ids[top]) < 2:
        return None
    frame = top
    site = GUARD_SITE.search(_first_line(guarded[frame][0].recompile_reason))
    return ValueGuard(
        frame=_label(named[frame]),
        site=site.group(1) if site else None,
        recompiles=len(ids[frame]),
        compile_ns=sum(c.dur_ns for c in compilations if _frame_of(c.compile_id) == frame),
    )


def _first_line(text: str | None) -> str:
    return (text or "").partition("\n")[0]


NOT_AROUND = (Phase.OPTIMIZER.value, Phase.DATA_WAIT.value, Phase.CHECKPOINT_IO.value, Phase.COMM.value)
"""Phases whose time is not around the model's graphs (the update, waiting for a batch, saving, collectives)."""


def graph_time(steady: Sequence[Step]) -> GraphTime | None:
    """None where the steady steps ran no compiled graph."""
    timed = [s for s in steady if s.graph_calls and s.graph_ns is not None]
    if len(timed) < max(3, len(steady) // 2):
        return None
    around = sorted(
        s.dur_ns - (s.graph_ns or 0) - sum(ns for ph, ns in exposed_by_phase(s).items() if ph in NOT_AROUND)
        for s in timed
    )
    return GraphTime(
        calls=nearest_rank(sorted(s.graph_calls or 0 for s in timed), 0.5),
        inside_ns=float(nearest_rank(sorted(s.graph_ns or 0 for s in timed), 0.5)),
        around_ns=float(max(0, nearest_rank(around, 0.5))),
        step_ns=float(nearest_rank(sorted(s.dur_ns for s in timed), 0.5)),
    )


def _whole_frames(compilations: Sequence[Compilation]) -> set[str]:
    broke = {_frame_of(c.compile_id) for c in compilations if c.restart_reasons or _resumed(c)}
    return {_frame_of(c.compile_id) for c in compilations if c.frame is not None} - broke


OWN = "/pinchpoint/capture/"
"""A frame of pinchpoint's own: its wrapper of `Module.__call__`, which a compiled module's call enters."""


TYPE_GUARD = "___check_type_id(self,"
"""A guard on the type of the module whose call a frame runs."""


def _another_module(c: Compilation) -> bool:
    """pinchpoint's wrapper of `Module.__call__` compiled again for another module class: one code
    object serves every module, so dynamo guards it on `type(self)`. Eagerly between graph breaks each
    class's call compiles once, as the program's own `forward` frames would without the wrapper: no
    size that varies, no recompile of the program's. (Since decision 111 the agent tells dynamo to skip
    the wrapper's frame: runs recorded before it, or on a torch without `skip_code`.)"""
    return bool(c.site and OWN in c.site and c.recompile_reason and TYPE_GUARD in c.recompile_reason)


def _label(c: Compilation) -> str:
    if c.site and OWN in c.site:
        return "the compiled module's call"
    return f"{c.frame} ({c.site})" if c.site else str(c.frame)


def _nth(compile_id: str) -> int:
    """`0/3` -> 3 (frame 0's fourth compilation); 0 where the id does not read so."""
    tail = compile_id.rpartition("/")[2]
    return int(tail) if tail.isdigit() else 0


def _varying(reasons: list[str]) -> tuple[Varying, ...]:
    sizes: dict[tuple[str, int], list[int]] = defaultdict(list)
    for reason in reasons:
        for m in SIZE_GUARD.finditer(reason):
            seen = sizes[(m.group(1), int(m.group(2)))]
            for v in (int(m.group(3)), int(m.group(4))):
                if v not in seen:
                    seen.append(v)
    return tuple(
        Varying(tensor=t, dim=d, sizes=tuple(v))
        for (t, d), v in sorted(sizes.items(), key=lambda kv: -len(kv[1]))
    )


RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
"""Dynamo's name for the code after a graph break: `torch_dynamo_resume_in_forward_at_51`."""


def _resumed(c: Compilation) -> bool:
    return c.frame is not None and RESUME.match(c.frame) is not None


def _frame_of(compile_id: str) -> str:
    return compile_id.partition("/")[0]


def _breaks(compilations: Sequence[Compilation]) -> tuple[GraphBreak, ...]:
    """Each resume frame's line, with the reason its file's broken frames gave (the first one)."""
    reasons: dict[str, str] = {}
    for c in compilations:
        file = (c.site or "").rpartition(":")[0]
        if c.restart_reasons and file:
            reasons.setdefault(file, c.restart_reasons[0])
    found: dict[str, GraphBreak] = {}
    for c in compilations:
        m = RESUME.match(c.frame or "")
        if m is None or (c.site and OWN in c.site):
            continue
        file = (c.site or "").rpartition(":")[0]
        site = f"{file}:{m.group(2)}" if file else f"line {m.group(2)}"
        found.setdefault(site, GraphBreak(function=m.group(1), site=site, reason=reasons.get(file)))
    return tuple(found.values())
